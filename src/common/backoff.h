#pragma once

// Bounded exponential back-off with jitter, for a loop that reconnects to a peer it cannot
// reach: the n-th wait in a row is uniform in [d/2, d], with d = min(initial * 2^(n-1), max), so
// the processes that lost the same peer do not come back in step, and none retries in a tight
// loop. Not thread-safe: one per loop, or under its owner's lock.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace granary::common {

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

// Peers held off after timed-out transfers, by address: each timeout holds its peer for the
// next wait of a Backoff(initial_ms, max_ms); while held, Check refuses the peer at once with
// UNAVAILABLE (naming it, the timeouts in a row and the time left) instead of letting the
// caller connect again. A peer that went 2 x max_ms past its last hold without a timeout
// starts afresh. Used by the RmaEngine (one-sided endpoints) and the client's node control
// connections. Not thread-safe: under its owner's lock or on its owner's thread.
class PeerHolds {
 public:
  using Clock = std::chrono::steady_clock;

  PeerHolds(int64_t initial_ms, int64_t max_ms) : initial_ms_(initial_ms), max_ms_(max_ms) {}

  // After a transfer to `address` timed out. A peer already held stays held as it is (two
  // transfers of one batch, or two batches, that timed out together count once).
  void Hold(absl::string_view address, Clock::time_point now = Clock::now()) {
    auto it = holds_.find(address);
    if (it == holds_.end()) {
      it = holds_.emplace(std::string(address), Entry{Backoff(initial_ms_, max_ms_), {}}).first;
    }
    Entry& h = it->second;
    if (now < h.until) return;
    if (now - h.until > std::chrono::milliseconds(2 * max_ms_)) h.backoff.Reset();
    h.until = now + std::chrono::milliseconds(h.backoff.NextMs());
  }

  // Whether `address` is held off at `now`.
  bool Held(absl::string_view address, Clock::time_point now = Clock::now()) const {
    auto it = holds_.find(address);
    return it != holds_.end() && now < it->second.until;
  }

  // OK, or UNAVAILABLE while `address` is held off.
  absl::Status Check(absl::string_view address, Clock::time_point now = Clock::now()) const {
    auto it = holds_.find(address);
    if (it == holds_.end() || now >= it->second.until) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "node ", address, " is unreachable (", it->second.backoff.failures(),
        " timed-out transfers in a row); next attempt in ",
        std::chrono::duration_cast<std::chrono::milliseconds>(it->second.until - now).count(),
        " ms"));
  }

 private:
  struct Entry {
    Backoff backoff;
    Clock::time_point until;
  };
  const int64_t initial_ms_;
  const int64_t max_ms_;
  absl::flat_hash_map<std::string, Entry> holds_;
};

}  // namespace granary::common
