#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "transport/worker.h"

namespace granary::transport {

// What a client needs to reach one remote segment.
struct RemoteSegment {
  uint64_t segment_id = 0;
  std::string node_address;  // host:port of the node's listener
  std::string rkey;          // packed remote key
  std::string worker_address;  // the node's UCX worker address
  bool same_host = false;      // connect without peer-failure handling so shm can be used
  std::string host_id;         // the node's host id, "<boot id>/<pid>" (forwarded in Fetch)
  int pid = 0;                 // the node's process id when on this host, else 0
};

// The host id a node reports: this machine's HostId() and the process id.
std::string LocalHostId();
// Sets same_host, pid and host_id of a segment from the host id its node reported. A same-host
// endpoint cannot report its peer's death (no peer-failure handling on shared memory), so the
// engine checks that pid is alive before it posts to it.
void SetHostInfo(RemoteSegment* seg, const std::string& host_id);

// One one-sided transfer between local memory and a remote segment.
struct RmaOp {
  bool is_put = false;
  void* local = nullptr;
  size_t length = 0;
  ucp_mem_h memh = nullptr;  // registration of `local`, or null (UCX then handles it)
  uint64_t remote_addr = 0;
  std::shared_ptr<const RemoteSegment> segment;
};

// Runs batches of one-sided puts and gets on one worker, keeping one endpoint per node and one
// unpacked rkey per (node, segment). Per batch: every op is posted at once (no waiting between
// them), then one flush per endpoint that received puts; the batch completes when all of them
// have. Cost: one closure hand-off to the progress thread per batch, no per-op allocation
// beyond UCX's own request. Thread-safe (everything runs on the worker's thread).
class RmaEngine {
 public:
  explicit RmaEngine(Worker* worker) : worker_(worker) {}
  ~RmaEngine();

  // Calls done(status) on the progress thread when every op finished (puts remotely visible).
  void Execute(std::vector<RmaOp> ops, std::function<void(absl::Status)> done);
  absl::Status ExecuteSync(std::vector<RmaOp> ops);
  // Drops the cached endpoint and rkeys of a node (after it failed or left).
  void ForgetNode(const std::string& node_address);

 private:
  struct Peer {
    std::shared_ptr<Endpoint> ep;
    absl::flat_hash_map<uint64_t, ucp_rkey_h> rkeys;
  };
  absl::StatusOr<Peer*> GetPeer(const RemoteSegment& seg);
  absl::StatusOr<ucp_rkey_h> GetRkey(Peer* peer, const RemoteSegment& seg);
  void DropPeer(const std::string& address);

  Worker* worker_;
  // Progress-thread state.
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_;
};

}  // namespace granary::transport
