#pragma once

#include <sstream>

#include "absl/strings/string_view.h"

namespace granary {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Process-wide threshold; messages below it are not formatted at all. Set from the
// GRANARY_LOG_LEVEL environment variable (debug|info|warning|error) at first use, or by
// SetLogLevel. Thread-safe.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
bool ParseLogLevel(absl::string_view text, LogLevel* out);

namespace internal {
// One log line; written to stderr in one write() when destroyed. kFatal aborts.
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
}  // namespace granary

#define GRANARY_LOG_ENABLED(level) (::granary::LogLevel::level >= ::granary::GetLogLevel())
#define LOG_AT(level)                                                                       \
  !GRANARY_LOG_ENABLED(level)                                                               \
      ? (void)0                                                                             \
      : ::granary::internal::Voidify() &                                                    \
            ::granary::internal::LogMessage(::granary::LogLevel::level, __FILE__, __LINE__) \
                .stream()
#define LOG_DEBUG LOG_AT(kDebug)
#define LOG_INFO LOG_AT(kInfo)
#define LOG_WARN LOG_AT(kWarning)
#define LOG_ERROR LOG_AT(kError)

// CHECK: a broken internal invariant crashes loudly. Never use it on user input.
#define GRANARY_CHECK(cond)                                                                     \
  (cond) ? (void)0                                                                              \
         : ::granary::internal::Voidify() &                                                     \
               ::granary::internal::LogMessage(::granary::LogLevel::kFatal, __FILE__, __LINE__) \
                       .stream()                                                                \
                   << "CHECK failed: " #cond " "
