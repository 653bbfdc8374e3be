#include "node/disk/disk_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"

namespace granary::node {

const char* DiskOpName(DiskOp op) {
  switch (op) {
    case DiskOp::kOpenDirect:
      return "open (O_DIRECT)";
    case DiskOp::kRead:
      return "read";
    case DiskOp::kWrite:
      return "write";
  }
  return "?";
}

void FreeDeleter::operator()(void* p) const { std::free(p); }

AlignedBuffer NewAlignedBuffer(size_t bytes) {
  void* p = std::aligned_alloc(kDiskBlock, DiskBlocks(bytes == 0 ? 1 : bytes));
  return AlignedBuffer(static_cast<unsigned char*>(p));
}

namespace {

std::string Errno(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// The bytes a file already occupies on disk (st_blocks is in 512-byte units).
uint64_t AllocatedBytes(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

absl::Status CheckOptions(const DiskOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError("disk_path is empty");
  struct stat st {};
  if (::stat(o.path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk_path ", o.path, ": ", Errno(errno), "; it must be a directory"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("disk_path ", o.path, " is not a directory"));
  }
  if (::access(o.path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("disk_path ", o.path, " is not writable: ", Errno(errno)));
  }
  if (o.size == 0 || o.size % kDiskBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat("disk_size ", o.size, " for ", o.path,
                                                   " must be a positive multiple of ", kDiskBlock,
                                                   " bytes"));
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk queue depth ", o.queue_depth, " for ", o.path, " must be 1..4096"));
  }
  struct statvfs vfs {};
  if (::statvfs(o.path.c_str(), &vfs) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk_path ", o.path, ": statvfs: ", Errno(errno)));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize +
                              AllocatedBytes(o.path + "/" + DiskFile::kFileName);
  if (o.size > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("disk_size ", common::FormatSize(o.size),
                                                     " is over the free space of ", o.path, " (",
                                                     common::FormatSize(free_bytes), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskFile>> DiskFile::Open(DiskOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::string file = options.path + "/" + kFileName;
  // A file a previous run left, of this size, holds that run's records (a restarted node
  // re-adopts them); one of another size is refused rather than read as records or cut.
  struct stat before {};
  const bool existed = ::stat(file.c_str(), &before) == 0;
  if (existed && static_cast<uint64_t>(before.st_size) != options.size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "disk tier ", file, " holds ", before.st_size, " bytes, but --disk_size asks for ",
        options.size, ": give its size, or remove the file to start the tier empty"));
  }
  bool direct = true;
  int fd = -1;
  const int injected = options.fault ? options.fault(DiskOp::kOpenDirect, 0, 0) : 0;
  if (injected == 0) {
    fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
  } else {
    errno = injected;
  }
  if (fd < 0 && errno == EINVAL) {
    // The file system has no O_DIRECT (some FUSE and network file systems).
    GRANARY_LOG_WARN << "disk tier " << options.path
                     << ": the file system refuses O_DIRECT; using buffered I/O";
    direct = false;
    fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("disk tier ", file, ": open: ", Errno(errno)));
  }
  // One node per tier file: a second one would write into the first one's records.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("disk tier ", file, " is in use by another process (", Errno(err), ")"));
  }
  // Reserve every block now: a full disk fails here, naming it, and never mid-write.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(options.size)); err != 0) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "disk tier ", file, ": reserving ", common::FormatSize(options.size), ": ", Errno(err)));
  }
  std::unique_ptr<DiskFile> disk(new DiskFile(std::move(options), std::move(file), fd, direct));
  disk->reused_ = existed;
  common::MutexLock lock(&disk->mu_);
  if (int err = io_uring_queue_init(static_cast<unsigned>(disk->options_.queue_depth),
                                    disk->ring_.get(), 0);
      err < 0) {
    disk->ring_.reset();
    return absl::UnavailableError(
        absl::StrCat("disk tier ", disk->file_, ": io_uring_queue_init: ", Errno(-err)));
  }
  return disk;
}

DiskFile::DiskFile(DiskOptions options, std::string file, int fd, bool direct)
    : options_(std::move(options)),
      file_(std::move(file)),
      fd_(fd),
      direct_(direct),
      ring_(std::make_unique<io_uring>()) {}

DiskFile::~DiskFile() {
  {
    common::MutexLock lock(&mu_);
    if (ring_) io_uring_queue_exit(ring_.get());
  }
  ::close(fd_);
}

absl::Status DiskFile::Write(absl::Span<const Io> ios) { return Run(DiskOp::kWrite, ios); }
absl::Status DiskFile::Read(absl::Span<const Io> ios) { return Run(DiskOp::kRead, ios); }

absl::Status DiskFile::Failure(DiskOp op, uint64_t offset, int err) const {
  const std::string what =
      absl::StrCat("disk tier ", file_, ": ", DiskOpName(op), " at offset ", offset, ": ");
  if (err == ENOSPC) return absl::ResourceExhaustedError(what + Errno(err));
  return absl::UnavailableError(what + Errno(err));
}

// The ring failed as a whole (not one transfer): what it still holds cannot be reaped, so it
// is closed and every later batch fails.
absl::Status DiskFile::Broken(DiskOp op, int err) {
  io_uring_queue_exit(ring_.get());
  ring_.reset();
  GRANARY_LOG_ERROR << "disk tier " << file_ << ": io_uring failed (" << Errno(err)
                    << "); the tier takes no more I/O";
  return absl::UnavailableError(
      absl::StrCat("disk tier ", file_, ": ", DiskOpName(op), ": io_uring: ", Errno(err)));
}

absl::Status DiskFile::Check(DiskOp op, const Io& io) const {
  if (io.offset % kDiskBlock != 0 || io.bytes % kDiskBlock != 0 || io.bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier ", file_, ": ", DiskOpName(op), " of ", io.bytes, " bytes at offset ", io.offset,
        " is not in whole ", kDiskBlock, "-byte blocks"));
  }
  if (io.offset > options_.size || io.bytes > options_.size - io.offset) {
    return absl::OutOfRangeError(absl::StrCat("disk tier ", file_, ": ", DiskOpName(op), " of ",
                                              io.bytes, " bytes at offset ", io.offset,
                                              " ends past its size ", options_.size));
  }
  if (io.data == nullptr || reinterpret_cast<uintptr_t>(io.data) % kDiskBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier ", file_, ": ", DiskOpName(op), " buffer 0x",
        absl::Hex(reinterpret_cast<uintptr_t>(io.data)), " is not ", kDiskBlock, "-byte aligned"));
  }
  return absl::OkStatus();
}

// Keeps up to queue_depth ranges in flight; a short transfer is resubmitted for its rest. On
// the first failure no new range is submitted, the ones in flight are drained, and the
// failure is returned.
absl::Status DiskFile::Run(DiskOp op, absl::Span<const Io> ios) {
  for (const Io& io : ios) {
    if (absl::Status s = Check(op, io); !s.ok()) return s;
  }
  struct Pending {
    uint64_t offset;
    unsigned char* data;
    size_t left;
  };
  std::vector<Pending> pending;
  pending.reserve(ios.size());
  for (const Io& io : ios)
    pending.push_back({io.offset, static_cast<unsigned char*>(io.data), io.bytes});
  common::MutexLock lock(&mu_);
  if (!ring_) return absl::FailedPreconditionError("disk tier " + file_ + " has no ring");
  io_uring* ring = ring_.get();
  absl::Status failed;
  size_t next = 0;  // the next range not yet submitted
  size_t in_flight = 0;
  std::vector<size_t> resubmit;
  const auto submit = [&](size_t i) {
    Pending& p = pending[i];
    if (options_.fault) {
      if (int err = options_.fault(op, p.offset, p.left); err != 0) {
        if (failed.ok()) failed = Failure(op, p.offset, err);
        return;
      }
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    const unsigned bytes = static_cast<unsigned>(std::min<size_t>(p.left, 1u << 30));
    if (op == DiskOp::kWrite) {
      io_uring_prep_write(sqe, fd_, p.data, bytes, static_cast<off_t>(p.offset));
    } else {
      io_uring_prep_read(sqe, fd_, p.data, bytes, static_cast<off_t>(p.offset));
    }
    io_uring_sqe_set_data64(sqe, i);
    ++in_flight;
  };
  const size_t depth = static_cast<size_t>(options_.queue_depth);
  while ((failed.ok() && (next < pending.size() || !resubmit.empty())) || in_flight > 0) {
    while (failed.ok() && in_flight < depth && !resubmit.empty()) {
      submit(resubmit.back());
      resubmit.pop_back();
    }
    while (failed.ok() && in_flight < depth && next < pending.size()) submit(next++);
    if (in_flight == 0) break;
    if (int err = io_uring_submit(ring); err < 0) return Broken(op, -err);
    io_uring_cqe* cqe = nullptr;
    int err = io_uring_wait_cqe(ring, &cqe);
    if (err == -EINTR) continue;
    if (err < 0) return Broken(op, -err);
    const size_t i = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    --in_flight;
    Pending& p = pending[i];
    if (res < 0) {
      if (failed.ok()) failed = Failure(op, p.offset, -res);
    } else if (res == 0) {
      // A read past the end of the file's data or a write that made no progress.
      if (failed.ok()) failed = Failure(op, p.offset, op == DiskOp::kRead ? EIO : ENOSPC);
    } else {
      p.offset += static_cast<uint64_t>(res);
      p.data += res;
      p.left -= static_cast<size_t>(res);
      if (p.left > 0) resubmit.push_back(i);
    }
  }
  return failed;
}

}  // namespace granary::node
