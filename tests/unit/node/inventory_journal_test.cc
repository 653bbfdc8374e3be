// The node's inventory journal on the machine's file system: replay of commits and frees, a torn
// tail cut off with later appends following good records, a corrupt record ending the replay, a
// file that is no journal refused and left alone, and compaction.

#include "node/inventory_journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/text.h"
#include "tests/unit/node/disk_test_util.h"

namespace granary::node {
namespace {

using proto::InventoryOp;
using proto::InventoryRecord;
using testing::Has;
using testing::TempDir;

InventoryRecord Commit(uint64_t segment, uint64_t offset, uint64_t generation,
                       const std::string& key) {
  InventoryRecord r;
  r.op = InventoryOp::kCommit;
  r.tenant = "tenant-a";
  r.key = key;
  r.segment_id = segment;
  r.offset = offset;
  r.alloc_size = 4096;
  r.value_length = 1000;
  r.generation = generation;
  r.flags = 1;
  r.commit_ms = 1700000000000 + generation;
  return r;
}

InventoryRecord Free(uint64_t segment, uint64_t offset, uint64_t generation) {
  InventoryRecord r;
  r.op = InventoryOp::kFree;
  r.segment_id = segment;
  r.offset = offset;
  r.generation = generation;
  return r;
}

std::unique_ptr<InventoryJournal> Open(const std::string& path, InventoryJournal::Replay* replay) {
  absl::StatusOr<std::unique_ptr<InventoryJournal>> j = InventoryJournal::Open(path, replay);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? std::move(*j) : nullptr;
}

std::vector<std::string> Keys(const InventoryJournal::Replay& r) {
  std::vector<std::string> out;
  for (const InventoryRecord& e : r.live) out.push_back(e.key);
  return out;
}

TEST(InventoryJournal, ReplaysCommitsAndFrees) {
  TempDir dir;
  const std::string path = dir.path() + "/journal";
  InventoryJournal::Replay replay;
  {
    auto j = Open(path, &replay);
    ASSERT_NE(j, nullptr);
    EXPECT_TRUE(replay.live.empty());
    ASSERT_TRUE(
        j->Append({Commit(0, 0, 1, "a"), Commit(0, 4096, 2, "b"), Commit(1, 0, 3, "c")}).ok());
    ASSERT_TRUE(j->Append({Commit(0, 0, 4, "a2"),  // a newer object at a's offset
                           Free(0, 4096, 2),       // b freed
                           Free(1, 0, 99),         // a free of another generation: ignored
                           Commit(0, 8192, 5, "d"), Commit(0, 8192, 1, "stale")})  // older: ignored
                    .ok());
    ASSERT_TRUE(j->Sync().ok());
  }
  auto j = Open(path, &replay);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(replay.records, 8u);
  EXPECT_EQ(replay.torn_bytes, 0u);
  EXPECT_EQ(Keys(replay), (std::vector<std::string>{"a2", "d", "c"}));
  const InventoryRecord& a2 = replay.live[0];
  EXPECT_EQ(a2.tenant, "tenant-a");
  EXPECT_EQ(a2.generation, 4u);
  EXPECT_EQ(a2.alloc_size, 4096u);
  EXPECT_EQ(a2.value_length, 1000u);
  EXPECT_EQ(a2.flags, 1u);
  EXPECT_EQ(a2.commit_ms, 1700000000004u);
}

TEST(InventoryJournal, ATornTailIsCutAndLaterAppendsFollowGoodRecords) {
  TempDir dir;
  const std::string path = dir.path() + "/journal";
  InventoryJournal::Replay replay;
  {
    auto j = Open(path, &replay);
    for (uint64_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(j->Append({Commit(0, i * 4096, i + 1, "k" + std::to_string(i))}).ok());
    }
    ASSERT_TRUE(j->Sync().ok());
  }
  const uint64_t whole = static_cast<uint64_t>(testing::ReadFile(path).size());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(whole - 3)), 0);  // died mid-append
  {
    auto j = Open(path, &replay);
    EXPECT_EQ(replay.live.size(), 4u);
    EXPECT_GT(replay.torn_bytes, 0u);
    ASSERT_TRUE(j->Append({Commit(0, 99 * 4096, 9, "after")}).ok());
    ASSERT_TRUE(j->Sync().ok());
  }
  auto j = Open(path, &replay);
  EXPECT_EQ(replay.torn_bytes, 0u);
  EXPECT_EQ(Keys(replay), (std::vector<std::string>{"k0", "k1", "k2", "k3", "after"}));
}

TEST(InventoryJournal, ACorruptRecordEndsTheReplayThere) {
  TempDir dir;
  const std::string path = dir.path() + "/journal";
  InventoryJournal::Replay replay;
  {
    auto j = Open(path, &replay);
    ASSERT_TRUE(j->Append({Commit(0, 0, 1, "first"), Commit(0, 4096, 2, "second"),
                           Commit(0, 8192, 3, "third")})
                    .ok());
  }
  std::string bytes = testing::ReadFile(path);
  const size_t at = bytes.find("second");
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x20;
  testing::WriteFile(path, bytes);
  auto j = Open(path, &replay);
  EXPECT_EQ(Keys(replay), (std::vector<std::string>{"first"}));
  EXPECT_GT(replay.torn_bytes, 0u);
}

TEST(InventoryJournal, AFileThatIsNoJournalIsRefusedAndLeftAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/journal";
  testing::WriteFile(path, "not a journal at all, just some bytes");
  InventoryJournal::Replay replay;
  absl::StatusOr<std::unique_ptr<InventoryJournal>> j = InventoryJournal::Open(path, &replay);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(Has(j.status().ToString(), path + " is not a journal")) << j.status();
  EXPECT_EQ(testing::ReadFile(path), "not a journal at all, just some bytes");
  j = InventoryJournal::Open(dir.path() + "/missing/journal", &replay);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(Has(j.status().ToString(), dir.path() + "/missing/journal: open")) << j.status();
}

TEST(InventoryJournal, CompactionKeepsTheLiveSetInLessSpace) {
  TempDir dir;
  const std::string path = dir.path() + "/journal";
  InventoryJournal::Replay replay;
  {
    auto j = Open(path, &replay);
    for (uint64_t g = 1; g <= 200; ++g) {
      ASSERT_TRUE(j->Append({Commit(0, (g % 10) * 4096, g, "k" + std::to_string(g))}).ok());
      if (g % 3 == 0) {
        ASSERT_TRUE(j->Append({Free(0, (g % 10) * 4096, g)}).ok());
      }
    }
  }
  auto j = Open(path, &replay);
  const std::vector<InventoryRecord> live = replay.live;
  const uint64_t before = j->bytes();
  ASSERT_TRUE(j->Compact(live).ok());
  EXPECT_LT(j->bytes(), before / 10);
  // Appends after a compaction land in the new file.
  ASSERT_TRUE(j->Append({Commit(5, 0, 500, "late")}).ok());
  j.reset();
  j = Open(path, &replay);
  std::vector<std::string> want;
  for (const InventoryRecord& r : live) want.push_back(r.key);
  want.push_back("late");
  EXPECT_EQ(Keys(replay), want);
  EXPECT_FALSE(std::filesystem::exists(path + ".compact"));
}

}  // namespace
}  // namespace granary::node
