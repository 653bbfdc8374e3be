#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "node/disk/disk_file.h"

namespace granary::node {

// Everything granary_node can be told; flags only fill it. Validate() names a bad value.
struct NodeOptions {
  // host:port of the master, or etcd://h1:2379;h2:2379 (HA): the active master's RPC address
  // is read from granary/<cluster_id>/master_view before every (re)connect.
  std::string master = "127.0.0.1:50051";
  std::string cluster_id = "granary_cluster";  // with an etcd:// master
  uint64_t host_segment_size = 1ull << 30;     // pinned host memory to contribute (bytes)
  // GPU memory to contribute per device in gpu_devices (bytes; 0: none). Needs a device backend
  // with devices (cuda, or the CPU-only fake): the node refuses to start otherwise.
  uint64_t gpu_segment_size = 0;
  // The devices that each contribute one GPU segment of gpu_segment_size (--gpu_device,
  // repeatable); empty: device 0. Distinct, >= 0. Unused while gpu_segment_size is 0 (the
  // systemd units always pass --gpu_device, with --gpu_segment_size=0 by default).
  std::vector<int> gpu_devices;
  // How --gpu_segment_size was written, for messages (empty: the byte count).
  std::string gpu_segment_size_flag;
  uint16_t rpc_port = 0;  // RPC port that clients connect to (0 = any)
  // The interface the RPC port binds (its handshake listener; transport/rpc_listener.h).
  std::string rpc_host = "0.0.0.0";
  std::string local_hostname;    // address clients use to reach this node
  uint16_t metrics_port = 9103;  // HTTP /metrics (0 = any)
  std::string metrics_host = "0.0.0.0";
  std::string pool;               // dedicated tenant pool; empty = shared
  bool virtual_segments = false;  // address space only, for metadata benchmarks
  bool use_huge_pages = true;     // try 2 MiB pages first (mmap segments)
  // An mlock failure fails the start instead of a warning (under --cgroup: unlocked pages
  // could be swapped or reclaimed, and the limit check assumed they stay).
  bool require_mlock = false;
  // Who allocates host segments: "ucx" (UCP_MEM_MAP_ALLOCATE: shared memory that same-host
  // clients map and copy with plain loads and stores; falls back to mmap when UCX cannot) or
  // "mmap" (anonymous mmap, 2 MiB pages when available; same-host transfers go through cma,
  // one system call each). Virtual segments are always mmap.
  std::string segment_memory = "ucx";
  // A file (on tmpfs or hugetlbfs) that holds the host segment, mapped shared, so that it
  // outlives the process (HostSegment). Beside it the node keeps segment_file + ".journal" (its
  // inventory: InventoryJournal) and segment_file + ".id" (its node id, the same after a
  // restart). A node started again with the same file re-adopts what it held: its inventory is
  // replayed, checked against the headers in the file, and reported to the master. Same-host
  // transfers then go through cma, as with "mmap". Empty: no file; the cache ends with the
  // process.
  std::string segment_file;
  // Disk tiers (node/disk/): one directory per device (--disk_path, repeatable), each holding
  // one preallocated file of disk_sizes[i] bytes (--disk_size: one size for every path, or one
  // per path), read and written through io_uring with at most disk_queue_depth I/Os in flight.
  // DiskFile::Open refuses a bad path or size at start, naming it. Empty: no disk tier.
  std::vector<std::string> disk_paths;
  std::vector<uint64_t> disk_sizes;
  int disk_queue_depth = 64;
  // Tests only: the disk tiers' fault hook (DiskOptions::fault).
  std::function<int(DiskOp op, uint64_t offset, size_t bytes)> disk_fault;
  int64_t reconnect_backoff_max_ms = 2000;
  // The host segment's name at the master (unique per node, not across nodes).
  std::string host_segment_name = "host0";
  // Serve /metrics and /health on metrics_host:metrics_port. An embedded node (EmbeddedNode)
  // runs without them.
  bool serve_http = true;
  // A LogLevel for this node's own lines (its threads, and the caller's during Create), without
  // touching the process-wide threshold; -1: the process-wide threshold (the daemon).
  int log_level = -1;

  // The NIC port the node's UCX context uses (UCX_NET_DEVICES names: "mlx5_0:1", "eth0";
  // --device_name). Empty: UCX_NET_DEVICES if set, else the NIC paired with the first GPU
  // segment's device, else UCX's own choice. A name the host lacks fails the start.
  std::string device_name;
  // The NUMA node host segments are bound to (mbind before first touch; --numa_node). -1: the
  // chosen NIC's node, or no binding when there is none. A node the host lacks fails the start.
  int numa_node = -1;
  // Where the topology is read (transport/topology.h); tests give synthetic trees.
  std::string sysfs_root = "/sys";

  [[nodiscard]] absl::Status Validate() const;
};

}  // namespace granary::node
