#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/http_head.h"
#include "common/metrics.h"
#include "common/mutex.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace granary::common {

// The limits of an HttpServer (the master's admin server, a node's metrics server). Defaults
// suit an admin API: small JSON bodies, a few scrapers and operators.
struct HttpServerOptions {
  // Connections held at once (being read, waiting for a worker, or being answered). One more
  // closes the oldest connection still sending its request; when every held connection has a
  // whole request, the new one is closed at once. Both count as reason "limit".
  int max_connections = 256;
  // The request line, headers and body must all have arrived this long after accept; else
  // 408 and close (reason "deadline"). A whole-request deadline, not one per read: trickling a
  // byte at a time does not extend it.
  absl::Duration request_deadline = absl::Seconds(5);
  // The peer must have taken the whole response this long after a worker starts writing it;
  // else the connection is closed (reason "slow_reader").
  absl::Duration response_deadline = absl::Seconds(10);
  // Request line and headers: 431 beyond (reason "head_too_large").
  size_t max_head_bytes = 16 * 1024;
  // Content-Length: 413 beyond, answered before any of the body is read (reason
  // "body_too_large").
  uint64_t max_body_bytes = 4 * 1024 * 1024;
  // Threads that run handlers.
  int workers = 4;
  // GET targets (exact, query included) answered on a thread of their own, so that they are
  // answered while every worker is busy. Their handlers must be quick and must not block.
  std::vector<std::string> lane_targets = {"/health"};
  // Where granary_http_connections_refused_total{reason} goes; null: kept private.
  MetricsRegistry* metrics = nullptr;
};

// A cpp-httplib server for routing and responses, behind a gate that a slow or hostile client
// cannot stall. httplib's own server is thread-per-connection from an 8-thread pool with only
// per-read timeouts: eight peers trickling header bytes held every thread. Here httplib's
// accept thread only hands each socket to the gate, one epoll thread that reads every request
// whole into memory under HttpServerOptions' deadline and limits and answers 400 (malformed
// request line or Content-Length), 411 (a body without Content-Length), 413, 431 and 408
// itself. Only complete requests reach a worker, which runs httplib's request processing on the
// buffered bytes and writes the response under a deadline; one request per connection
// (Connection: close). Routes registered through Get/Put/Delete/Post also answer 405 (with
// Allow) for another method on their path; any request with a body must say application/json
// (415). Refusals are counted in granary_http_connections_refused_total{reason} and logged once
// per peer address.
//
// Register routes before Start(); handlers run on the worker and lane threads, concurrently.
// Destruction stops accepting, closes every held connection, waits for running handlers and
// joins every thread. Start is not thread-safe; everything else is internal.
class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes on an exact path (the query is not part of it).
  void Get(const std::string& path, Handler handler);
  void Put(const std::string& path, Handler handler);
  void Delete(const std::string& path, Handler handler);
  void Post(const std::string& path, Handler handler);
  // The httplib server, for routes these do not cover (no 405 for them).
  httplib::Server& server();

  // Binds host:port (0 = any free port) and starts serving.
  [[nodiscard]] absl::Status Start(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }

 private:
  class Gated;
  // A connection the gate is reading (or draining after a refusal).
  struct Conn {
    std::string peer;     // the peer's address, for logs
    std::string bytes;    // what arrived so far
    size_t scanned = 0;   // bytes FindHeadEnd already looked at
    size_t head_end = 0;  // 0 until the head is in
    http::HeadCheck head;
    absl::Time deadline;
    uint64_t order = 0;     // admission order: the oldest is evicted first
    bool draining = false;  // refused: its reply is sent, what it still sends is dropped
    size_t drained = 0;
  };
  // A whole request on its way to a worker.
  struct Job {
    int fd = -1;
    std::string bytes;
  };
  // Jobs and the threads that run them (the workers, or the lane).
  struct Lane {
    Mutex mu;
    std::deque<Job> jobs ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::vector<std::thread> threads;
    bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stop || !jobs.empty(); }
  };

  void Route(const std::string& method, const std::string& path, Handler handler);
  // The accept thread's hand-off: queue the socket for the gate.
  void Admit(int fd);
  // The gate thread and its steps (state owned by that thread alone).
  void GateLoop();
  void TakeNew(int fd, absl::Time now);
  void OnReadable(int fd, Conn& c);
  void Refuse(int fd, Conn& c, int status, absl::string_view reason, absl::string_view message);
  void Expire(absl::Time now);
  void Dispatch(int fd, Conn& c);
  void CloseConn(int fd);
  void Count(absl::string_view reason, const std::string& peer);
  // A worker or lane thread.
  void Work(Lane* lane);
  void Serve(Job job);

  const HttpServerOptions options_;
  std::unique_ptr<MetricsRegistry> own_metrics_;              // when options_.metrics is null
  absl::flat_hash_map<std::string, MetricCounter*> refused_;  // fixed at construction
  std::unique_ptr<Gated> server_;
  std::map<std::string, std::set<std::string>> routes_;  // path -> methods; fixed after Start
  uint16_t port_ = 0;

  std::thread accept_thread_;
  std::thread gate_thread_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: new sockets or stop
  Mutex pending_mu_;
  std::vector<int> pending_ ABSL_GUARDED_BY(pending_mu_);
  bool stopping_ ABSL_GUARDED_BY(pending_mu_) = false;
  std::atomic<int> held_{0};  // connections held: in the gate, queued, or being answered
  // Gate thread only.
  absl::flat_hash_map<int, Conn> conns_;
  uint64_t next_order_ = 0;
  absl::Time next_expiry_scan_ = absl::InfinitePast();
  Mutex log_mu_;
  absl::flat_hash_set<std::string> logged_peers_ ABSL_GUARDED_BY(log_mu_);  // logged once each
  Lane workers_;
  Lane lane_;
};

}  // namespace granary::common
