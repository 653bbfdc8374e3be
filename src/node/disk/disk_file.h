#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "proto/disk_layout.h"

struct io_uring;

namespace granary::node {

// What a disk fault hook is asked about.
enum class DiskOp { kOpenDirect, kRead, kWrite };
const char* DiskOpName(DiskOp op);

struct DiskOptions {
  // A directory on the file system that holds the tier (ext4 or xfs on NVMe in production; any
  // file system works). The tier is one file in it, kFileName.
  std::string path;
  // The tier's bytes: a positive multiple of kDiskBlock, at most the file system's free space
  // (an existing tier file's own blocks count as free).
  uint64_t size = 0;
  // io_uring entries in flight at most per batch, 1..4096.
  int queue_depth = 64;
  // Tests only: called before each I/O (and before the O_DIRECT open); a non-zero errno fails
  // it as if the kernel had (kOpenDirect with EINVAL: the file system refuses O_DIRECT).
  std::function<int(DiskOp op, uint64_t offset, size_t bytes)> fault;
};

using proto::kDiskBlock;

// One disk tier: a preallocated file of options.size bytes under options.path, read and
// written in batches through one io_uring.
//
// - Open refuses, naming the value: an empty or missing path, a path that is not a directory
//   or not writable, a size that is zero, not a multiple of kDiskBlock, or over the free space;
//   an existing tier file of another size; a tier file another process holds (a lock). An
//   existing file of the size is kept as it is (reused()).
//   It reserves the whole size (fallocate) so that a full disk shows at start, not mid-write.
// - I/O uses O_DIRECT (no page cache: the node's memory tiers are the cache). Where the file
//   system refuses O_DIRECT, Open logs that once and the tier uses buffered I/O.
// - Read and Write run a batch of block-aligned ranges with at most queue_depth in flight,
//   resubmitting short transfers, and return when every range is done or the first failure
//   (the error names the path, the operation, the offset and the errno).
//
// Buffers: with O_DIRECT the kernel needs them kDiskBlock-aligned; AlignedBuffer gives such
// memory. Thread-safe: a batch holds the ring's mutex while it runs, so batches from several
// threads run one after another (each keeps the device's queue full on its own).
class DiskFile {
 public:
  static constexpr const char* kFileName = "granary-tier.dat";

  struct Io {
    uint64_t offset = 0;  // into the tier; a multiple of kDiskBlock
    void* data = nullptr;
    size_t bytes = 0;  // a multiple of kDiskBlock
  };

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DiskFile>> Open(DiskOptions options);
  ~DiskFile();
  DiskFile(const DiskFile&) = delete;
  DiskFile& operator=(const DiskFile&) = delete;

  [[nodiscard]] absl::Status Write(absl::Span<const Io> ios);
  [[nodiscard]] absl::Status Read(absl::Span<const Io> ios);

  const std::string& path() const { return options_.path; }
  const std::string& file() const { return file_; }
  uint64_t size() const { return options_.size; }
  // Whether I/O bypasses the page cache (O_DIRECT).
  bool direct() const { return direct_; }
  // Whether the file was there before Open (of this size): it holds a previous run's records.
  bool reused() const { return reused_; }

 private:
  DiskFile(DiskOptions options, std::string file, int fd, bool direct);
  absl::Status Run(DiskOp op, absl::Span<const Io> ios);
  absl::Status Check(DiskOp op, const Io& io) const;
  absl::Status Failure(DiskOp op, uint64_t offset, int err) const;
  absl::Status Broken(DiskOp op, int err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DiskOptions options_;
  const std::string file_;
  const int fd_;
  const bool direct_;
  bool reused_ = false;  // set by Open
  common::Mutex mu_;
  std::unique_ptr<io_uring> ring_ ABSL_GUARDED_BY(mu_);
};

// kDiskBlock-aligned memory (free with std::free), for DiskFile's buffers.
struct FreeDeleter {
  void operator()(void* p) const;
};
using AlignedBuffer = std::unique_ptr<unsigned char[], FreeDeleter>;
[[nodiscard]] AlignedBuffer NewAlignedBuffer(size_t bytes);

using proto::DiskBlocks;

}  // namespace granary::node
