// The CPU reference of the checksum (device/checksum.h), which the device kernels are held to:
// known answers (computed outside C++, and by a byte-at-a-time loop written here from the
// definition), and the changes it must notice.

#include "device/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"

namespace granary::device {
namespace {

using Bytes = std::vector<unsigned char>;

// The definition in checksum.h, spelled out a byte at a time with nothing from checksum_math.h.
uint64_t Splitmix64Finalizer(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t LoopChecksum(const unsigned char* p, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; 8 * i < n; ++i) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8; ++b) {
      if (8 * i + b < n) word |= static_cast<uint64_t>(p[8 * i + b]) << (8 * b);
    }
    sum += Splitmix64Finalizer(word + i * 0x9E3779B97F4A7C15ull);
  }
  return Splitmix64Finalizer(sum ^ Splitmix64Finalizer(n + 0x9E3779B97F4A7C15ull));
}

uint64_t Of(const Bytes& b) { return ChecksumCpu(b.data(), b.size()); }
uint64_t Of(const std::string& s) { return ChecksumCpu(s.data(), s.size()); }

Bytes Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& c : b) c = static_cast<unsigned char>(rng());
  return b;
}

TEST(Checksum, MixIsTheSplitmix64Finalizer) {
  // splitmix64's published first outputs for seeds 0 and 1234567: Mix(seed + step).
  EXPECT_EQ(ChecksumMix(0 + kChecksumWordStep), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(ChecksumMix(1234567 + kChecksumWordStep), 6457827717110365317ull);
}

TEST(Checksum, KnownAnswers) {
  // Computed by an independent Python implementation of the definition.
  EXPECT_EQ(Of(std::string("")), 0x48218226FF3CD4BFull);
  EXPECT_EQ(ChecksumCpu(nullptr, 0), 0x48218226FF3CD4BFull);
  EXPECT_EQ(Of(std::string("a")), 0x414E8B6620192C9Bull);
  EXPECT_EQ(Of(std::string("abcdefgh")), 0x0EE350518A508605ull);
  EXPECT_EQ(Of(std::string("hello, world!")), 0xBCB03C2FFDF22B62ull);
  Bytes ramp(256);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Of(ramp), 0xA31E9A4C67C9C0D3ull);
  EXPECT_EQ(Of(Bytes(16, 0)), 0xF844A3584C67552Bull);
}

TEST(Checksum, MatchesTheByteLoopAtEverySizeAndAlignment) {
  const Bytes data = Random(4096 + 64, 1);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4095, 4096}) {
      EXPECT_EQ(ChecksumCpu(data.data() + start, n), LoopChecksum(data.data() + start, n))
          << "start " << start << " n " << n;
    }
  }
}

TEST(Checksum, EverySingleBitFlipChangesIt) {
  Bytes b = Random(67, 2);  // 8 full words and a 3-byte tail
  const uint64_t base = Of(b);
  for (size_t byte = 0; byte < b.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      b[byte] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_NE(Of(b), base) << "byte " << byte << " bit " << bit;
      b[byte] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  EXPECT_EQ(Of(b), base);
}

TEST(Checksum, SwappedWordsAndBlocksChangeIt) {
  const Bytes b = Random(4096, 3);
  const uint64_t base = Of(b);
  for (auto [x, y] : {std::pair<size_t, size_t>{0, 1}, {0, 511}, {17, 300}}) {
    Bytes swapped = b;
    std::swap_ranges(swapped.begin() + 8 * x, swapped.begin() + 8 * x + 8, swapped.begin() + 8 * y);
    EXPECT_NE(Of(swapped), base) << "words " << x << " and " << y;
  }
  // Two 1 KiB halves of the first 2 KiB swapped (a K and a V block in the wrong order).
  Bytes blocks = b;
  std::swap_ranges(blocks.begin(), blocks.begin() + 1024, blocks.begin() + 1024);
  EXPECT_NE(Of(blocks), base);
  // A word repeated is not the word once.
  EXPECT_NE(Of(Bytes(16, 7)), Of(Bytes(8, 7)));
}

TEST(Checksum, TailBytesAndLengthCount) {
  // Zero padding of the last word does not make a shorter string equal to a longer one.
  EXPECT_NE(Of(std::string("abc")), Of(std::string("abc\0", 4)));
  EXPECT_NE(Of(Bytes(8, 0)), Of(Bytes(16, 0)));
  EXPECT_NE(Of(Bytes(0)), Of(Bytes(1, 0)));
  // Each tail byte counts.
  Bytes b = Random(13, 4);
  const uint64_t base = Of(b);
  for (size_t i = 8; i < 13; ++i) {
    Bytes c = b;
    c[i] ^= 0x80;
    EXPECT_NE(Of(c), base) << "tail byte " << i;
  }
}

TEST(Checksum, BatchMatchesOneByOneAndNamesBadArguments) {
  const Bytes data = Random(10000, 5);
  const std::vector<ChecksumRegion> regions = {
      {data.data(), data.size()}, {data.data() + 3, 5}, {nullptr, 0}, {data.data() + 1, 4099}};
  std::vector<uint64_t> out(regions.size(), 0);
  ASSERT_TRUE(BatchChecksumCpu(regions.data(), static_cast<int>(regions.size()), out.data()).ok());
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(out[i], ChecksumCpu(regions[i].data, regions[i].bytes)) << i;
  }
  EXPECT_TRUE(BatchChecksumCpu(nullptr, 0, nullptr).ok());
  absl::Status negative = BatchChecksumCpu(regions.data(), -1, out.data());
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(negative.message(), "-1")) << negative;
  const std::vector<ChecksumRegion> null_data = {{data.data(), 1}, {nullptr, 8}};
  absl::Status bad = BatchChecksumCpu(null_data.data(), 2, out.data());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "regions[1]")) << bad;
  absl::Status no_out = BatchChecksumCpu(regions.data(), 1, nullptr);
  EXPECT_EQ(no_out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(no_out.message(), "out")) << no_out;
}

// Not a pass/fail check: the cost the header documents, printed for the log.
TEST(Checksum, Throughput) {
  const Bytes data = Random(64 << 20, 6);
  const auto start = std::chrono::steady_clock::now();
  const uint64_t sum = Of(data);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ChecksumCpu: 64 MiB in %.1f ms, %.2f GB/s (sum %016llx)\n", seconds * 1e3,
              data.size() / seconds / 1e9, static_cast<unsigned long long>(sum));
}

}  // namespace
}  // namespace granary::device
