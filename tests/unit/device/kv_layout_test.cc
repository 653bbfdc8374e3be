// KV-layout operations: the CPU reference against an independent indexing of the layout, and
// the GPU versions against the CPU reference on random inputs. GPU tests skip without a device.

#include "device/kv_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/device_backend.h"
#include "device/kv_regions.h"

namespace granary::device {
namespace {

using Bytes = std::vector<unsigned char>;

constexpr uint64_t kSeed = 20260611;

Bytes RandomBytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (auto& c : b) c = static_cast<unsigned char>(rng());
  return b;
}

// n distinct block ids from [0, num_blocks), in random order.
std::vector<int32_t> DistinctIds(std::mt19937_64& rng, int64_t num_blocks, int n) {
  std::vector<int32_t> all(num_blocks);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

PagedKvLayout Layout(int64_t num_blocks, int64_t block_size, int64_t num_heads, int64_t head_dim,
                     int64_t elem_bytes, int64_t stride = 0) {
  PagedKvLayout l;
  l.num_blocks = num_blocks;
  l.block_size = block_size;
  l.num_heads = num_heads;
  l.head_dim = head_dim;
  l.elem_bytes = elem_bytes;
  l.block_stride_bytes = stride;
  return l;
}

size_t CacheBytes(const PagedKvLayout& l) {
  return static_cast<size_t>(l.num_blocks - 1) * l.BlockStride() + l.BlockBytes();
}

// The gathered buffer computed element by element from the 4-D shape, without BlockBytes(),
// BlockStride() or memcpy of whole blocks: out[i][kv][t][h][d] = cache_kv[id_i][t][h][d], with
// the dense cache index (((id * block_size + t) * num_heads + h) * head_dim + d).
Bytes ExpectedGather(const PagedKvLayout& l, const Bytes& k, const Bytes& v,
                     const std::vector<int32_t>& ids) {
  Bytes out;
  for (int32_t id : ids) {
    for (const Bytes* cache : {&k, &v}) {
      for (int64_t t = 0; t < l.block_size; ++t) {
        for (int64_t h = 0; h < l.num_heads; ++h) {
          for (int64_t d = 0; d < l.head_dim; ++d) {
            const int64_t elem = ((id * l.block_size + t) * l.num_heads + h) * l.head_dim + d;
            for (int64_t e = 0; e < l.elem_bytes; ++e) {
              out.push_back((*cache)[elem * l.elem_bytes + e]);
            }
          }
        }
      }
    }
  }
  return out;
}

// ---- Layout and argument validation -------------------------------------------------------

TEST(PagedKvLayout, ValidateNamesTheBadField) {
  EXPECT_TRUE(Layout(4, 16, 8, 128, 2).Validate().ok());
  struct Case {
    PagedKvLayout layout;
    std::string expected;
  };
  for (const Case& c : {Case{Layout(0, 16, 8, 128, 2), "num_blocks must be positive, got 0"},
                        Case{Layout(4, -1, 8, 128, 2), "block_size must be positive, got -1"},
                        Case{Layout(4, 16, 0, 128, 2), "num_heads must be positive, got 0"},
                        Case{Layout(4, 16, 8, 0, 2), "head_dim must be positive, got 0"},
                        Case{Layout(4, 16, 8, 128, 0), "elem_bytes must be positive, got 0"},
                        Case{Layout(4, 16, 8, 128, 2, 100), "got 100"},
                        Case{Layout(4, 16, 8, 128, 2, -5), "got -5"},
                        Case{Layout(4, 1 << 30, 1 << 30, 1 << 30, 2), "overflow"},
                        Case{Layout(int64_t{1} << 40, 1 << 20, 1, 1, 8), "overflow"}}) {
    absl::Status s = c.layout.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s;
  }
}

TEST(PagedKvLayout, Sizes) {
  const PagedKvLayout dense = Layout(10, 16, 8, 128, 2);
  EXPECT_EQ(dense.BlockBytes(), 16u * 8 * 128 * 2);
  EXPECT_EQ(dense.BlockStride(), dense.BlockBytes());
  EXPECT_EQ(dense.GatheredBytes(3), 6 * dense.BlockBytes());
  EXPECT_EQ(Layout(10, 16, 8, 128, 2, 65536).BlockStride(), 65536u);
}

TEST(KvLayoutCpu, RejectsOutOfRangeIdsNamingThem) {
  const PagedKvLayout l = Layout(8, 2, 2, 4, 2);
  Bytes k(CacheBytes(l)), v(CacheBytes(l)), out(l.GatheredBytes(3));
  for (int32_t bad : {8, -1, 1 << 30}) {
    const std::vector<int32_t> ids = {0, 5, bad};
    absl::Status s = GatherBlocksCpu(l, k.data(), v.data(), ids.data(), 3, out.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("block_ids[2] = " + std::to_string(bad)), std::string::npos) << s;
    EXPECT_EQ(ScatterBlocksCpu(l, out.data(), ids.data(), 3, k.data(), v.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(KvLayoutCpu, RejectsBadCountsAndNullPointers) {
  const PagedKvLayout l = Layout(8, 2, 2, 4, 2);
  Bytes k(CacheBytes(l)), v(CacheBytes(l)), out(l.GatheredBytes(1));
  const int32_t id = 1;
  EXPECT_EQ(GatherBlocksCpu(l, k.data(), v.data(), &id, -1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherBlocksCpu(l, k.data(), v.data(), nullptr, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherBlocksCpu(l, nullptr, v.data(), &id, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherBlocksCpu(l, k.data(), v.data(), &id, 1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterBlocksCpu(l, out.data(), &id, 1, k.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // n == 0 touches nothing, so null pointers are fine.
  EXPECT_TRUE(GatherBlocksCpu(l, nullptr, nullptr, nullptr, 0, nullptr).ok());
  EXPECT_EQ(GatherBlocksCpu(Layout(0, 2, 2, 4, 2), k.data(), v.data(), &id, 1, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvLayoutCpu, ScatterRejectsDuplicateIdsGatherAllowsThem) {
  const PagedKvLayout l = Layout(8, 2, 2, 4, 2);
  Bytes k(CacheBytes(l)), v(CacheBytes(l)), buf(l.GatheredBytes(3));
  const std::vector<int32_t> ids = {3, 1, 3};
  EXPECT_TRUE(GatherBlocksCpu(l, k.data(), v.data(), ids.data(), 3, buf.data()).ok());
  absl::Status s = ScatterBlocksCpu(l, buf.data(), ids.data(), 3, k.data(), v.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block id 3 is listed twice (block_ids[0] and block_ids[2])"),
            std::string::npos)
      << s;
}

// ---- CPU reference ------------------------------------------------------------------------

TEST(KvLayoutCpu, GatherMatchesIndependentIndexing) {
  std::mt19937_64 rng(kSeed);
  for (const PagedKvLayout& l :
       {Layout(16, 4, 2, 8, 2), Layout(7, 3, 5, 3, 1), Layout(32, 16, 4, 64, 2),
        Layout(5, 1, 1, 1, 4), Layout(9, 2, 3, 7, 8)}) {
    const Bytes k = RandomBytes(rng, CacheBytes(l));
    const Bytes v = RandomBytes(rng, CacheBytes(l));
    // Gather may list a block twice; include a repeat.
    std::vector<int32_t> ids = DistinctIds(rng, l.num_blocks, std::min<int>(l.num_blocks, 6));
    ids.push_back(ids.front());
    Bytes out(l.GatheredBytes(ids.size()), 0xEE);
    ASSERT_TRUE(GatherBlocksCpu(l, k.data(), v.data(), ids.data(), ids.size(), out.data()).ok());
    EXPECT_EQ(out, ExpectedGather(l, k, v, ids)) << "head_dim=" << l.head_dim;
  }
}

TEST(KvLayoutCpu, GatherFromInterleavedCacheWithStride) {
  // One tensor [num_blocks, 2, block_size, num_heads, head_dim]: K and V of a block adjacent.
  std::mt19937_64 rng(kSeed + 1);
  const PagedKvLayout dense = Layout(12, 4, 2, 8, 2);
  const size_t block = dense.BlockBytes();
  const Bytes k = RandomBytes(rng, CacheBytes(dense));
  const Bytes v = RandomBytes(rng, CacheBytes(dense));
  Bytes interleaved(2 * block * dense.num_blocks);
  for (int64_t b = 0; b < dense.num_blocks; ++b) {
    std::memcpy(&interleaved[2 * b * block], &k[b * block], block);
    std::memcpy(&interleaved[(2 * b + 1) * block], &v[b * block], block);
  }
  PagedKvLayout strided = dense;
  strided.block_stride_bytes = 2 * block;
  ASSERT_TRUE(strided.Validate().ok());
  const std::vector<int32_t> ids = {11, 0, 4, 7};
  Bytes out(strided.GatheredBytes(ids.size()));
  ASSERT_TRUE(GatherBlocksCpu(strided, interleaved.data(), interleaved.data() + block, ids.data(),
                              ids.size(), out.data())
                  .ok());
  EXPECT_EQ(out, ExpectedGather(dense, k, v, ids));

  // Scatter back into a zeroed interleaved tensor restores exactly the listed blocks.
  Bytes restored(interleaved.size(), 0);
  ASSERT_TRUE(ScatterBlocksCpu(strided, out.data(), ids.data(), ids.size(), restored.data(),
                               restored.data() + block)
                  .ok());
  for (int64_t b = 0; b < dense.num_blocks; ++b) {
    const bool listed = std::find(ids.begin(), ids.end(), b) != ids.end();
    const Bytes zeros(2 * block, 0);
    EXPECT_EQ(0, std::memcmp(&restored[2 * b * block],
                             listed ? &interleaved[2 * b * block] : zeros.data(), 2 * block))
        << "block " << b;
  }
}

TEST(KvLayoutCpu, GatherScatterRoundTripsRandomData) {
  std::mt19937_64 rng(kSeed + 2);
  for (int trial = 0; trial < 20; ++trial) {
    const PagedKvLayout l =
        Layout(1 + rng() % 40, 1 + rng() % 8, 1 + rng() % 4, 1 + rng() % 16, 1 + rng() % 4);
    const Bytes k = RandomBytes(rng, CacheBytes(l));
    const Bytes v = RandomBytes(rng, CacheBytes(l));
    const std::vector<int32_t> ids = DistinctIds(rng, l.num_blocks, rng() % (l.num_blocks + 1));
    const int n = static_cast<int>(ids.size());

    // Gather from (k, v), scatter into zeroed caches: listed blocks equal, the rest untouched.
    Bytes buf(l.GatheredBytes(n));
    ASSERT_TRUE(GatherBlocksCpu(l, k.data(), v.data(), ids.data(), n, buf.data()).ok());
    Bytes k2(k.size(), 0), v2(v.size(), 0);
    ASSERT_TRUE(ScatterBlocksCpu(l, buf.data(), ids.data(), n, k2.data(), v2.data()).ok());
    const size_t block = l.BlockBytes();
    for (int64_t b = 0; b < l.num_blocks; ++b) {
      const bool listed = std::find(ids.begin(), ids.end(), b) != ids.end();
      for (auto [orig, copy] : {std::pair{&k, &k2}, std::pair{&v, &v2}}) {
        const Bytes expected =
            listed ? Bytes(orig->begin() + b * block, orig->begin() + (b + 1) * block)
                   : Bytes(block, 0);
        EXPECT_EQ(Bytes(copy->begin() + b * block, copy->begin() + (b + 1) * block), expected)
            << "trial " << trial << " block " << b;
      }
    }

    // Scatter a random buffer, gather it back: the same bytes.
    const Bytes random = RandomBytes(rng, l.GatheredBytes(n));
    ASSERT_TRUE(ScatterBlocksCpu(l, random.data(), ids.data(), n, k2.data(), v2.data()).ok());
    Bytes back(random.size());
    ASSERT_TRUE(GatherBlocksCpu(l, k2.data(), v2.data(), ids.data(), n, back.data()).ok());
    EXPECT_EQ(back, random) << "trial " << trial;
  }
}

// Non-overlapping random regions between two arenas, with random sizes (some 0, some above
// kMaxChunkBytes) and random misalignment.
std::vector<CopyRegion> RandomRegions(std::mt19937_64& rng, const unsigned char* src_base,
                                      unsigned char* dst_base, size_t arena, int n) {
  std::vector<CopyRegion> regions;
  size_t dst_off = 0;
  for (int i = 0; i < n; ++i) {
    size_t bytes = rng() % 4096;
    if (rng() % 10 == 0) bytes = 0;
    if (rng() % 25 == 0) bytes = internal::kMaxChunkBytes + rng() % (3 * internal::kMaxChunkBytes);
    if (rng() % 2 == 0) bytes &= ~size_t{15};
    size_t gap = rng() % 2 == 0 ? (16 - dst_off % 16) % 16 : rng() % 7;
    if (dst_off + gap + bytes > arena) break;
    dst_off += gap;
    size_t src_off = rng() % (arena - bytes + 1);
    if (rng() % 2 == 0) src_off &= ~size_t{15};
    regions.push_back({src_base + src_off, dst_base + dst_off, bytes});
    dst_off += bytes;
  }
  return regions;
}

TEST(KvLayoutCpu, BatchCopyCopiesEveryRegion) {
  std::mt19937_64 rng(kSeed + 3);
  const size_t arena = 1 << 20;
  const Bytes src = RandomBytes(rng, arena);
  Bytes dst(arena, 0);
  const std::vector<CopyRegion> regions = RandomRegions(rng, src.data(), dst.data(), arena, 300);
  ASSERT_GT(regions.size(), 50u);
  ASSERT_TRUE(BatchCopyCpu(regions.data(), regions.size()).ok());
  Bytes expected(arena, 0);
  for (const CopyRegion& r : regions) {
    const size_t s = static_cast<const unsigned char*>(r.src) - src.data();
    const size_t d = static_cast<unsigned char*>(r.dst) - dst.data();
    for (size_t i = 0; i < r.bytes; ++i) expected[d + i] = src[s + i];
  }
  EXPECT_EQ(dst, expected);
}

TEST(KvLayoutCpu, BatchCopyRejectsNullRegionPointersNamingTheRegion) {
  unsigned char a[8] = {}, b[8] = {};
  const std::vector<CopyRegion> regions = {{a, b, 8}, {nullptr, nullptr, 0}, {a, nullptr, 4}};
  absl::Status s = BatchCopyCpu(regions.data(), regions.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("regions[2] has bytes=4 but a null dst"), std::string::npos) << s;
  EXPECT_EQ(BatchCopyCpu(nullptr, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchCopyCpu(regions.data(), -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BatchCopyCpu(nullptr, 0).ok());
}

TEST(KvLayoutCpu, SplitIntoChunksCoversEachRegionInOrder) {
  std::mt19937_64 rng(kSeed + 4);
  const size_t arena = 1 << 20;
  const Bytes src = RandomBytes(rng, arena);
  Bytes dst(arena, 0), dst_chunked(arena, 0);
  const std::vector<CopyRegion> regions = RandomRegions(rng, src.data(), dst.data(), arena, 200);
  const size_t max_chunk = 1000;  // odd on purpose: later chunks start unaligned
  const std::vector<CopyRegion> chunks =
      internal::SplitIntoChunks(regions.data(), regions.size(), max_chunk);
  size_t total = 0, chunk_total = 0, expected_count = 0;
  for (const CopyRegion& r : regions) {
    total += r.bytes;
    expected_count += (r.bytes + max_chunk - 1) / max_chunk;
  }
  EXPECT_EQ(chunks.size(), expected_count);
  for (const CopyRegion& c : chunks) {
    EXPECT_GT(c.bytes, 0u);
    EXPECT_LE(c.bytes, max_chunk);
    chunk_total += c.bytes;
  }
  EXPECT_EQ(chunk_total, total);
  // Running the chunks (redirected to a second arena) gives what running the regions gives.
  ASSERT_TRUE(BatchCopyCpu(regions.data(), regions.size()).ok());
  std::vector<CopyRegion> moved = chunks;
  for (CopyRegion& c : moved) {
    c.dst = dst_chunked.data() + (static_cast<unsigned char*>(c.dst) - dst.data());
  }
  ASSERT_TRUE(BatchCopyCpu(moved.data(), moved.size()).ok());
  EXPECT_EQ(dst_chunked, dst);
}

// ---- Availability (stub and real build alike) ---------------------------------------------

TEST(CudaAvailability, ReportsAConsistentPicture) {
  const int count = DeviceCount();
  EXPECT_GE(count, 0);
  EXPECT_EQ(Available(), count > 0);
  if (count == 0) {
    EXPECT_FALSE(Available());
  }
  // Only the fake has devices without CUDA (GRANARY_DEVICE_BACKEND=fake:
  // device_kv_layout_fake_test).
  if (!BuiltWithCuda() && ActiveBackendName() != "fake") {
    EXPECT_EQ(count, 0);
  }
#ifdef GRANARY_HAVE_CUDA
  EXPECT_TRUE(BuiltWithCuda());
#else
  EXPECT_FALSE(BuiltWithCuda());
#endif
  int host_value = 0;
  EXPECT_FALSE(IsDevicePointer(&host_value));
  EXPECT_FALSE(IsDevicePointer(nullptr));
  std::cout << "BuiltWithCuda=" << BuiltWithCuda() << " DeviceCount=" << count
            << " backend=" << ActiveBackendName() << "\n";
}

TEST(CudaAvailability, WithoutADeviceEveryCallFailsWithFailedPrecondition) {
  if (Available()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const auto no_cuda = absl::StatusCode::kFailedPrecondition;
  absl::StatusOr<void*> p = DeviceAlloc(0, 1024);
  EXPECT_EQ(p.status().code(), no_cuda) << p.status();
  EXPECT_EQ(DeviceBuffer::Create(0, 1024).status().code(), no_cuda);
  EXPECT_EQ(Stream::Create(0).status().code(), no_cuda);
  unsigned char host[64] = {};
  EXPECT_EQ(CopyHostToDevice(0, host, host + 32, 16).code(), no_cuda);
  EXPECT_EQ(CopyDeviceToHost(0, host, host + 32, 16).code(), no_cuda);
  EXPECT_EQ(Memset(0, host, 0, 16).code(), no_cuda);
  const PagedKvLayout l = Layout(2, 1, 1, 4, 2);
  const int32_t id = 1;
  EXPECT_EQ(GatherBlocksGpu(0, l, host, host + 16, &id, 1, host + 32).code(), no_cuda);
  EXPECT_EQ(ScatterBlocksGpu(0, l, host + 32, &id, 1, host, host + 16).code(), no_cuda);
  const CopyRegion region{host, host + 32, 16};
  EXPECT_EQ(BatchCopyGpu(0, &region, 1).code(), no_cuda);
  DeviceFree(0, nullptr);  // no-op, must not crash
  if (!BuiltWithCuda()) {
    EXPECT_EQ(p.status().message(), kNoCudaMessage);
  } else {
    // A CUDA build on a machine without a (usable) device says which.
    EXPECT_NE(p.status().message().find("no usable CUDA device"), std::string::npos) << p.status();
  }
}

TEST(DeviceBuffer, EmptyAndMovedFromBuffersHoldNothing) {
  DeviceBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  DeviceBuffer moved = std::move(empty);
  EXPECT_EQ(moved.data(), nullptr);
  Stream stream;
  EXPECT_EQ(stream.handle(), nullptr);
}

// ---- GPU against the CPU reference --------------------------------------------------------

#define SKIP_WITHOUT_GPU()                                                       \
  do {                                                                           \
    if (!Available()) {                                                          \
      GTEST_SKIP() << "no usable CUDA device (BuiltWithCuda=" << BuiltWithCuda() \
                   << "); GPU half skipped";                                     \
    }                                                                            \
  } while (0)

// A device copy of `host`.
DeviceBuffer Upload(const Bytes& host) {
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(0, std::max<size_t>(host.size(), 1));
  EXPECT_TRUE(buf.ok()) << buf.status();
  if (!host.empty()) {
    absl::Status s = CopyHostToDevice(0, buf->data(), host.data(), host.size());
    EXPECT_TRUE(s.ok()) << s;
  }
  return std::move(*buf);
}

Bytes Download(const DeviceBuffer& buf, size_t n) {
  Bytes host(n);
  absl::Status s = CopyDeviceToHost(0, host.data(), buf.data(), n);
  EXPECT_TRUE(s.ok()) << s;
  return host;
}

// Layouts that reach every path of the kernel: 16-byte words, odd sizes (byte path and tails),
// blocks above kMaxChunkBytes (split), and lists short enough to travel inline and long enough
// to need a device table.
struct GpuCase {
  PagedKvLayout layout;
  int n;
};

std::vector<GpuCase> GpuCases() {
  return {{Layout(64, 16, 8, 128, 2), 10},     // 32 KiB blocks, inline
          {Layout(256, 16, 8, 128, 2), 200},   // 400 chunks: device table
          {Layout(40, 3, 5, 3, 1), 17},        // 45-byte blocks: unaligned words and tails
          {Layout(300, 7, 3, 5, 1), 300},      // 105-byte blocks, table
          {Layout(8, 32, 16, 128, 2), 5},      // 128 KiB blocks: split into chunks
          {Layout(50, 2, 2, 3, 4, 100), 25}};  // strided (stride not a multiple of 16)
}

TEST(KvLayoutGpu, GatherMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(kSeed + 5);
  for (const GpuCase& c : GpuCases()) {
    const PagedKvLayout& l = c.layout;
    const Bytes k = RandomBytes(rng, CacheBytes(l));
    const Bytes v = RandomBytes(rng, CacheBytes(l));
    std::vector<int32_t> ids = DistinctIds(rng, l.num_blocks, c.n);
    Bytes expected(l.GatheredBytes(c.n));
    ASSERT_TRUE(GatherBlocksCpu(l, k.data(), v.data(), ids.data(), c.n, expected.data()).ok());
    DeviceBuffer dk = Upload(k), dv = Upload(v), dout = Upload(Bytes(expected.size(), 0));
    absl::Status s = GatherBlocksGpu(0, l, dk.data(), dv.data(), ids.data(), c.n, dout.data());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(Download(dout, expected.size()), expected) << "block bytes " << l.BlockBytes();
  }
}

TEST(KvLayoutGpu, ScatterMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(kSeed + 6);
  for (const GpuCase& c : GpuCases()) {
    const PagedKvLayout& l = c.layout;
    Bytes k = RandomBytes(rng, CacheBytes(l));
    Bytes v = RandomBytes(rng, CacheBytes(l));
    const std::vector<int32_t> ids = DistinctIds(rng, l.num_blocks, c.n);
    const Bytes in = RandomBytes(rng, l.GatheredBytes(c.n));
    DeviceBuffer dk = Upload(k), dv = Upload(v), din = Upload(in);
    ASSERT_TRUE(ScatterBlocksCpu(l, in.data(), ids.data(), c.n, k.data(), v.data()).ok());
    absl::Status s = ScatterBlocksGpu(0, l, din.data(), ids.data(), c.n, dk.data(), dv.data());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(Download(dk, k.size()), k) << "block bytes " << l.BlockBytes();
    EXPECT_EQ(Download(dv, v.size()), v) << "block bytes " << l.BlockBytes();
  }
}

TEST(KvLayoutGpu, BatchCopyMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(kSeed + 7);
  const size_t arena = 4 << 20;
  for (int n : {1, 50, 1000}) {
    const Bytes src = RandomBytes(rng, arena);
    Bytes dst = RandomBytes(rng, arena);
    DeviceBuffer dsrc = Upload(src), ddst = Upload(dst);
    // The same random regions, once over the host arenas and once over the device arenas.
    const std::vector<CopyRegion> host_regions =
        RandomRegions(rng, src.data(), dst.data(), arena, n);
    std::vector<CopyRegion> dev_regions = host_regions;
    for (CopyRegion& r : dev_regions) {
      r.src = static_cast<const unsigned char*>(dsrc.data()) +
              (static_cast<const unsigned char*>(r.src) - src.data());
      r.dst = static_cast<unsigned char*>(ddst.data()) +
              (static_cast<unsigned char*>(r.dst) - dst.data());
    }
    ASSERT_TRUE(BatchCopyCpu(host_regions.data(), host_regions.size()).ok());
    absl::Status s = BatchCopyGpu(0, dev_regions.data(), dev_regions.size());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(Download(ddst, arena), dst) << n << " regions";
  }
}

TEST(KvLayoutGpu, AsyncOnAStreamMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(kSeed + 8);
  absl::StatusOr<Stream> stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (const GpuCase& c : GpuCases()) {
    const PagedKvLayout& l = c.layout;
    const Bytes k = RandomBytes(rng, CacheBytes(l));
    const Bytes v = RandomBytes(rng, CacheBytes(l));
    const std::vector<int32_t> ids = DistinctIds(rng, l.num_blocks, c.n);
    Bytes expected(l.GatheredBytes(c.n));
    ASSERT_TRUE(GatherBlocksCpu(l, k.data(), v.data(), ids.data(), c.n, expected.data()).ok());
    DeviceBuffer dk = Upload(k), dv = Upload(v), dout = Upload(Bytes(expected.size(), 0));
    DeviceBuffer dk2 = Upload(Bytes(k.size(), 0)), dv2 = Upload(Bytes(v.size(), 0));
    {
      // The id list is released before the stream runs: the call must not keep it.
      std::vector<int32_t> ids_copy = ids;
      ASSERT_TRUE(GatherBlocksGpu(0, l, dk.data(), dv.data(), ids_copy.data(), c.n, dout.data(),
                                  stream->handle())
                      .ok());
      ASSERT_TRUE(ScatterBlocksGpu(0, l, dout.data(), ids_copy.data(), c.n, dk2.data(), dv2.data(),
                                   stream->handle())
                      .ok());
    }
    ASSERT_TRUE(stream->Synchronize().ok());
    EXPECT_EQ(Download(dout, expected.size()), expected);
    Bytes k2(k.size(), 0), v2(v.size(), 0);
    ASSERT_TRUE(ScatterBlocksCpu(l, expected.data(), ids.data(), c.n, k2.data(), v2.data()).ok());
    EXPECT_EQ(Download(dk2, k.size()), k2);
    EXPECT_EQ(Download(dv2, v.size()), v2);
  }
}

TEST(KvLayoutGpu, DeviceMemoryBasics) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(0, 4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_TRUE(IsDevicePointer(buf->data()));
  ASSERT_TRUE(Memset(0, buf->data(), 0xAB, 4096).ok());
  EXPECT_EQ(Download(*buf, 4096), Bytes(4096, 0xAB));
  DeviceBuffer moved = std::move(*buf);
  EXPECT_EQ(buf->data(), nullptr);
  EXPECT_EQ(moved.size(), 4096u);

  EXPECT_EQ(DeviceAlloc(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<void*> bad = DeviceAlloc(DeviceCount(), 64);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CUDA device " + std::to_string(DeviceCount())),
            std::string::npos)
      << bad.status();
  absl::StatusOr<void*> huge = DeviceAlloc(0, size_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
}

TEST(KvLayoutGpu, RejectsBadIdsBeforeLaunching) {
  SKIP_WITHOUT_GPU();
  const PagedKvLayout l = Layout(4, 2, 2, 8, 2);
  DeviceBuffer dk = Upload(Bytes(CacheBytes(l))), dv = Upload(Bytes(CacheBytes(l)));
  DeviceBuffer dout = Upload(Bytes(l.GatheredBytes(2)));
  const std::vector<int32_t> ids = {1, 4};
  absl::Status s = GatherBlocksGpu(0, l, dk.data(), dv.data(), ids.data(), 2, dout.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_ids[1] = 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace granary::device
