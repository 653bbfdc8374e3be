// granary_node: contributes pinned host memory (and GPU memory) to a Granary cluster.
#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/size.h"
#include "node/cgroup.h"
#include "node/node_options.h"
#include "node/node_server.h"

using granary::node::NodeOptions;

// The defaults of the flags that fill NodeOptions are its own (node_options.h); a size is
// written as ParseSize reads it. docs/flags.md lists them as --helpfull prints them.
DEFINE_string(master, NodeOptions{}.master,
              "Master address host:port, or etcd://h1:2379;h2:2379 to follow the active master "
              "of --cluster_id (masters started with --enable_ha)");
DEFINE_string(cluster_id, NodeOptions{}.cluster_id, "Cluster name, with an etcd:// --master");
DEFINE_string(host_segment_size, granary::common::FormatSize(NodeOptions{}.host_segment_size),
              "Pinned host memory to contribute (B, KB, MB, GB, TB; 1 KB = 1024 B)");
DEFINE_string(gpu_segment_size, granary::common::FormatSize(NodeOptions{}.gpu_segment_size),
              "GPU memory to contribute on each --gpu_device (needs a device backend with GPUs)");
DEFINE_string(gpu_device, "",
              "Device of a GPU segment; repeat the flag (or list them: 0,1) for one segment per "
              "device (default 0)");
DEFINE_uint32(rpc_port, NodeOptions{}.rpc_port, "RPC port clients connect to (0 = any free port)");
DEFINE_string(rpc_host, NodeOptions{}.rpc_host,
              "Interface the RPC port binds (127.0.0.1: this host only; :: for IPv6)");
DEFINE_string(local_hostname, NodeOptions{}.local_hostname,
              "Address clients reach this node at (default: the local "
              "address of the connection to the master)");
DEFINE_uint32(metrics_port, NodeOptions{}.metrics_port,
              "HTTP port for /metrics and /health (0 = any)");
DEFINE_string(metrics_host, NodeOptions{}.metrics_host, "HTTP bind address");
DEFINE_string(pool, NodeOptions{}.pool, "Dedicate this node's segments to one tenant");
DEFINE_string(cgroup, "",
              "Run in this memory cgroup (v1 or v2), created under the node's own cgroup "
              "before anything else starts; needs --memory_limit");
DEFINE_string(memory_limit, "",
              "The --cgroup's memory limit (e.g. 36GB): the segments, --memory_reserve and "
              "what the cgroup already holds must fit under it, or the node refuses to start");
DEFINE_string(memory_reserve, "",
              "Room under --memory_limit for UCX, threads, page tables and heap (default: "
              "64 MB or 3% of the segments, whichever is more)");
DEFINE_bool(virtual_segments, NodeOptions{}.virtual_segments,
            "Register address space only (metadata benchmarks)");
DEFINE_bool(huge_pages, NodeOptions{}.use_huge_pages, "Try 2 MiB pages for mmap host segments");
DEFINE_string(segment_memory, NodeOptions{}.segment_memory,
              "Who allocates host segments: ucx (shared memory that same-host clients copy "
              "with loads and stores; mmap when UCX cannot) or mmap (anonymous, 2 MiB pages)");
DEFINE_string(segment_file, NodeOptions{}.segment_file,
              "Keep the host segment in this file (on tmpfs or hugetlbfs), mapped shared, so "
              "that a restarted node finds its objects there and reports them to the master; "
              "beside it, FILE.journal (what the segment holds) and FILE.id (the node's id). "
              "Empty: anonymous memory, lost when the process ends");
DEFINE_string(disk_path, "",
              "A directory for a disk tier (one preallocated file in it, read and written "
              "through io_uring, O_DIRECT where the file system allows it); repeat the flag (or "
              "list them: /nvme0/g,/nvme1/g) for one tier per device");
DEFINE_string(disk_size, "",
              "Bytes of each --disk_path's tier (a multiple of 4 KB, at most the free space): "
              "one size for every path, or one per path (64GB,128GB)");
DEFINE_int32(disk_queue_depth, NodeOptions{}.disk_queue_depth,
             "I/Os in flight at most per disk tier (1..4096)");
DEFINE_string(device_name, NodeOptions{}.device_name,
              "NIC port for the data path, as UCX_NET_DEVICES names it (mlx5_0:1, eth0); "
              "default: UCX_NET_DEVICES, else the NIC nearest the first --gpu_device, else UCX's "
              "choice");
DEFINE_int32(numa_node, NodeOptions{}.numa_node,
             "NUMA node to bind host segments to (-1: the chosen NIC's node, if any)");
DEFINE_string(sysfs_root, NodeOptions{}.sysfs_root, "Where the host topology is read (tests)");
DEFINE_string(log_level, "info", "debug|info|warning|error");

namespace {

// Every value of --NAME on the command line, in order (gflags keeps only the last of a
// repeated flag), each comma list split into its items.
std::vector<std::string> RepeatedFlagValues(int argc, char** argv, absl::string_view name) {
  std::vector<std::string> values;
  const std::string eq = absl::StrCat("-", name, "="), bare = absl::StrCat("-", name);
  auto add = [&](absl::string_view value) {
    for (absl::string_view item : absl::StrSplit(value, ',')) values.emplace_back(item);
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::StartsWith(a, "--")) a.remove_prefix(1);
    if (absl::StartsWith(a, eq)) add(a.substr(eq.size()));
    if (a == bare && i + 1 < argc) add(argv[++i]);
  }
  return values;
}

// The cgroup of --cgroup/--memory_limit (null without them), entered before UCX or any thread,
// so that what the node allocates from here on is charged to it; or why the node must not start.
absl::StatusOr<std::unique_ptr<granary::node::NodeCgroup>> EnterCgroup() {
  if (FLAGS_cgroup.empty() != FLAGS_memory_limit.empty()) {
    return absl::InvalidArgumentError(
        FLAGS_cgroup.empty() ? "--memory_limit '" + FLAGS_memory_limit +
                                   "' needs --cgroup=NAME (the cgroup it limits)"
                             : "--cgroup '" + FLAGS_cgroup + "' needs --memory_limit=SIZE");
  }
  auto host_size = granary::common::ParseSize(FLAGS_host_segment_size);
  if (FLAGS_cgroup.empty() || !host_size.ok()) return nullptr;
  auto limit = granary::common::ParsePositiveSize(FLAGS_memory_limit);
  if (!limit.ok()) {
    return absl::InvalidArgumentError("--memory_limit: " + std::string(limit.status().message()));
  }
  uint64_t reserve = std::max<uint64_t>(64ull << 20, *host_size / 100 * 3);
  if (!FLAGS_memory_reserve.empty()) {
    auto r = granary::common::ParseSize(FLAGS_memory_reserve);
    if (!r.ok()) {
      return absl::InvalidArgumentError("--memory_reserve: " + std::string(r.status().message()));
    }
    reserve = *r;
  }
  auto cg = granary::node::NodeCgroup::Enter(granary::node::CgroupPaths{}, FLAGS_cgroup, *limit,
                                             getpid());
  if (!cg.ok()) return cg.status();
  if (absl::Status st = (*cg)->CheckRoom(*host_size, reserve); !st.ok()) {
    return absl::FailedPreconditionError("refusing to start in cgroup " + (*cg)->dir() + ": " +
                                         std::string(st.message()));
  }
  return std::move(*cg);
}

// NodeOptions from the flags (gpu_device_values, disk_path_values: every --gpu_device and
// --disk_path item given), or the bad flag.
absl::StatusOr<NodeOptions> OptionsFromFlags(const std::vector<std::string>& gpu_device_values,
                                             const std::vector<std::string>& disk_path_values) {
  NodeOptions o;
  o.master = FLAGS_master;
  o.cluster_id = FLAGS_cluster_id;
  auto host = granary::common::ParseSize(FLAGS_host_segment_size);
  if (!host.ok()) {
    return absl::InvalidArgumentError("--host_segment_size: " +
                                      std::string(host.status().message()));
  }
  o.host_segment_size = *host;
  auto gpu = granary::common::ParseSize(FLAGS_gpu_segment_size);
  if (!gpu.ok()) {
    return absl::InvalidArgumentError("--gpu_segment_size: " + std::string(gpu.status().message()));
  }
  o.gpu_segment_size = *gpu;
  o.gpu_segment_size_flag = FLAGS_gpu_segment_size;
  for (const std::string& d : gpu_device_values) {
    int device = 0;
    if (!absl::SimpleAtoi(d, &device)) {
      return absl::InvalidArgumentError("--gpu_device='" + d + "' is not a device number");
    }
    o.gpu_devices.push_back(device);
  }
  o.disk_paths = disk_path_values;
  if (!FLAGS_disk_size.empty()) {
    for (absl::string_view text : absl::StrSplit(FLAGS_disk_size, ',')) {
      auto size = granary::common::ParsePositiveSize(text);
      if (!size.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--disk_size='", text, "': ", size.status().message()));
      }
      o.disk_sizes.push_back(*size);
    }
    // One size for every path.
    if (o.disk_sizes.size() == 1 && o.disk_paths.size() > 1) {
      o.disk_sizes.assign(o.disk_paths.size(), o.disk_sizes[0]);
    }
  }
  o.disk_queue_depth = FLAGS_disk_queue_depth;
  if (FLAGS_rpc_port > 65535 || FLAGS_metrics_port > 65535) {
    return absl::InvalidArgumentError("ports must be 0..65535");
  }
  o.rpc_port = static_cast<uint16_t>(FLAGS_rpc_port);
  o.rpc_host = FLAGS_rpc_host;
  o.local_hostname = FLAGS_local_hostname;
  o.metrics_port = static_cast<uint16_t>(FLAGS_metrics_port);
  o.metrics_host = FLAGS_metrics_host;
  o.pool = FLAGS_pool;
  o.virtual_segments = FLAGS_virtual_segments;
  o.use_huge_pages = FLAGS_huge_pages;
  o.segment_memory = FLAGS_segment_memory;
  o.segment_file = FLAGS_segment_file;
  o.device_name = FLAGS_device_name;
  o.numa_node = FLAGS_numa_node;
  o.sysfs_root = FLAGS_sysfs_root;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> gpu_device_values = RepeatedFlagValues(argc, argv, "gpu_device");
  const std::vector<std::string> disk_path_values = RepeatedFlagValues(argc, argv, "disk_path");
  gflags::SetUsageMessage("granary_node --master=HOST:PORT --host_segment_size=SIZE [flags]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  granary::common::ConfigureMutexDeadlockDetection();
  auto fail = [](absl::string_view msg) {
    fprintf(stderr, "granary_node: %.*s\n", static_cast<int>(msg.size()), msg.data());
    return 2;
  };
  granary::LogLevel level;
  if (!granary::common::ParseLogLevel(FLAGS_log_level, &level)) {
    return fail("--log_level '" + FLAGS_log_level + "' is not one of debug|info|warning|error");
  }
  granary::common::SetLogLevel(level);
  // The cgroup first, before UCX or any thread.
  auto entered = EnterCgroup();
  if (!entered.ok()) return fail(entered.status().message());
  std::unique_ptr<granary::node::NodeCgroup> cgroup = std::move(*entered);
  auto options = OptionsFromFlags(gpu_device_values, disk_path_values);
  if (!options.ok()) return fail(options.status().message());
  NodeOptions& o = *options;
  uint64_t usage_before = 0;
  if (cgroup != nullptr) {
    // hugetlb pages are charged to the hugetlb controller, not to the memory limit: under a
    // limit they would escape it. Unlocked pages could be reclaimed behind the check.
    if (o.use_huge_pages)
      GRANARY_LOG_INFO << "--cgroup: 2 MiB hugetlb pages off (not memory-limited)";
    o.use_huge_pages = false;
    o.require_mlock = true;
    auto f = cgroup->Read();
    if (f.ok()) usage_before = f->usage;
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto node = granary::node::NodeServer::Create(o);
  if (!node.ok()) {
    fprintf(stderr, "granary_node: %s\n", node.status().ToString().c_str());
    return 1;
  }
  if (cgroup != nullptr) {
    if (auto warning = cgroup->CheckCharged(usage_before, o.host_segment_size)) {
      GRANARY_LOG_WARN << *warning;
    }
    granary::node::ExportCgroupMetrics(cgroup.get(), &(*node)->metrics());
    (*node)->SetCgroup(cgroup.get());
  }
  std::thread([&set, n = node->get()] {
    int sig = 0;
    sigwait(&set, &sig);
    GRANARY_LOG_INFO << "signal " << sig << ": unmounting and shutting down";
    n->Shutdown();
  }).detach();
  (*node)->Run();
  node->reset();
  if (cgroup != nullptr) cgroup->Leave();  // after the segments are unmapped
  return 0;
}
