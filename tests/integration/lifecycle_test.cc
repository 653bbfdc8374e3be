// Node and master lifecycle on real processes: graceful unmount on SIGTERM, re-mount and client
// reconnection after a master restart (no HA: the restarted master starts empty).
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
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  auto client = cluster_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("before", MakeValue("before", 1, 4096)).ok());

  ASSERT_TRUE(cluster_->RestartMaster().ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2, 10).ok()) << "nodes did not re-mount";
  // Without HA the new master's table is empty; the same client object keeps working.
  absl::Status st;
  for (int i = 0; i < 50; ++i) {
    st = (*client)->Put("after", MakeValue("after", 1, 4096));
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(st.ok()) << st;
  auto v = (*client)->Get("after");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v == MakeValue("after", 1, 4096));
  EXPECT_EQ((*client)->Get("before").status().code(), absl::StatusCode::kNotFound);
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
