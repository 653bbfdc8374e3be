// TransferRouter (transfer_router.h): the planning, the put and get runs, and the host paths
// (inline messages, node pushes, mapped copies, one-sided RMA). The GPU-segment and
// device-buffer paths are transfer_router_device.cc.
#include "client/transfer_router.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/inline_io.h"
#include "common/clock.h"
#include "common/status_macros.h"

namespace granary::client {

using proto::AllocHeader;
using proto::kAllocHeaderSize;

TransferRouter::TransferRouter(const Paths& paths, common::MetricsRegistry* metrics,
                               int64_t transfer_timeout_ms, bool messages_between_hosts,
                               bool ucx_device_memory)
    : paths_(paths),
      transfer_timeout_ms_(transfer_timeout_ms),
      messages_between_hosts_(messages_between_hosts),
      pushed_reads_(metrics->Counter(
          "granary_client_pushed_reads_total",
          "Values a node wrote into a registered buffer for a read over tcp (Push)")),
      inline_values_{metrics->Counter("granary_client_inline_values_total",
                                      "Values read or written inline in one message per node "
                                      "(Read and Write, nodes over tcp)",
                                      {{"op", "read"}}),
                     metrics->Counter("granary_client_inline_values_total",
                                      "Values read or written inline in one message per node "
                                      "(Read and Write, nodes over tcp)",
                                      {{"op", "write"}})},
      ipc_transfers_(GpuTransfersCounter(metrics, "ipc")),
      bounce_transfers_(GpuTransfersCounter(metrics, "bounce")),
      ucx_transfers_(ucx_device_memory ? GpuTransfersCounter(metrics, "ucx") : nullptr) {}

void TransferRouter::PlanPut(Batch* batch, absl::Span<const std::string> keys,
                             absl::Span<const void* const> data, absl::Span<const size_t> sizes,
                             const proto::PutStartReply& started, std::vector<AllocHeader>* headers,
                             std::vector<absl::Status>* out, PutPlan* plan,
                             const std::vector<int>* devices) {
  client::PlanPut(keys, data, sizes, started, batch, headers, out, plan, devices);
  for (InlineGroup& g : plan->writes) {
    if (g.disk) g.tenant = paths_.tenant;
  }
}

absl::Status TransferRouter::RunPut(PutPlan* plan, int64_t timeout_ms, EngineOrder* order,
                                    const std::vector<int>* devices) {
  // The stream contract (DeviceWait): host memory among the values is read by the CPU or UCX,
  // so the host waits for the engine first; device memory waits on the device, in Transfer.
  if (order != nullptr && !plan->commit.entries.empty() &&
      (devices == nullptr ||
       std::any_of(devices->begin(), devices->end(), [](int d) { return d < 0; }))) {
    GRANARY_RETURN_IF_ERROR(order->OnHost());
  }
  // Small values to nodes over tcp travel in one Write per node, sent first; the rest
  // one-sided meanwhile.
  const int64_t start_us = common::MonotonicUs();
  InlineBatch writes(/*write=*/true, &plan->writes, inline_values_[1]);
  writes.Start([nodes = paths_.nodes](const std::string& node, bool other_host) {
    return nodes->Get(node, other_host);
  });
  absl::Status st;
  if (!plan->ops.empty()) st = Transfer(std::move(plan->ops), timeout_ms, order);
  const int64_t left_ms =
      std::max<int64_t>(1, timeout_ms - (common::MonotonicUs() - start_us) / 1000);
  std::vector<absl::Status> wrote = writes.Wait(left_ms);
  for (size_t g = 0; g < wrote.size(); ++g) {
    if (absl::IsDeadlineExceeded(wrote[g])) {
      paths_.nodes->Drop(plan->writes[g].node,
                         /*back_off=*/timeout_ms >= transfer_timeout_ms_);
    }
    if (st.ok()) st = wrote[g];
  }
  return st;
}

void TransferRouter::PlanGet(Batch* batch, int attempt, absl::Span<const std::string> keys,
                             absl::Span<const size_t> pending, const proto::GetReply& reply,
                             const DestFn& dest, std::vector<AllocHeader>* headers,
                             std::vector<absl::StatusOr<size_t>>* out, GetPlan* plan,
                             const std::vector<int>* devices, std::optional<bool> prefer_gpu) {
  client::PlanGet(attempt, keys, pending, reply, dest, batch, headers, out, plan, devices,
                  prefer_gpu);
}

std::vector<absl::Status> TransferRouter::RunGet(GetPlan* plan, size_t n,
                                                 std::vector<AllocHeader>* headers) {
  // Each key's transfer status: its Read's or Push's, or the one-sided transfer's.
  std::vector<absl::Status> failed(n);
  std::vector<bool> pushed(n, false);  // read by a Read or a Push: failed[i] is its own
  const int64_t start_us = common::MonotonicUs();
  InlineBatch reads(/*write=*/false, &plan->reads, inline_values_[0]);
  reads.Start([nodes = paths_.nodes](const std::string& node, bool other_host) {
    return nodes->Get(node, other_host);
  });
  for (PushGroup& g : plan->pushes) {
    g.req.timeout_ms = proto::NodeTransferTimeoutMs(transfer_timeout_ms_);
    absl::Status pst = Push(g.node, g.req, g.keys, headers);
    for (size_t i : g.keys) {
      failed[i] = pst;
      pushed[i] = true;
    }
  }
  absl::Status st = plan->ops.empty() ? absl::OkStatus() : Transfer(std::move(plan->ops));
  for (size_t i : plan->fetched) {
    if (!pushed[i]) failed[i] = st;
  }
  const int64_t left_ms =
      std::max<int64_t>(1, transfer_timeout_ms_ - (common::MonotonicUs() - start_us) / 1000);
  std::vector<absl::Status> read = reads.Wait(left_ms);
  for (size_t g = 0; g < read.size(); ++g) {
    if (absl::IsDeadlineExceeded(read[g])) {
      paths_.nodes->Drop(plan->reads[g].node, /*back_off=*/true);
    }
    for (size_t i : plan->reads[g].keys) {
      failed[i] = read[g];
      pushed[i] = true;
    }
  }
  return failed;
}

absl::Status TransferRouter::Transfer(std::vector<transport::RmaOp> ops, int64_t timeout_ms,
                                      EngineOrder* order) {
  if (timeout_ms <= 0) timeout_ms = transfer_timeout_ms_;
  // GPU segments: device copies through the backend, never a CPU copy (to and from host and
  // device buffers alike), and never UCX unless it supports CUDA memory.
  std::vector<transport::RmaOp> direct;  // moved by a CUDA UCX, after the device transfers
  if (GpuSegments::AnyGpu(ops)) {
    GRANARY_RETURN_IF_ERROR(RunGpuSegments(&ops, &direct, timeout_ms, order));
  }
  // This client's device buffers: from mapped node memory, or staged.
  if (DeviceTransfers::AnyDevice(ops)) {
    GRANARY_RETURN_IF_ERROR(RunDeviceBuffers(&ops, timeout_ms, order));
  }
  paths_.rma->CopyMapped(&ops);  // same-host shared memory: plain copies, here
  // A CUDA UCX reads device memory on a stream of its own: the host waits for the engine.
  if (order != nullptr && !direct.empty()) GRANARY_RETURN_IF_ERROR(order->OnHost());
  ops.insert(ops.end(), std::make_move_iterator(direct.begin()),
             std::make_move_iterator(direct.end()));
  if (ops.empty()) return absl::OkStatus();
  return Remote(std::move(ops), timeout_ms);
}

absl::Status TransferRouter::Remote(std::vector<transport::RmaOp> ops, int64_t timeout_ms) {
  std::vector<std::string> nodes;
  for (const auto& op : ops) nodes.push_back(op.segment->node_address);
  // Past the timeout: cancel by closing the endpoints, on the worker thread and waited for:
  // once closed, no transport of theirs moves another byte into or out of the buffers. Closing
  // completes most requests with an error at once, but UCX 1.13 never completes some: one
  // queued on a same-host endpoint whose peer died before wireup, and an RMA read over tcp from
  // a peer the network cut off (seen in the netns tests). Waiting longer would only delay the
  // fail-over to another replica, so give up on them after 100 ms. The nodes stay unreachable
  // for a back-off, so the next reads go to other replicas instead of connecting again. A
  // put's write window can cut the timeout short: that deadline is the put's, not the nodes'
  // fault, so they are not held off for it.
  const bool nodes_fault = timeout_ms >= transfer_timeout_ms_;
  transport::RmaEngine* rma = paths_.rma;
  absl::Status st = rma->ExecuteWithin(
      std::move(ops), absl::Milliseconds(timeout_ms),
      [&] {
        if (nodes_fault) paths_.nodes->timeouts()->Inc();
        rma->MarkUnreachable(nodes, nodes_fault);
      },
      absl::Milliseconds(100));
  if (absl::IsDeadlineExceeded(st)) {
    return absl::DeadlineExceededError(
        absl::StrCat("transfer did not finish within ", timeout_ms, " ms"));
  }
  if (!st.ok()) {
    for (const auto& n : nodes) rma->ForgetNode(n);
  }
  return st;
}

absl::Status TransferRouter::Push(const std::string& node, const proto::PushRequest& req,
                                  absl::Span<const size_t> keys,
                                  std::vector<AllocHeader>* headers) {
  GRANARY_ASSIGN_OR_RETURN(std::string got, paths_.nodes->Push(node, req));
  if (got.size() != keys.size() * kAllocHeaderSize) {
    return absl::InternalError(absl::StrCat("node ", node, " returned ", got.size(),
                                            " header bytes for ", keys.size(), " values"));
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    std::memcpy(&(*headers)[keys[j]], got.data() + j * kAllocHeaderSize, kAllocHeaderSize);
  }
  pushed_reads_->Inc(keys.size());
  return absl::OkStatus();
}

}  // namespace granary::client
