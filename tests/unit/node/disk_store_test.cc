// Objects on a disk tier (node/disk/disk_store.h) on the machine's file system: byte-exact from
// 1 byte to 64 MiB in one batch, long keys, another object at the offset, and torn state (a
// changed value byte, a zeroed preamble, a truncated file, a write fault): each caught, counted
// where it is a checksum failure, and never served.

#include "node/disk/disk_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/text.h"
#include "tests/unit/node/disk_test_util.h"

namespace granary::node {
namespace {

using testing::Has;
using testing::Random;
using testing::TempDir;

constexpr uint64_t kSize = 160 << 20;

struct Fixture {
  TempDir dir;
  DiskOptions options;
  std::unique_ptr<DiskStore> store;
  std::string file() const { return dir.path() + "/" + DiskFile::kFileName; }
  void Open() {
    options.path = dir.path();
    options.size = kSize;
    absl::StatusOr<std::unique_ptr<DiskFile>> f = DiskFile::Open(options);
    ASSERT_TRUE(f.ok()) << f.status();
    store = std::make_unique<DiskStore>(std::move(*f));
  }
};

DiskRecordMeta Meta(const std::string& key, uint64_t generation) {
  DiskRecordMeta m;
  m.tenant = "tenant-a";
  m.key = key;
  m.generation = generation;
  m.key_hash = std::hash<std::string>()(key);
  return m;
}

// Puts one object per size back to back from offset 0; returns their offsets.
std::vector<uint64_t> PutAll(DiskStore& store,
                             const std::vector<std::vector<unsigned char>>& values,
                             const std::vector<std::string>& keys) {
  std::vector<DiskStore::PutOp> ops;
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    ops.push_back({at, Meta(keys[i], 100 + i), values[i]});
    offsets.push_back(at);
    at += DiskRecordBytes(8, keys[i].size(), values[i].size());
  }
  std::vector<absl::Status> st;
  store.Put(absl::MakeSpan(ops), &st);
  for (size_t i = 0; i < st.size(); ++i) EXPECT_TRUE(st[i].ok()) << i << ": " << st[i];
  return offsets;
}

// Gets object i (generation 100 + i) into a buffer filled with 0xEE first.
absl::Status GetOne(DiskStore& store, uint64_t offset, const std::string& key, uint64_t generation,
                    std::vector<unsigned char>* out) {
  std::fill(out->begin(), out->end(), 0xEE);
  std::vector<absl::Status> st;
  const DiskStore::GetOp op{offset, generation, std::hash<std::string>()(key),
                            absl::MakeSpan(*out)};
  store.Get({op}, &st);
  return st[0];
}

bool Untouched(const std::vector<unsigned char>& out) {
  return std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0xEE; });
}

TEST(DiskStore, RoundTripsByteExactFromOneByteTo64MiBInOneBatch) {
  Fixture f;
  f.Open();
  const std::vector<size_t> sizes = {1, 4095, 4096, 4097, 65536, 1 << 20, 64 << 20, 0, 777};
  std::vector<std::vector<unsigned char>> values;
  std::vector<std::string> keys;
  for (size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(Random(sizes[i], static_cast<uint32_t>(i)));
    keys.push_back(i == 8 ? std::string(4096, 'L') : "key/" + std::to_string(i));
  }
  const std::vector<uint64_t> offsets = PutAll(*f.store, values, keys);
  std::vector<std::vector<unsigned char>> outs;
  std::vector<DiskStore::GetOp> ops;
  for (size_t i = 0; i < sizes.size(); ++i) outs.emplace_back(sizes[i], 0xEE);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ops.push_back(
        {offsets[i], 100 + i, std::hash<std::string>()(keys[i]), absl::MakeSpan(outs[i])});
  }
  std::vector<absl::Status> st;
  f.store->Get(ops, &st);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(st[i].ok()) << i << ": " << st[i];
    EXPECT_TRUE(outs[i] == values[i]) << "object " << i << " of " << sizes[i] << " bytes differs";
  }
  absl::StatusOr<DiskRecordMeta> meta = f.store->Peek(offsets[8]);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->key, keys[8]);
  EXPECT_EQ(meta->tenant, "tenant-a");
  EXPECT_EQ(meta->value_length, 777u);
  EXPECT_EQ(f.store->checksum_failures(), 0u);
  // Every preamble at once (the long key's in a second round), and one where there is none.
  std::vector<uint64_t> at = offsets;
  at.push_back(kSize - kDiskBlock);
  std::vector<absl::StatusOr<DiskRecordMeta>> metas;
  f.store->PeekMany(at, &metas);
  ASSERT_EQ(metas.size(), at.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(metas[i].ok()) << i << ": " << metas[i].status();
    EXPECT_EQ(metas[i]->key, keys[i]);
    EXPECT_EQ(metas[i]->generation, 100 + i);
    EXPECT_EQ(metas[i]->value_length, sizes[i]);
  }
  EXPECT_EQ(metas.back().status().code(), absl::StatusCode::kDataLoss) << metas.back().status();
}

TEST(DiskStore, AnotherObjectAtTheOffsetIsUnavailableAndNotServed) {
  Fixture f;
  f.Open();
  const std::vector<unsigned char> v = Random(5000, 1);
  const uint64_t at = PutAll(*f.store, {v}, {"k"})[0];
  std::vector<unsigned char> out(v.size());
  absl::Status s = GetOne(*f.store, at, "k", 101, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Has(s.ToString(), "holds generation 100")) << s;
  EXPECT_TRUE(Untouched(out));
  s = GetOne(*f.store, at, "other", 100, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  std::vector<unsigned char> shorter(v.size() - 1);
  EXPECT_EQ(GetOne(*f.store, at, "k", 100, &shorter).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(GetOne(*f.store, at, "k", 100, &out).ok());
  EXPECT_EQ(out, v);
  EXPECT_EQ(f.store->checksum_failures(), 0u);
}

// Changes `bytes` at `offset` of the tier's file behind the store's back.
void Scribble(const std::string& file, uint64_t offset, const std::vector<unsigned char>& bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

TEST(DiskStore, TornStateIsCaughtCountedAndNeverServed) {
  Fixture f;
  f.Open();
  const std::vector<std::vector<unsigned char>> values = {Random(10000, 1), Random(10000, 2),
                                                          Random(10000, 3)};
  const std::vector<std::string> keys = {"a", "b", "c"};
  const std::vector<uint64_t> at = PutAll(*f.store, values, keys);
  std::vector<unsigned char> out(10000);
  // A value byte changed on disk.
  Scribble(f.file(), at[0] + kDiskBlock + 5000, {static_cast<unsigned char>(values[0][5000] ^ 1)});
  absl::Status s = GetOne(*f.store, at[0], "a", 100, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(Has(s.ToString(), f.file() + " offset 0: disk record tenant-a/a (generation 100): "
                                           "value checksum mismatch"))
      << s;
  EXPECT_TRUE(Untouched(out));
  EXPECT_EQ(f.store->checksum_failures(), 1u);
  // A zeroed preamble (a header whose write never landed).
  Scribble(f.file(), at[1], std::vector<unsigned char>(kDiskBlock, 0));
  s = GetOne(*f.store, at[1], "b", 101, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(Untouched(out));
  EXPECT_EQ(f.store->checksum_failures(), 2u);
  EXPECT_FALSE(f.store->Peek(at[1]).ok());
  // The third is whole.
  ASSERT_TRUE(GetOne(*f.store, at[2], "c", 102, &out).ok());
  EXPECT_EQ(out, values[2]);
  // A file cut short under the node: the read fails, nothing is served.
  ASSERT_EQ(::truncate(f.file().c_str(), static_cast<off_t>(at[2] + kDiskBlock + 4096)), 0);
  s = GetOne(*f.store, at[2], "c", 102, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.ToString(), f.file())) << s;
  EXPECT_TRUE(Untouched(out));
}

TEST(DiskStore, AWriteFaultNamesTheFileAndLosesNothingStored) {
  Fixture f;
  bool fail = false;
  f.options.fault = [&](DiskOp op, uint64_t, size_t) {
    return fail && op == DiskOp::kWrite ? EIO : 0;
  };
  f.Open();
  const std::vector<unsigned char> v = Random(70000, 4);
  const uint64_t at = PutAll(*f.store, {v}, {"kept"})[0];
  fail = true;
  std::vector<DiskStore::PutOp> ops = {{at + (1 << 20), Meta("lost", 1), v}};
  std::vector<absl::Status> st;
  f.store->Put(absl::MakeSpan(ops), &st);
  EXPECT_EQ(st[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Has(st[0].ToString(), f.file() + ": write at offset 1048576: Input/output error"))
      << st[0];
  fail = false;
  std::vector<unsigned char> out(v.size());
  ASSERT_TRUE(GetOne(*f.store, at, "kept", 100, &out).ok());
  EXPECT_EQ(out, v);
}

}  // namespace
}  // namespace granary::node
