#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/messages.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::link {

// The control connection to the master that a node (node/master_session.h) and a client
// (client/master_session.h) both keep, in one place:
//  - which master: a fixed host:port, or with an etcd:// address (HA) the active master named
//    in granary/<cluster_id>/master_view, read again before every attempt;
//  - the dial (transport::RpcClient: Granary's handshake, the protocol version agreed within
//    the window of docs/protocol.md) and the hello;
//  - the epoch fence: a view or a hello reply whose epoch is below the highest one seen is
//    refused, and each connection is fenced at its hello's epoch (RpcClient::SetEpochFence);
//  - the back-off between failed attempts (common/backoff.h: jittered, exponential, from
//    backoff_initial_ms up to backoff_max_ms), each failure counted in `connect_failures`;
//  - the heartbeat pace the last hello reply asked for, and the waits of a reconnect loop.
//
// Its owner decides when to connect (a node from its own loop, at once after a failure's
// back-off; a client on demand, when a call finds no connection), what a fresh connection
// needs before anyone uses it (the OnHello hook: a node mounts its segments and reports its
// inventory, a client notes its write window), and how heartbeats go (a node's wait for the
// answer and carry its cgroup figures; a client's are sent and forgotten).
//
// Thread-safe: any method from any thread. Attempts are serialized (a caller of Connection
// waits for an attempt in progress, then gets its connection or, on a failure, the fail-fast
// answer); the OnHello hook runs on the attempting thread and may call the link's short calls
// (Current, Drop, Wake, stopping, the waits), not Connection. Destroy the link before its
// Worker: the destructor drops the connection.
class MasterLink {
 public:
  struct Options {
    std::string master;                             // host:port, or etcd://h1:2379;h2:2379 (HA)
    std::string cluster_id;                         // with etcd://: whose master_view
    int etcd_timeout_ms = 1000;                     // each etcd request
    absl::Duration rpc_timeout = absl::Seconds(5);  // the dial, and the hello's answer
    int64_t backoff_initial_ms = 100;               // the waits between failed attempts
    int64_t backoff_max_ms = 2000;
    // true: an unreadable master_view, and a hello that timed out or lost its connection, fail
    // with UNAVAILABLE naming the master (a client's calls retry on UNAVAILABLE); a NOT_LEADER
    // refusal passes as it is. false: every error as it came.
    bool unavailable_errors = false;
    common::MetricCounter* connect_failures = nullptr;  // each failed attempt; may be null
    const common::LogRoute* log_route = nullptr;  // lines logged while connecting; outlives it
  };
  // The hello of one attempt (a client draws a new client id for each).
  using HelloMaker = std::function<proto::HelloRequest()>;
  // Runs on a fresh connection once its hello was accepted, before Connection or Current hand
  // it out. An error fails the attempt (counted and backed off like a failed dial).
  using OnHello = std::function<absl::Status(const std::shared_ptr<transport::RpcClient>& m,
                                             const proto::HelloReply& reply)>;

  // INVALID_ARGUMENT or etcd's error when an etcd:// address cannot be used. Connects later.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterLink>> Create(Options options,
                                                                          transport::Worker* worker,
                                                                          HelloMaker hello,
                                                                          OnHello on_hello);
  ~MasterLink();
  MasterLink(const MasterLink&) = delete;
  MasterLink& operator=(const MasterLink&) = delete;

  // The live connection; else one attempt (resolve, dial, hello, OnHello) when one is due;
  // else, while backing off after a failed attempt, an error at once: the last attempt's code,
  // reason and message, the failures in a row and when the next attempt is due.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Connection();
  // The connection as it is, without connecting: null when there is none; it may be broken.
  [[nodiscard]] std::shared_ptr<transport::RpcClient> Current();
  // Forgets `m` if it is still the connection: the next Connection connects again.
  void Drop(const std::shared_ptr<transport::RpcClient>& m);
  // Ends a WaitForHeartbeat early if `m` is still the connection (its user saw it fail).
  void Wake(const std::shared_ptr<transport::RpcClient>& m);

  // Sleeps `ms`; false (at once) once Shutdown was called.
  bool SleepFor(int64_t ms);
  // Until the next heartbeat is due (the interval of the last hello reply, at least 50 ms;
  // 1 s before any), a Wake, or Shutdown; false once Shutdown was called.
  bool WaitForHeartbeat();
  // A reconnect loop's back-off: until the next attempt is due. With an etcd:// master the
  // wait ends early, and the next attempt is due at once, when master_view names another
  // master than the one last tried (a failover: the back-off never outlasts an election).
  void WaitToReconnect();
  // A call riding out a failover: until the next attempt is due or `deadline_us` (MonotonicUs),
  // and at least backoff_initial_ms (a master that refuses at once is not hammered). False
  // when the deadline has passed or Shutdown was called.
  [[nodiscard]] bool WaitForNextAttempt(int64_t deadline_us);
  // Ends every wait, now and later. Connection still works (a node unmounts after it).
  void Shutdown();
  [[nodiscard]] bool stopping();

  // HA: whether the master is found through etcd.
  [[nodiscard]] bool follows_etcd() const { return etcd_ != nullptr; }
  // HA: whether a request that got `st` from the master on `m` may go to the next master (the
  // master admitted nothing: it is not the leader, or the connection broke before it answered).
  [[nodiscard]] static bool FailedOver(const absl::Status& st, const transport::RpcClient& m);
  // Failed attempts since the last connection.
  [[nodiscard]] int failures();
  [[nodiscard]] uint32_t heartbeat_ms();
  // HA: the highest master epoch seen (0: none, or no HA).
  [[nodiscard]] int64_t highest_epoch() const { return highest_epoch_->load(); }
  [[nodiscard]] const Options& options() const { return options_; }

 private:
  MasterLink(Options options, transport::Worker* worker, HelloMaker hello, OnHello on_hello);
  // One attempt: resolve, dial, hello, the epoch fence, OnHello.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Attempt()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(connect_mu_);
  // The address to dial: options_.master, or the one master_view names.
  [[nodiscard]] absl::StatusOr<std::string> Resolve() ABSL_EXCLUSIVE_LOCKS_REQUIRED(connect_mu_);
  // The hello on a fresh connection, its reply checked against the epoch fence.
  [[nodiscard]] absl::StatusOr<proto::HelloReply> Hello(transport::RpcClient* m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(connect_mu_);
  bool StoppingOrWoken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; }

  const Options options_;
  transport::Worker* const worker_;
  const HelloMaker hello_;
  const OnHello on_hello_;
  std::unique_ptr<etcd::EtcdClient> etcd_;  // with an etcd:// master; set in Create

  granary::common::Mutex connect_mu_;  // one attempt at a time; before mu_ when both are held
  etcd::EpochFence epochs_ ABSL_GUARDED_BY(connect_mu_);
  // epochs_.highest(), readable without a lock; every connection's epoch fence reads it too.
  const std::shared_ptr<std::atomic<int64_t>> highest_epoch_ =
      std::make_shared<std::atomic<int64_t>>(0);

  granary::common::Mutex mu_;  // held for short calls only, never across I/O
  std::shared_ptr<transport::RpcClient> conn_ ABSL_GUARDED_BY(mu_);
  uint32_t heartbeat_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  common::Backoff backoff_ ABSL_GUARDED_BY(mu_);
  int64_t next_attempt_us_ ABSL_GUARDED_BY(mu_) = 0;  // MonotonicUs; 0: try now
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  std::string last_address_ ABSL_GUARDED_BY(mu_);  // what the last attempt resolved
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace granary::link
