// On a host without RDMA devices (this one), clients fall back to UCX's choice of network
// devices and say so once per process, however many clients it makes. Its own binary: the
// "once" is the process's.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/mutex.h"
#include "granary/client.h"

namespace granary {
namespace {

class CountingSink : public LogSink {
 public:
  explicit CountingSink(std::string needle) : needle_(std::move(needle)) {}
  void Write(LogLevel, absl::string_view line) override {
    granary::common::MutexLock lock(&mu_);
    if (absl::StrContains(line, needle_)) ++count_;
  }
  int count() {
    granary::common::MutexLock lock(&mu_);
    return count_;
  }

 private:
  const std::string needle_;
  granary::common::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ClientTopologyTest, TheFallbackIsSaidOncePerProcess) {
  const std::string line =
      "] topology: no RDMA devices under /sys/class/infiniband: UCX chooses the network devices "
      "itself\n";
  std::vector<std::shared_ptr<CountingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<CountingSink>(line));
    ClientOptions o;
    o.master_server_address = "127.0.0.1:1";  // nothing listens: Create fails after the context
    o.rpc_timeout_ms = 500;
    o.gpu_device = 0;
    o.log_level = LogLevel::kInfo;
    o.log_sink = sinks.back();
    EXPECT_FALSE(Client::Create(o).ok());
  }
  EXPECT_EQ(sinks[0]->count(), 1);
  EXPECT_EQ(sinks[1]->count(), 0);
  EXPECT_EQ(sinks[2]->count(), 0);
}

TEST(ClientTopologyTest, AGpuDeviceBelowMinusOneIsRefused) {
  ClientOptions o;
  o.gpu_device = -2;
  auto c = Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "gpu_device -2 is not a GPU index (or -1 for none)");
}

}  // namespace
}  // namespace granary
