// The disk tier's record format: a preamble round-trips with short and long keys, any changed
// byte of a preamble or a value is caught (DATA_LOSS, never served), and bad input is refused
// naming it.

#include "node/disk/disk_record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/checksum.h"
#include "node/disk/disk_file.h"
#include "proto/wire_types.h"
#include "tests/text.h"

namespace granary::node {
namespace {

using testing::Has;

DiskRecordMeta Meta(std::string tenant, std::string key, const std::vector<unsigned char>& v) {
  DiskRecordMeta m;
  m.tenant = std::move(tenant);
  m.key = std::move(key);
  m.generation = 77;
  m.key_hash = 0x1234567890ABCDEFULL;
  m.value_length = v.size();
  m.value_checksum = device::ChecksumCpu(v.data(), v.size());
  return m;
}

std::vector<unsigned char> Encode(const DiskRecordMeta& m) {
  std::vector<unsigned char> out(DiskPreambleBytes(m.tenant.size(), m.key.size()));
  EXPECT_TRUE(EncodeDiskPreamble(m, absl::MakeSpan(out)).ok());
  return out;
}

TEST(DiskRecord, SizesAreWholeBlocks) {
  EXPECT_EQ(DiskPreambleBytes(0, 0), kDiskBlock);
  EXPECT_EQ(DiskPreambleBytes(8, kDiskBlock - 64 - 8), kDiskBlock);
  EXPECT_EQ(DiskPreambleBytes(8, kDiskBlock - 64 - 7), 2 * kDiskBlock);
  EXPECT_EQ(DiskRecordBytes(3, 5, 0), kDiskBlock);
  EXPECT_EQ(DiskRecordBytes(3, 5, 1), 2 * kDiskBlock);
  EXPECT_EQ(DiskRecordBytes(3, 5, 1 << 20), kDiskBlock + (1 << 20));
}

TEST(DiskRecord, PreamblesRoundTripWithShortAndLongKeys) {
  const std::vector<unsigned char> v(1000, 7);
  for (const std::string& key : {std::string("k"), std::string(proto::kMaxKeyBytes, 'x')}) {
    const DiskRecordMeta m = Meta(std::string(proto::kMaxTenantIdBytes, 't'), key, v);
    const std::vector<unsigned char> bytes = Encode(m);
    EXPECT_EQ(PeekDiskPreambleBytes(absl::MakeConstSpan(bytes).first(kDiskBlock)), bytes.size());
    absl::StatusOr<DiskRecordMeta> back = DecodeDiskPreamble(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->tenant, m.tenant);
    EXPECT_EQ(back->key, m.key);
    EXPECT_EQ(back->generation, 77u);
    EXPECT_EQ(back->key_hash, m.key_hash);
    EXPECT_EQ(back->value_length, 1000u);
    EXPECT_EQ(back->value_checksum, m.value_checksum);
    EXPECT_TRUE(CheckDiskValue(*back, v).ok());
    if (bytes.size() > kDiskBlock) {
      absl::StatusOr<DiskRecordMeta> partial =
          DecodeDiskPreamble(absl::MakeConstSpan(bytes).first(kDiskBlock));
      EXPECT_EQ(partial.status().code(), absl::StatusCode::kOutOfRange) << partial.status();
      EXPECT_TRUE(Has(partial.status().ToString(), "needs 8192 bytes")) << partial.status();
    }
  }
}

TEST(DiskRecord, AnyChangedPreambleByteIsDataLoss) {
  const std::vector<unsigned char> v(64, 1);
  const DiskRecordMeta m = Meta("tenant-a", "some/key/0001", v);
  const std::vector<unsigned char> good = Encode(m);
  const size_t used = sizeof(DiskRecordHeader) + m.tenant.size() + m.key.size();
  ASSERT_LT(used, good.size());  // the padding is covered too
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80}) {
      std::vector<unsigned char> bad = good;
      bad[i] ^= flip;
      absl::StatusOr<DiskRecordMeta> back = DecodeDiskPreamble(bad);
      // A flip in the sizes can make the announced preamble longer than the block.
      EXPECT_TRUE(!back.ok() && (back.status().code() == absl::StatusCode::kDataLoss ||
                                 back.status().code() == absl::StatusCode::kOutOfRange))
          << "byte " << i << " flipped by " << int(flip) << " went unnoticed";
    }
  }
  const std::vector<unsigned char> zero(kDiskBlock, 0);
  EXPECT_EQ(PeekDiskPreambleBytes(zero), 0u);
  absl::StatusOr<DiskRecordMeta> back = DecodeDiskPreamble(zero);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Has(back.status().ToString(), "bad magic")) << back.status();
}

TEST(DiskRecord, AChangedOrShortValueIsDataLossNamingTheObject) {
  std::vector<unsigned char> v(1 << 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 31);
  const DiskRecordMeta m = Meta("tenant-a", "kv/7", v);
  for (size_t i : {size_t{0}, size_t{4095}, v.size() - 1}) {
    std::vector<unsigned char> bad = v;
    bad[i] ^= 0x10;
    absl::Status s = CheckDiskValue(m, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(Has(s.ToString(), "tenant-a/kv/7 (generation 77): value checksum mismatch")) << s;
  }
  absl::Status s = CheckDiskValue(m, absl::MakeConstSpan(v).first(v.size() - 1));
  EXPECT_TRUE(Has(s.ToString(), "65535 value bytes, the header says 65536")) << s;
}

TEST(DiskRecord, EncodeRefusesOversizedNamesAndWrongBuffers) {
  const std::vector<unsigned char> v(1, 1);
  DiskRecordMeta m = Meta("t", std::string(proto::kMaxKeyBytes + 1, 'k'), v);
  std::vector<unsigned char> out(2 * kDiskBlock);
  absl::Status s = EncodeDiskPreamble(m, absl::MakeSpan(out));
  EXPECT_TRUE(Has(s.ToString(), "key of 4097 bytes is over the limits")) << s;
  m = Meta("t", "k", v);
  s = EncodeDiskPreamble(m, absl::MakeSpan(out));
  EXPECT_TRUE(Has(s.ToString(), "preamble buffer of 8192 bytes, need 4096")) << s;
}

}  // namespace
}  // namespace granary::node
