#include "node/segments.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "device/device_backend.h"
#include "node/memory_limits.h"

namespace granary::node {
namespace {

std::string NumaText(int numa_node) {
  return numa_node < 0 ? ", NUMA node not bound" : absl::StrCat(", on NUMA node ", numa_node);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeSegments>> NodeSegments::Create(
    const NodeOptions& options, common::MetricsRegistry* metrics) {
  std::unique_ptr<NodeSegments> s(new NodeSegments(options, metrics));
  GRANARY_RETURN_IF_ERROR(s->ChooseTopology());
  return s;
}

void NodeSegments::StopDisks() {
  for (auto& s : segments_) {
    if (s.disk) s.disk->Stop();
  }
}

void NodeSegments::Release() {
  for (auto& s : segments_) {
    s.region.reset();
    s.gpu.reset();
  }
}

absl::Status NodeSegments::ChooseTopology() {
  GRANARY_ASSIGN_OR_RETURN(topology_, transport::Topology::Read(options_.sysfs_root));
  int gpu = -1;
  if (options_.gpu_segment_size > 0)
    gpu = options_.gpu_devices.empty() ? 0 : options_.gpu_devices[0];
  absl::StatusOr<transport::NetDeviceChoice> c =
      transport::ChooseNetDevice(topology_, options_.device_name, gpu);
  if (!c.ok()) {
    // "device_name '...' is not ..." is the flag's value.
    const bool flag = absl::StartsWith(c.status().message(), "device_name");
    return absl::Status(c.status().code(), absl::StrCat(flag ? "--" : "", c.status().message()));
  }
  nic_ = *c;
  host_numa_node_ = nic_.numa_node;
  if (options_.numa_node >= 0) {
    if (!topology_.HasNumaNode(options_.numa_node)) {
      std::vector<std::string> nodes;
      for (const auto& numa : topology_.numa_nodes()) nodes.push_back(absl::StrCat(numa.id));
      return absl::InvalidArgumentError(absl::StrCat(
          "--numa_node=", options_.numa_node, " is not a NUMA node of this host (",
          options_.sysfs_root,
          "/devices/system/node has: ", nodes.empty() ? "none" : absl::StrJoin(nodes, ", "), ")"));
    }
    host_numa_node_ = options_.numa_node;
  }
  return absl::OkStatus();
}

void NodeSegments::PlaceSpan(SegmentSpan* span, int gpu) {
  span->nic = nic_.device;
  span->gpu = gpu >= 0 ? gpu : nic_.gpu;
  span->numa_node = host_numa_node_;
  if (gpu >= 0) {
    span->numa_node = -1;
    for (const auto& g : topology_.gpus()) {
      if (g.index == gpu) span->numa_node = g.numa_node;
    }
  }
  metrics_
      ->Gauge("granary_node_segment_numa_node",
              "The NUMA node a segment's memory is on (-1: not bound, or unknown), with its NIC "
              "and GPU",
              {{"segment", span->name}, {"nic", span->nic}, {"gpu", absl::StrCat(span->gpu)}})
      ->Set(span->numa_node);
}

absl::Status NodeSegments::AddHost(transport::Context* ctx, const std::string& name,
                                   std::vector<SegmentSpan>* spans) {
  const NodeOptions& options = options_;
  if (!options.virtual_segments) {
    // Before anything is allocated: a size larger than the machine can hold is refused here,
    // not found out by UCX test-writing its shared-memory file until the kernel kills processes.
    if (absl::StatusOr<MachineMemory> machine = ReadMachineMemory(); machine.ok()) {
      GRANARY_RETURN_IF_ERROR(
          CheckHostSegmentFits("host segment " + name, options.host_segment_size, *machine));
    } else {
      GRANARY_LOG_WARN << "host segment " << name
                       << ": its size is not checked against the machine's "
                       << "memory: " << machine.status().message();
    }
  }
  Segment seg;
  if (options.segment_memory == "ucx" && !options.virtual_segments &&
      options.segment_file.empty()) {
    auto region = transport::MemoryRegion::Allocate(ctx, options.host_segment_size);
    if (region.ok() && host_numa_node_ >= 0) {
      // Bound before the first touch (pages UCX touched already are moved).
      GRANARY_RETURN_IF_ERROR(
          BindToNumaNode((*region)->addr(), (*region)->length(), host_numa_node_));
    }
    if (region.ok()) {
      // First touch now, not on the data path, then pin.
      auto* base = static_cast<volatile char*>((*region)->addr());
      for (size_t off = 0; off < (*region)->length(); off += 4096) base[off] = 0;
      bool locked = mlock((*region)->addr(), (*region)->length()) == 0;
      if (!locked && options.require_mlock) {
        return absl::FailedPreconditionError(absl::StrCat(
            "host segment ", name, ": mlock of ", common::FormatSize(options.host_segment_size),
            " failed (", strerror(errno),
            "); under --cgroup the segment must be locked: raise RLIMIT_MEMLOCK "
            "(LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK"));
      }
      if (!locked) {
        GRANARY_LOG_WARN << "host segment " << name << ": mlock failed (" << strerror(errno)
                         << "); the memory may be swapped";
      }
      seg.region = std::move(*region);
      GRANARY_LOG_INFO << "host segment " << name << ": "
                       << common::FormatSize(options.host_segment_size)
                       << ", allocated by UCX (shared memory for same-host peers)"
                       << (locked ? ", locked" : ", not locked") << NumaText(host_numa_node_);
    } else {
      GRANARY_LOG_WARN << "host segment " << name << ": UCX could not allocate it ("
                       << region.status().message() << "); falling back to mmap";
    }
  }
  if (seg.region == nullptr) {
    HostSegment::Options ho;
    ho.size = options.host_segment_size;
    ho.huge_pages = options.use_huge_pages;
    ho.populate = !options.virtual_segments;
    ho.lock = !options.virtual_segments;
    ho.numa_node = host_numa_node_;
    ho.file = options.segment_file;
    GRANARY_ASSIGN_OR_RETURN(seg.memory, HostSegment::Create(ho));
    reused_file_ = seg.memory->reused();
    if (options.require_mlock && ho.lock && !seg.memory->locked()) {
      return absl::FailedPreconditionError(
          absl::StrCat("host segment ", name, ": mlock of ", common::FormatSize(ho.size),
                       " failed; under --cgroup the segment must be locked: raise RLIMIT_MEMLOCK "
                       "(LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK"));
    }
    GRANARY_ASSIGN_OR_RETURN(
        seg.region, transport::MemoryRegion::Create(ctx, seg.memory->data(), seg.memory->size()));
    GRANARY_LOG_INFO << "host segment " << name << ": " << common::FormatSize(ho.size)
                     << (seg.memory->huge_pages() ? ", 2 MiB pages" : ", 4 KiB pages")
                     << (seg.memory->locked() ? ", locked" : ", not locked")
                     << (options.virtual_segments ? ", virtual (no data)" : "")
                     << (options.segment_file.empty() ? ""
                         : seg.memory->reused()
                             ? absl::StrCat(", in file '", options.segment_file,
                                            "' (kept from a previous run)")
                             : absl::StrCat(", in file '", options.segment_file, "' (new)"))
                     << (options.virtual_segments ? "" : NumaText(host_numa_node_));
  }
  SegmentSpan span;
  span.name = name;
  span.base = reinterpret_cast<uint64_t>(seg.region->addr());
  span.size = seg.region->length();
  span.tier = proto::Tier::kHost;
  PlaceSpan(&span, -1);
  GRANARY_ASSIGN_OR_RETURN(span.rkey, seg.region->PackRkey());
  spans->push_back(std::move(span));
  segments_.push_back(std::move(seg));
  return absl::OkStatus();
}

absl::Status NodeSegments::AddGpu(transport::Context* ctx, int device,
                                  std::vector<SegmentSpan>* spans) {
  const std::string name = absl::StrCat("gpu", device);
  const std::string flag = options_.gpu_segment_size_flag.empty()
                               ? absl::StrCat(options_.gpu_segment_size)
                               : options_.gpu_segment_size_flag;
  Segment seg;
  GRANARY_ASSIGN_OR_RETURN(seg.gpu, GpuSegment::Create(&device::ActiveRuntime(), device,
                                                       options_.gpu_segment_size, flag));
  SegmentSpan span;
  span.name = name;
  span.base = reinterpret_cast<uint64_t>(seg.gpu->base());
  span.size = seg.gpu->size();
  span.tier = proto::Tier::kGpu;
  span.gpu_ipc = seg.gpu->ipc();
  span.gpu_uuid.assign(reinterpret_cast<const char*>(seg.gpu->uuid().data()),
                       seg.gpu->uuid().size());
  PlaceSpan(&span, device);
  // Mapped with UCX only where UCX supports CUDA memory (Context::SupportsCudaMemory):
  // then clients that cannot open the IPC handle move its bytes through UCX. Debian's UCX has no
  // CUDA support and would touch device memory from the CPU: never mapped there (no rkey), and
  // such clients go through the node bounce.
  std::string ucx =
      "not mapped with UCX (this UCX has no CUDA memory support): other hosts go "
      "through the node bounce";
  if (ctx->SupportsCudaMemory()) {
    absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> region =
        transport::MemoryRegion::Create(ctx, seg.gpu->base(), seg.gpu->size(),
                                        /*cuda=*/true);
    absl::StatusOr<std::string> rkey =
        region.ok() ? (*region)->PackRkey() : absl::StatusOr<std::string>(region.status());
    if (rkey.ok()) {
      seg.region = *std::move(region);
      span.rkey = *std::move(rkey);
      ucx =
          "mapped with UCX as CUDA memory: clients that cannot open the IPC handle move its "
          "bytes through UCX";
    } else {
      ucx = absl::StrCat("this UCX supports CUDA memory, but mapping the segment failed (",
                         rkey.status().message(), "): other hosts go through the node bounce");
    }
  }
  GRANARY_LOG_INFO << "GPU segment " << name << ": " << common::FormatSize(span.size)
                   << " on device " << device << " (" << device::ActiveBackendName()
                   << " backend, UUID " << absl::BytesToHexString(span.gpu_uuid)
                   << "), exported for same-host IPC; " << ucx;
  spans->push_back(std::move(span));
  segments_.push_back(std::move(seg));
  return absl::OkStatus();
}

absl::Status NodeSegments::AddDisk(size_t i, std::vector<SegmentSpan>* spans) {
  DiskOptions o;
  o.path = options_.disk_paths[i];
  o.size = options_.disk_sizes[i];
  o.queue_depth = options_.disk_queue_depth;
  o.fault = options_.disk_fault;
  if (o.size > DiskTier::kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("--disk_size ", o.size, " of --disk_path '",
                                                   o.path, "' is over ", DiskTier::kMaxSize,
                                                   " bytes, the most one disk tier holds"));
  }
  GRANARY_ASSIGN_OR_RETURN(std::unique_ptr<DiskFile> file, DiskFile::Open(o));
  GRANARY_LOG_INFO << "disk tier disk" << i << ": " << common::FormatSize(o.size) << " in '"
                   << file->file() << "', "
                   << (file->direct() ? "O_DIRECT" : "buffered (the file system refuses O_DIRECT)")
                   << ", queue depth " << o.queue_depth;
  Segment seg;
  seg.disk =
      std::make_unique<DiskTier>(std::make_unique<DiskStore>(std::move(file)), DiskTier::Base(i));
  SegmentSpan span;
  span.name = absl::StrCat("disk", i);
  span.base = seg.disk->base();
  span.size = o.size;
  span.tier = proto::Tier::kDisk;
  spans->push_back(std::move(span));
  segments_.push_back(std::move(seg));
  return absl::OkStatus();
}

}  // namespace granary::node
