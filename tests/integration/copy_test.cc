// Copy and Move on real processes: the destination node reads the replica one-sided from the
// source node; the tenant is charged for the new replica at start and the accounting is exact
// after end, revoke and failure.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using nlohmann::json;
constexpr uint64_t kSize = 3 << 20;
constexpr uint64_t kCharge = kSize + 64;

class CopyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      setenv("UCX_TLS", "tcp", 1);
    } else {
      unsetenv("UCX_TLS");
    }
    char tmpl[] = "/tmp/granary_copy_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    std::string policy = std::string(tmpl) + "/q.yaml";
    std::ofstream(policy) << "version: 1\ntenants:\n  - name: tenant-a\n    quota: 16MB\n";
    Cluster::Options o;
    o.nodes = 2;
    o.node_segment_size = "64MB";
    if (GetParam() == "tcp") o.env = {"UCX_TLS=tcp"};
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + policy};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto client = cluster_->NewClient("tenant-a");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    client_.reset();
    cluster_.reset();
    unsetenv("UCX_TLS");
  }
  json Tenant() {
    auto body = HttpGet(cluster_->master_http_port(), "/api/v1/tenant_quotas?tenant_id=tenant-a");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? json::parse(*body)["data"] : json();
  }
  // The node that does not hold `key`'s first replica, by its address.
  std::string OtherNode(const std::string& holder_address) {
    auto segs = client_->Segments();
    EXPECT_TRUE(segs.ok());
    for (const auto& s : *segs) {
      if (s.node_address != holder_address) return s.node_address;
    }
    return "";
  }
  std::string HolderOf(const std::string& key) {
    // With one replica the holder is the segment with used bytes.
    auto segs = client_->Segments();
    for (const auto& s : *segs) {
      if (s.used > 0) return s.node_address;
    }
    return "";
  }
  // Index of the cluster node process listening at `address` (from its log line).
  int NodeIndex(const std::string& address) {
    std::string port = address.substr(address.rfind(':') + 1);
    for (int i = 0; i < cluster_->node_count(); ++i) {
      if (cluster_->node(i)->Log().find("listening on port " + port + ",") != std::string::npos) {
        return i;
      }
    }
    return -1;
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_P(CopyTest, CopyAddsAReplicaThatSurvivesTheSourceNode) {
  const std::string v = MakeValue("k", 1, kSize);
  ASSERT_TRUE(client_->Put("k", v).ok());
  EXPECT_EQ(Tenant()["charged_bytes"].get<uint64_t>(), kCharge);
  std::string src = HolderOf("k"), dst = OtherNode(src);
  ASSERT_FALSE(dst.empty());
  ASSERT_TRUE(client_->Copy("k", dst).ok());
  EXPECT_EQ(client_->Stat("k")->replicas, 2u);
  json t = Tenant();
  EXPECT_EQ(t["charged_bytes"].get<uint64_t>(), 2 * kCharge);
  EXPECT_EQ(t["inflight_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["entries"].get<uint64_t>(), 1u);
  // A second copy to the same node is refused and changes nothing.
  EXPECT_EQ(client_->Copy("k", dst).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Tenant()["charged_bytes"].get<uint64_t>(), 2 * kCharge);
  // The copy alone serves the reads once the source node is gone.
  int src_index = NodeIndex(src);
  ASSERT_GE(src_index, 0);
  cluster_->node(src_index)->Kill(SIGKILL);
  cluster_->node(src_index)->Wait();
  ASSERT_TRUE(cluster_->WaitForSegments(1).ok());
  auto got = client_->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == v);
  EXPECT_EQ(Tenant()["charged_bytes"].get<uint64_t>(), kCharge);
}

TEST_P(CopyTest, MoveKeepsOneReplicaOnTheTargetAndTheChargeUnchanged) {
  const std::string v = MakeValue("m", 1, kSize);
  ASSERT_TRUE(client_->Put("m", v).ok());
  std::string src = HolderOf("m"), dst = OtherNode(src);
  ASSERT_TRUE(client_->Move("m", dst).ok());
  EXPECT_EQ(client_->Stat("m")->replicas, 1u);
  EXPECT_EQ(Tenant()["charged_bytes"].get<uint64_t>(), kCharge);
  EXPECT_EQ(HolderOf("m"), dst);
  int src_index = NodeIndex(src);
  cluster_->node(src_index)->Kill(SIGKILL);
  cluster_->node(src_index)->Wait();
  ASSERT_TRUE(cluster_->WaitForSegments(1).ok());
  auto got = client_->Get("m");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == v);
}

TEST_P(CopyTest, FailedCopiesRefundAndNameTheProblem) {
  ASSERT_TRUE(client_->Put("f", MakeValue("f", 1, kSize)).ok());
  absl::Status st = client_->Copy("f", "no-such-node:1");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("no-such-node:1"), absl::string_view::npos);
  EXPECT_EQ(client_->Copy("missing", OtherNode(HolderOf("f"))).code(), absl::StatusCode::kNotFound);
  json t = Tenant();
  EXPECT_EQ(t["charged_bytes"].get<uint64_t>(), kCharge);
  EXPECT_EQ(t["inflight_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(client_->Get("f").ok());
}

TEST_P(CopyTest, CopyUnderQuotaPressureEvictsAnotherOwnObjectNeverTheOneCopied) {
  // 16 MB of quota: "f" and four more 3 MB objects leave room for no further replica.
  ASSERT_TRUE(client_->Put("f", MakeValue("f", 1, kSize)).ok());
  for (int i = 0; i < 4; ++i) {
    std::string k = absl::StrCat("o", i);
    ASSERT_TRUE(client_->Put(k, MakeValue(k, 1, kSize)).ok()) << k;
  }
  ASSERT_EQ(Tenant()["charged_bytes"].get<uint64_t>(), 5 * kCharge);
  std::string dst = OtherNode(HolderOf("f"));
  absl::Status st = client_->Copy("f", dst);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(client_->Stat("f")->replicas, 2u);
  json t = Tenant();
  EXPECT_LE(t["charged_bytes"].get<uint64_t>(), t["effective_quota_bytes"].get<uint64_t>());
  EXPECT_EQ(t["charged_bytes"].get<uint64_t>(), 5 * kCharge);  // one other object went
  EXPECT_EQ(t["entries"].get<uint64_t>(), 4u);
  EXPECT_EQ(client_->Get("o0").status().code(), absl::StatusCode::kNotFound);  // the oldest
  auto got = client_->Get("f");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == MakeValue("f", 1, kSize));
}

INSTANTIATE_TEST_SUITE_P(Transports, CopyTest, ::testing::Values("default", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace granary::testing
