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
  ASSERT_TRUE((*client)->Put("before", MakeValue("before", 1, 4096)).ok());
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
    ASSERT_TRUE((*client)->Put(k, MakeValue(k, 2, 8192)).ok()) << k;
    auto got = (*client)->Get(k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == MakeValue(k, 2, 8192));
  }
}

}  // namespace
}  // namespace granary::testing
