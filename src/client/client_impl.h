#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "client/device_transfers.h"
#include "client/engine_order.h"
#include "client/gpu_bounce.h"
#include "client/gpu_segments.h"
#include "client/master_session.h"
#include "client/node_links.h"
#include "client/planner.h"
#include "client/registrations.h"
#include "client/staging_pool.h"
#include "client/stream_pool.h"
#include "client/transfer_router.h"
#include "common/backoff.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "granary/client.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "transport/context.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::client {

// PutOptions' pins and tier as PutStartRequest::flags.
uint32_t PutFlags(const PutOptions& options);
// GetOptions::tier as the planner's replica preference (PlanGet): whether GPU-tier replicas
// come first (true), host-tier ones (false), or the master's order (nullopt).
std::optional<bool> PreferGpu(StorageTier tier);

// The Client implementation: the API and the session. It validates each call, talks to the
// master through its session (MasterSession: connection, heartbeats, segment descriptors;
// PutStart/PutEnd, Get and its leases, Copy/Move, the metadata calls in client_metadata.cc) and
// hands the master's answers to its TransferRouter (transfer_router.h), which plans each
// value's path and runs it. It owns what the paths run on: a UCX context, one worker (progress
// thread), the RmaEngine, the registered buffers (Registrations), the control connections to
// nodes (NodeLinks), the GPU segments, the node bounce and the device buffers' paths. The
// scatter-list forms stage in client_regions.cc; paged KV sits on top of this class
// (granary/paged_kv.h). Thread-safe; see Client. The two-phase calls below are public for
// tools and tests that need to stop between the phases.
class ClientImpl : public Client {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ClientImpl>> Create(
      const ClientOptions& options);
  ~ClientImpl() override;

  [[nodiscard]] absl::Status Put(absl::string_view key, absl::string_view value) override;
  [[nodiscard]] absl::StatusOr<std::string> Get(absl::string_view key) override;
  std::vector<absl::Status> BatchPut(absl::Span<const std::string> keys,
                                     absl::Span<const absl::string_view> values) override;
  std::vector<absl::Status> BatchPutWith(absl::Span<const std::string> keys,
                                         absl::Span<const absl::string_view> values,
                                         const PutOptions& options) override;
  std::vector<absl::StatusOr<std::string>> BatchGet(absl::Span<const std::string> keys,
                                                    const GetOptions& options) override;
  std::vector<absl::Status> BatchPutFrom(absl::Span<const std::string> keys,
                                         absl::Span<const void* const> buffers,
                                         absl::Span<const size_t> sizes,
                                         const PutOptions& options) override;
  std::vector<absl::StatusOr<size_t>> BatchGetInto(absl::Span<const std::string> keys,
                                                   absl::Span<void* const> buffers,
                                                   absl::Span<const size_t> capacities,
                                                   const GetOptions& options) override;
  std::vector<absl::Status> BatchPutFromRegions(absl::Span<const std::string> keys,
                                                absl::Span<const std::vector<BufferRegion>> regions,
                                                const PutOptions& options) override;
  std::vector<absl::StatusOr<size_t>> BatchGetIntoRegions(
      absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions,
      const GetOptions& options) override;
  // The forms with default options and with a DeviceWait (Client's).
  using Client::BatchGet;
  using Client::BatchGetInto;
  using Client::BatchGetIntoRegions;
  using Client::BatchPutFrom;
  using Client::BatchPutFromRegions;
  using Client::GetInto;
  using Client::PutFrom;
  [[nodiscard]] absl::StatusOr<PrefixLookup> LookupPrefix(
      absl::string_view model, absl::string_view hash_scheme,
      const std::optional<std::string>& adapter_id, absl::Span<const std::string> prefix_hashes,
      bool lease) override;
  [[nodiscard]] absl::StatusOr<bool> Exist(absl::string_view key) override;
  std::vector<absl::StatusOr<bool>> BatchExist(absl::Span<const std::string> keys) override;
  [[nodiscard]] absl::Status Remove(absl::string_view key, bool force = false) override;
  std::vector<absl::Status> BatchRemove(absl::Span<const std::string> keys,
                                        bool force = false) override;
  [[nodiscard]] absl::Status Copy(absl::string_view key, absl::string_view node) override {
    return CopyOrMove(key, node, false);
  }
  [[nodiscard]] absl::Status Move(absl::string_view key, absl::string_view node) override {
    return CopyOrMove(key, node, true);
  }
  [[nodiscard]] absl::Status RegisterBuffer(void* data, size_t size) override;
  [[nodiscard]] absl::Status UnregisterBuffer(void* data) override;
  [[nodiscard]] absl::StatusOr<ListResult> List(absl::string_view prefix, size_t limit,
                                                absl::string_view start_after) override;
  [[nodiscard]] absl::StatusOr<ObjectInfo> Stat(absl::string_view key) override;
  [[nodiscard]] absl::StatusOr<std::vector<SegmentInfo>> Segments() override;
  const ClientOptions& options() const override { return options_; }
  std::string MetricsText() const override { return metrics_.Render(); }

  // Phase one of a put: allocation on the master only, no bytes written.
  [[nodiscard]] absl::StatusOr<proto::PutStartReply> PutStart(absl::Span<const std::string> keys,
                                                              absl::Span<const uint64_t> sizes,
                                                              uint32_t flags = 0);
  // A put in two calls, for a caller that must hear the master's answer before it has the
  // bytes (the CLI asks for room before it reads stdin). BeginPut is phase one and remembers
  // when it was sent: the write window counts from there, so FinishPut must follow within it
  // (else it revokes the grant and answers UNAVAILABLE: retry the put). FinishPut writes the
  // values the grant admitted and commits them, as Put does after its own PutStart; the keys,
  // sizes and order must be BeginPut's. A grant that is never finished is revoked with
  // PutRevoke (or expires on the master).
  struct PutGrant {
    proto::PutStartReply reply;  // one result per key
    int64_t sent_us = 0;         // MonotonicUs when the PutStart was sent
    int64_t epoch = 0;           // the highest master epoch seen then (HA)
  };
  [[nodiscard]] absl::StatusOr<PutGrant> BeginPut(absl::Span<const std::string> keys,
                                                  absl::Span<const uint64_t> sizes,
                                                  uint32_t flags = 0);
  std::vector<absl::Status> FinishPut(absl::Span<const std::string> keys,
                                      absl::Span<const void* const> data,
                                      absl::Span<const size_t> sizes, const PutGrant& grant,
                                      const std::vector<int>* devices = nullptr,
                                      EngineOrder* order = nullptr);
  // Reads one replica as a descriptor says, without asking the master: the fenced-read check
  // (header generation, key hash, length) applies. For tests and tools that hold a descriptor.
  [[nodiscard]] absl::StatusOr<std::string> ReadReplica(const std::string& key, uint64_t generation,
                                                        uint64_t size,
                                                        const proto::ReplicaDesc& replica);
  // Releases read leases (GetEnd) without waiting for the answer, as every read does.
  void ReleaseLeasesAsync(const proto::KeyGenRequest& leases);
  // Any control request, with one reconnect on a broken session (MasterSession::Call).
  template <typename Req, typename Rep>
  [[nodiscard]] absl::StatusOr<Rep> Call(proto::MsgType type, const Req& req) {
    return session_->Call<Req, Rep>(type, req);
  }
  // The same without waiting (MasterSession::CallAsync).
  template <typename Req, typename Rep>
  [[nodiscard]] std::future<absl::StatusOr<Rep>> CallAsync(proto::MsgType type, const Req& req) {
    return session_->CallAsync<Req, Rep>(type, req);
  }

 private:
  explicit ClientImpl(const ClientOptions& o)
      : options_(o),
        log_route_{o.log_level ? static_cast<int>(*o.log_level) : -1, o.log_sink.get()} {}
  // Create's steps: the UCX context (its NIC), the worker, the RmaEngine and the copy threads;
  // then the device paths (GPU segments, DeviceTransfers and its pin cap, a CUDA UCX).
  [[nodiscard]] absl::Status OpenTransport();
  [[nodiscard]] absl::Status OpenDevicePaths();
  std::vector<absl::Status> PutImpl(absl::Span<const std::string> keys,
                                    absl::Span<const void* const> data,
                                    absl::Span<const size_t> sizes, uint32_t flags = 0,
                                    const std::vector<int>* devices = nullptr,
                                    EngineOrder* order = nullptr);
  // PutImpl for the caller's buffers (classified here: WithBufferDevices) after `wait`
  // (DeviceWait), or after `order` when the caller made it already (null: `wait` decides).
  std::vector<absl::Status> PutWaiting(absl::Span<const std::string> keys,
                                       absl::Span<const void* const> data,
                                       absl::Span<const size_t> sizes, uint32_t flags,
                                       const DeviceWait& wait, EngineOrder* order = nullptr);
  // devices (null: every destination is host memory): per key, the device of its destination
  // or -1 (WithBufferDevices).
  std::vector<absl::StatusOr<size_t>> GetImpl(absl::Span<const std::string> keys,
                                              const DestFn& dest, const GetOptions& options,
                                              const std::vector<int>* devices = nullptr);
  // Runs one planned round of reads (TransferRouter::RunGet), gives the round's leases back
  // and checks each header; failed keys go to *pending.
  void RunGetRound(absl::Span<const std::string> keys, GetPlan* plan,
                   std::vector<proto::AllocHeader>* headers,
                   std::vector<absl::StatusOr<size_t>>* out, std::vector<size_t>* pending);
  // List as the master answers it (with each object's replica descriptors).
  [[nodiscard]] absl::StatusOr<proto::ListReply> ListRaw(absl::string_view prefix, size_t limit,
                                                         absl::string_view start_after);
  [[nodiscard]] absl::Status CopyOrMove(absl::string_view key, absl::string_view node, bool move);

  const ClientOptions options_;  // holds the log sink
  // Where this client's lines go (options_.log_level and log_sink): set on its threads, and on
  // a caller's thread while a call that may log runs (ScopedLogRoute, two thread-local stores).
  const common::LogRoute log_route_;
  common::MetricsRegistry metrics_;
  // Destroyed in reverse order by ~ClientImpl: router, session, node connections, engine,
  // device paths, registrations, worker, context.
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<Registrations> registrations_;
  // Shares large same-host copies with the caller (ClientOptions::copy_threads); outlives rma_.
  std::unique_ptr<common::WorkPool> copy_pool_;
  std::unique_ptr<transport::RmaEngine> rma_;
  std::unique_ptr<GpuSegments> gpu_;  // same-host GPU segments (IPC mappings, streams)
  // GPU segments this process cannot map, staged by their node; its slots are registrations_'.
  std::unique_ptr<GpuBounce> bounce_;
  // This client's device buffers (host segments and staging); outlives rma_, whose unmap hook
  // calls it.
  std::unique_ptr<DeviceTransfers> device_;
  // Device staging of the scatter-list calls, kept for reuse.
  StagingPool staging_;
  // Streams of the scatter-list calls' device work (never the legacy stream).
  StreamPool region_streams_;
  // Control connections to nodes (Read, Write, Push, Fetch); destroyed after session_.
  std::unique_ptr<NodeLinks> nodes_;
  std::unique_ptr<MasterSession> session_;
  // Decides and runs each batch's paths over the members above (pointers to them).
  std::unique_ptr<TransferRouter> router_;
  // Device buffers passed to RegisterBuffer: recorded (start -> size), never given to UCX.
  granary::common::Mutex device_regs_mu_;
  absl::flat_hash_map<uintptr_t, size_t> device_regs_ ABSL_GUARDED_BY(device_regs_mu_);
};

}  // namespace granary::client
