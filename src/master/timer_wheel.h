#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace granary::master {

// A hashed timing wheel of deadlines. Add is O(1); Advance visits only the buckets of the ticks
// that passed (each entry is looked at once per lap of the wheel), so no periodic full scan.
// Thread-safe.
class TimerWheel {
 public:
  struct Entry {
    int64_t deadline_ms;
    std::string key;  // the object's table key
    uint64_t generation;
  };
  explicit TimerWheel(int64_t tick_ms, size_t buckets = 4096);

  void Add(int64_t deadline_ms, std::string key, uint64_t generation);
  // Drops the entry of `generation` added with `deadline_ms`, once it is moot (the put
  // committed), so the wheel holds only what can still run out. O(entries of that tick added
  // after it), which for a put that commits promptly is about the puts in flight. False
  // when it is not there: already due, or its tick had passed when it was added (it then fires
  // at the next Advance, harmlessly).
  bool Remove(int64_t deadline_ms, uint64_t generation);
  // Removes and returns every entry whose deadline is <= now_ms.
  std::vector<Entry> Advance(int64_t now_ms);
  size_t size() const;

 private:
  const int64_t tick_ms_;
  mutable granary::common::Mutex mu_;
  std::vector<std::vector<Entry>> buckets_ ABSL_GUARDED_BY(mu_);
  int64_t last_tick_ ABSL_GUARDED_BY(mu_) = -1;
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace granary::master
