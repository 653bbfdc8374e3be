#include "master/timer_wheel.h"

#include <algorithm>
#include <limits>

namespace granary::master {

namespace {
// last_tick_ until the first Advance. Not -1: that is a real tick (the one before tick 0).
constexpr int64_t kNotStarted = std::numeric_limits<int64_t>::min();
}  // namespace

TimerWheel::TimerWheel(int64_t tick_ms, size_t buckets)
    : tick_ms_(tick_ms), buckets_(buckets), last_tick_(kNotStarted) {}

void TimerWheel::Add(int64_t deadline_ms, std::string key, uint64_t generation) {
  granary::common::MutexLock lock(&mu_);
  int64_t tick = deadline_ms / tick_ms_;
  // A tick already passed is due at the next Advance.
  if (last_tick_ != kNotStarted && tick <= last_tick_) tick = last_tick_ + 1;
  const int64_t n = static_cast<int64_t>(buckets_.size());
  buckets_[static_cast<size_t>((tick % n + n) % n)].push_back(
      Entry{deadline_ms, std::move(key), generation});
  ++size_;
}

bool TimerWheel::Remove(int64_t deadline_ms, uint64_t generation) {
  granary::common::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(buckets_.size());
  const int64_t tick = deadline_ms / tick_ms_;
  auto& bucket = buckets_[static_cast<size_t>((tick % n + n) % n)];
  // From the back: a put commits soon after it started, so its entry is among the newest of
  // its tick's bucket; the scan is then as long as the puts in flight, not the bucket.
  for (size_t j = bucket.size(); j-- > 0;) {
    if (bucket[j].generation != generation || bucket[j].deadline_ms != deadline_ms) continue;
    if (j + 1 != bucket.size()) bucket[j] = std::move(bucket.back());
    bucket.pop_back();
    // A bucket fills during one tick and then empties as those puts commit: give its memory
    // back rather than holding it for a whole lap.
    if (bucket.empty()) std::vector<Entry>().swap(bucket);
    --size_;
    return true;
  }
  return false;
}

std::vector<TimerWheel::Entry> TimerWheel::Advance(int64_t now_ms) {
  granary::common::MutexLock lock(&mu_);
  std::vector<Entry> due;
  const int64_t n = static_cast<int64_t>(buckets_.size());
  int64_t now_tick = now_ms / tick_ms_;
  // The first Advance visits every bucket: entries added before it may be due already.
  if (last_tick_ == kNotStarted) last_tick_ = now_tick - n;
  if (now_tick <= last_tick_) return due;
  int64_t steps = std::min<int64_t>(now_tick - last_tick_, n);
  for (int64_t i = 0; i < steps; ++i) {
    int64_t tick = now_tick - i;
    auto& bucket = buckets_[static_cast<size_t>((tick % n + n) % n)];
    size_t kept = 0;
    for (size_t j = 0; j < bucket.size(); ++j) {
      if (bucket[j].deadline_ms <= now_ms) {
        due.push_back(std::move(bucket[j]));
      } else {
        // Never self-move: a moved-onto-itself std::string is left empty.
        if (kept != j) bucket[kept] = std::move(bucket[j]);
        ++kept;
      }
    }
    bucket.resize(kept);
    if (bucket.empty()) std::vector<Entry>().swap(bucket);
  }
  // The current tick may still hold entries due later in it: visit it again next time.
  last_tick_ = now_tick - 1;
  size_ -= due.size();
  return due;
}

size_t TimerWheel::size() const {
  granary::common::MutexLock lock(&mu_);
  return size_;
}

}  // namespace granary::master
