#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/etcd/etcd_client.h"

namespace granary::etcd {

// How nodes and clients find the active master with HA (master/ha/leader_election.h): a master
// address written `etcd://h1:2379;h2:2379` names etcd, and the active master's RPC address is
// the "rpc" field of granary/<cluster_id>/master_view, whose create_revision is the epoch.

// The etcd endpoints ("h1:2379,h2:2379") of an etcd:// master address; nullopt for host:port.
[[nodiscard]] std::optional<std::string> EndpointsOfMasterAddress(const std::string& master);

// INVALID_ARGUMENT naming `what` and the value when an etcd:// address has a bad endpoint or
// the cluster id is empty or holds a '/'. OK for a host:port address (checked elsewhere).
[[nodiscard]] absl::Status ValidateMasterAddress(absl::string_view what, const std::string& master,
                                                 const std::string& cluster_id);

[[nodiscard]] std::string MasterViewKey(const std::string& cluster_id);

struct MasterView {
  std::string rpc;    // host:port of the active master's RPC listener
  std::string admin;  // host:port of its admin HTTP API ("" when the view names none)
  int64_t epoch = 0;  // master_view's create_revision
};

// The current view: UNAVAILABLE when no master leads yet (or etcd cannot be reached), DATA_LOSS
// when the key holds no RPC address.
[[nodiscard]] absl::StatusOr<MasterView> ReadMasterView(EtcdClient* etcd,
                                                        const std::string& cluster_id);

// The highest epoch a peer has seen. A master answering with a lower one is a deposed leader
// that has not noticed yet (a paused process, a partition): its answers are refused. Epoch 0
// (a master without HA) is always accepted. Not thread-safe: the owner's lock guards it.
class EpochFence {
 public:
  // OK (and remembers the epoch when it is higher), or UNAVAILABLE naming both
  // epochs and `who`.
  [[nodiscard]] absl::Status Accept(int64_t epoch, absl::string_view who);
  int64_t highest() const { return highest_; }

 private:
  int64_t highest_ = 0;
};

}  // namespace granary::etcd
