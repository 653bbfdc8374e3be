// The disk tier's file layer on real file systems: the machine's own (a directory under the
// test's temp dir, O_DIRECT) and a tmpfs mounted by the test (root only; skipped otherwise,
// saying so): refusals that name the bad value, round trips from one block to 64 MiB at queue
// depths 1 and 64, the buffered fallback, injected faults, a full file system and a reopen.

#include "node/disk/disk_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/text.h"
#include "tests/unit/node/disk_test_util.h"

namespace granary::node {
namespace {

using testing::Has;
using testing::Random;
using testing::TempDir;
using testing::Tmpfs;

DiskOptions Options(const std::string& path, uint64_t size, int depth = 64) {
  DiskOptions o;
  o.path = path;
  o.size = size;
  o.queue_depth = depth;
  return o;
}

TEST(DiskFile, RefusesBadOptionsNamingThem) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const auto refused = [](DiskOptions o, const std::string& named) {
    absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(std::move(o));
    ASSERT_FALSE(d.ok());
    EXPECT_TRUE(Has(d.status().ToString(), named)) << d.status();
  };
  refused(Options("", 1 << 20), "disk_path is empty");
  refused(Options(dir.path() + "/missing", 1 << 20), dir.path() + "/missing");
  const std::string file = dir.path() + "/plain";
  ASSERT_EQ(::close(::creat(file.c_str(), 0600)), 0);
  refused(Options(file, 1 << 20), file + " is not a directory");
  refused(Options(dir.path(), 0), "disk_size 0");
  refused(Options(dir.path(), 1000), "disk_size 1000");
  refused(Options(dir.path(), 1 << 20, 0), "queue depth 0");
  refused(Options(dir.path(), 1 << 20, 5000), "queue depth 5000");
  // Nothing was left behind by a refusal.
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + DiskFile::kFileName));
}

TEST(DiskFile, RefusesAReadOnlyDirectoryAndASizeOverTheFreeSpace) {
  Tmpfs ro(1 << 20, /*read_only=*/true);
  REQUIRE_TMPFS(ro);
  absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(Options(ro.path(), 64 << 10));
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Has(d.status().ToString(), ro.path() + " is not writable")) << d.status();

  Tmpfs small(8 << 20);
  REQUIRE_TMPFS(small);
  d = DiskFile::Open(Options(small.path(), 16 << 20));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      Has(d.status().ToString(), "disk_size 16 MB is over the free space of " + small.path()))
      << d.status();
  // A tier that fits, reopened: its own blocks count as free.
  d = DiskFile::Open(Options(small.path(), 6 << 20));
  ASSERT_TRUE(d.ok()) << d.status();
  d->reset();
  d = DiskFile::Open(Options(small.path(), 6 << 20));
  EXPECT_TRUE(d.ok()) << d.status();
}

// Writes `sizes` (each rounded to blocks) back to back from offset 0 in one batch, reads them
// back in another batch into fresh buffers and compares.
void RoundTrip(DiskFile& disk, const std::vector<size_t>& sizes, uint32_t seed) {
  std::vector<AlignedBuffer> out, in;
  std::vector<DiskFile::Io> writes, reads;
  std::vector<std::vector<unsigned char>> want;
  uint64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t bytes = DiskBlocks(sizes[i]);
    want.push_back(Random(bytes, seed + static_cast<uint32_t>(i)));
    out.push_back(NewAlignedBuffer(bytes));
    in.push_back(NewAlignedBuffer(bytes));
    std::memcpy(out.back().get(), want.back().data(), bytes);
    std::memset(in.back().get(), 0xEE, bytes);
    writes.push_back({offset, out.back().get(), bytes});
    reads.push_back({offset, in.back().get(), bytes});
    offset += bytes;
  }
  ASSERT_TRUE(disk.Write(writes).ok());
  ASSERT_TRUE(disk.Read(reads).ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(std::memcmp(in[i].get(), want[i].data(), want[i].size()), 0)
        << "range " << i << " of " << want[i].size() << " bytes differs";
  }
}

void EverySize(const std::string& path, bool expect_direct) {
  for (int depth : {1, 64}) {
    absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(Options(path, 96 << 20, depth));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ((*d)->direct(), expect_direct);
    RoundTrip(**d, {1, 4096, 4097, 65536, 1 << 20}, 1);
    RoundTrip(**d, {64 << 20}, 2);
    RoundTrip(**d, std::vector<size_t>(200, 64 << 10), 3);  // more ranges than the depth
  }
}

TEST(DiskFile, RoundTripsOnTheMachinesFileSystemWithODirect) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  EverySize(dir.path(), /*expect_direct=*/true);
}

TEST(DiskFile, RoundTripsOnATmpfs) {
  Tmpfs fs(200 << 20);
  REQUIRE_TMPFS(fs);
  // tmpfs takes O_DIRECT since Linux 6.6; older kernels fall back to buffered I/O.
  absl::StatusOr<std::unique_ptr<DiskFile>> probe = DiskFile::Open(Options(fs.path(), 4096));
  ASSERT_TRUE(probe.ok()) << probe.status();
  const bool direct = (*probe)->direct();
  probe->reset();
  // A tier file of another size is refused: the probe's goes first.
  ASSERT_EQ(std::remove((fs.path() + "/" + DiskFile::kFileName).c_str()), 0);
  EverySize(fs.path(), direct);
}

TEST(DiskFile, UsesBufferedIoWhereTheFileSystemRefusesODirectAndSaysSoOnce) {
  TempDir dir;
  DiskOptions o = Options(dir.path(), 8 << 20);
  int opens = 0;
  o.fault = [&](DiskOp op, uint64_t, size_t) {
    if (op != DiskOp::kOpenDirect) return 0;
    ++opens;
    return EINVAL;
  };
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(opens, 1);
  EXPECT_FALSE((*d)->direct());
  RoundTrip(**d, {4096, 1 << 20, 3 << 20}, 4);
  const std::string line = "the file system refuses O_DIRECT; using buffered I/O";
  EXPECT_TRUE(Has(log, dir.path() + ": " + line)) << log;
  EXPECT_EQ(log.find(line), log.rfind(line)) << "said more than once: " << log;
}

TEST(DiskFile, AFaultFailsItsBatchNamingTheFileOffsetAndError) {
  TempDir dir;
  DiskOptions o = Options(dir.path(), 8 << 20, 4);
  int fail_at = -1;  // the offset whose I/O fails, -1: none
  int err = EIO;
  DiskOp fail_op = DiskOp::kWrite;
  o.fault = [&](DiskOp op, uint64_t offset, size_t) {
    return op == fail_op && static_cast<int64_t>(offset) == fail_at ? err : 0;
  };
  absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<AlignedBuffer> bufs;
  std::vector<DiskFile::Io> ios;
  for (int i = 0; i < 16; ++i) {
    bufs.push_back(NewAlignedBuffer(4096));
    std::memset(bufs.back().get(), i, 4096);
    ios.push_back({static_cast<uint64_t>(i) * 4096, bufs.back().get(), 4096});
  }
  fail_at = 9 * 4096;
  absl::Status s = (*d)->Write(ios);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  const std::string file = dir.path() + "/" + DiskFile::kFileName;
  EXPECT_TRUE(Has(s.ToString(), file + ": write at offset 36864: Input/output error")) << s;
  err = ENOSPC;
  s = (*d)->Write(ios);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // The ring is whole after a failed batch: the same batch without the fault, then a read
  // fault, then a clean read.
  fail_at = -1;
  ASSERT_TRUE((*d)->Write(ios).ok());
  fail_op = DiskOp::kRead;
  fail_at = 0;
  err = EIO;
  s = (*d)->Read(ios);
  EXPECT_TRUE(Has(s.ToString(), "read at offset 0: Input/output error")) << s;
  fail_at = -1;
  for (auto& b : bufs) std::memset(b.get(), 0xFF, 4096);
  ASSERT_TRUE((*d)->Read(ios).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bufs[i][4095], i);
}

TEST(DiskFile, RefusesRangesNotInWholeBlocksOrPastTheEnd) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(Options(dir.path(), 1 << 20));
  ASSERT_TRUE(d.ok()) << d.status();
  AlignedBuffer buf = NewAlignedBuffer(8192);
  const auto refused = [&](DiskFile::Io io, const std::string& named) {
    absl::Status s = (*d)->Write({io});
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(Has(s.ToString(), named)) << s;
  };
  refused({100, buf.get(), 4096}, "at offset 100 is not in whole 4096-byte blocks");
  refused({0, buf.get(), 100}, "write of 100 bytes");
  refused({0, buf.get(), 0}, "write of 0 bytes");
  refused({1 << 20, buf.get(), 4096}, "ends past its size 1048576");
  refused({0, buf.get() + 1, 4096}, "is not 4096-byte aligned");
}

TEST(DiskFile, KeepsItsBytesAcrossAReopen) {
  TempDir dir;
  const std::vector<unsigned char> want = Random(1 << 20, 9);
  {
    absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(Options(dir.path(), 4 << 20));
    ASSERT_TRUE(d.ok()) << d.status();
    AlignedBuffer buf = NewAlignedBuffer(want.size());
    std::memcpy(buf.get(), want.data(), want.size());
    ASSERT_TRUE((*d)->Write({{2 << 20, buf.get(), want.size()}}).ok());
  }
  absl::StatusOr<std::unique_ptr<DiskFile>> d = DiskFile::Open(Options(dir.path(), 4 << 20));
  ASSERT_TRUE(d.ok()) << d.status();
  AlignedBuffer back = NewAlignedBuffer(want.size());
  ASSERT_TRUE((*d)->Read({{2 << 20, back.get(), want.size()}}).ok());
  EXPECT_EQ(std::memcmp(back.get(), want.data(), want.size()), 0);
}

}  // namespace
}  // namespace granary::node
