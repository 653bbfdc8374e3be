#include "client/gpu_segments.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/engine_order.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/alloc_header.h"

namespace granary::client {

// One segment's IPC mapping in this process; closed when the last batch using it lets go.
struct GpuSegments::Mapping {
  cuda::DeviceBackend* backend = nullptr;
  int device = -1;
  std::string ipc;  // the handle it was opened from
  unsigned char* base = nullptr;
  ~Mapping() {
    if (absl::Status st = backend->CloseIpc(base); !st.ok()) {
      LOG_WARN << "closing a GPU segment's IPC mapping failed: " << st;
    }
  }
};

GpuSegments::GpuSegments(MetricsRegistry* metrics)
    : opened_(metrics->Counter("granary_client_gpu_segment_opens_total",
                               "GPU segments this client mapped through their IPC handle")),
      failures_(metrics->Counter("granary_client_gpu_segment_failures_total",
                                 "Batches on GPU segments that failed (open, copy or header)")),
      fallbacks_(metrics->Counter("granary_client_gpu_fallback_total",
                                  "GPU segments whose IPC open failed, so the node staged the "
                                  "transfer instead")) {}

GpuSegments::~GpuSegments() {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Mapping>> mapped;  // closed outside the lock
  {
    granary::MutexLock lock(&mu_);
    mapped.swap(mapped_);
  }
}

void GpuSegments::Retain(const absl::flat_hash_set<uint64_t>& mounted) {
  std::vector<std::shared_ptr<Mapping>> gone;  // closed outside the lock
  granary::MutexLock lock(&mu_);
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    if (mounted.contains(it->first)) {
      ++it;
      continue;
    }
    gone.push_back(std::move(it->second));
    mapped_.erase(it++);
  }
}

bool GpuSegments::AnyGpu(const std::vector<transport::RmaOp>& ops) {
  for (const transport::RmaOp& op : ops) {
    if (op.segment->gpu) return true;
  }
  return false;
}

absl::StatusOr<int> GpuSegments::LocalDevice(cuda::DeviceBackend& backend,
                                             const std::string& uuid) {
  // Devices are matched by UUID: CUDA_VISIBLE_DEVICES may number them differently here.
  const int n = backend.DeviceCount();
  for (int d = 0; d < n; ++d) {
    absl::StatusOr<cuda::DeviceUuid> u = backend.DeviceUuidOf(d);
    if (u.ok() && uuid.size() == u->size() && std::memcmp(uuid.data(), u->data(), u->size()) == 0) {
      return d;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat("no device of this process (", n, " on the ",
                                                    backend.Name(), " backend) has UUID ",
                                                    absl::BytesToHexString(uuid)));
}

absl::StatusOr<std::shared_ptr<GpuSegments::Mapping>> GpuSegments::Open(
    const transport::RemoteSegment& seg) {
  cuda::DeviceBackend& backend = cuda::ActiveBackend();
  std::shared_ptr<Mapping> stale;  // closed outside the lock, once no batch holds it
  {
    granary::MutexLock lock(&mu_);
    auto it = mapped_.find(seg.segment_id);
    if (it != mapped_.end() && it->second->ipc == seg.gpu_ipc && it->second->backend == &backend) {
      return it->second;
    }
    if (it != mapped_.end()) {
      stale = std::move(it->second);
      mapped_.erase(it);
    }
  }
  stale.reset();
  const std::string where =
      absl::StrCat("GPU segment ", seg.segment_id, " of node ", seg.node_address);
  if (!seg.same_host) {
    return absl::FailedPreconditionError(absl::StrCat(where, " is on another host"));
  }
  absl::StatusOr<int> device = LocalDevice(backend, seg.gpu_uuid);
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat(where, ": ", device.status().message()));
  }
  absl::StatusOr<void*> base = backend.OpenIpc(*device, seg.gpu_ipc);
  if (!base.ok()) {
    return absl::UnavailableError(absl::StrCat(where, ": opening its IPC handle on device ",
                                               *device, " failed: ", base.status().message()));
  }
  auto m = std::make_shared<Mapping>();
  m->backend = &backend;
  m->device = *device;
  m->ipc = seg.gpu_ipc;
  m->base = static_cast<unsigned char*>(*base);
  opened_->Inc();
  LOG_DEBUG << "mapped " << where << " (" << seg.size << " bytes) on device " << *device;
  granary::MutexLock lock(&mu_);  // destroyed before `m`: a losing `m` closes unlocked
  auto [it, fresh] = mapped_.try_emplace(seg.segment_id, m);
  if (!fresh) return it->second;  // another thread opened it first
  return m;
}

absl::Status GpuSegments::Run(std::vector<transport::RmaOp>* ops,
                              std::vector<transport::RmaOp>* bounced, EngineOrder* order) {
  // Split: the GPU ops (in order) out, the rest kept in place.
  std::vector<transport::RmaOp> gpu =
      transport::TakeOps(ops, [](const transport::RmaOp& op) { return op.segment->gpu; });
  if (gpu.empty()) return absl::OkStatus();
  // Segments this process cannot map go to the node bounce: another host or no device with the
  // UUID (FAILED_PRECONDITION from Open), or an IPC open that failed (UNAVAILABLE: counted as a
  // fallback). Anything else fails the batch.
  std::vector<const transport::RemoteSegment*> remote;
  const transport::RemoteSegment* last = nullptr;
  for (const transport::RmaOp& op : gpu) {
    if (op.segment.get() == last) continue;
    last = op.segment.get();
    if (std::find(remote.begin(), remote.end(), last) != remote.end()) continue;
    absl::StatusOr<std::shared_ptr<Mapping>> m = Open(*op.segment);
    if (m.ok()) continue;
    if (absl::IsUnavailable(m.status())) {
      fallbacks_->Inc();
      LOG_WARN << m.status() << "; the node stages this transfer instead";
    } else if (!absl::IsFailedPrecondition(m.status())) {
      failures_->Inc();
      return m.status();
    }
    remote.push_back(last);
  }
  if (!remote.empty()) {
    std::vector<transport::RmaOp> far = transport::TakeOps(&gpu, [&](const transport::RmaOp& op) {
      return std::find(remote.begin(), remote.end(), op.segment.get()) != remote.end();
    });
    for (transport::RmaOp& op : far) bounced->push_back(std::move(op));
  }
  if (gpu.empty()) return absl::OkStatus();
  absl::Status st = RunOnDevice(gpu, order);
  if (!st.ok()) failures_->Inc();
  return st;
}

absl::Status GpuSegments::RunOnDevice(const std::vector<transport::RmaOp>& gpu,
                                      EngineOrder* order) {
  // One mapping per segment of the batch, held until the copies are done; one stream.
  std::vector<std::shared_ptr<Mapping>> held;
  std::vector<cuda::CopyRegion> regions;
  std::vector<cuda::CopyRegion> fence;  // each get header again, after the values
  std::vector<proto::AllocHeader> again;
  size_t get_headers = 0;
  for (const transport::RmaOp& op : gpu) get_headers += !op.is_put && op.header ? 1 : 0;
  again.resize(get_headers);
  const transport::RemoteSegment* last_seg = nullptr;
  Mapping* last = nullptr;
  for (const transport::RmaOp& op : gpu) {
    const transport::RemoteSegment& seg = *op.segment;
    if (&seg != last_seg) {
      GRANARY_ASSIGN_OR_RETURN(std::shared_ptr<Mapping> m, Open(seg));
      if (!held.empty() &&
          (m->device != held.front()->device || m->backend != held.front()->backend)) {
        return absl::UnimplementedError(absl::StrCat("a batch spans GPU segments on devices ",
                                                     held.front()->device, " and ", m->device,
                                                     "; one device per batch is supported"));
      }
      last_seg = &seg;
      last = m.get();
      held.push_back(std::move(m));
    }
    if (op.length == 0 || op.remote_addr < seg.base || op.length > seg.size ||
        op.remote_addr - seg.base > seg.size - op.length) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU segment ", seg.segment_id, ": [", op.remote_addr, ", +", op.length,
                       ") is outside the segment at ", seg.base, " of ", seg.size, " bytes"));
    }
    unsigned char* device = last->base + (op.remote_addr - seg.base);
    if (op.is_put) {
      regions.push_back({op.local, device, op.length});
      continue;
    }
    regions.push_back({device, op.local, op.length});
    if (op.header) fence.push_back({device, &again[fence.size()], proto::kAllocHeaderSize});
  }
  regions.insert(regions.end(), fence.begin(), fence.end());
  cuda::DeviceBackend* backend = held.front()->backend;
  GRANARY_ASSIGN_OR_RETURN(StreamPool::Stream stream, streams_.Take(backend, held.front()->device));
  absl::Status st = order == nullptr ? absl::OkStatus() : order->Before(stream.handle);
  if (st.ok()) {
    st = backend->BatchCopyAsync(stream.handle, regions.data(), static_cast<int>(regions.size()));
  }
  absl::Status synced = backend->SynchronizeStream(stream.handle);
  if (st.ok()) st = synced;
  streams_.Return(stream, st.ok());
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("a device copy of GPU segment ", gpu.front().segment->segment_id, " (node ",
                     gpu.front().segment->node_address, ") failed: ", st.message()));
  }
  // The fence: each get header, read before its value, must be what it is after every value.
  size_t h = 0;
  for (const transport::RmaOp& op : gpu) {
    if (op.is_put || !op.header) continue;
    if (std::memcmp(op.local, &again[h++], proto::kAllocHeaderSize) != 0) {
      return absl::UnavailableError(
          absl::StrCat("a replica header on GPU segment ", op.segment->segment_id,
                       " changed during the read (the object was replaced or removed); retry"));
    }
  }
  return absl::OkStatus();
}

}  // namespace granary::client
