#pragma once

#include <atomic>
#include <cstdint>

namespace granary::common {

// Monotonic milliseconds. The master takes a Clock* so that tests can drive time.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
};

// CLOCK_MONOTONIC. Use Default() for the process-wide instance.
class SystemClock : public Clock {
 public:
  int64_t NowMs() const override;
  static SystemClock* Default();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void AdvanceMs(int64_t ms) { now_.fetch_add(ms); }

 private:
  std::atomic<int64_t> now_;
};

// Monotonic microseconds and nanoseconds, for latency figures.
int64_t MonotonicUs();
int64_t MonotonicNs();

}  // namespace granary::common
