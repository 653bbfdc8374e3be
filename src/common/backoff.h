#pragma once

// Bounded exponential back-off with jitter, for a loop that reconnects to a peer it cannot
// reach: the n-th wait in a row is uniform in [d/2, d], with d = min(initial * 2^(n-1), max), so
// the processes that lost the same peer do not come back in step, and none retries in a tight
// loop. Not thread-safe: one per loop, or under its owner's lock.

#include <algorithm>
#include <cstdint>
#include <random>

namespace granary {

class Backoff {
 public:
  Backoff(int64_t initial_ms, int64_t max_ms)
      : initial_ms_(std::max<int64_t>(1, initial_ms)),
        max_ms_(std::max(initial_ms_, max_ms)),
        next_ms_(initial_ms_),
        rng_(std::random_device{}()) {}

  // The wait after one more failure in a row.
  int64_t NextMs() {
    const int64_t d = next_ms_;
    next_ms_ = std::min(max_ms_, d * 2);
    ++failures_;
    return std::uniform_int_distribution<int64_t>(d - d / 2, d)(rng_);
  }
  // After a success: the next failure waits about initial_ms again.
  void Reset() {
    next_ms_ = initial_ms_;
    failures_ = 0;
  }
  // Failures since the last Reset.
  int failures() const { return failures_; }

 private:
  const int64_t initial_ms_;
  const int64_t max_ms_;
  int64_t next_ms_;
  int failures_ = 0;
  std::minstd_rand rng_;
};

}  // namespace granary
