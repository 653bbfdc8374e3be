#pragma once

#include "absl/strings/string_view.h"

namespace granary {

// How much a log line matters. Lines below a threshold are not formatted at all.
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Where a program wants the library's log lines (ClientOptions::log_sink). Write gets each
// line whole, formatted as "I1201 20:30:00.123456 <thread id> <file>:<line>] <message>\n"
// (the first letter is the level). It is called from the library's threads and from the
// threads that call the library, concurrently, so it must be thread-safe; it must not call back
// into the library, and should not block for long (the data path waits for it).
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void Write(LogLevel level, absl::string_view line) = 0;
};

}  // namespace granary
