#include "common/clock.h"

#include <time.h>

namespace granary::common {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t MonotonicUs() { return MonotonicNs() / 1000; }

int64_t SystemClock::NowMs() const { return MonotonicNs() / 1'000'000; }

SystemClock* SystemClock::Default() {
  static SystemClock clock;
  return &clock;
}

}  // namespace granary::common
