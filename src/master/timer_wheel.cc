#include "master/timer_wheel.h"

#include <algorithm>

namespace granary::master {

TimerWheel::TimerWheel(int64_t tick_ms, size_t buckets) : tick_ms_(tick_ms), buckets_(buckets) {}

void TimerWheel::Add(int64_t deadline_ms, std::string key, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  int64_t tick = deadline_ms / tick_ms_;
  if (last_tick_ >= 0 && tick <= last_tick_) tick = last_tick_ + 1;  // due at the next Advance
  buckets_[static_cast<size_t>(tick) % buckets_.size()].push_back(
      Entry{deadline_ms, std::move(key), generation});
  ++size_;
}

std::vector<TimerWheel::Entry> TimerWheel::Advance(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> due;
  int64_t now_tick = now_ms / tick_ms_;
  if (last_tick_ < 0) last_tick_ = now_tick - 1;
  if (now_tick < last_tick_ + 1) return due;
  int64_t steps = std::min<int64_t>(now_tick - last_tick_, static_cast<int64_t>(buckets_.size()));
  for (int64_t i = 0; i < steps; ++i) {
    auto& bucket = buckets_[static_cast<size_t>(now_tick - i) % buckets_.size()];
    size_t kept = 0;
    for (auto& e : bucket) {
      if (e.deadline_ms <= now_ms) {
        due.push_back(std::move(e));
      } else {
        bucket[kept++] = std::move(e);
      }
    }
    bucket.resize(kept);
  }
  // The current tick may still hold entries due later in it: visit it again next time.
  last_tick_ = now_tick - 1;
  size_ -= due.size();
  return due;
}

size_t TimerWheel::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

}  // namespace granary::master
