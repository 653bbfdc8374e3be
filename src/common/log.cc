#include "common/log.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace granary::common {
namespace {

LogLevel InitialLevel() {
  const char* env = std::getenv("GRANARY_LOG_LEVEL");
  LogLevel level = LogLevel::kInfo;
  if (env != nullptr) ParseLogLevel(env, &level);
  return level;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(InitialLevel())};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Level().load(std::memory_order_relaxed)); }

bool ParseLogLevel(absl::string_view text, LogLevel* out) {
  if (text == "debug")
    *out = LogLevel::kDebug;
  else if (text == "info")
    *out = LogLevel::kInfo;
  else if (text == "warning" || text == "warn")
    *out = LogLevel::kWarning;
  else if (text == "error")
    *out = LogLevel::kError;
  else
    return false;
  return true;
}

namespace internal {

constinit thread_local const LogRoute* thread_log_route = nullptr;

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = "DIWEF";
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm tm_utc;
  gmtime_r(&ts.tv_sec, &tm_utc);
  char when[32];
  strftime(when, sizeof(when), "%m%d %H:%M:%S", &tm_utc);
  const char* base = std::strrchr(file, '/');
  char prefix[96];
  snprintf(prefix, sizeof(prefix), "%c%s.%06ld %ld %s:%d] ", kLetters[static_cast<int>(level)],
           when, ts.tv_nsec / 1000, static_cast<long>(syscall(SYS_gettid)), base ? base + 1 : file,
           line);
  stream_ << prefix;
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  const LogRoute* route = thread_log_route;
  if (route != nullptr && route->sink != nullptr) {
    route->sink->Write(level_, text);
  } else {
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace internal
}  // namespace granary::common
