#include "node/host_segment.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mempolicy.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status_macros.h"

namespace granary::node {

absl::Status BindToNumaNode(void* addr, size_t len, int node) {
  constexpr int kMaxNodes = 1024;
  if (node < 0 || node >= kMaxNodes) {
    return absl::InvalidArgumentError(absl::StrCat("NUMA node ", node, " is out of range"));
  }
  unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  // libnuma is not a dependency: the system call itself. maxnode counts one past the last bit.
  if (syscall(SYS_mbind, addr, len, MPOL_BIND, mask, kMaxNodes + 1, MPOL_MF_MOVE) != 0) {
    return absl::InternalError(absl::StrCat("mbind of ", common::FormatSize(len), " to NUMA node ",
                                            node, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

namespace {
// First touch, one write per 4 KiB page (after a binding, so the pages come from its node).
void Prefault(void* p, size_t size) {
  auto* base = static_cast<volatile char*>(p);
  for (size_t off = 0; off < size; off += 4096) base[off] = 0;
}
}  // namespace

absl::Status HostSegment::MapFile(const Options& o) {
  const int fd = open(o.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment file '", o.file, "': cannot open it: ", std::strerror(errno)));
  }
  auto fail = [&](absl::Status st) {
    close(fd);
    return st;
  };
  // One process at a time: a second node on the same file would write into the first one's
  // objects. The lock goes with the descriptor, which the segment keeps (and with the process).
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "segment file '", o.file, "' is in use by another process (",
        errno == EWOULDBLOCK ? "another granary_node holds its lock" : std::strerror(errno),
        "): give each node a file of its own")));
  }
  struct stat st = {};
  struct statfs fs = {};
  if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0) {
    return fail(absl::InternalError(
        absl::StrCat("segment file '", o.file, "': stat failed: ", std::strerror(errno))));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("segment file '", o.file, "' is not a regular file")));
  }
  const bool hugetlb = fs.f_type == HUGETLBFS_MAGIC;
  if (hugetlb && o.size % static_cast<uint64_t>(fs.f_bsize) != 0) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("segment file '", o.file, "' is on hugetlbfs, whose pages are ",
                     common::FormatSize(fs.f_bsize), ": the segment size ",
                     common::FormatSize(o.size), " must be a multiple of that")));
  }
  if (st.st_size != 0 && static_cast<uint64_t>(st.st_size) != o.size) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "segment file '", o.file, "' holds ", common::FormatSize(st.st_size), " (", st.st_size,
        " bytes) of a previous run, but the segment size is ", common::FormatSize(o.size), " (",
        o.size,
        " bytes): start with the size it was made with, or remove the file (and its .journal) "
        "to start empty")));
  }
  reused_ = st.st_size != 0;
  if (!reused_) {
    if (ftruncate(fd, static_cast<off_t>(o.size)) != 0) {
      return fail(absl::ResourceExhaustedError(
          absl::StrCat("segment file '", o.file, "': cannot size it to ",
                       common::FormatSize(o.size), ": ", std::strerror(errno))));
    }
    // Reserve the space now (tmpfs and hugetlbfs allocate on first touch otherwise, and a full
    // file system would kill the node with SIGBUS on the data path).
    if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(o.size)); err != 0) {
      ftruncate(fd, 0);
      return fail(absl::ResourceExhaustedError(
          absl::StrCat("segment file '", o.file, "': cannot reserve ", common::FormatSize(o.size),
                       ": ", std::strerror(err))));
    }
  }
  void* p = mmap(nullptr, o.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("segment file '", o.file, "': cannot map ", common::FormatSize(o.size), ": ",
                     std::strerror(errno))));
  }
  file_fd_ = fd;  // holds the lock
  data_ = p;
  huge_ = hugetlb;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostSegment>> HostSegment::Create(const Options& o) {
  std::unique_ptr<HostSegment> s(new HostSegment());
  s->size_ = o.size;
  if (!o.file.empty()) {
    GRANARY_RETURN_IF_ERROR(s->MapFile(o));
    if (o.numa_node >= 0) {
      // Pages the file already has stay where they are; new ones come from the node.
      if (absl::Status st = BindToNumaNode(s->data_, o.size, o.numa_node); !st.ok()) {
        GRANARY_LOG_WARN << "segment file '" << o.file << "': " << st.message();
      }
    }
    if (o.lock && mlock(s->data_, o.size) == 0) {
      s->locked_ = true;
    } else if (o.lock) {
      GRANARY_LOG_WARN
          << "mlock of " << common::FormatSize(o.size) << " failed (" << std::strerror(errno)
          << "): the segment may be swapped; raise RLIMIT_MEMLOCK (LimitMEMLOCK=infinity)";
    }
    return s;
  }
  // A bound segment is mapped unpopulated, bound, then touched: MAP_POPULATE would fault the
  // pages in before mbind could place them. It skips hugetlb pages (their reservation is taken
  // from every node's pool at mmap, and a fault on a node without any would be SIGBUS), and
  // gets transparent huge pages where they are enabled.
  const bool bind = o.populate && o.numa_node >= 0;
  const int populate = bind ? 0 : o.populate ? MAP_POPULATE : MAP_NORESERVE;
  constexpr size_t kHuge = 2u << 20;
  if (o.huge_pages && o.populate && !bind && o.size % kHuge == 0) {
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
          "cannot map a host segment of ", common::FormatSize(o.size), ": ", std::strerror(errno)));
    }
    s->data_ = p;
    if (o.populate) madvise(p, o.size, MADV_HUGEPAGE);  // transparent huge pages if enabled
  }
  if (bind) {
    if (absl::Status st = BindToNumaNode(s->data_, o.size, o.numa_node); !st.ok()) {
      munmap(s->data_, o.size);
      s->data_ = nullptr;
      return st;
    }
    Prefault(s->data_, o.size);
  }
  if (o.lock && o.populate) {
    if (mlock(s->data_, o.size) == 0) {
      s->locked_ = true;
    } else {
      GRANARY_LOG_WARN
          << "mlock of " << common::FormatSize(o.size) << " failed (" << std::strerror(errno)
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
  if (file_fd_ >= 0) close(file_fd_);  // and its lock
}

}  // namespace granary::node
