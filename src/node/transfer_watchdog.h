#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace granary::node {

// Deadlines for the node's own transfers toward a peer (a Push into a client's buffer, a Fetch
// from another node), which the RMA engine runs with no deadline of its own. Each transfer is
// answered exactly once: by Finish when it completes in time, or, once its deadline has passed,
// by the watchdog's thread with DEADLINE_EXCEEDED, and that only after hold_off(peers) has
// returned. hold_off closes the endpoints to those peers (so no byte of the transfer moves
// after the answer) and keeps them off for a back-off (RmaEngine::MarkUnreachable): the next
// transfers to a cut-off client fail at once instead of queueing behind another timeout.
// Thread-safe; hold_off and the answers run on the watchdog's thread, never under its lock.
class TransferWatchdog {
 public:
  using Answer = std::function<void(const absl::Status&)>;
  using HoldOff = std::function<void(const std::vector<std::string>& peers)>;
  explicit TransferWatchdog(HoldOff hold_off);
  ~TransferWatchdog();  // Stop()
  TransferWatchdog(const TransferWatchdog&) = delete;
  TransferWatchdog& operator=(const TransferWatchdog&) = delete;

  // Registers a transfer of `what` ("push", "fetch") to `peer` that must finish within
  // timeout_ms; returns its token for Finish.
  uint64_t Start(std::string what, std::string peer, int64_t timeout_ms, Answer answer);
  // The transfer finished with st: answers it, unless the watchdog already has (then st is
  // dropped; the peer was answered DEADLINE_EXCEEDED). Returns whether it answered.
  bool Finish(uint64_t token, const absl::Status& st);
  // Stops and joins the thread: no deadline fires from then on, and transfers still pending are
  // answered only by Finish. Idempotent.
  void Stop();
  // Transfers started and not yet answered.
  size_t pending() const;
  // Transfers the watchdog answered with DEADLINE_EXCEEDED, since creation.
  uint64_t expired() const;

 private:
  struct Pending {
    std::string what;
    std::string peer;
    int64_t timeout_ms = 0;
    absl::Time deadline;
    Answer answer;
  };
  void Loop();
  bool Wake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; }

  const HoldOff hold_off_;
  mutable granary::common::Mutex mu_;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time earliest_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool woken_ ABSL_GUARDED_BY(mu_) = false;  // a deadline earlier than earliest_ came in
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace granary::node
