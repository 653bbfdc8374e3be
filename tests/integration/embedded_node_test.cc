// granary::EmbeddedNode: a node inside the test process, against a real master process; a client
// in the same process stores through it, and Stop (or the destructor) unmounts it.
#include "granary/embedded_node.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class EmbeddedNodeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      setenv("UCX_TLS", "tcp", 1);
    } else {
      unsetenv("UCX_TLS");
    }
    Cluster::Options o;
    o.nodes = 0;
    if (GetParam() == "tcp") o.env = {"UCX_TLS=tcp"};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    unsetenv("UCX_TLS");
  }
  EmbeddedNodeOptions Options(uint64_t size = 32 << 20) const {
    EmbeddedNodeOptions o;
    o.master = cluster_->master_address();
    o.segment_size = size;
    o.log_level = LogLevel::kWarning;
    return o;
  }
  std::string AllSegments() {
    auto body = HttpGet(cluster_->master_http_port(), "/get_all_segments");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : "<error>";
  }
  double Segments() { return cluster_->Metric("granary_master_segments").value_or(-1); }

  std::unique_ptr<Cluster> cluster_;
};

TEST_P(EmbeddedNodeTest, StoresOneMiBByteExactAndStopUnmounts) {
  auto node = EmbeddedNode::Start(Options());
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string address = (*node)->address();
  ASSERT_TRUE(address.starts_with("127.0.0.1:")) << address;
  uint32_t port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(10), &port)) << address;
  EXPECT_GE(port, 12300u);
  EXPECT_LE(port, 14300u);
  EXPECT_EQ((*node)->segment_name(), address);
  EXPECT_EQ(Segments(), 1);  // mounted before Start returned
  EXPECT_EQ(AllSegments(), address + "\n");

  auto client = cluster_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  auto segs = (*client)->Segments();
  ASSERT_TRUE(segs.ok()) << segs.status();
  ASSERT_EQ(segs->size(), 1u);
  EXPECT_EQ((*segs)[0].node_address, address);
  EXPECT_EQ((*segs)[0].name, address);
  const std::string value = MakeValue("big", 1, 1 << 20);
  ASSERT_TRUE((*client)->Put("big", value).ok());
  auto got = (*client)->Get("big");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value) << "the bytes read back differ";
  std::string into(2 << 20, '\0');
  auto n = (*client)->GetInto("big", into.data(), into.size());
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, value.size());
  EXPECT_TRUE(into.compare(0, value.size(), value) == 0);
  auto info = (*client)->Stat("big");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->replica_addresses, std::vector<std::string>{address});

  (*node)->Stop();
  EXPECT_EQ(Segments(), 0);
  EXPECT_EQ(AllSegments(), "");
  EXPECT_EQ((*client)->Get("big").status().code(), absl::StatusCode::kNotFound);
  (*node)->Stop();  // idempotent
  EXPECT_EQ((*node)->address(), address);
}

TEST_P(EmbeddedNodeTest, TwoNodesInOneProcessHoldTwoReplicasAndTheDestructorUnmounts) {
  {
    EmbeddedNodeOptions fixed = Options();
    fixed.port = FreePort();
    auto a = EmbeddedNode::Start(fixed);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ((*a)->address(), absl::StrCat("127.0.0.1:", fixed.port));
    auto b = EmbeddedNode::Start(Options());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NE((*a)->address(), (*b)->address());
    EXPECT_EQ(Segments(), 2);
    ClientOptions co = cluster_->ClientOpts();
    co.replica_num = 2;
    auto client = Client::Create(co);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Put("two", MakeValue("two", 1, 100'000)).ok());
    auto info = (*client)->Stat("two");
    ASSERT_TRUE(info.ok()) << info.status();
    std::set<std::string> got(info->replica_addresses.begin(), info->replica_addresses.end());
    EXPECT_EQ(got, (std::set<std::string>{(*a)->address(), (*b)->address()}));
    std::string all = AllSegments();
    EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 2) << all;
  }
  EXPECT_EQ(Segments(), 0);
}

TEST_P(EmbeddedNodeTest, BadOptionsAndAnUnreachableMasterFailAtStart) {
  EmbeddedNodeOptions small = Options(4096);
  auto s = EmbeddedNode::Start(small);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EmbeddedNodeOptions bad_master = Options();
  bad_master.master = "no-port";
  EXPECT_EQ(EmbeddedNode::Start(bad_master).status().code(), absl::StatusCode::kInvalidArgument);
  EmbeddedNodeOptions nobody = Options(1 << 20);
  nobody.master = absl::StrCat("127.0.0.1:", FreePort());  // nothing listens there
  nobody.mount_timeout_ms = 300;
  auto n = EmbeddedNode::Start(nobody);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  EXPECT_EQ(Segments(), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, EmbeddedNodeTest, ::testing::Values("default", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace granary::testing
