#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/planner.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "transport/rpc_client.h"

namespace granary::client {

// One batch's Read or Write messages (planner.h, InlineGroup) in flight to nodes over tcp.
// Start sends every group at once; Wait returns each group's status, in group order.
//
// A Read's reply is copied into its destinations on the progress thread as it arrives, under
// this object's lock; Wait, on timeout, marks the batch abandoned under the same lock, so no
// reply lands in the caller's buffers after Wait returned. (A Write that timed out may still
// be applied by its node later, as a one-sided write still in a socket may: the caller gives
// its allocation back and drops the connection, and the header check keeps readers from
// taking those bytes for another object.)
class InlineBatch {
 public:
  // The connection to a node (address, whether it is on another host).
  using NodeFn = std::function<absl::StatusOr<std::shared_ptr<transport::RpcClient>>(
      const std::string&, bool)>;
  // groups must stay unchanged, and their headers and values valid, until Wait returns.
  InlineBatch(bool write, const std::vector<InlineGroup>* groups, common::MetricCounter* values);
  // Sends every group (a node that cannot be reached fails its group at once).
  void Start(const NodeFn& node_client);
  // Waits at most timeout_ms for every answer; a group still unanswered then is
  // DEADLINE_EXCEEDED naming its node. Call once.
  std::vector<absl::Status> Wait(int64_t timeout_ms);

 private:
  // Everything a reply touches, shared with the callbacks: a reply that comes after Wait gave
  // up finds `abandoned` set and touches nothing else (the groups and buffers may be gone).
  struct State {
    granary::common::Mutex mu;
    bool write = false;
    const std::vector<InlineGroup>* groups = nullptr;
    common::MetricCounter* values = nullptr;
    std::atomic<size_t> unanswered{0};  // groups without an answer; changed under mu
    bool abandoned ABSL_GUARDED_BY(mu) = false;
    std::vector<absl::Status> status ABSL_GUARDED_BY(mu);
    std::vector<bool> answered ABSL_GUARDED_BY(mu);
    bool Done() const { return unanswered.load(std::memory_order_acquire) == 0; }
  };
  // Group g's answer, on the progress thread (or at once when it could not be sent).
  static void Finish(State* s, size_t g, absl::StatusOr<absl::string_view> frame);
  // A Read reply's data into the group's destinations and headers.
  static absl::Status Scatter(const InlineGroup& group, absl::string_view frame);

  // Null when the batch has no groups (every batch on other transports): nothing to allocate.
  std::shared_ptr<State> state_;
  transport::Worker* worker_ = nullptr;  // the groups' (Start), which Wait may drive
};

}  // namespace granary::client
