#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/backoff.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/work_pool.h"
#include "proto/messages.h"
#include "transport/worker.h"

namespace granary::transport {

// What a client needs to reach one remote segment.
struct RemoteSegment {
  uint64_t segment_id = 0;
  std::string node_address;    // host:port of the node's listener
  std::string rkey;            // packed remote key
  std::string worker_address;  // the node's UCX worker address
  bool same_host = false;      // connect without peer-failure handling so shm can be used
  std::string host_id;         // the node's host id, "<boot id>/<pid>" (forwarded in Fetch)
  int pid = 0;                 // the node's process id when on this host, else 0
  uint64_t base = 0;           // the segment's remote address range, when known (size > 0):
  uint64_t size = 0;           // what a same-host mapping (RmaEngine::CopyMapped) may touch
  // A GPU segment (tier gpu): device memory that neither UCX nor a CPU copy may touch. The
  // client moves its bytes through the device backend (client/gpu_segments.h), never through
  // this engine.
  bool gpu = false;
  // A disk tier (tier disk): no memory at all. Its values travel in Read and Write messages
  // only (the node reads and writes the tier), never through this engine.
  bool disk = false;
  std::string gpu_ipc;   // the node's IPC export of byte 0 (proto::SegmentInfo::gpu_ipc)
  std::string gpu_uuid;  // the device's UUID
};

// The host id a node reports: this machine's HostId() and the process id.
std::string LocalHostId();
// Sets same_host, pid and host_id of a segment from the host id its node reported. A same-host
// endpoint cannot report its peer's death (no peer-failure handling on shared memory), so the
// engine checks that pid is alive before it posts to it.
void SetHostInfo(RemoteSegment* seg, const std::string& host_id);
// A segment as the master or a node describes it on the wire, with its host info set (the one
// place proto::SegmentInfo becomes a RemoteSegment).
std::shared_ptr<RemoteSegment> RemoteSegmentOf(const proto::SegmentInfo& info);
// The reverse: a segment as a request names it (Fetch's source, Push's destination).
proto::SegmentInfo SegmentInfoOf(const RemoteSegment& seg);

// One one-sided transfer between local memory and a remote segment.
struct RmaOp {
  bool is_put = false;
  void* local = nullptr;
  size_t length = 0;
  ucp_mem_h memh = nullptr;  // registration of `local`, or null (UCX then handles it)
  uint64_t remote_addr = 0;
  std::shared_ptr<const RemoteSegment> segment;
  bool header = false;  // the op moves the 64-byte allocation header (set by the planners)
  // `local` is device (or managed) memory of this device (a client's GPU destination or source,
  // client/device_transfers.h); -1: host memory. Such an op is never a CPU copy and never
  // reaches UCX here: CopyMapped leaves it, Execute refuses it (INTERNAL).
  int device = -1;
};

// Moves the ops of *ops that pred accepts into the result, in order; the others stay, in order.
template <typename Pred>
std::vector<RmaOp> TakeOps(std::vector<RmaOp>* ops, const Pred& pred) {
  std::vector<RmaOp> taken;
  size_t kept = 0;
  for (size_t i = 0; i < ops->size(); ++i) {
    RmaOp& op = (*ops)[i];
    if (pred(op)) {
      taken.push_back(std::move(op));
      continue;
    }
    if (kept != i) (*ops)[kept] = std::move(op);
    ++kept;
  }
  ops->resize(kept);
  return taken;
}

// An op of RmaEngine::RunMapped with the address its remote range is mapped at here.
struct MappedOp {
  RmaOp op;
  void* mapped = nullptr;       // where op's remote range is, here
  void* mapped_base = nullptr;  // where the segment's first byte is, here
  uint64_t mapped_size = 0;     // the segment's size
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
  [[nodiscard]] absl::Status ExecuteSync(std::vector<RmaOp> ops);
  // Runs ops and waits for them at most `timeout`, driving the worker itself where it may
  // (caller_drive). Past the timeout it calls on_timeout (which must make the ops complete:
  // MarkUnreachable or ForgetNode their nodes, which closes the endpoints), waits up to `grace`
  // more, and answers DEADLINE_EXCEEDED naming the timeout. With a finite grace an op UCX never
  // completes is abandoned (logged): its local buffer may still be written, so a caller whose
  // buffers do not outlive the call passes an infinite grace.
  [[nodiscard]] absl::Status ExecuteWithin(std::vector<RmaOp> ops, absl::Duration timeout,
                                           const std::function<void()>& on_timeout,
                                           absl::Duration grace);
  // Same host, shared memory. A node on this host allocates its segment in shared memory, and
  // once Execute has unpacked the segment's rkey, that memory is mapped into this process
  // (ucp_rkey_ptr): the op is then a memcpy. This copies, on the calling thread, every op of
  // *ops whose segment is mapped (its range inside the segment, its node process alive) and
  // leaves the others in *ops, in order, for Execute. No hand-off to the progress thread, no
  // UCX request: that hand-off and its wake-ups cost more than copying a 4 KiB value. Copies
  // are done (puts visible to the node's other readers) when it returns. Host memory only on
  // this side (ops with device >= 0 are left in *ops). Thread-safe; returns how many ops it
  // copied.
  // With a copy pool set, a batch whose mapped copies add up to at least kParallelCopyBytes is
  // copied in parts of about kCopyPartBytes by the calling thread and the pool's threads
  // together.
  size_t CopyMapped(std::vector<RmaOp>* ops);
  static constexpr uint64_t kParallelCopyBytes = 1u << 20;
  static constexpr uint64_t kCopyPartBytes = 256u << 10;
  // The threads that share CopyMapped's large batches (null: the calling thread alone). Set
  // once, before the first transfer; the pool outlives the engine. Each batch shared counts in
  // `shared` (may be null).
  void set_copy_pool(common::WorkPool* pool, common::MetricCounter* shared) {
    copy_pool_ = pool;
    shared_copies_ = shared;
  }
  // The ops of *ops that `want` accepts and whose segment is mapped here, taken out of *ops
  // (the others stay, in order) and handed to fn with the address of each one's remote range,
  // under the mapping lock: the mappings stay valid until fn returns, so fn finishes every
  // access (a device copy included) before it does. Returns fn's status; OK with nothing taken
  // (fn not called). Thread-safe.
  [[nodiscard]] absl::Status RunMapped(std::vector<RmaOp>* ops,
                                       absl::FunctionRef<bool(const RmaOp&)> want,
                                       absl::FunctionRef<absl::Status(std::vector<MappedOp>&)> fn);
  // Called with a segment's local address and size just before its mapping goes away (the node
  // was dropped), with the mapping lock held exclusively: a client unregisters memory it pinned
  // there (client/device_transfers.h). Set once, before the first transfer.
  // Where UCX supports CUDA memory (Context::SupportsCudaMemory): Execute then moves ops with
  // device >= 0 (UCX detects and handles the device memory itself); otherwise it refuses them.
  // Set once, before the first transfer.
  void set_device_memory(bool allowed) { device_memory_ = allowed; }
  void set_unmap_hook(std::function<void(void* local, uint64_t size)> hook) {
    unmap_hook_ = std::move(hook);
  }
  // Whether this engine's endpoint to the node moves data over tcp alone (no RDMA, no shared
  // memory), known once a transfer has connected to it; false before. A client then has the
  // node push values into a registered buffer (proto::PushRequest) instead of reading them.
  // Thread-safe.
  bool TcpOnly(const std::string& node_address);
  // Drops the cached endpoint and rkeys of a node (after it failed or left).
  void ForgetNode(const std::string& node_address);
  // After a transfer to these nodes timed out: closes their endpoints on the worker thread
  // before it returns (from then on no transfer on them moves another byte), and keeps each
  // node unreachable for a jittered exponential back-off (kUnreachableInitialMs doubling to
  // kUnreachableMaxMs; afresh once a node has gone 2 x the maximum without a failure). Until it
  // has passed, a transfer to the node fails at once with UNAVAILABLE (a reader goes to another
  // replica) instead of connecting again: over tcp UCX 1.13 connects with a blocking connect(),
  // which holds this engine's only worker thread for seconds while the peer is cut off. Each
  // refusal counts in `refusals` (may be null). Not from the worker thread. With back_off false
  // the endpoints are closed (and waited for) but the nodes are not held off: the timeout was
  // the caller's own deadline (a put's write window), not the nodes' fault.
  void MarkUnreachable(const std::vector<std::string>& node_addresses, bool back_off = true);
  void set_refusal_counter(common::MetricCounter* refusals) { refusals_ = refusals; }

  static constexpr int64_t kUnreachableInitialMs = 500;
  static constexpr int64_t kUnreachableMaxMs = 10'000;

 private:
  struct Peer {
    std::shared_ptr<Endpoint> ep;
    absl::flat_hash_map<uint64_t, ucp_rkey_h> rkeys;
  };
  [[nodiscard]] absl::StatusOr<Peer*> GetPeer(const RemoteSegment& seg);
  [[nodiscard]] absl::StatusOr<ucp_rkey_h> GetRkey(Peer* peer, const RemoteSegment& seg);
  void DropPeer(const std::string& address);
  // Progress thread: whether an op to this node would create an endpoint first.
  bool NeedsConnect(const std::string& address) const;
  // Progress thread: posts the batch's operations (Execute's body).
  void Start(std::vector<RmaOp> ops, std::function<void(absl::Status)> done);

  // The mapped op of *ops at i, or nullptr (shared by CopyMapped and RunMapped).
  struct MapCursor;
  void* MappedLocked(const RmaOp& op, MapCursor* cursor) ABSL_SHARED_LOCKS_REQUIRED(map_mu_);

  Worker* worker_;
  common::MetricCounter* refusals_ = nullptr;
  common::WorkPool* copy_pool_ = nullptr;
  common::MetricCounter* shared_copies_ = nullptr;
  std::function<void(void*, uint64_t)> unmap_hook_;
  bool device_memory_ = false;  // set_device_memory
  // Progress-thread state.
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_;
  common::PeerHolds unreachable_{kUnreachableInitialMs, kUnreachableMaxMs};
  // Segments mapped into this process, by segment id; each rkey is owned by its Peer. DropPeer
  // removes its rkeys here (exclusive lock) before destroying them, so a copy under the shared
  // lock never reads through an unmapped rkey.
  struct Mapped {
    std::string node_address;
    ucp_rkey_h rkey = nullptr;
    uint64_t base = 0;
    uint64_t size = 0;
  };
  granary::common::Mutex map_mu_;
  absl::flat_hash_map<uint64_t, Mapped> mapped_ ABSL_GUARDED_BY(map_mu_);
  granary::common::Mutex tcp_mu_;
  absl::flat_hash_set<std::string> tcp_only_ ABSL_GUARDED_BY(tcp_mu_);
  // tcp_only_.size(), read without the lock: on shared memory and RDMA (none tcp-only),
  // TcpOnly is one atomic load per call.
  std::atomic<size_t> tcp_only_count_{0};
};

}  // namespace granary::transport
