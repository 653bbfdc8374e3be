#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "node/disk/disk_tier.h"
#include "node/gpu_segment.h"
#include "node/host_segment.h"
#include "node/node_options.h"
#include "node/node_service.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/topology.h"

namespace granary::node {

// The memory a node contributes: its host segments (UCX-allocated shared memory, or mmap) and
// GPU segments (exported for IPC through the device backend), registered with UCX, and where
// each sits (NIC, NUMA node, GPU); and its disk tiers (node/disk/disk_tier.h). Create reads the
// topology and picks the NIC and the host segments' NUMA node; the Add calls allocate, register and
// describe one segment each, before anything connects, so the memory is charged at start. Owned by
// NodeServer; segment i here is NodeService's segment i. Not thread-safe while being built;
// afterwards the accessors are read-only and may be called from any thread.
class NodeSegments {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeSegments>> Create(
      const NodeOptions& options, common::MetricsRegistry* metrics);

  // The NIC the node's UCX context should use, and why (empty device: UCX's choice).
  const transport::NetDeviceChoice& nic() const { return nic_; }
  // Allocates and registers the host segment `name` (UCX-allocated or mmap, as options say).
  [[nodiscard]] absl::Status AddHost(transport::Context* ctx, const std::string& name,
                                     std::vector<SegmentSpan>* spans);
  // Allocates and exports the GPU segment of `device` through the device backend.
  [[nodiscard]] absl::Status AddGpu(transport::Context* ctx, int device,
                                    std::vector<SegmentSpan>* spans);
  // Opens the disk tier `name` (DiskFile::Open refuses a bad path or size, naming it) at
  // options.disk_paths[i] with options.disk_sizes[i] bytes, the node's i-th; its segment has
  // the synthetic base DiskTier::Base(i) and no rkey.
  [[nodiscard]] absl::Status AddDisk(size_t i, std::vector<SegmentSpan>* spans);
  // Whether any disk tier's file was there before (it holds a previous run's records).
  bool reused_disk() const {
    for (const auto& s : segments_) {
      if (s.disk && s.disk->store().file().reused()) return true;
    }
    return false;
  }
  // The disk tier of segment `index`, or null for a memory segment.
  DiskTier* disk(size_t index) const { return segments_[index].disk.get(); }
  // The UCX registration of segment `index` (host segments; GPU ones only where UCX maps CUDA
  // memory, else null).
  transport::MemoryRegion* region(size_t index) const { return segments_[index].region.get(); }
  // Whether the host segment's file (NodeOptions::segment_file) held a previous run's bytes.
  bool reused_file() const { return reused_file_; }
  // Runs the disk tiers' queued jobs and stops their threads (before the RPC server goes: the
  // jobs answer through it).
  void StopDisks();
  // Unregisters and frees every segment: before the UCX context goes, after every transfer
  // that may touch the memory has stopped.
  void Release();

 private:
  struct Segment {
    std::unique_ptr<HostSegment> memory;  // mmap segments only; null when UCX allocated it
    std::unique_ptr<transport::MemoryRegion> region;  // declared after memory: unmapped first
    // A GPU segment: memory is null, and region too unless UCX maps CUDA memory (then it is
    // the segment's CUDA mapping, unmapped before the segment is freed).
    std::unique_ptr<GpuSegment> gpu;
    std::unique_ptr<DiskTier> disk;  // a disk tier: no memory, no region
  };
  NodeSegments(const NodeOptions& options, common::MetricsRegistry* metrics)
      : options_(options), metrics_(metrics) {}
  [[nodiscard]] absl::Status ChooseTopology();
  // Fills span's nic, numa_node and gpu (`gpu`: a GPU segment's device, else -1), and its gauge.
  void PlaceSpan(SegmentSpan* span, int gpu);

  const NodeOptions options_;
  common::MetricsRegistry* const metrics_;
  transport::Topology topology_;
  transport::NetDeviceChoice nic_;
  int host_numa_node_ = -1;  // where host segments are bound (-1: nowhere)
  bool reused_file_ = false;
  std::vector<Segment> segments_;
};

}  // namespace granary::node
