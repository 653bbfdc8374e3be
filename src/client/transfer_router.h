#pragma once

// The client's transfer router: for every value a put writes or a get reads, it decides the
// path and runs it. ClientImpl (client_impl.h) validates the call, talks to the master and
// hands the router the master's answer; the router plans with the planner (planner.h, against
// this client's segments, transports and registered buffers: Batch) and runs the plan:
//   inline        small values to a node over tcp alone, in Read and Write messages (inline_io.h)
//   push          larger reads from such a node into a registered buffer: the node pushes them
//   mapped copy   host segments of a same-host node, mapped into this process: plain copies
//                 (RmaEngine::CopyMapped)
//   one-sided     the rest of the host memory: UCX RMA (RmaEngine::ExecuteWithin), cancelled
//                 past the transfer timeout
//   ipc           a GPU segment this process can map: device copies through its IPC mapping
//                 (gpu_segments.h)
//   ucx           with a UCX that supports CUDA memory: GPU segments with an rkey, and device
//                 buffers it would otherwise stage, moved one-sided by UCX itself
//   node bounce   a GPU segment this process cannot map: its node stages it (gpu_bounce.h)
//   device        this client's device buffers against host segments: copies from the mapped
//                 node memory, or staged through pinned slots (device_transfers.h)
// transfer_router.cc has the planning, the put and get runs and the host paths;
// transfer_router_device.cc the GPU-segment and device-buffer paths.
//
// Owned by ClientImpl; holds pointers to the subsystems it routes to, which ClientImpl owns
// and which must outlive it. Thread-safe: any number of batches run at once, each on its
// caller's thread (a Batch is one batch's and not shared).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/device_transfers.h"
#include "client/engine_order.h"
#include "client/gpu_bounce.h"
#include "client/gpu_segments.h"
#include "client/master_session.h"
#include "client/node_links.h"
#include "client/planner.h"
#include "client/registrations.h"
#include "common/metrics.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "transport/rma.h"

namespace granary::client {

class TransferRouter {
 public:
  // The subsystems the paths run on (ClientImpl's).
  struct Paths {
    MasterSession* session = nullptr;  // segment descriptors
    Registrations* registrations = nullptr;
    transport::RmaEngine* rma = nullptr;
    GpuSegments* gpu = nullptr;
    GpuBounce* bounce = nullptr;
    DeviceTransfers* device = nullptr;
    NodeLinks* nodes = nullptr;
    std::string tenant;  // the client's tenant, which disk records name (InlineGroup::tenant)
  };
  // transfer_timeout_ms: ClientOptions::transfer_timeout_ms. messages_between_hosts: values to
  // and from nodes on other hosts travel in Read and Write messages only
  // (ClientOptions::tcp_data_between_hosts, and the context has no network transport but
  // tcp). ucx_device_memory: UCX moves device memory (Context::SupportsCudaMemory).
  TransferRouter(const Paths& paths, common::MetricsRegistry* metrics, int64_t transfer_timeout_ms,
                 bool messages_between_hosts, bool ucx_device_memory);
  TransferRouter(const TransferRouter&) = delete;
  TransferRouter& operator=(const TransferRouter&) = delete;

  // The planner's view of this client for one batch (PlanInputs): registration lookups pin
  // the buffers they find until ReleasePins or the destructor, so the batch must keep it until
  // its transfers are done.
  class Batch : public PlanInputs {
   public:
    explicit Batch(TransferRouter* router) : router_(router), pins_(router->paths_.registrations) {}
    absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> Segment(uint64_t id) override {
      return router_->paths_.session->SegmentFor(id);
    }
    bool TcpOnly(const std::string& node_address) override {
      return router_->paths_.rma->TcpOnly(node_address);
    }
    bool MessagesOnly(const transport::RemoteSegment& segment) override {
      return router_->messages_between_hosts_ && !segment.same_host;
    }
    RegisteredRange Registered(const void* p, size_t n) override {
      return router_->paths_.registrations->Lookup(p, n, &pins_);
    }
    proto::SegmentInfo PushTarget(const RegisteredRange& range) override {
      return router_->paths_.registrations->PushTarget(range);
    }
    // Once the batch's transfers are done (the destructor does it too).
    void ReleasePins() { pins_.Release(); }

   private:
    TransferRouter* const router_;
    Registrations::Pins pins_;
  };

  // ----- Put -----
  // The paths of a put's values into the places the master granted (PlanPut, through *batch;
  // its arguments as there).
  void PlanPut(Batch* batch, absl::Span<const std::string> keys, absl::Span<const void* const> data,
               absl::Span<const size_t> sizes, const proto::PutStartReply& started,
               std::vector<proto::AllocHeader>* headers, std::vector<absl::Status>* out,
               PutPlan* plan, const std::vector<int>* devices);
  // Runs the plan's writes within timeout_ms: the Write messages sent first, the rest meanwhile
  // (Transfer). `order` (a put's DeviceWait, null: none): where host memory is among the values
  // (devices null, or a -1 in it) the host waits for it first, since the CPU or UCX reads them.
  // A timed-out Write drops its node's connection, held off when timeout_ms is the whole
  // transfer timeout (not a write window's remainder). The first error, or OK.
  [[nodiscard]] absl::Status RunPut(PutPlan* plan, int64_t timeout_ms, EngineOrder* order,
                                    const std::vector<int>* devices);

  // ----- Get -----
  // The paths of one round of reads (PlanGet, through *batch; its arguments as there).
  void PlanGet(Batch* batch, int attempt, absl::Span<const std::string> keys,
               absl::Span<const size_t> pending, const proto::GetReply& reply, const DestFn& dest,
               std::vector<proto::AllocHeader>* headers, std::vector<absl::StatusOr<size_t>>* out,
               GetPlan* plan, const std::vector<int>* devices, std::optional<bool> prefer_gpu);
  // Runs one planned round of n keys' reads: the Read messages sent first, then the node
  // pushes, then the rest (Transfer), each within the transfer timeout; a timed-out Read drops
  // and holds off its node. Per batch index, the status of its transfer (meaningful for the
  // keys in plan->fetched; the headers are read into *headers, not checked here).
  std::vector<absl::Status> RunGet(GetPlan* plan, size_t n,
                                   std::vector<proto::AllocHeader>* headers);

  // Runs one batch of one-sided ops on whichever path each op's segment and local memory take
  // (ipc, ucx, node bounce, device, mapped copy, one-sided), cancelling what has not finished
  // after timeout_ms (0: the transfer timeout). `order`: a put's DeviceWait (null: none),
  // waited for before the caller's memory is read.
  [[nodiscard]] absl::Status Transfer(std::vector<transport::RmaOp> ops, int64_t timeout_ms = 0,
                                      EngineOrder* order = nullptr);

 private:
  // The one-sided part of Transfer (host memory on this side), through UCX.
  [[nodiscard]] absl::Status Remote(std::vector<transport::RmaOp> ops, int64_t timeout_ms);
  // Has `node` write the values of req into this client's registered buffer (reads over tcp;
  // proto::PushRequest) and copies the headers it returns into (*headers)[keys[j]].
  [[nodiscard]] absl::Status Push(const std::string& node, const proto::PushRequest& req,
                                  absl::Span<const size_t> keys,
                                  std::vector<proto::AllocHeader>* headers);
  // transfer_router_device.cc: takes the ops on GPU segments out of *ops and runs them through
  // IPC and the node bounce; those UCX moves itself (ucx_device_memory) go to *direct, for the
  // one-sided transfer.
  [[nodiscard]] absl::Status RunGpuSegments(std::vector<transport::RmaOp>* ops,
                                            std::vector<transport::RmaOp>* direct,
                                            int64_t timeout_ms, EngineOrder* order);
  // transfer_router_device.cc: takes the ops with a device-local side out of *ops and runs
  // them (DeviceTransfers: mapped copies, staging; with ucx_device_memory the ones it would
  // stage stay in *ops).
  [[nodiscard]] absl::Status RunDeviceBuffers(std::vector<transport::RmaOp>* ops,
                                              int64_t timeout_ms, EngineOrder* order);

  const Paths paths_;
  const int64_t transfer_timeout_ms_;
  const bool messages_between_hosts_;
  common::MetricCounter* const pushed_reads_;  // granary_client_pushed_reads_total
  common::MetricCounter* const
      inline_values_[2];                        // granary_client_inline_values_total{op=read,write}
  common::MetricCounter* const ipc_transfers_;  // granary_client_gpu_transfers_total{path="ipc"}
  common::MetricCounter* const bounce_transfers_;  // {path="bounce"}: a node's GPU segment, staged
  common::MetricCounter* const ucx_transfers_;  // {path="ucx"}: only where UCX supports CUDA memory
};

}  // namespace granary::client
