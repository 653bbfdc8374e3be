// NodeInventory: the master's commit and free records applied to real memory (a heap buffer
// stands in for a segment), and the report a re-mounted node sends, checked against the
// allocation headers in that memory.
#include "node/node_inventory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/util.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {
namespace {

using proto::AllocHeader;
using proto::InventoryOp;
using proto::InventoryRecord;

constexpr uint64_t kSegBytes = 1 << 20;

class NodeInventoryTest : public ::testing::Test {
 protected:
  NodeInventoryTest() {
    for (int i = 0; i < 2; ++i) {
      memory_[i] = std::make_unique<uint64_t[]>(kSegBytes / 8);
      spans_.push_back({"host" + std::to_string(i), reinterpret_cast<uint64_t>(memory_[i].get()),
                        kSegBytes, proto::Tier::kHost, "rkey"});
    }
  }
  AllocHeader& HeaderAt(int seg, uint64_t offset) {
    return *reinterpret_cast<AllocHeader*>(spans_[seg].base + offset);
  }
  // What a client writes: the header of (key, generation, length) at offset.
  void Write(int seg, uint64_t offset, const std::string& key, uint64_t gen, uint64_t len) {
    AllocHeader h;
    h.generation = gen;
    h.key_hash = common::HashBytes(key);
    h.value_length = len;
    std::memcpy(&HeaderAt(seg, offset), &h, sizeof(h));
  }
  static InventoryRecord Commit(const std::string& key, uint64_t offset, uint64_t gen,
                                uint64_t len = 1000, const std::string& tenant = "t") {
    InventoryRecord r;
    r.op = InventoryOp::kCommit;
    r.tenant = tenant;
    r.key = key;
    r.segment_id = 99;  // the session's id; Apply is given the index
    r.offset = offset;
    r.alloc_size = (proto::kAllocHeaderSize + len + 63) / 64 * 64;
    r.value_length = len;
    r.generation = gen;
    r.commit_ms = 1234;
    return r;
  }
  static InventoryRecord Free(uint64_t offset, uint64_t gen) {
    InventoryRecord r;
    r.op = InventoryOp::kFree;
    r.offset = offset;
    r.alloc_size = 1088;
    r.generation = gen;
    return r;
  }
  std::vector<InventoryRecord> Flat(const std::vector<std::vector<InventoryRecord>>& batches) {
    std::vector<InventoryRecord> out;
    for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
    return out;
  }

  std::unique_ptr<uint64_t[]> memory_[2];
  std::vector<SegmentSpan> spans_;
};

TEST_F(NodeInventoryTest, CommittedObjectsWithMatchingHeadersAreReportedInOffsetOrder) {
  NodeInventory inv(&spans_);
  Write(0, 8192, "k2", 20, 1000);
  Write(0, 0, "k1", 10, 1000);
  Write(1, 4096, "k3", 30, 500);
  EXPECT_TRUE(inv.Apply(0, Commit("k2", 8192, 20)));
  EXPECT_TRUE(inv.Apply(0, Commit("k1", 0, 10)));
  EXPECT_TRUE(inv.Apply(1, Commit("k3", 4096, 30, 500, "other")));
  EXPECT_EQ(inv.size(), 3u);
  auto all = Flat(inv.Report({7, 8}, 100, 1 << 20));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].key, "k1");  // segment 0 by offset, then segment 1
  EXPECT_EQ(all[1].key, "k2");
  EXPECT_EQ(all[2].key, "k3");
  EXPECT_EQ(all[0].segment_id, 7u);  // the id of this session, not the one in the record
  EXPECT_EQ(all[2].segment_id, 8u);
  EXPECT_EQ(all[2].tenant, "other");
  EXPECT_EQ(all[0].commit_ms, 1234u);
  EXPECT_EQ(all[0].op, InventoryOp::kCommit);
  EXPECT_EQ(inv.mismatches(), 0u);
}

TEST_F(NodeInventoryTest, EveryKindOfHeaderMismatchIsDroppedAndCounted) {
  NodeInventory inv(&spans_);
  const uint64_t kOffsets[] = {0, 4096, 8192, 12288, 16384};
  for (int i = 0; i < 5; ++i) {
    Write(0, kOffsets[i], "k" + std::to_string(i), 100 + i, 1000);
    ASSERT_TRUE(inv.Apply(0, Commit("k" + std::to_string(i), kOffsets[i], 100 + i)));
  }
  HeaderAt(0, 4096).magic = 0;             // never written, or invalidated
  HeaderAt(0, 8192).generation = 999;      // overwritten by another put
  HeaderAt(0, 12288).key_hash ^= 1;        // another key
  HeaderAt(0, 16384).value_length = 1001;  // another length
  auto all = Flat(inv.Report({7, 8}, 100, 1 << 20));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, "k0");
  EXPECT_EQ(inv.mismatches(), 4u);
  EXPECT_EQ(inv.size(), 1u);  // dropped, not reported again
  EXPECT_EQ(Flat(inv.Report({7, 8}, 100, 1 << 20)).size(), 1u);
  EXPECT_EQ(inv.mismatches(), 4u);
}

TEST_F(NodeInventoryTest, FreeForgetsTheEntryAndInvalidatesOnlyItsOwnHeader) {
  NodeInventory inv(&spans_);
  Write(0, 0, "a", 10, 1000);
  ASSERT_TRUE(inv.Apply(0, Commit("a", 0, 10)));
  // A free of another generation, or of an offset not held, changes nothing.
  EXPECT_FALSE(inv.Apply(0, Free(0, 11)));
  EXPECT_FALSE(inv.Apply(0, Free(4096, 10)));
  EXPECT_EQ(HeaderAt(0, 0).generation, 10u);
  EXPECT_TRUE(inv.Apply(0, Free(0, 10)));
  EXPECT_EQ(inv.size(), 0u);
  // A reader's check now fails: generation 0 matches no grant.
  EXPECT_FALSE(proto::CheckAllocHeader(HeaderAt(0, 0), 10, common::HashBytes("a"), 1000).ok());
  EXPECT_EQ(HeaderAt(0, 0).magic, AllocHeader::kMagic);  // the rest of the header is untouched

  // The space was given to a new put whose writer got there before the free record: its header
  // survives the free of the old generation.
  Write(0, 4096, "b", 20, 1000);
  ASSERT_TRUE(inv.Apply(0, Commit("b", 4096, 20)));
  Write(0, 4096, "c", 21, 1000);  // b freed at the master, c written there, records late
  EXPECT_TRUE(inv.Apply(0, Free(4096, 20)));
  EXPECT_TRUE(proto::CheckAllocHeader(HeaderAt(0, 4096), 21, common::HashBytes("c"), 1000).ok());
}

TEST_F(NodeInventoryTest, ANewerCommitAtAnOffsetReplacesAnOlderOneAndNotTheReverse) {
  NodeInventory inv(&spans_);
  Write(0, 0, "new", 50, 1000);
  EXPECT_TRUE(inv.Apply(0, Commit("old", 0, 40)));
  EXPECT_TRUE(inv.Apply(0, Commit("new", 0, 50)));
  EXPECT_FALSE(inv.Apply(0, Commit("old", 0, 40)));  // a late record of the older object
  auto all = Flat(inv.Report({7, 8}, 100, 1 << 20));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key, "new");
  EXPECT_EQ(all[0].generation, 50u);
}

TEST_F(NodeInventoryTest, RecordsOutsideTheSegmentOrUnalignedAreIgnored) {
  NodeInventory inv(&spans_);
  EXPECT_FALSE(inv.Apply(0, Commit("x", kSegBytes - 64, 1, 1000)));  // runs past the end
  EXPECT_FALSE(inv.Apply(0, Commit("x", 100, 1)));                   // unaligned
  EXPECT_FALSE(inv.Apply(2, Commit("x", 0, 1)));                     // no such segment
  EXPECT_FALSE(inv.Apply(0, Free(kSegBytes, 1)));
  EXPECT_EQ(inv.size(), 0u);
}

TEST_F(NodeInventoryTest, ReportIsBatchedAndSkipsSegmentsNotMountedNow) {
  NodeInventory inv(&spans_);
  for (uint64_t i = 0; i < 10; ++i) {
    Write(0, i * 4096, "k" + std::to_string(i), 100 + i, 1000);
    ASSERT_TRUE(inv.Apply(0, Commit("k" + std::to_string(i), i * 4096, 100 + i)));
  }
  Write(1, 0, "other", 7, 1000);
  ASSERT_TRUE(inv.Apply(1, Commit("other", 0, 7)));
  auto batches = inv.Report({7, 0}, 4, 1 << 20);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size(), 4u);
  EXPECT_EQ(batches[2].size(), 2u);
  EXPECT_EQ(Flat(batches).size(), 10u);  // segment 1 is not mounted: not reported, still held
  EXPECT_EQ(inv.size(), 11u);
}

// A streamed report while records still arrive: entries read where BeginReport found them while
// nothing was added or erased, looked up again once something was (an added entry may have
// moved every other one: the ASan tree catches a stale read). An entry freed between batches is
// not reported; one replaced in place is reported as it is then; one added after BeginReport
// waits for the next report.
TEST_F(NodeInventoryTest, AStreamedReportFollowsChangesBetweenItsBatches) {
  NodeInventory inv(&spans_);
  for (uint64_t i = 0; i < 8; ++i) {
    Write(0, i * 4096, "k" + std::to_string(i), 100 + i, 1000);
    ASSERT_TRUE(inv.Apply(0, Commit("k" + std::to_string(i), i * 4096, 100 + i)));
  }
  NodeInventory::ReportCursor c = inv.BeginReport();
  EXPECT_EQ(c.total, 8u);
  std::vector<InventoryRecord> got = inv.NextBatch(&c, {7, 8}, 2, 1 << 20);
  ASSERT_EQ(got.size(), 2u);
  // In place (no entry added or erased): k2 replaced by a newer commit at its offset.
  Write(0, 2 * 4096, "k2b", 500, 1000);
  ASSERT_TRUE(inv.Apply(0, Commit("k2b", 2 * 4096, 500)));
  auto b = inv.NextBatch(&c, {7, 8}, 2, 1 << 20);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].key, "k2b");
  EXPECT_EQ(b[0].generation, 500u);
  EXPECT_EQ(b[1].key, "k3");
  // Now k5 is freed and 2,000 entries arrive on the other segment (the table grows, moving
  // every entry): the rest of the report looks each entry up.
  ASSERT_TRUE(inv.Apply(0, Free(5 * 4096, 105)));
  for (uint64_t i = 0; i < 2000; ++i) {
    Write(1, i * 512, "n" + std::to_string(i), 1 + i, 100);
    ASSERT_TRUE(inv.Apply(1, Commit("n" + std::to_string(i), i * 512, 1 + i, 100)));
  }
  std::vector<std::string> rest;
  for (auto more = inv.NextBatch(&c, {7, 8}, 2, 1 << 20); !more.empty();
       more = inv.NextBatch(&c, {7, 8}, 2, 1 << 20)) {
    for (const auto& r : more) rest.push_back(r.key);
  }
  EXPECT_EQ(rest, (std::vector<std::string>{"k4", "k6", "k7"}));
  EXPECT_EQ(inv.mismatches(), 0u);
  EXPECT_EQ(inv.size(), 2007u);
}

// A GPU segment (device memory of the fake backend, which faults on any CPU access): its
// records are kept, its headers are checked through batched device reads (more than one chunk
// of them), and a free swaps the generation word to 0 with a device atomic.
TEST(NodeInventoryGpuTest, AGpuSegmentIsReportedAndInvalidatedThroughTheDevice) {
  absl::StatusOr<std::unique_ptr<device::FakeBackend>> fake = device::FakeBackend::Create({});
  ASSERT_TRUE(fake.ok()) << fake.status();
  device::SetBackendForTesting(fake->get());
  device::DeviceRuntime& b = (*fake)->runtime();
  const uint64_t n = NodeInventory::kGpuHeaderChunk + 100;  // two header reads
  const uint64_t bytes = n * 1088;
  absl::StatusOr<void*> mem = b.Alloc(0, bytes);
  ASSERT_TRUE(mem.ok()) << mem.status();
  {
    std::vector<SegmentSpan> spans(1);
    spans[0].name = "gpu0";
    spans[0].base = reinterpret_cast<uint64_t>(*mem);
    spans[0].size = bytes;
    spans[0].tier = proto::Tier::kGpu;
    spans[0].gpu = 0;
    NodeInventory inv(&spans);
    // What a client writes through its IPC mapping: each allocation's header.
    for (uint64_t i = 0; i < n; ++i) {
      const std::string key = "k" + std::to_string(i);
      AllocHeader h;
      h.generation = i + 1;
      h.key_hash = common::HashBytes(key);
      h.value_length = 1000;
      if (i == 7) h.value_length = 999;  // a stale header: dropped, not reported
      ASSERT_TRUE(b.Copy(0, static_cast<char*>(*mem) + i * 1088, &h, sizeof(h),
                         device::CopyKind::kHostToDevice)
                      .ok());
      InventoryRecord r;
      r.op = InventoryOp::kCommit;
      r.tenant = "t";
      r.key = key;
      r.offset = i * 1088;
      r.alloc_size = 1088;
      r.value_length = 1000;
      r.generation = i + 1;
      ASSERT_TRUE(inv.Apply(0, r)) << i;
    }
    InventoryRecord free;
    free.op = InventoryOp::kFree;
    free.offset = 3 * 1088;
    free.alloc_size = 1088;
    free.generation = 4;
    ASSERT_TRUE(inv.Apply(0, free));
    AllocHeader freed;
    ASSERT_TRUE(b.Copy(0, &freed, static_cast<char*>(*mem) + 3 * 1088, sizeof(freed),
                       device::CopyKind::kDeviceToHost)
                    .ok());
    EXPECT_EQ(freed.generation, 0u);
    EXPECT_EQ(freed.magic, AllocHeader::kMagic);  // the rest of the header is left alone
    EXPECT_EQ(inv.gpu_errors(), 0u);

    std::vector<InventoryRecord> got;
    const uint64_t default_stream_ops = (*fake)->DefaultStreamOps();
    for (const auto& batch : inv.Report({55}, 10000, 1 << 30)) {
      got.insert(got.end(), batch.begin(), batch.end());
    }
    EXPECT_EQ((*fake)->DefaultStreamOps(), default_stream_ops)
        << "the header reads ran on the legacy default stream";
    ASSERT_EQ(got.size(), n - 2);  // less the freed one and the stale one
    EXPECT_EQ(inv.mismatches(), 1u);
    for (const InventoryRecord& r : got) {
      EXPECT_NE(r.offset, 3 * 1088);
      EXPECT_NE(r.offset, 7 * 1088);
      EXPECT_EQ(r.segment_id, 55u);
      EXPECT_EQ(r.generation, r.offset / 1088 + 1);
    }
  }
  b.Free(0, *mem);
  device::SetBackendForTesting(nullptr);
}

// With a journal (a segment file's), what Apply takes reaches the file at Flush, and a second
// inventory over the same memory (a restarted node) adopts exactly the live entries: commits,
// minus frees, newest generation per offset; its report checks them against the headers.
TEST_F(NodeInventoryTest, AJournalCarriesTheLiveEntriesToTheNextProcess) {
  char dir[] = "/tmp/granary_inv_journal_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/segment.journal";
  {
    InventoryJournal::Replay replay;
    auto journal = InventoryJournal::Open(path, &replay);
    ASSERT_TRUE(journal.ok()) << journal.status();
    NodeInventory inv(&spans_);
    EXPECT_EQ(inv.Adopt(std::move(*journal), replay), 0u);
    Write(0, 0, "a", 1, 1000);
    Write(0, 2048, "b", 3, 1000);
    Write(1, 4096, "c", 4, 1000);
    ASSERT_TRUE(inv.Apply(0, Commit("a", 0, 1)));
    ASSERT_TRUE(inv.Apply(0, Commit("b", 2048, 2)));
    ASSERT_TRUE(inv.Apply(0, Commit("b", 2048, 3)));  // a newer put at the same offset
    ASSERT_TRUE(inv.Flush().ok());
    ASSERT_TRUE(inv.Apply(1, Commit("c", 4096, 4)));
    ASSERT_TRUE(inv.Apply(0, Free(0, 1)));  // "a" freed: its header is invalidated too
    ASSERT_TRUE(inv.Flush().ok());
    ASSERT_TRUE(inv.Apply(1, Commit("d", 8192, 5)));  // applied, never flushed: not carried
  }
  InventoryJournal::Replay replay;
  auto journal = InventoryJournal::Open(path, &replay);
  ASSERT_TRUE(journal.ok()) << journal.status();
  NodeInventory next(&spans_);
  EXPECT_EQ(next.Adopt(std::move(*journal), replay), 2u);
  const auto reported = Flat(next.Report({11, 12}, 100, 1 << 20));
  ASSERT_EQ(reported.size(), 2u);
  EXPECT_EQ(reported[0].key, "b");
  EXPECT_EQ(reported[0].generation, 3u);
  EXPECT_EQ(reported[0].segment_id, 11u);  // the master's id of segment 0 now
  EXPECT_EQ(reported[1].key, "c");
  EXPECT_EQ(reported[1].segment_id, 12u);
  EXPECT_EQ(next.mismatches(), 0u);
}

// Past twice the live entries plus the slack, Flush rewrites the journal as the live set.
TEST_F(NodeInventoryTest, AJournalThatOutgrowsItsEntriesIsCompacted) {
  char dir[] = "/tmp/granary_inv_journal_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/segment.journal";
  InventoryJournal::Replay replay;
  auto journal = InventoryJournal::Open(path, &replay);
  ASSERT_TRUE(journal.ok()) << journal.status();
  NodeInventory inv(&spans_);
  inv.Adopt(std::move(*journal), replay);
  Write(0, 0, "k", 1, 100);
  uint64_t gen = 1;
  // One live entry, rewritten over and over at the same offset.
  const uint64_t rounds = NodeInventory::kCompactSlack / 1000 + 2;
  for (uint64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(inv.Apply(0, Commit("k", 0, ++gen, 100)));
    ASSERT_TRUE(inv.Flush().ok());
  }
  Write(0, 0, "k", gen, 100);
  InventoryJournal::Replay again;
  auto reopened = InventoryJournal::Open(path, &again);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_LT(again.records, NodeInventory::kCompactSlack) << "never compacted";
  ASSERT_EQ(again.live.size(), 1u);
  EXPECT_EQ(again.live[0].generation, gen);
}

}  // namespace
}  // namespace granary::node
