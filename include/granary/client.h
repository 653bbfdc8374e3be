#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "granary/client_options.h"
#include "granary/kv_key.h"

namespace granary {

// One piece of a scatter (get) or gather (put) list: host memory, or device memory of the
// process's device backend (the GPU paths of GetInto/PutFrom).
struct BufferRegion {
  void* data = nullptr;
  size_t size = 0;
};

// The stream contract of a put that reads device memory (PutFrom and its batch and scatter-list
// forms given device buffers, BatchPutWith given views of device memory, PagedKv::Put on device
// caches, granary/paged_kv.h). Granary copies on streams of its own, which nothing orders after the
// engine's stream, so the bytes must be complete before the put reads them. Either
//   - pass the engine's stream, or an event it recorded after its writes, as a DeviceWait: the
//     put makes its copy stream wait for it on the device (cudaStreamWaitEvent; for a stream,
//     an event is recorded on it when the call starts), and waits on the host where the bytes
//     are read by the CPU or UCX or copied synchronously (a scatter list's gather, the paged-KV
//     gather, the node bounce); or
//   - without one, finish the writes before the call: synchronize the stream they were issued
//     on (torch.cuda.current_stream().synchronize(), cudaStreamSynchronize) or the device.
// A put that does neither can store bytes the engine's kernels have not written yet, silently.
// The same holds for host memory the engine fills with copies on its stream (D2H into pinned
// memory). Gets need nothing: they return when the bytes are in place (Granary's streams are
// synchronized), so work the engine enqueues after the call sees them.
// Handles are the process's device backend's: for CUDA a cudaStream_t and a cudaEvent_t as
// void*. A stream whose device is not the buffers' is synchronized on the host instead. Both
// may be given; the put waits for both. The caller keeps them alive for the call.
struct DeviceWait {
  void* stream = nullptr;  // the engine's stream: everything enqueued on it before the call
  void* event = nullptr;   // an event recorded after the writes (its latest record counts)
  bool empty() const { return stream == nullptr && event == nullptr; }
};

// One object as the master describes it.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  uint64_t generation = 0;
  bool complete = false;
  uint32_t replicas = 0;
  uint64_t age_ms = 0;
  // The node address (host:port, as SegmentInfo::node_address) of each complete replica. Filled
  // by Client::Stat (empty while the object is not complete, and in List's results).
  std::vector<std::string> replica_addresses;
  // The tier of each of those replicas ("host", "gpu" or "disk"), in the same order.
  std::vector<std::string> replica_tiers;
};

// One mounted segment.
struct SegmentInfo {
  uint64_t segment_id = 0;
  std::string name;
  std::string node_id;
  std::string node_address;
  std::string tier;  // "host", "gpu" or "disk"
  std::string pool;  // tenant of a dedicated pool, or empty
  uint64_t size = 0;
  uint64_t used = 0;
};

// The answer to LookupPrefix: how many leading blocks of a prefix chain are present and
// complete, and where each of them lives.
struct PrefixLookup {
  size_t present = 0;
  struct Block {
    std::string key;  // the encoded KvKey (pass it to Get/GetInto)
    uint64_t size = 0;
    std::string node_address;  // a location hint: the node of its first complete replica
  };
  std::vector<Block> blocks;  // `present` entries
  uint32_t lease_ms = 0;      // with lease: the blocks are leased this long
};

// Where a put places its replicas: the memory tier of a segment (a node's --host_segment_size
// or --gpu_segment_size), `any`, or the tenant's default. Every replica of one object sits on
// one tier.
enum class StorageTier {
  kHost,  // host memory: readable by every client, same-host or remote
  kGpu,   // a node's GPU memory: same-host clients copy through the device backend's IPC; a
          // client on another host (or whose IPC open fails) is served by the node's bounce
  kAny,   // GPU segments while they have room without evicting anything there, else host
          // segments (evicting there as a host put would)
  kTenantDefault,  // the tenant's `default_tier` in the master's policy (host when unset)
  // The nodes' disk tiers (granary_node --disk_path): a node reads and writes them for its
  // clients, in Read and Write messages, so a value moves to and from host memory only and is
  // at most about 64 MB (one message). Needs a master of protocol 15 or later.
  kDisk,
};

// "host", "gpu", "any" or "disk" as a StorageTier (the CLI's --tier, Python's tier=);
// INVALID_ARGUMENT naming the value otherwise.
[[nodiscard]] absl::StatusOr<StorageTier> ParseStorageTier(absl::string_view text);

// Options of one put.
struct PutOptions {
  bool soft_pin = false;  // evicted only when nothing unpinned is left
  bool hard_pin = false;  // never evicted (still removable, still charged)
  // The tier every replica is placed on (kHost or kGpu: only that tier, RESOURCE_EXHAUSTED
  // when it has no room; kAny: see StorageTier). By default the tenant's policy decides
  // (`default_tier`), and a tenant whose policy names none puts on host memory only.
  StorageTier tier = StorageTier::kTenantDefault;
  // For values that are views of device memory: what the put waits for before it reads them
  // (DeviceWait; empty: the caller has finished its writes).
  DeviceWait wait;
};

// Options of one get.
struct GetOptions {
  // How long the master holds the read lease of each key while this get reads it, in ms
  // (0: the master's --default_kv_lease_ttl). While a read lease is held, a Remove without
  // force is refused and eviction skips the object; the get ends its leases as soon as its
  // bytes are in place, so a longer lease only matters for reads that may be slow (large GPU
  // values through a node's bounce, a congested link). A lease that runs out never yields
  // wrong bytes (reads are fenced by the value's header). INVALID_ARGUMENT above
  // kMaxLeaseMs. A master older than protocol 14 grants its default.
  static constexpr uint32_t kMaxLeaseMs = 600'000;
  uint32_t lease_ms = 0;
  // The tier to read from where an object has replicas on more than one (a Copy or Move of a
  // host object to a node's GPU segment, or the reverse): kHost or kGpu reads a replica on
  // that tier first and falls back to the others; a hint, never an error. kAny and
  // kTenantDefault take the replicas in the master's order.
  StorageTier tier = StorageTier::kAny;
};

struct ListResult {
  std::vector<ObjectInfo> objects;
  bool more = false;  // call again with start_after = the last key
};

// A connection to a Granary cluster for one tenant. Values move one-sided between this
// process's memory and the nodes' segments; the master only hands out places.
//
// Thread-safe: any number of threads may call any method at once. Errors are Status codes:
// NOT_FOUND (no such key), ALREADY_EXISTS (Put of a key that exists), RESOURCE_EXHAUSTED (no
// space or quota), UNAVAILABLE (master or node unreachable; retry), DEADLINE_EXCEEDED,
// INVALID_ARGUMENT (bad key, size or buffer). Where the code alone does not say why (which
// quota rule refused a put), granary::ErrorReasonOf(status) does (granary/error_reason.h).
//
// Creating a client changes no process-wide setting (not the environment, absl's mutex
// options or the log threshold); its log lines go to ClientOptions::log_sink at
// ClientOptions::log_level.
class Client {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);
  // ClientOptions::FromEnvironment(), then Create.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> CreateFromEnvironment();
  virtual ~Client() = default;

  [[nodiscard]] virtual absl::Status Put(absl::string_view key, absl::string_view value) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;

  // Batch forms: one control round trip per phase for the whole batch; one status per key.
  virtual std::vector<absl::Status> BatchPut(absl::Span<const std::string> keys,
                                             absl::Span<const absl::string_view> values) = 0;
  // BatchPut with options (PutOptions); values may be views of host or device memory.
  virtual std::vector<absl::Status> BatchPutWith(absl::Span<const std::string> keys,
                                                 absl::Span<const absl::string_view> values,
                                                 const PutOptions& options) = 0;
  virtual std::vector<absl::StatusOr<std::string>> BatchGet(absl::Span<const std::string> keys,
                                                            const GetOptions& options) = 0;
  std::vector<absl::StatusOr<std::string>> BatchGet(absl::Span<const std::string> keys) {
    return BatchGet(keys, GetOptions{});
  }

  // Zero-copy forms for the caller's buffers, host or device memory (registered buffers are
  // fastest; unregistered host memory works too, through UCX's own registration cache).
  // GetInto returns the value's size; FAILED_PRECONDITION if `capacity` is smaller (nothing is
  // written then). The options (PutOptions: pins, the tier, and what to wait for before reading
  // device memory, the stream contract; GetOptions: the read lease and a tier hint) default to
  // no pin, the tenant's default tier, the caller's writes complete, and the master's lease.
  // INVALID_ARGUMENT for a DeviceWait handle the device backend refuses.
  virtual std::vector<absl::Status> BatchPutFrom(absl::Span<const std::string> keys,
                                                 absl::Span<const void* const> buffers,
                                                 absl::Span<const size_t> sizes,
                                                 const PutOptions& options) = 0;
  virtual std::vector<absl::StatusOr<size_t>> BatchGetInto(absl::Span<const std::string> keys,
                                                           absl::Span<void* const> buffers,
                                                           absl::Span<const size_t> capacities,
                                                           const GetOptions& options) = 0;
  [[nodiscard]] absl::Status PutFrom(absl::string_view key, const void* data, size_t size,
                                     const PutOptions& options = {}) {
    const std::string k(key);
    return BatchPutFrom(absl::MakeConstSpan(&k, 1), absl::MakeConstSpan(&data, 1),
                        absl::MakeConstSpan(&size, 1), options)[0];
  }
  [[nodiscard]] absl::StatusOr<size_t> GetInto(absl::string_view key, void* buffer, size_t capacity,
                                               const GetOptions& options = {}) {
    const std::string k(key);
    return std::move(BatchGetInto(absl::MakeConstSpan(&k, 1), absl::MakeConstSpan(&buffer, 1),
                                  absl::MakeConstSpan(&capacity, 1), options)[0]);
  }
  std::vector<absl::Status> BatchPutFrom(absl::Span<const std::string> keys,
                                         absl::Span<const void* const> buffers,
                                         absl::Span<const size_t> sizes) {
    return BatchPutFrom(keys, buffers, sizes, PutOptions{});
  }
  std::vector<absl::StatusOr<size_t>> BatchGetInto(absl::Span<const std::string> keys,
                                                   absl::Span<void* const> buffers,
                                                   absl::Span<const size_t> capacities) {
    return BatchGetInto(keys, buffers, capacities, GetOptions{});
  }

  // Scatter-list forms (vLLM's multi-buffer calls): object i is the concatenation of
  // regions[i], in order. A one-region list is BatchPutFrom/BatchGetInto itself; longer lists
  // are gathered into (or read into and scattered from) one staging buffer per batch, on the
  // device when any region is device memory (copies on the copy engine), else in host memory.
  // BatchGetIntoRegions returns each object's size; FAILED_PRECONDITION when it exceeds the sum
  // of the list's sizes (nothing is written then).
  virtual std::vector<absl::Status> BatchPutFromRegions(
      absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions,
      const PutOptions& options) = 0;
  virtual std::vector<absl::StatusOr<size_t>> BatchGetIntoRegions(
      absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions,
      const GetOptions& options) = 0;
  std::vector<absl::Status> BatchPutFromRegions(
      absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions) {
    return BatchPutFromRegions(keys, regions, PutOptions{});
  }
  std::vector<absl::StatusOr<size_t>> BatchGetIntoRegions(
      absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions) {
    return BatchGetIntoRegions(keys, regions, GetOptions{});
  }

  // The put forms above with only a DeviceWait (PutOptions{.wait = wait}).
  [[nodiscard]] absl::Status PutFrom(absl::string_view key, const void* data, size_t size,
                                     const DeviceWait& wait) {
    return PutFrom(key, data, size, WaitOnly(wait));
  }
  std::vector<absl::Status> BatchPutFrom(absl::Span<const std::string> keys,
                                         absl::Span<const void* const> buffers,
                                         absl::Span<const size_t> sizes, const DeviceWait& wait) {
    return BatchPutFrom(keys, buffers, sizes, WaitOnly(wait));
  }
  std::vector<absl::Status> BatchPutFromRegions(absl::Span<const std::string> keys,
                                                absl::Span<const std::vector<BufferRegion>> regions,
                                                const DeviceWait& wait) {
    return BatchPutFromRegions(keys, regions, WaitOnly(wait));
  }

  // "How much of this prefix do you hold for me?": one request for the whole chain of
  // (model, hash_scheme, adapter_id, prefix_hashes[i]) keys, tenant-scoped. With lease=true the
  // present blocks are leased, so a Get that follows within lease_ms cannot miss them.
  [[nodiscard]] virtual absl::StatusOr<PrefixLookup> LookupPrefix(
      absl::string_view model, absl::string_view hash_scheme,
      const std::optional<std::string>& adapter_id, absl::Span<const std::string> prefix_hashes,
      bool lease = false) = 0;

  [[nodiscard]] virtual absl::StatusOr<bool> Exist(absl::string_view key) = 0;
  virtual std::vector<absl::StatusOr<bool>> BatchExist(absl::Span<const std::string> keys) = 0;
  // Removes the object and frees its space. FAILED_PRECONDITION with ErrorReason::kHasLease while
  // a read of the key is in flight (its read lease is held), unless `force`: then it is removed
  // anyway, and the reader sees a removed object (NOT_FOUND after its header check), never wrong
  // bytes. FAILED_PRECONDITION (no reason) while a put of the key is in progress, even with force.
  [[nodiscard]] virtual absl::Status Remove(absl::string_view key, bool force = false) = 0;
  virtual std::vector<absl::Status> BatchRemove(absl::Span<const std::string> keys,
                                                bool force = false) = 0;

  // Adds a replica of `key` on `node` (a node id, or the host:port `granary segments` shows).
  // The destination node reads the bytes one-sided from a current replica. The new replica is
  // charged to the tenant. Move does the same and then drops the source replica.
  [[nodiscard]] virtual absl::Status Copy(absl::string_view key, absl::string_view node) = 0;
  [[nodiscard]] virtual absl::Status Move(absl::string_view key, absl::string_view node) = 0;

  // Registers memory with the transport once, so transfers into it need no per-call
  // registration. Device memory of the device backend is recorded and never handed to UCX (its
  // transfers take the GPU paths). ALREADY_EXISTS when a buffer starting at `data` is
  // registered.
  [[nodiscard]] virtual absl::Status RegisterBuffer(void* data, size_t size) = 0;
  // Deregisters the buffer that starts at `data`. Waits (does not refuse) while transfers that
  // started before the call still use the buffer, so once it returns no transfer of this client
  // touches the buffer through its registration and the memory may be freed. Calls that start
  // while it waits treat the buffer as unregistered memory. NOT_FOUND when no buffer starting
  // at `data` is registered.
  [[nodiscard]] virtual absl::Status UnregisterBuffer(void* data) = 0;

  // Inspection (tenant-scoped).
  [[nodiscard]] virtual absl::StatusOr<ListResult> List(absl::string_view prefix, size_t limit,
                                                        absl::string_view start_after = "") = 0;
  [[nodiscard]] virtual absl::StatusOr<ObjectInfo> Stat(absl::string_view key) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::vector<SegmentInfo>> Segments() = 0;

  virtual const ClientOptions& options() const = 0;
  // This client's metrics in Prometheus text format (transports its endpoints use, ...).
  virtual std::string MetricsText() const = 0;

 private:
  static PutOptions WaitOnly(const DeviceWait& wait) {
    PutOptions options;
    options.wait = wait;
    return options;
  }
};

}  // namespace granary
