// TransferRouter (transfer_router.h): the GPU-segment paths (ipc, ucx, node bounce) and this
// client's device buffers (device_transfers.h). The host paths are transfer_router.cc.
#include <utility>

#include "client/transfer_router.h"
#include "common/status_macros.h"

namespace granary::client {

absl::Status TransferRouter::RunGpuSegments(std::vector<transport::RmaOp>* ops,
                                            std::vector<transport::RmaOp>* direct,
                                            int64_t timeout_ms, EngineOrder* order) {
  std::vector<transport::RmaOp> bounced;
  size_t device_values = 0;
  for (const auto& op : *ops) device_values += op.segment->gpu && op.device >= 0 && !op.header;
  GRANARY_RETURN_IF_ERROR(paths_.gpu->Run(ops, &bounced, order));
  for (const auto& op : bounced) device_values -= op.device >= 0 && !op.header ? 1 : 0;
  ipc_transfers_->Inc(device_values);
  // A UCX that supports CUDA memory moves the segments that have an rkey (their node mapped
  // them with it) itself, one-sided, with the host ops; never Debian's UCX.
  if (ucx_transfers_ != nullptr) {
    std::vector<transport::RmaOp> mapped = transport::TakeOps(
        &bounced, [](const transport::RmaOp& op) { return !op.segment->rkey.empty(); });
    size_t device_direct = 0;
    for (const auto& op : mapped) device_direct += op.device >= 0 && !op.header;
    ucx_transfers_->Inc(device_direct);
    *direct = std::move(mapped);
  }
  // Segments this process cannot map: the node stages them (Push and Fetch).
  if (bounced.empty()) return absl::OkStatus();
  size_t device_bounced = 0;
  for (const auto& op : bounced) device_bounced += op.device >= 0 && !op.header;
  if (order != nullptr) GRANARY_RETURN_IF_ERROR(order->OnHost());  // copies synchronously
  NodeLinks* nodes = paths_.nodes;
  GRANARY_RETURN_IF_ERROR(paths_.bounce->Run(
      std::move(bounced), proto::NodeTransferTimeoutMs(timeout_ms), timeout_ms,
      [nodes](const std::string& node, const proto::PushRequest& req, GpuBounce::PushDone done) {
        nodes->PushAsync(node, req, std::move(done));
      },
      [nodes](const std::string& node, const proto::FetchRequest& req, GpuBounce::FetchDone done) {
        nodes->FetchAsync(node, req, std::move(done));
      }));
  bounce_transfers_->Inc(device_bounced);
  return absl::OkStatus();
}

absl::Status TransferRouter::RunDeviceBuffers(std::vector<transport::RmaOp>* ops,
                                              int64_t timeout_ms, EngineOrder* order) {
  return paths_.device->Run(
      ops, timeout_ms,
      [this](std::vector<transport::RmaOp> staged, int64_t ms) {
        paths_.rma->CopyMapped(&staged);  // none is mapped, or it would not be staged
        return staged.empty() ? absl::OkStatus() : Remote(std::move(staged), ms);
      },
      order);
}

}  // namespace granary::client
