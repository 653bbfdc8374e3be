#include "master/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace granary::master {
namespace {

// The deadlines of fired entries, sorted (the wheel promises no order).
std::vector<int64_t> Deadlines(const std::vector<TimerWheel::Entry>& entries) {
  std::vector<int64_t> out;
  for (const auto& e : entries) out.push_back(e.deadline_ms);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TimerWheel, NothingIsDueBeforeItsDeadline) {
  TimerWheel w(/*tick_ms=*/50);
  w.Add(1000, "a", 1);
  w.Add(1049, "b", 2);  // same tick as "a", later in it
  for (int64_t now = 0; now < 1000; ++now) {
    ASSERT_TRUE(w.Advance(now).empty()) << "at " << now;
  }
  EXPECT_EQ(w.size(), 2u);
}

TEST(TimerWheel, EntryIsDueExactlyAtItsDeadlineWithItsKeyAndGeneration) {
  TimerWheel w(/*tick_ms=*/50);
  EXPECT_TRUE(w.Advance(0).empty());
  w.Add(1000, "obj/key", 77);
  EXPECT_TRUE(w.Advance(999).empty());
  std::vector<TimerWheel::Entry> due = w.Advance(1000);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].deadline_ms, 1000);
  EXPECT_EQ(due[0].key, "obj/key");
  EXPECT_EQ(due[0].generation, 77u);
  EXPECT_TRUE(w.Advance(1001).empty());
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimerWheel, RemovedEntriesNeverFireAndOthersStillDo) {
  TimerWheel w(/*tick_ms=*/50);
  EXPECT_TRUE(w.Advance(0).empty());
  for (uint64_t g = 1; g <= 100; ++g) w.Add(1000 + static_cast<int64_t>(g % 3), "k", g);
  EXPECT_EQ(w.size(), 100u);
  // Every even generation commits: its entry goes.
  for (uint64_t g = 2; g <= 100; g += 2) {
    EXPECT_TRUE(w.Remove(1000 + static_cast<int64_t>(g % 3), g)) << g;
  }
  EXPECT_EQ(w.size(), 50u);
  // Twice, a wrong deadline, an unknown generation: nothing to remove.
  EXPECT_FALSE(w.Remove(1000 + 2 % 3, 2));
  EXPECT_FALSE(w.Remove(5000, 3));
  EXPECT_FALSE(w.Remove(1000 + 3 % 3, 1000));
  std::set<uint64_t> fired;
  for (const auto& e : w.Advance(1100)) fired.insert(e.generation);
  EXPECT_EQ(fired.size(), 50u);
  for (uint64_t g : fired) EXPECT_EQ(g % 2, 1u) << g;
  EXPECT_EQ(w.size(), 0u);
  EXPECT_FALSE(w.Remove(1001, 1));  // already fired
}

TEST(TimerWheel, EntriesForTheCurrentTickDueLaterInItAreNotLost) {
  // Stepping 1 ms with a 50 ms tick: each entry added mid-tick fires at its exact deadline.
  TimerWheel w(/*tick_ms=*/50);
  ASSERT_TRUE(w.Advance(100).empty());
  uint64_t id = 0;
  std::set<std::pair<int64_t, uint64_t>> pending;
  for (int64_t now = 101; now <= 400; ++now) {
    for (int64_t ahead : {0, 1, 7, 48}) {  // 0 is due now; the rest may be in this tick
      w.Add(now + ahead, "k", ++id);
      pending.insert({now + ahead, id});
    }
    for (const auto& e : w.Advance(now)) {
      EXPECT_EQ(e.deadline_ms, now) << "fired at " << now << ", not exactly at its deadline";
      EXPECT_EQ(pending.erase({e.deadline_ms, e.generation}), 1u);
    }
  }
  for (const auto& [deadline, gen] : pending) EXPECT_GT(deadline, 400) << gen;
}

TEST(TimerWheel, PastDeadlineAddedLateFiresAtTheNextAdvance) {
  TimerWheel w(/*tick_ms=*/50);
  ASSERT_TRUE(w.Advance(1000).empty());
  w.Add(10, "late", 1);
  w.Add(1000, "now", 2);
  EXPECT_EQ(Deadlines(w.Advance(1001)), (std::vector<int64_t>{10, 1000}));
}

TEST(TimerWheel, EntriesAddedBeforeTheFirstAdvanceFireWhenDue) {
  // The clock does not start at zero: the first Advance is long after these deadlines.
  TimerWheel w(/*tick_ms=*/50);
  w.Add(1'000'010, "a", 1);
  w.Add(1'000'700, "b", 2);
  w.Add(1'900'000, "c", 3);
  EXPECT_EQ(Deadlines(w.Advance(1'001'000)), (std::vector<int64_t>{1'000'010, 1'000'700}));
  EXPECT_EQ(w.size(), 1u);
  EXPECT_TRUE(w.Advance(1'899'999).empty());
  EXPECT_EQ(Deadlines(w.Advance(1'900'000)), (std::vector<int64_t>{1'900'000}));
}

TEST(TimerWheel, KeysAndGenerationsSurviveBeingKeptInTheirBucket) {
  // Entries visited and kept (a lap early, or sharing a bucket with an entry that fires) must
  // come out later with the key and generation they were added with.
  TimerWheel w(/*tick_ms=*/10, /*buckets=*/4);  // one lap is 40 ms
  ASSERT_TRUE(w.Advance(0).empty());
  const std::string long_key(100, 'L');  // beyond the small-string buffer
  w.Add(205, long_key, 1);               // visited on five laps before it is due
  w.Add(48, "s", 2);                     // kept at 45 while the next one fires
  w.Add(45, "fires-first", 3);
  std::vector<TimerWheel::Entry> due = w.Advance(45);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, "fires-first");
  due = w.Advance(48);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, "s");
  EXPECT_EQ(due[0].generation, 2u);
  for (int64_t now = 49; now < 205; ++now) ASSERT_TRUE(w.Advance(now).empty()) << now;
  due = w.Advance(205);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, long_key);
  EXPECT_EQ(due[0].generation, 1u);
}

TEST(TimerWheel, DeadlinesMoreThanOneLapAheadAreNotFiredEarly) {
  // 8 buckets of 10 ms: one lap is 80 ms. These share buckets with earlier ticks.
  TimerWheel w(/*tick_ms=*/10, /*buckets=*/8);
  ASSERT_TRUE(w.Advance(0).empty());
  w.Add(80, "one lap", 1);
  w.Add(85, "one lap and a bit", 2);
  w.Add(1000, "many laps", 3);
  for (int64_t now = 1; now < 80; ++now) ASSERT_TRUE(w.Advance(now).empty()) << now;
  EXPECT_EQ(Deadlines(w.Advance(80)), (std::vector<int64_t>{80}));
  for (int64_t now = 81; now < 85; ++now) ASSERT_TRUE(w.Advance(now).empty()) << now;
  EXPECT_EQ(Deadlines(w.Advance(85)), (std::vector<int64_t>{85}));
  for (int64_t now = 86; now < 1000; now += 3) ASSERT_TRUE(w.Advance(now).empty()) << now;
  EXPECT_EQ(Deadlines(w.Advance(1000)), (std::vector<int64_t>{1000}));
}

TEST(TimerWheel, LongGapFiresEverythingDueAndKeepsTheRest) {
  TimerWheel w(/*tick_ms=*/10, /*buckets=*/8);  // one lap is 80 ms
  ASSERT_TRUE(w.Advance(0).empty());
  size_t due_by_gap = 0;
  for (int64_t d = 1; d <= 1200; d += 3) {
    w.Add(d, "k", static_cast<uint64_t>(d));
    if (d <= 800) ++due_by_gap;
  }
  const size_t total = w.size();
  std::vector<TimerWheel::Entry> due = w.Advance(800);  // ten laps at once
  EXPECT_EQ(due.size(), due_by_gap);
  for (const auto& e : due) EXPECT_LE(e.deadline_ms, 800);
  EXPECT_EQ(w.size(), total - due_by_gap);
  due = w.Advance(1200);
  EXPECT_EQ(due.size(), total - due_by_gap);
  for (const auto& e : due) EXPECT_GT(e.deadline_ms, 800);
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimerWheel, SizeCountsAddedEntriesNotYetFired) {
  TimerWheel w(/*tick_ms=*/50);
  EXPECT_EQ(w.size(), 0u);
  w.Add(100, "a", 1);
  w.Add(200, "b", 2);
  w.Add(200, "b", 2);  // duplicates are separate entries
  EXPECT_EQ(w.size(), 3u);
  EXPECT_TRUE(w.Advance(99).empty());
  EXPECT_EQ(w.size(), 3u);
  EXPECT_EQ(w.Advance(150).size(), 1u);
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(w.Advance(200).size(), 2u);
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimerWheel, RandomDeadlinesFireExactlyOnceNeverEarlyNeverLate) {
  // 64 buckets of 10 ms (a 640 ms lap); steps of up to 700 ms sometimes skip a whole lap.
  TimerWheel w(/*tick_ms=*/10, /*buckets=*/64);
  std::mt19937_64 rng(42);
  std::set<std::pair<int64_t, uint64_t>> reference;  // (deadline, id) not yet fired
  uint64_t next_id = 0;
  auto add = [&](int64_t deadline) {
    uint64_t id = next_id++;
    w.Add(deadline, std::to_string(id), id);
    reference.insert({deadline, id});
  };
  const int64_t start = 5'000'003;  // the first Advance comes after the first Adds
  for (int i = 0; i < 50'000; ++i) add(start + static_cast<int64_t>(rng() % 20'000));
  int64_t now = start;
  size_t fired = 0;
  while (fired < 100'000) {
    now += 1 + static_cast<int64_t>(rng() % (rng() % 8 == 0 ? 700 : 40));
    for (const auto& e : w.Advance(now)) {
      ASSERT_LE(e.deadline_ms, now) << "fired early: id " << e.generation;
      ASSERT_EQ(e.key, std::to_string(e.generation));
      ASSERT_EQ(reference.erase({e.deadline_ms, e.generation}), 1u)
          << "fired twice or never added: id " << e.generation;
      ++fired;
    }
    ASSERT_TRUE(reference.empty() || reference.begin()->first > now)
        << "not fired by " << now << ": deadline " << reference.begin()->first;
    ASSERT_EQ(w.size(), reference.size());
    // Keep adding while time runs, including deadlines already past and far ahead.
    for (int i = 0; i < 8 && next_id < 100'000; ++i) {
      add(now - 50 + static_cast<int64_t>(rng() % 3'000));
    }
  }
  EXPECT_EQ(next_id, 100'000u);
  EXPECT_TRUE(reference.empty());
  EXPECT_EQ(w.size(), 0u);
}

}  // namespace
}  // namespace granary::master
