// Tenant pools on real processes: a master with a policy file, a shared node and a node started
// with --pool=tenant-p. The pooled tenant fills its pool and evicts only its own objects there
// while another tenant writes at the same time; with pool_spill false nothing of it lands on the
// shared segment, with pool_spill true (set through the admin API) it does once the pool is
// full; a Copy or Move by another tenant to the pool node is refused.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using nlohmann::json;
constexpr uint64_t kMiB = 1 << 20;

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_pool_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string policy = std::string(tmpl) + "/q.yaml";
    std::ofstream(policy) << "version: 1\ntenants:\n  - name: tenant-p\n    quota: 256MB\n"
                             "  - name: tenant-o\n    quota: 256MB\n";
    Cluster::Options o;
    o.nodes = 1;
    o.node_segment_size = "64MB";
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + policy};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto pool = Process::Start(
        {BinDir() + "/granary_node", "--master=" + cluster_->master_address(),
         "--host_segment_size=8MB", "--pool=tenant-p", "--metrics_port=0", "--log_level=info"},
        {}, cluster_->dir() + "/pool-node.log");
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_node_ = std::move(*pool);
    ASSERT_TRUE(cluster_->WaitForSegments(2).ok());
    for (const json& s : Api("/api/v1/segments")) {
      const std::string pool_of = s["pool"];
      segment_pool_[s["segment_id"].get<uint64_t>()] = pool_of;
      if (pool_of == "tenant-p") pool_address_ = s["node_address"];
    }
    ASSERT_FALSE(pool_address_.empty());
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    if (HasFailure() && pool_node_) std::cerr << "--- pool node\n" << pool_node_->Log();
  }
  json Api(const std::string& path, const char* field = "data") {
    auto body = HttpGet(cluster_->master_http_port(), path);
    EXPECT_TRUE(body.ok()) << path << ": " << body.status();
    return body.ok() ? json::parse(*body)[field] : json();
  }
  // How many of the tenant's objects have a replica in a pool / on a shared segment.
  std::pair<int, int> PooledAndShared(const std::string& tenant) {
    int pooled = 0, shared = 0;
    for (const json& o : Api("/api/v1/objects?tenant_id=" + tenant)) {
      for (const json& p : o["placements"]) {
        (segment_pool_[p["segment_id"].get<uint64_t>()].empty() ? shared : pooled)++;
      }
    }
    return {pooled, shared};
  }
  std::unique_ptr<Client> NewClient(const std::string& tenant) {
    auto c = cluster_->NewClient(tenant);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  void SetPoolSpill(bool spill) {
    httplib::Client http("127.0.0.1", cluster_->master_http_port());
    auto res = http.Put("/api/v1/tenant_quotas?tenant_id=tenant-p",
                        absl::StrCat(R"({"requested_quota_bytes": 268435456, "pool_spill": )",
                                     spill ? "true" : "false", "}"),
                        "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(json::parse(res->body)["data"]["pool_spill"], spill);
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Process> pool_node_;
  std::map<uint64_t, std::string> segment_pool_;  // segment id -> pool ("" shared)
  std::string pool_address_;
};

TEST_F(PoolTest, APooledTenantEvictsOnlyItsOwnInItsPoolWhileAnotherWritesUntouched) {
  auto p = NewClient("tenant-p");
  auto o = NewClient("tenant-o");
  ASSERT_TRUE(p && o);
  // 24 MiB into an 8 MB pool, while the other tenant writes 16 MiB to the shared segment.
  std::thread other([&] {
    for (int i = 0; i < 16; ++i) {
      const std::string k = absl::StrCat("o-", i);
      EXPECT_TRUE(o->Put(k, MakeValue(k, 1, kMiB)).ok()) << k;
    }
  });
  for (int i = 0; i < 24; ++i) {
    const std::string k = absl::StrCat("p-", i);
    absl::Status st = p->Put(k, MakeValue(k, 1, kMiB));
    EXPECT_TRUE(st.ok()) << k << ": " << st;
  }
  other.join();
  for (int i = 0; i < 16; ++i) {
    const std::string k = absl::StrCat("o-", i);
    auto got = o->Get(k);
    ASSERT_TRUE(got.ok()) << k << ": " << got.status();
    EXPECT_TRUE(*got == MakeValue(k, 1, kMiB)) << k;
  }
  auto last = p->Get("p-23");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(*last == MakeValue("p-23", 1, kMiB));
  EXPECT_EQ(p->Get("p-0").status().code(), absl::StatusCode::kNotFound);
  const auto [pooled, shared] = PooledAndShared("tenant-p");
  EXPECT_GT(pooled, 0);
  EXPECT_LE(pooled, 8);
  EXPECT_EQ(shared, 0) << "pool_spill is false: nothing of tenant-p on the shared segment";
  EXPECT_EQ(PooledAndShared("tenant-o"), std::make_pair(0, 16));
  const json tp = Api("/api/v1/tenant_quotas?tenant_id=tenant-p");
  EXPECT_GT(tp["evicted_objects"].get<uint64_t>(), 0u) << tp;
  EXPECT_EQ(tp["pool_spill"], false);
  EXPECT_EQ(tp["pool"]["capacity_bytes"], 8 * kMiB) << tp;
  EXPECT_GT(tp["pool"]["used_bytes"].get<uint64_t>(), 0u) << tp;
  EXPECT_EQ(Api("/api/v1/tenant_quotas?tenant_id=tenant-o")["evicted_objects"], 0u);
  auto metric = cluster_->Metric("granary_pool_capacity_bytes{tenant=\"tenant-p\"}");
  ASSERT_TRUE(metric.ok()) << metric.status();
  EXPECT_EQ(*metric, 8.0 * kMiB);
  // A value larger than the pool cannot be placed anywhere: a clear error naming the pool.
  absl::Status big = p->Put("too-big", std::string(9 * kMiB, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_NE(big.message().find("pool of tenant 'tenant-p'"), std::string::npos) << big;
  EXPECT_EQ(PooledAndShared("tenant-p").second, 0);
}

TEST_F(PoolTest, WithPoolSpillAFullPoolSpillsToTheSharedSegment) {
  auto p = NewClient("tenant-p");
  ASSERT_TRUE(p);
  for (int i = 0; i < 6; ++i) {
    const std::string k = absl::StrCat("p-", i);
    ASSERT_TRUE(p->Put(k, MakeValue(k, 1, kMiB)).ok()) << k;
  }
  EXPECT_EQ(PooledAndShared("tenant-p"), std::make_pair(6, 0));
  SetPoolSpill(true);
  for (int i = 6; i < 16; ++i) {
    const std::string k = absl::StrCat("p-", i);
    ASSERT_TRUE(p->Put(k, MakeValue(k, 1, kMiB)).ok()) << k;
  }
  const auto [pooled, shared] = PooledAndShared("tenant-p");
  EXPECT_GE(shared, 8) << "the pool holds 7 objects of 1 MiB; the rest spilled";
  EXPECT_EQ(pooled + shared, 16) << "nothing was evicted while the shared segment had room";
  for (int i = 0; i < 16; ++i) {
    const std::string k = absl::StrCat("p-", i);
    auto got = p->Get(k);
    ASSERT_TRUE(got.ok()) << k << ": " << got.status();
    EXPECT_TRUE(*got == MakeValue(k, 1, kMiB)) << k;
  }
}

TEST_F(PoolTest, CopyOrMoveByAnotherTenantToThePoolNodeIsRefused) {
  auto o = NewClient("tenant-o");
  ASSERT_TRUE(o);
  ASSERT_TRUE(o->Put("k", MakeValue("k", 1, kMiB)).ok());
  for (bool move : {false, true}) {
    absl::Status st = move ? o->Move("k", pool_address_) : o->Copy("k", pool_address_);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find("tenant 'tenant-p''s pool"), std::string::npos) << st;
  }
  EXPECT_EQ(PooledAndShared("tenant-o"), std::make_pair(0, 1));
  auto got = o->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == MakeValue("k", 1, kMiB));
}

}  // namespace
}  // namespace granary::testing
