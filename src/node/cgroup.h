#pragma once

// A node's own memory cgroup (docs/architecture.md section 6, "Hard isolation"): with
// `--cgroup=NAME --memory_limit=SIZE` the node, first thing in main and before any other thread
// exists, creates (or reuses, when empty) the cgroup NAME under its own, moves itself in, and
// sets the limit; then it checks that its segments fit before it allocates them, and after
// pre-faulting them that the cgroup was charged for them. cgroup v1 (the memory hierarchy) and
// v2 (unified, with the memory controller) are told apart at run time from the mounts.
//
// Every path comes from CgroupPaths, so the tests run v2 against a fake cgroupfs tree (plain
// directories and files) as well as v1 against the real one. Not thread-safe: main uses it
// before and after the node's threads run; Read() may then be called from the metrics thread
// (it only reads files).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::common {
class MetricsRegistry;
}  // namespace granary::common

namespace granary::node {

// Where the kernel's views are; the defaults are the real ones.
struct CgroupPaths {
  std::string mounts = "/proc/self/mounts";
  std::string self_cgroup = "/proc/self/cgroup";
};

enum class CgroupVersion { kV1, kV2 };

// The memory hierarchy this process is in.
struct CgroupLayout {
  CgroupVersion version = CgroupVersion::kV1;
  std::string mount;  // where the memory hierarchy is mounted (v1) or the unified tree (v2)
  std::string own;    // this process's cgroup, relative to `mount` ("/" or "/system.slice/x")
};

// The memory hierarchy from the mounts and this process's cgroup file. FAILED_PRECONDITION when
// no memory controller is reachable (names what was found: for example a cgroup2 tree whose
// controllers lack memory, as on hosts with memory on v1 only).
[[nodiscard]] absl::StatusOr<CgroupLayout> DetectCgroupLayout(const CgroupPaths& paths);

// NAME must be one path component of [A-Za-z0-9_.-], not "." or "..". INVALID_ARGUMENT names it.
[[nodiscard]] absl::Status ValidateCgroupName(const std::string& name);

// What the cgroup says about itself, for the node's metrics and the start-up checks.
struct CgroupFigures {
  uint64_t limit = 0;            // this cgroup's own limit
  uint64_t effective_limit = 0;  // the smallest limit up the tree (the binding one)
  std::string binding;           // the cgroup whose limit binds (a path under the mount)
  uint64_t usage = 0;
  uint64_t peak = 0;        // v1 max_usage_in_bytes, v2 memory.peak (0 where the kernel lacks it)
  uint64_t limit_hits = 0;  // v1 memory.failcnt, v2 memory.events "max"
  uint64_t oom = 0;         // v2 memory.events "oom"; v1 0
  uint64_t oom_kill = 0;    // v1 memory.oom_control "oom_kill", v2 memory.events "oom_kill"
};

class NodeCgroup {
 public:
  // Creates or reuses <own>/<name>, moves process `pid` (all its threads) in, enables the
  // memory controller for it (v2) and sets `limit` (swap off where the kernel accounts it).
  // Refuses, with the reason, a name already used by a running process, a cgroupfs this process
  // may not write (with what to do on v1 and in containers), and a v2 parent that still holds
  // other processes (the no-internal-process rule).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeCgroup>> Enter(const CgroupPaths& paths,
                                                                         const std::string& name,
                                                                         uint64_t limit, pid_t pid);
  ~NodeCgroup();

  // The absolute directory of the cgroup, and its version.
  const std::string& dir() const { return dir_; }
  CgroupVersion version() const { return layout_.version; }
  const char* version_name() const { return layout_.version == CgroupVersion::kV1 ? "v1" : "v2"; }

  [[nodiscard]] absl::StatusOr<CgroupFigures> Read() const;

  // Before allocating: segments + reserve + what the cgroup already holds must fit under the
  // effective limit. FAILED_PRECONDITION naming every number and the binding cgroup otherwise.
  [[nodiscard]] absl::Status CheckRoom(uint64_t segments, uint64_t reserve) const;

  // After pre-faulting: the charge should have grown by about `segments` since `usage_before`;
  // a message (for a warning) when it grew by less than 90% of it, naming both numbers (huge
  // pages, for example, are charged to the hugetlb controller, not to memory limits).
  std::optional<std::string> CheckCharged(uint64_t usage_before, uint64_t segments) const;

  // On a clean exit: v1 moves `pid` back to the parent and removes the cgroup (its charges go
  // with the pages: shared memory clients still map stays charged until they let go); v2 leaves
  // the empty cgroup for the next start to reuse (a process cannot move back into a parent whose
  // subtree_control is set). Idempotent; also run by the destructor.
  void Leave();

 private:
  NodeCgroup(CgroupLayout layout, std::string dir, pid_t pid)
      : layout_(std::move(layout)), dir_(std::move(dir)), pid_(pid) {}
  std::string File(const char* name) const { return dir_ + "/" + name; }

  CgroupLayout layout_;
  std::string dir_;
  pid_t pid_;
  bool left_ = false;
};

// The cgroup's figures in the node's /metrics, read at each scrape: granary_node_cgroup_*
// {cgroup, version} (limit, effective limit, usage, peak, headroom; limit hits, OOMs and OOM
// kills). `cgroup` must outlive the registry's use of the collector.
void ExportCgroupMetrics(const NodeCgroup* cgroup, common::MetricsRegistry* metrics);

}  // namespace granary::node
