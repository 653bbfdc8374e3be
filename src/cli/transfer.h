#pragma once

// The CLI's local input and output: the progress line of long transfers, reading and writing
// files (or stdin and stdout), and the rate summary line.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/size.h"

namespace granary::cli {

// A progress line on stderr for long transfers: "\r<what>: <bytes> of <total> (<rate>)",
// redrawn at most every 100 ms, and only when stderr is a terminal (never in a pipe or a log).
// Update and Done are called by one thread (the command's), Tick by the ticker thread of a
// transfer; one mutex orders their writes.
class Progress {
 public:
  Progress(std::string what, uint64_t total)
      : what_(std::move(what)),
        total_(total),
        on_(isatty(2) == 1),
        t0_(granary::common::MonotonicUs()) {}
  ~Progress() { Done(); }
  bool on() const { return on_; }
  // `done` bytes of the phase `phase` ("read", "sent", "written") are through.
  void Update(const char* phase, uint64_t done) {
    if (!on_) return;
    granary::common::MutexLock lock(&mu_);
    const int64_t now = granary::common::MonotonicUs();
    if (now - last_us_ < 100'000 && done < total_) return;
    last_us_ = now;
    const double s = static_cast<double>(std::max<int64_t>(now - t0_, 1)) / 1e6;
    std::string line =
        absl::StrFormat("%s: %s %s", what_, granary::common::FormatSize(done), phase);
    if (total_ > 0) {
      absl::StrAppendFormat(&line, " of %s (%.0f%%)", granary::common::FormatSize(total_),
                            100.0 * static_cast<double>(done) / static_cast<double>(total_));
    }
    absl::StrAppendFormat(
        &line, ", %s/s, %.1f s",
        granary::common::FormatSize(static_cast<uint64_t>(static_cast<double>(done) / s)), s);
    fprintf(stderr, "\r\033[K%s", line.c_str());
    drawn_ = true;
  }
  // The transfer itself is one call: while it runs, a line says how long it has taken.
  template <typename F>
  auto Around(const char* phase, F&& call) {
    if (!on_) return call();
    std::atomic<bool> finished{false};
    std::thread ticker([&] {
      while (!finished.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (finished.load()) break;
        granary::common::MutexLock lock(&mu_);
        const double s = static_cast<double>(granary::common::MonotonicUs() - t0_) / 1e6;
        fprintf(stderr, "\r\033[K%s: %s %s, %.1f s", what_.c_str(), phase,
                granary::common::FormatSize(total_).c_str(), s);
        drawn_ = true;
      }
    });
    auto result = call();
    finished.store(true);
    ticker.join();
    return result;
  }
  // Clears the line, so the command's own summary line follows on a clean terminal.
  void Done() {
    granary::common::MutexLock lock(&mu_);
    if (drawn_) fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  const std::string what_;
  const uint64_t total_;
  const bool on_;
  const int64_t t0_;
  granary::common::Mutex mu_;
  int64_t last_us_ ABSL_GUARDED_BY(mu_) = 0;
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads from `fd` into `data` (appending) until it holds `limit` bytes or the input ends.
[[nodiscard]] absl::Status ReadUpTo(int fd, const std::string& what, size_t limit,
                                    std::string* data, Progress* progress);

// Reads a small file whole (the token file), refusing one that holds more than `limit` bytes
// (a device such as /dev/zero is never read to its end).
[[nodiscard]] absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit);

// Writes `data` to `path` ("-": stdout), created or truncated.
[[nodiscard]] absl::Status WriteAll(const std::string& path, const std::string& data,
                                    Progress* progress = nullptr);

// "<size> in <ms> ms (<GB/s> GB/s)".
std::string Rate(uint64_t bytes, int64_t us);

}  // namespace granary::cli
