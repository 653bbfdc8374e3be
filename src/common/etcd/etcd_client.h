#pragma once

// One etcd v3 client for the whole process, over etcd's JSON gateway (POST /v3/..., int64
// fields as JSON strings, keys and values base64), with cpp-httplib. Used by the master's
// election (master/ha) and by the etcd policy store; nodes and clients will watch the view
// through it too.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace httplib {
class Client;
}

namespace granary::etcd {

struct Endpoint {
  std::string text;  // as the operator wrote it, for messages
  std::string host;
  int port = 0;
};

// "host:port[,host:port...]" (each entry "host:port", "[v6]:port" or "http://host:port").
// INVALID_ARGUMENT naming the bad entry.
[[nodiscard]] absl::StatusOr<std::vector<Endpoint>> ParseEndpoints(absl::string_view list);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision when the range was served
  std::vector<KeyValue> kvs;
};

// One compare of a txn: target(key) <result> operand.
struct Compare {
  enum class Target { kCreate, kMod, kVersion, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kCreate;
  Result result = Result::kEqual;
  int64_t revision = 0;  // kCreate, kMod, kVersion
  std::string value;     // kValue
  static Compare CreateRevision(std::string key, int64_t rev) {
    return {std::move(key), Target::kCreate, Result::kEqual, rev, {}};
  }
  static Compare Value(std::string key, std::string value) {
    return {std::move(key), Target::kValue, Result::kEqual, 0, std::move(value)};
  }
};

// One operation of a txn branch.
struct Op {
  enum class Type { kPut, kDelete, kRange };
  Type type = Type::kPut;
  std::string key;
  std::string value;  // kPut
  int64_t lease = 0;  // kPut: 0 = none
  static Op Put(std::string key, std::string value, int64_t lease = 0) {
    return {Type::kPut, std::move(key), std::move(value), lease};
  }
  static Op Delete(std::string key) { return {Type::kDelete, std::move(key), {}, 0}; }
  static Op Get(std::string key) { return {Type::kRange, std::move(key), {}, 0}; }
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;             // the header revision: for a txn that wrote, its revision
  std::vector<RangeResult> ranges;  // one per kRange op of the branch that ran, in order
};

struct LeaseGrant {
  int64_t id = 0;
  int64_t ttl_sec = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for kDelete: the key and mod_revision (the delete's revision)
};

// Cancels a Watch from another thread: Cancel() closes the watch's connection, and every later
// Watch given this token returns at once. Thread-safe.
class WatchCancel {
 public:
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class EtcdClient;
  // Registers the watch's connection (null: none); false when already cancelled.
  bool Attach(httplib::Client* client);
  std::atomic<bool> cancelled_{false};
  granary::common::Mutex mu_;
  httplib::Client* client_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Every request opens a fresh connection with connect, read and write timeouts of timeout_ms,
// so a half-open connection can never wedge a caller (Mooncake #2253). Endpoints are tried in
// turn, starting from the last one that answered; a transport error, HTTP 5xx or gRPC
// UNAVAILABLE / DEADLINE_EXCEEDED moves on to the next, anything else is returned at once.
// When no endpoint answers: UNAVAILABLE naming each endpoint and its error. A call therefore
// takes at most about endpoints × timeout_ms.
//
// Thread-safe: the only mutable state is the atomic index of the preferred endpoint. Owned by
// whoever created it; it keeps no threads.
class EtcdClient {
 public:
  // `endpoints` as ParseEndpoints takes them; timeout_ms > 0.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      absl::string_view endpoints, int timeout_ms);

  [[nodiscard]] absl::StatusOr<LeaseGrant> LeaseGrantTtl(int64_t ttl_sec);
  // One keepalive: the lease's remaining TTL as etcd reports it (<= 0: the lease is gone).
  [[nodiscard]] absl::StatusOr<int64_t> LeaseKeepAlive(int64_t id);
  [[nodiscard]] absl::Status LeaseRevoke(int64_t id);
  // The key, or an empty kvs when absent.
  [[nodiscard]] absl::StatusOr<RangeResult> Range(const std::string& key);
  // Returns the revision of the put.
  [[nodiscard]] absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                                            int64_t lease = 0);
  [[nodiscard]] absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares,
                                              const std::vector<Op>& success,
                                              const std::vector<Op>& failure = {});

  // Watches `key` from `start_revision` (0: from now) on one endpoint until `on_events`
  // returns false, `cancel` is cancelled, the stream ends or no byte came for
  // read_timeout_ms. on_events gets each batch with its header revision, on this thread.
  // *next_revision is the revision to re-arm from (the last event's mod_revision + 1, or
  // start_revision when none came). Returns OK when stopped by on_events or cancel, or when
  // the stream timed out (re-arm); UNAVAILABLE naming the endpoints when none accepted the
  // watch; OUT_OF_RANGE when start_revision was compacted (re-read, then watch from there).
  [[nodiscard]] absl::Status Watch(
      const std::string& key, int64_t start_revision, int read_timeout_ms,
      const std::function<bool(int64_t revision, const std::vector<WatchEvent>&)>& on_events,
      WatchCancel* cancel, int64_t* next_revision);

  // "etcd:h1:2379,h2:2379", for messages.
  const std::string& Describe() const { return description_; }

 private:
  EtcdClient(std::vector<Endpoint> endpoints, int timeout_ms);
  // Calls attempt(endpoint, client) on each endpoint in turn, from the preferred one, each with
  // a fresh client (connect and write timeouts timeout_ms_, read timeout read_timeout_ms). An
  // attempt returns true when the endpoint answered (that ends the rotation and makes it the
  // preferred one), false to move on. False when none answered.
  using Attempt = std::function<bool(const Endpoint&, httplib::Client&)>;
  bool OnEndpoints(int read_timeout_ms, const Attempt& attempt);
  // POSTs `body` to each endpoint in turn until one answers; returns the JSON reply text.
  [[nodiscard]] absl::StatusOr<std::string> Post(const std::string& path, const std::string& body);

  const std::vector<Endpoint> endpoints_;
  const int timeout_ms_;
  const std::string description_;
  std::atomic<size_t> preferred_{0};  // index of the endpoint that last answered
};

}  // namespace granary::etcd
