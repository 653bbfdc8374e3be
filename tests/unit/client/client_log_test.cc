// A client's log lines go to the sink and level of its ClientOptions, not to the process's.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/log.h"
#include "common/mutex.h"
#include "granary/client.h"

namespace granary {
namespace {

class CaptureSink : public LogSink {
 public:
  void Write(LogLevel level, absl::string_view line) override {
    granary::common::MutexLock lock(&mu_);
    lines_.emplace_back(level, std::string(line));
  }
  bool Saw(absl::string_view needle) {
    granary::common::MutexLock lock(&mu_);
    for (const auto& [level, line] : lines_) {
      if (absl::StrContains(line, needle)) return true;
    }
    return false;
  }

 private:
  granary::common::Mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_ ABSL_GUARDED_BY(mu_);
};

// Nothing listens on port 1: Create logs that it connects, then fails.
ClientOptions Unreachable(std::shared_ptr<LogSink> sink, LogLevel level) {
  ClientOptions o;
  o.master_server_address = "127.0.0.1:1";
  o.rpc_timeout_ms = 2000;
  o.log_level = level;
  o.log_sink = std::move(sink);
  return o;
}

TEST(ClientLogTest, TheSinkSeesTheClientsLines) {
  auto sink = std::make_shared<CaptureSink>();
  const LogLevel process_level = common::GetLogLevel();
  auto c = Client::Create(Unreachable(sink, LogLevel::kDebug));
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(sink->Saw("connecting to the master at 127.0.0.1:1"));
  EXPECT_EQ(common::GetLogLevel(), process_level);  // the process's threshold is left as it was
}

TEST(ClientLogTest, LinesBelowTheLevelAreDropped) {
  auto sink = std::make_shared<CaptureSink>();
  auto c = Client::Create(Unreachable(sink, LogLevel::kWarning));
  EXPECT_FALSE(c.ok());
  EXPECT_FALSE(sink->Saw("connecting to the master"));
}

// The device name reaches the UCX context: its opened resources, read back, are tcp on lo only.
TEST(ClientLogTest, AGivenDeviceNameConfiguresTheUcxContext) {
  auto sink = std::make_shared<CaptureSink>();
  ClientOptions o = Unreachable(sink, LogLevel::kInfo);
  o.device_name = "lo";
  auto c = Client::Create(o);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(sink->Saw("network device lo (device_name); UCX opened: tcp/lo\n"));
}

TEST(ClientLogTest, AnUnknownDeviceNameFailsCreate) {
  ClientOptions o = Unreachable(std::make_shared<CaptureSink>(), LogLevel::kInfo);
  o.device_name = "lo,mlx9_9:1";
  auto c = Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(c.status().message(),
                                "device_name 'mlx9_9:1' is not an RDMA port, RDMA device or "
                                "network interface of this host (/sys has: "))
      << c.status();
}

}  // namespace
}  // namespace granary
