#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace granary::node {

// Binds [addr, addr + len) to NUMA node `node` (mbind MPOL_BIND, moving pages already there):
// pages touched after it come from that node. INTERNAL names the node and errno on failure.
[[nodiscard]] absl::Status BindToNumaNode(void* addr, size_t len, int node);

// Host memory for a segment: anonymous mmap, pre-faulted (first touch at start, not on the data
// path), locked with mlock, on 2 MiB huge pages when the system has them. Owns the mapping.
// Immutable after Create; thread-safe to read.
//
// With Options::file the memory is that file, mapped shared (MAP_SHARED), so that it outlives
// the process: on tmpfs (/dev/shm) or hugetlbfs it survives a kill -9 and a restart, not a
// reboot. A missing or empty file is created at the size (space reserved with fallocate, so a
// full file system shows at start); an existing one must have exactly the size (refused
// otherwise, naming both sizes: the node never truncates what a previous run left) and is
// mapped with its bytes as they are (reused()). On hugetlbfs the size must be a multiple of
// the huge page size. The file is locked (flock) while the segment lives: a second process
// on it is refused, naming the file.
class HostSegment {
 public:
  struct Options {
    size_t size = 0;
    bool huge_pages = true;
    bool lock = true;      // mlock; failure is reported, not fatal
    bool populate = true;  // false for virtual (metadata-only) segments
    int numa_node = -1;    // bind the pages to this NUMA node before they are touched; -1: no
    std::string file;      // map this file (shared) instead of anonymous memory
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostSegment>> Create(const Options& o);
  ~HostSegment();
  HostSegment(const HostSegment&) = delete;
  HostSegment& operator=(const HostSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  bool huge_pages() const { return huge_; }
  bool locked() const { return locked_; }
  // Options::file existed with the segment's size: its bytes are a previous run's.
  bool reused() const { return reused_; }

 private:
  HostSegment() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool huge_ = false;
  bool locked_ = false;
  bool reused_ = false;
  int file_fd_ = -1;  // Options::file, open and locked (flock) while the segment lives
  // Maps Options::file into data_ (Create's file branch).
  [[nodiscard]] absl::Status MapFile(const Options& o);
};

}  // namespace granary::node
