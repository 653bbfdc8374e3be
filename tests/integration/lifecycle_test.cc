// Node and master lifecycle on real processes: graceful unmount on SIGTERM, re-mount and client
// reconnection after a master restart (no HA: the restarted master rebuilds from the nodes'
// inventories; restart_test.cc covers that at scale).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class LifecycleTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(LifecycleTest, SigtermUnmountsTheNodeGracefully) {
  Cluster::Options o;
  o.nodes = 2;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  cluster_->node(1)->Kill(SIGTERM);
  EXPECT_EQ(cluster_->node(1)->Wait(), 0);
  // The master learns it from the node's UnmountSegment, not from a timeout.
  ASSERT_TRUE(cluster_->WaitForSegments(1, 2).ok());
  EXPECT_NE(cluster_->node(1)->Log().find("unmounted segment"), std::string::npos);
}

TEST_F(LifecycleTest, NodesRemountAndClientsReconnectAfterMasterRestart) {
  Cluster::Options o;
  o.nodes = 2;
  // The restarted master quarantines unreported space for the put timeout + margin.
  o.put_start_timeout_sec = 2;
  o.master_flags = {"--restart_quarantine_margin_ms=500"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  auto client = cluster_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Status first = (*client)->Put("before", MakeValue("before", 1, 4096));
  ASSERT_TRUE(first.ok()) << first;
  // Its commit record reaches its node asynchronously (within a tick).
  for (int i = 0; i < 100; ++i) {
    auto sent = cluster_->Metric("granary_master_inventory_records_sent_total");
    if (sent.ok() && *sent >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  ASSERT_TRUE(cluster_->RestartMaster().ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2, 10).ok()) << "nodes did not re-mount";
  // The same client object keeps working: the object stored before is back, and a put lands
  // once the quarantine of unreported space has passed.
  absl::Status st;
  for (int i = 0; i < 100; ++i) {
    st = (*client)->Put("after", MakeValue("after", 1, 4096));
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(st.ok()) << st;
  auto v = (*client)->Get("after");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v == MakeValue("after", 1, 4096));
  auto before = (*client)->Get("before");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(*before == MakeValue("before", 1, 4096));
  // Regression: the client once reused segment descriptors cached from the old master, whose
  // segment ids the new master had given to other nodes, and wrote into the wrong node.
  for (int i = 0; i < cluster_->node_count(); ++i) {
    EXPECT_TRUE(cluster_->node(i)->Running()) << "node " << i << " died";
  }
  for (int i = 0; i < 20; ++i) {
    std::string k = "spread-" + std::to_string(i);
    const absl::Status put = (*client)->Put(k, MakeValue(k, 2, 8192));
    ASSERT_TRUE(put.ok()) << k << ": " << put;
    auto got = (*client)->Get(k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == MakeValue(k, 2, 8192));
  }
}

// While the master is down, a client's calls fail fast with UNAVAILABLE, and it tries to
// reconnect only after a jittered exponential back-off, not once per call; it comes back once
// the master does.
TEST_F(LifecycleTest, ClientsBackOffWhileTheMasterIsDown) {
  auto c = Cluster::Start(Cluster::Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  auto client = cluster_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Exist("k").ok());
  cluster_->master()->Kill(SIGKILL);
  cluster_->master()->Wait();
  auto attempts = [&] {
    const std::string text = (*client)->MetricsText();
    const std::string name = "\ngranary_client_master_connect_failures_total ";
    size_t at = text.find(name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
  };
  int calls = 0;
  absl::Status last;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    last = (*client)->Exist("k").status();
    ASSERT_FALSE(last.ok());
    ++calls;
  }
  EXPECT_TRUE(absl::IsUnavailable(last)) << last;
  EXPECT_NE(last.message().find(cluster_->master_address()), std::string::npos) << last;
  EXPECT_NE(last.message().find("the next in"), std::string::npos) << last;
  // 25-50 ms, then doubling up to 2 s: at most a handful of attempts in 1.5 s, however many
  // calls were made.
  const double failed = attempts();
  EXPECT_GE(failed, 2) << calls << " calls";
  EXPECT_LE(failed, 8) << calls << " calls";
  EXPECT_GT(calls, 10 * failed);
  ASSERT_TRUE(cluster_->RestartMaster().ok());
  absl::Status st;
  for (int i = 0; i < 60; ++i) {  // the back-off is at most 2 s
    st = (*client)->Exist("k").status();
    if (st.ok() || absl::IsNotFound(st)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(st.ok() || absl::IsNotFound(st)) << st;
}

}  // namespace
}  // namespace granary::testing
