#include "node/host_segment.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"

namespace granary::node {

absl::StatusOr<std::unique_ptr<HostSegment>> HostSegment::Create(const Options& o) {
  std::unique_ptr<HostSegment> s(new HostSegment());
  s->size_ = o.size;
  const int populate = o.populate ? MAP_POPULATE : MAP_NORESERVE;
  constexpr size_t kHuge = 2u << 20;
  if (o.huge_pages && o.populate && o.size % kHuge == 0) {
    void* p = mmap(nullptr, o.size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | populate, -1, 0);
    if (p != MAP_FAILED) {
      s->data_ = p;
      s->huge_ = true;
    }
  }
  if (s->data_ == nullptr) {
    void* p = mmap(nullptr, o.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate,
                   -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot map a host segment of ", FormatSize(o.size), ": ", std::strerror(errno)));
    }
    s->data_ = p;
    if (o.populate) madvise(p, o.size, MADV_HUGEPAGE);  // transparent huge pages if enabled
  }
  if (o.lock && o.populate) {
    if (mlock(s->data_, o.size) == 0) {
      s->locked_ = true;
    } else {
      LOG_WARN << "mlock of " << FormatSize(o.size) << " failed (" << std::strerror(errno)
               << "): the segment may be swapped; raise RLIMIT_MEMLOCK (LimitMEMLOCK=infinity)";
    }
  }
  return s;
}

HostSegment::~HostSegment() {
  if (data_ != nullptr) {
    if (locked_) munlock(data_, size_);
    munmap(data_, size_);
  }
}

}  // namespace granary::node
