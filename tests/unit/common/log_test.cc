#include "common/log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace granary {
namespace {

class VectorSink : public LogSink {
 public:
  void Write(LogLevel level, absl::string_view line) override {
    levels.push_back(level);
    lines.emplace_back(line);
  }
  std::vector<LogLevel> levels;
  std::vector<std::string> lines;
};

int formatted = 0;
int Counted() {
  ++formatted;
  return 1;
}

TEST(LogTest, ARouteSendsTheThreadsLinesToItsSinkAtItsLevel) {
  VectorSink sink;
  common::LogRoute route{static_cast<int>(LogLevel::kWarning), &sink};
  {
    common::ScopedLogRoute scope(&route);
    formatted = 0;
    GRANARY_LOG_INFO << "dropped " << Counted();
    EXPECT_EQ(formatted, 0) << "a line below the level was formatted";
    GRANARY_LOG_WARN << "kept " << Counted();
    EXPECT_EQ(formatted, 1);
  }
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_EQ(sink.levels[0], LogLevel::kWarning);
  EXPECT_EQ(sink.lines[0][0], 'W');
  EXPECT_NE(sink.lines[0].find("log_test.cc"), std::string::npos);
  EXPECT_NE(sink.lines[0].find("] kept 1\n"), std::string::npos);
  // Out of the scope, lines go to the default again (stderr), not to the sink.
  GRANARY_LOG_ERROR << "to stderr";
  EXPECT_EQ(sink.lines.size(), 1u);
}

TEST(LogTest, ARouteWithoutALevelFollowsTheProcessThreshold) {
  VectorSink sink;
  common::LogRoute route{-1, &sink};
  common::ScopedLogRoute scope(&route);
  const LogLevel before = common::GetLogLevel();
  common::SetLogLevel(LogLevel::kError);
  GRANARY_LOG_WARN << "dropped";
  GRANARY_LOG_ERROR << "kept";
  common::SetLogLevel(before);
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_NE(sink.lines[0].find("kept"), std::string::npos);
}

}  // namespace
}  // namespace granary
