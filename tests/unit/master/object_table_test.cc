#include "master/object_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace granary::master {
namespace {

const absl::string_view kNul("\0", 1);  // the table key's separator

// What a table holds, as a reference model: key -> (generation, replica count).
using Model = std::map<std::string, std::pair<uint64_t, size_t>>;

void ExpectMatches(const ObjectTable& table, const Model& model) {
  ASSERT_EQ(table.size(), model.size());
  Model seen;
  for (const auto& [key, o] : table) {
    EXPECT_TRUE(seen.emplace(std::string(key), std::pair(o.generation, o.replicas.size())).second)
        << "key '" << key << "' iterated twice";
  }
  EXPECT_EQ(seen, model);
  for (const auto& [key, value] : model) {
    auto it = table.find(key);
    ASSERT_TRUE(it != table.end()) << key;
    EXPECT_EQ(it->first, key);
    EXPECT_EQ(it->second.generation, value.first) << key;
  }
}

Placements ReplicasFor(uint64_t n) {
  Placements ps;
  for (uint64_t i = 0; i < n; ++i) ps.push_back(Placement{100 + i, 4096 * i, 4096, 0});
  return ps;
}

TEST(ObjectTable, InsertFindErase) {
  ObjectTable table;
  EXPECT_TRUE(table.empty());
  EXPECT_TRUE(table.find("a") == table.end());
  auto [it, fresh] = table.try_emplace("tenant");
  EXPECT_TRUE(fresh);
  EXPECT_EQ(it->second.generation, 0u);  // a default Object
  EXPECT_EQ(it->second.state, ObjectState::kProcessing);
  it->second.generation = 7;
  it->second.replicas = ReplicasFor(3);  // on the heap

  const std::string with_nul("t\0k", 3);
  auto [it2, fresh2] = table.try_emplace(with_nul);
  EXPECT_TRUE(fresh2);
  it2->second.generation = 8;
  auto again = table.try_emplace(with_nul);
  EXPECT_FALSE(again.second);
  EXPECT_EQ(again.first->second.generation, 8u);
  EXPECT_TRUE(table.find(std::string("t\0j", 3)) == table.end());
  EXPECT_TRUE(table.find("t") == table.end());  // a prefix is another key
  EXPECT_EQ(table.size(), 2u);

  table.erase(table.find("tenant"));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.find("tenant") == table.end());
  // The freed slot is reused and comes back as a default Object (no stale replicas).
  auto [it3, fresh3] = table.try_emplace("other");
  EXPECT_TRUE(fresh3);
  EXPECT_EQ(it3->second.generation, 0u);
  EXPECT_TRUE(it3->second.replicas.empty());
  EXPECT_EQ(table.find(with_nul)->second.generation, 8u);
}

TEST(ObjectTable, EraseWhileIterating) {
  ObjectTable table;
  Model model;
  for (uint64_t i = 0; i < 5000; ++i) {
    const std::string key = absl::StrCat("tenant", kNul, "key-", i);
    table.try_emplace(key).first->second.generation = i;
    if (i % 3 != 0) model[key] = {i, 0};
  }
  for (auto it = table.begin(); it != table.end();) {
    if (it->second.generation % 3 == 0) {
      table.erase(it++);
    } else {
      ++it;
    }
  }
  ExpectMatches(table, model);
}

TEST(ObjectTable, RandomOperationsMatchAModelAcrossKeyCompaction) {
  ObjectTable table;
  Model model;
  std::mt19937_64 rng(42);
  std::vector<std::string> keys;
  uint64_t generation = 0;
  bool compacted = false;
  for (int round = 0; round < 6; ++round) {
    // Fill: long keys (up to 300 bytes) so that the dead bytes pass the compaction floor.
    for (int i = 0; i < 20000; ++i) {
      std::string key = absl::StrCat("t", round % 3, kNul, "k", rng() % 100000, "-");
      key.append(rng() % 300, static_cast<char>('a' + rng() % 26));
      auto [it, fresh] = table.try_emplace(key);
      if (fresh) {
        it->second.generation = ++generation;
        const size_t n = 1 + rng() % 3;
        it->second.replicas = ReplicasFor(n);
        model[key] = {generation, n};
        keys.push_back(std::move(key));
      } else {
        ASSERT_EQ(it->second.generation, model.at(key).first);
      }
    }
    // Drain most of it in random order.
    std::shuffle(keys.begin(), keys.end(), rng);
    const uint64_t arena_before = table.key_arena_bytes();
    while (keys.size() > 2000) {
      auto it = table.find(keys.back());
      ASSERT_TRUE(it != table.end()) << keys.back();
      table.erase(it);
      model.erase(keys.back());
      keys.pop_back();
    }
    ExpectMatches(table, model);
    // The next insert compacts the arena: fewer chunks, every key still found.
    table.try_emplace("after-drain").first->second.generation = ++generation;
    model["after-drain"] = {generation, 0};
    if (table.key_arena_bytes() < arena_before) {
      compacted = true;
      EXPECT_EQ(table.dead_key_bytes(), 0u);
    }
    ExpectMatches(table, model);
    table.erase(table.find("after-drain"));
    model.erase("after-drain");
    if (HasFailure()) return;
  }
  EXPECT_TRUE(compacted) << "the workload should have compacted the key arena";
}

TEST(ObjectTable, LongestKey) {
  ObjectTable table;
  const std::string longest(ObjectTable::kMaxKeyBytes, 'x');
  for (int i = 0; i < 10; ++i) {  // several per arena chunk, and across chunks
    std::string key = longest;
    key[0] = static_cast<char>('a' + i);
    table.try_emplace(key).first->second.generation = i + 1;
  }
  for (int i = 0; i < 10; ++i) {
    std::string key = longest;
    key[0] = static_cast<char>('a' + i);
    auto it = table.find(key);
    ASSERT_TRUE(it != table.end());
    EXPECT_EQ(it->second.generation, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(it->first.size(), ObjectTable::kMaxKeyBytes);
  }
}

TEST(ObjectTable, ForEachSlotVisitsEachElementOnceAndFindSlotSeesReuse) {
  ObjectTable table;
  Model model;
  for (uint64_t i = 0; i < 3000; ++i) {
    const std::string key = absl::StrCat("tenant", kNul, "key-", i);
    table.try_emplace(key).first->second.generation = i + 1;
    model[key] = {i + 1, 0};
  }
  for (uint64_t i = 0; i < 3000; i += 3) {
    const std::string key = absl::StrCat("tenant", kNul, "key-", i);
    table.erase(table.find(key));
    model.erase(key);
  }
  std::map<std::string, uint32_t> slot_of;
  bool first = true;
  uint32_t previous = 0;
  table.ForEachSlot([&](uint32_t slot, absl::string_view key, const Object& o) {
    EXPECT_TRUE(first || slot > previous) << "slots out of order: " << previous << ", " << slot;
    first = false;
    previous = slot;
    EXPECT_TRUE(slot_of.emplace(std::string(key), slot).second) << key << " visited twice";
    ASSERT_TRUE(model.count(std::string(key))) << "erased key " << key << " visited";
    EXPECT_EQ(o.generation, model.at(std::string(key)).first) << key;
  });
  EXPECT_EQ(slot_of.size(), model.size());
  for (const auto& [key, slot] : slot_of) {
    auto it = table.FindSlot(slot);
    ASSERT_TRUE(it != table.end()) << key;
    EXPECT_EQ(it->first, key);
  }
  // An erased slot is found empty; once reused it holds the newcomer, which the caller tells
  // apart by its object.
  const auto [victim, slot] = *slot_of.begin();
  table.erase(table.find(victim));
  EXPECT_TRUE(table.FindSlot(slot) == table.end());
  table.try_emplace("newcomer").first->second.generation = 99999;
  auto reused = table.FindSlot(slot);  // the last slot freed is the first reused
  ASSERT_TRUE(reused != table.end());
  EXPECT_EQ(reused->first, "newcomer");
  EXPECT_EQ(reused->second.generation, 99999u);
  EXPECT_TRUE(table.FindSlot(UINT32_MAX - 1) == table.end());  // never handed out
}

}  // namespace
}  // namespace granary::master
