#pragma once

#include <sstream>

#include "absl/strings/string_view.h"
#include "granary/log_sink.h"

namespace granary::common {

// Process-wide threshold; messages below it are not formatted at all. Set from the
// GRANARY_LOG_LEVEL environment variable (debug|info|warning|error) at first use, or by
// SetLogLevel. Thread-safe. The daemons and tools set it; a library never does.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool ParseLogLevel(absl::string_view text, LogLevel* out);

// Where the lines logged on one thread go instead of the process-wide default (stderr, at the
// threshold above). A library that runs inside another program (the client) sets a route on
// its own threads and, for the length of a call, on the caller's, so its lines reach the sink
// and level that program chose without changing the process's settings. The route's owner
// keeps it alive while any thread uses it.
struct LogRoute {
  int level = -1;           // a LogLevel, or -1: the process-wide threshold
  LogSink* sink = nullptr;  // null: stderr
};

namespace internal {
extern constinit thread_local const LogRoute* thread_log_route;
}  // namespace internal

// Sets the calling thread's route (null: the default) until the next call or the thread's end.
inline void SetThreadLogRoute(const LogRoute* route) { internal::thread_log_route = route; }

// The route for one scope on the calling thread; restores the previous one when it ends.
// Cost: two thread-local stores.
class ScopedLogRoute {
 public:
  explicit ScopedLogRoute(const LogRoute* route) : previous_(internal::thread_log_route) {
    internal::thread_log_route = route;
  }
  ~ScopedLogRoute() { internal::thread_log_route = previous_; }
  ScopedLogRoute(const ScopedLogRoute&) = delete;
  ScopedLogRoute& operator=(const ScopedLogRoute&) = delete;

 private:
  const LogRoute* const previous_;
};

// Whether a line at `level` logged on this thread would go anywhere. One thread-local load and
// one relaxed atomic load.
inline bool LogEnabled(LogLevel level) {
  const LogRoute* route = internal::thread_log_route;
  const int threshold =
      route != nullptr && route->level >= 0 ? route->level : static_cast<int>(GetLogLevel());
  return static_cast<int>(level) >= threshold;
}

namespace internal {
// One log line; handed to the thread's route's sink, or written to stderr in one write(), when
// destroyed. kFatal aborts.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace granary::common

#define GRANARY_LOG_ENABLED(level) (::granary::common::LogEnabled(::granary::LogLevel::level))
#define GRANARY_LOG_AT(level)                                                           \
  !GRANARY_LOG_ENABLED(level) ? (void)0                                                 \
                              : ::granary::common::internal::Voidify() &                \
                                    ::granary::common::internal::LogMessage(            \
                                        ::granary::LogLevel::level, __FILE__, __LINE__) \
                                        .stream()
#define GRANARY_LOG_DEBUG GRANARY_LOG_AT(kDebug)
#define GRANARY_LOG_INFO GRANARY_LOG_AT(kInfo)
#define GRANARY_LOG_WARN GRANARY_LOG_AT(kWarning)
#define GRANARY_LOG_ERROR GRANARY_LOG_AT(kError)

// CHECK: a broken internal invariant crashes loudly. Never use it on user input.
#define GRANARY_CHECK(cond)                                                                   \
  (cond) ? (void)0                                                                            \
         : ::granary::common::internal::Voidify() &                                           \
               ::granary::common::internal::LogMessage(::granary::LogLevel::kFatal, __FILE__, \
                                                       __LINE__)                              \
                       .stream()                                                              \
                   << "CHECK failed: " #cond " "
