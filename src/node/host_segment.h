#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace granary::node {

// Host memory for a segment: anonymous mmap, pre-faulted (first touch at start, not on the data
// path), locked with mlock, on 2 MiB huge pages when the system has them. Owns the mapping.
// Immutable after Create; thread-safe to read.
// Binds [addr, addr + len) to NUMA node `node` (mbind MPOL_BIND, moving pages already there):
// pages touched after it come from that node. INTERNAL names the node and errno on failure.
[[nodiscard]] absl::Status BindToNumaNode(void* addr, size_t len, int node);

class HostSegment {
 public:
  struct Options {
    size_t size = 0;
    bool huge_pages = true;
    bool lock = true;      // mlock; failure is reported, not fatal
    bool populate = true;  // false for virtual (metadata-only) segments
    int numa_node = -1;    // bind the pages to this NUMA node before they are touched; -1: no
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostSegment>> Create(const Options& o);
  ~HostSegment();
  HostSegment(const HostSegment&) = delete;
  HostSegment& operator=(const HostSegment&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  bool huge_pages() const { return huge_; }
  bool locked() const { return locked_; }

 private:
  HostSegment() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool huge_ = false;
  bool locked_ = false;
};

}  // namespace granary::node
