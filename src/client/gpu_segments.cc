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
  device::DeviceRuntime* backend = nullptr;
  int device = -1;
  std::string ipc;  // the handle it was opened from
  unsigned char* base = nullptr;
  ~Mapping() {
    if (absl::Status st = backend->CloseIpc(base); !st.ok()) {
      GRANARY_LOG_WARN << "closing a GPU segment's IPC mapping failed: " << st;
    }
  }
};

GpuSegments::GpuSegments(common::MetricsRegistry* metrics)
    : opened_(metrics->Counter("granary_client_gpu_segment_opens_total",
                               "GPU segments this client mapped through their IPC handle")),
      failures_(metrics->Counter("granary_client_gpu_segment_failures_total",
                                 "Batches on GPU segments that failed (open, copy or header)")),
      fallbacks_(metrics->Counter("granary_client_gpu_fallback_total",
                                  "GPU segments whose IPC open failed, so the node staged the "
                                  "transfer instead")) {}

GpuSegments::~GpuSegments() {
  absl::flat_hash_map<Key, std::shared_ptr<Mapping>> mapped;  // closed outside the lock
  {
    granary::common::MutexLock lock(&mu_);
    mapped.swap(mapped_);
  }
}

void GpuSegments::Retain(const absl::flat_hash_set<uint64_t>& mounted) {
  std::vector<std::shared_ptr<Mapping>> gone;  // closed outside the lock
  granary::common::MutexLock lock(&mu_);
  for (auto it = failed_.begin(); it != failed_.end();) {
    if (mounted.contains(it->first.first)) {
      ++it;
    } else {
      failed_.erase(it++);
    }
  }
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    if (mounted.contains(it->first.first)) {
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

absl::StatusOr<int> GpuSegments::LocalDevice(device::DeviceRuntime& backend,
                                             const std::string& uuid) {
  // Devices are matched by UUID: CUDA_VISIBLE_DEVICES may number them differently here.
  const int n = backend.DeviceCount();
  for (int d = 0; d < n; ++d) {
    absl::StatusOr<device::DeviceUuid> u = backend.DeviceUuidOf(d);
    if (u.ok() && uuid.size() == u->size() && std::memcmp(uuid.data(), u->data(), u->size()) == 0) {
      return d;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat("no device of this process (", n, " on the ",
                                                    backend.Name(), " backend) has UUID ",
                                                    absl::BytesToHexString(uuid)));
}

absl::StatusOr<std::shared_ptr<GpuSegments::Mapping>> GpuSegments::Open(
    const transport::RemoteSegment& seg, int buffer_device) {
  device::DeviceRuntime& backend = device::ActiveRuntime();
  const Key key{seg.segment_id, buffer_device};
  const std::string where =
      absl::StrCat("GPU segment ", seg.segment_id, " of node ", seg.node_address);
  std::shared_ptr<Mapping> stale;  // closed outside the lock, once no batch holds it
  {
    granary::common::MutexLock lock(&mu_);
    auto it = mapped_.find(key);
    if (it != mapped_.end() && it->second->ipc == seg.gpu_ipc && it->second->backend == &backend) {
      return it->second;
    }
    if (it != mapped_.end()) {
      stale = std::move(it->second);
      mapped_.erase(it);
    }
    auto failed = failed_.find(key);
    if (failed != failed_.end() && failed->second.ipc == seg.gpu_ipc &&
        absl::Now() < failed->second.retry_at) {
      return absl::UnavailableError(
          absl::StrCat(where, ": its IPC open failed before; retried after ",
                       absl::FormatTime(failed->second.retry_at), " (", failed->second.why, ")"));
    }
  }
  stale.reset();
  if (!seg.same_host) {
    return absl::FailedPreconditionError(absl::StrCat(where, " is on another host"));
  }
  // The segment's GPU must be one of this process's (matched by UUID: CUDA_VISIBLE_DEVICES may
  // number it differently here). It is mapped on the caller's buffer's device where there is one
  // (CUDA enables peer access for it), so that the copy is one device-to-device copy there and
  // no other GPU gets a context; for host buffers, on the segment's own device.
  absl::StatusOr<int> own = LocalDevice(backend, seg.gpu_uuid);
  if (!own.ok()) {
    return absl::Status(own.status().code(), absl::StrCat(where, ": ", own.status().message()));
  }
  const int device = buffer_device >= 0 ? buffer_device : *own;
  absl::StatusOr<void*> base = backend.OpenIpc(device, seg.gpu_ipc);
  if (!base.ok()) {
    // Remembered, so that each batch does not try (and log) again.
    absl::Status failed =
        absl::UnavailableError(absl::StrCat(where, ": opening its IPC handle on device ", device,
                                            " failed: ", base.status().message()));
    GRANARY_LOG_WARN << failed << "; the node stages its transfers instead until "
                     << absl::FormatDuration(kRetryOpenAfter) << " from now";
    granary::common::MutexLock lock(&mu_);
    failed_[key] =
        Failed{seg.gpu_ipc, absl::Now() + kRetryOpenAfter, std::string(base.status().message())};
    return failed;
  }
  auto m = std::make_shared<Mapping>();
  m->backend = &backend;
  m->device = device;
  m->ipc = seg.gpu_ipc;
  m->base = static_cast<unsigned char*>(*base);
  opened_->Inc();
  GRANARY_LOG_DEBUG << "mapped " << where << " (" << seg.size << " bytes) on device " << device;
  granary::common::MutexLock lock(&mu_);  // destroyed before `m`: a losing `m` closes unlocked
  failed_.erase(key);
  auto [it, fresh] = mapped_.try_emplace(key, m);
  if (!fresh) return it->second;  // another thread opened it first
  return m;
}

// The device each segment of the batch is mapped for: the device of the batch's first device
// buffer on it, -1 (its own device) when every buffer on it is host memory.
absl::flat_hash_map<const transport::RemoteSegment*, int> GpuSegments::BufferDevices(
    const std::vector<transport::RmaOp>& gpu) {
  absl::flat_hash_map<const transport::RemoteSegment*, int> on;
  for (const transport::RmaOp& op : gpu) {
    auto [it, fresh] = on.try_emplace(op.segment.get(), op.device);
    if (!fresh && it->second < 0) it->second = op.device;
  }
  return on;
}

absl::Status GpuSegments::Run(std::vector<transport::RmaOp>* ops,
                              std::vector<transport::RmaOp>* bounced, EngineOrder* order) {
  // Split: the GPU ops (in order) out, the rest kept in place.
  std::vector<transport::RmaOp> gpu =
      transport::TakeOps(ops, [](const transport::RmaOp& op) { return op.segment->gpu; });
  if (gpu.empty()) return absl::OkStatus();
  // Segments this process cannot map go to the node bounce: another host or no device with the
  // UUID (FAILED_PRECONDITION from Open), or an IPC open that failed now or before (UNAVAILABLE,
  // logged by Open: counted as a fallback). Anything else fails the batch.
  const absl::flat_hash_map<const transport::RemoteSegment*, int> on = BufferDevices(gpu);
  std::vector<const transport::RemoteSegment*> remote;
  for (const auto& [seg, device] : on) {
    absl::StatusOr<std::shared_ptr<Mapping>> m = Open(*seg, device);
    if (m.ok()) continue;
    if (absl::IsUnavailable(m.status())) {
      fallbacks_->Inc();
    } else if (!absl::IsFailedPrecondition(m.status())) {
      failures_->Inc();
      return m.status();
    }
    remote.push_back(seg);
  }
  if (!remote.empty()) {
    std::vector<transport::RmaOp> far = transport::TakeOps(&gpu, [&](const transport::RmaOp& op) {
      return std::find(remote.begin(), remote.end(), op.segment.get()) != remote.end();
    });
    for (transport::RmaOp& op : far) bounced->push_back(std::move(op));
  }
  if (gpu.empty()) return absl::OkStatus();
  absl::Status st = RunOnDevice(gpu, on, order);
  if (!st.ok()) failures_->Inc();
  return st;
}

absl::Status GpuSegments::RunOnDevice(
    const std::vector<transport::RmaOp>& gpu,
    const absl::flat_hash_map<const transport::RemoteSegment*, int>& on, EngineOrder* order) {
  // One mapping per segment of the batch, held until the copies are done; one stream per device
  // the mappings are on, each running its ops in the batch's order, then its get headers again.
  struct OnDevice {
    std::vector<device::CopyRegion> regions;
    std::vector<device::CopyRegion> fence;
    StreamPool::Stream stream;
  };
  absl::flat_hash_map<int, OnDevice> devices;
  absl::flat_hash_map<const transport::RemoteSegment*, std::shared_ptr<Mapping>> held;
  std::vector<proto::AllocHeader> again;  // each get header again, after the values
  size_t get_headers = 0;
  for (const transport::RmaOp& op : gpu) get_headers += !op.is_put && op.header ? 1 : 0;
  again.resize(get_headers);
  size_t fenced = 0;
  device::DeviceRuntime* backend = nullptr;
  for (const transport::RmaOp& op : gpu) {
    const transport::RemoteSegment& seg = *op.segment;
    std::shared_ptr<Mapping>& m = held[&seg];
    if (m == nullptr) {
      GRANARY_ASSIGN_OR_RETURN(m, Open(seg, on.at(&seg)));
      backend = m->backend;
    }
    if (op.length == 0 || op.remote_addr < seg.base || op.length > seg.size ||
        op.remote_addr - seg.base > seg.size - op.length) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU segment ", seg.segment_id, ": [", op.remote_addr, ", +", op.length,
                       ") is outside the segment at ", seg.base, " of ", seg.size, " bytes"));
    }
    unsigned char* device = m->base + (op.remote_addr - seg.base);
    OnDevice& d = devices[m->device];
    if (op.is_put) {
      d.regions.push_back({op.local, device, op.length});
      continue;
    }
    d.regions.push_back({device, op.local, op.length});
    if (op.header) d.fence.push_back({device, &again[fenced++], proto::kAllocHeaderSize});
  }
  absl::Status st;
  for (auto& [device, d] : devices) {
    absl::StatusOr<StreamPool::Stream> stream = streams_.Take(backend, device);
    if (!stream.ok()) {
      st = stream.status();
      break;
    }
    d.stream = *stream;
    d.regions.insert(d.regions.end(), d.fence.begin(), d.fence.end());
    st = order == nullptr ? absl::OkStatus() : order->Before(d.stream.handle);
    if (st.ok()) {
      st = backend->BatchCopyAsync(d.stream.handle, d.regions.data(),
                                   static_cast<int>(d.regions.size()));
    }
    if (!st.ok()) break;
  }
  for (auto& [device, d] : devices) {
    if (d.stream.handle == nullptr) continue;
    absl::Status synced = backend->SynchronizeStream(d.stream.handle);
    if (st.ok()) st = synced;
    streams_.Return(d.stream, synced.ok());
  }
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
