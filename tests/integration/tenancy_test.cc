// Tenant isolation, structured KV keys with prefix lookup, the _probe deep health check, and
// fair eviction under skewed load, on a real master and node.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "granary/kv_key.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using nlohmann::json;

class TenancyTest : public ::testing::Test {
 protected:
  void StartCluster(Cluster::Options o = {}) {
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  std::unique_ptr<Client> NewClient(const std::string& tenant) {
    auto c = cluster_->NewClient(tenant);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(TenancyTest, TenantsNeverSeeOrTouchEachOthersKeys) {
  StartCluster();
  auto a = NewClient("tenant-a"), b = NewClient("tenant-b");
  ASSERT_TRUE(a->Put("same", "bytes of a").ok());
  ASSERT_TRUE(b->Put("same", "bytes of b, longer").ok());
  EXPECT_EQ(*a->Get("same"), "bytes of a");
  EXPECT_EQ(*b->Get("same"), "bytes of b, longer");
  ASSERT_TRUE(a->Remove("same").ok());
  EXPECT_EQ(a->Get("same").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*b->Get("same"), "bytes of b, longer");
  ASSERT_TRUE(a->Put("only-a", "x").ok());
  auto la = a->List("", 100), lb = b->List("", 100);
  ASSERT_EQ(la->objects.size(), 1u);
  EXPECT_EQ(la->objects[0].key, "only-a");
  ASSERT_EQ(lb->objects.size(), 1u);
  EXPECT_EQ(lb->objects[0].key, "same");
  EXPECT_FALSE(*b->Exist("only-a"));
  // The admin object listing requires a tenant and shows only that tenant's keys.
  EXPECT_FALSE(HttpGet(cluster_->master_http_port(), "/api/v1/objects").ok());
  auto body = HttpGet(cluster_->master_http_port(), "/api/v1/objects?tenant_id=tenant-b");
  ASSERT_TRUE(body.ok()) << body.status();
  json j = json::parse(*body);
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["key"], "same");
}

TEST_F(TenancyTest, TenantIdRulesAreCheckedAtHelloNamingTheRule) {
  StartCluster();
  struct Case {
    std::string id, rule;
  } cases[] = {{"_probe", "reserved"},
               {std::string(129, 't'), "128"},
               {std::string("bad\x01id"), "control"}};
  for (const auto& c : cases) {
    auto client = cluster_->NewClient(c.id);
    ASSERT_FALSE(client.ok()) << c.id;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(client.status().message().find(c.rule), absl::string_view::npos) << client.status();
  }
  EXPECT_TRUE(cluster_->NewClient(std::string(128, 't')).ok());
}

TEST_F(TenancyTest, LookupPrefixCountsLeadingCompleteBlocksPerTenantAndLeasesThem) {
  StartCluster();
  auto a = NewClient("tenant-a"), b = NewClient("tenant-b");
  const std::string model = "llama-3-8b", scheme = "sha256";
  const std::optional<std::string> adapter = "lora-7";
  std::vector<std::string> hashes;
  for (int i = 0; i < 6; ++i) hashes.push_back(absl::StrCat("h", i, "/with:separators"));
  for (int i = 0; i < 5; ++i) {
    if (i == 3) continue;  // a hole: the prefix ends there
    KvKey k{model, scheme, adapter, hashes[i]};
    ASSERT_TRUE(a->Put(EncodeKvKey(k), MakeValue(hashes[i], 1, 16384)).ok());
  }
  auto r = a->LookupPrefix(model, scheme, adapter, hashes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->present, 3u);
  ASSERT_EQ(r->blocks.size(), 3u);
  EXPECT_EQ(r->blocks[0].size, 16384u);
  EXPECT_FALSE(r->blocks[0].node_address.empty());
  // Another adapter, another tenant: nothing.
  EXPECT_EQ(a->LookupPrefix(model, scheme, std::nullopt, hashes)->present, 0u);
  EXPECT_EQ(b->LookupPrefix(model, scheme, adapter, hashes)->present, 0u);
  // With a lease the blocks cannot be removed (or evicted) until the lease ends.
  auto leased = a->LookupPrefix(model, scheme, adapter, hashes, /*lease=*/true);
  ASSERT_TRUE(leased.ok());
  EXPECT_GT(leased->lease_ms, 0u);
  EXPECT_EQ(a->Remove(leased->blocks[0].key).code(), absl::StatusCode::kFailedPrecondition);
  auto v = a->Get(leased->blocks[1].key);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v == MakeValue(hashes[1], 1, 16384));
}

TEST_F(TenancyTest, DeepHealthProbesThroughANodeAndFailsClearlyWithout) {
  StartCluster();
  httplib::Client http("127.0.0.1", cluster_->master_http_port());
  auto res = http.Get("/health?deep=1");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_TRUE(j["deep"]["ok"].get<bool>());
  EXPECT_GT(j["deep"]["round_trip_us"].get<double>(), 0);
  // Invisible: no object, no tenant account, nothing listed.
  auto objects = cluster_->Metric("granary_master_objects");
  EXPECT_EQ(*objects, 0);
  EXPECT_EQ(HttpGet(cluster_->master_http_port(), "/metrics")->find("_probe"), std::string::npos);
  cluster_->node(0)->Kill(SIGKILL);
  cluster_->node(0)->Wait();
  ASSERT_TRUE(cluster_->WaitForSegments(0).ok());
  res = http.Get("/health?deep=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  j = json::parse(res->body);
  EXPECT_FALSE(j["deep"]["ok"].get<bool>());
  EXPECT_NE(j["deep"]["error"].get<std::string>().find("no node has mounted a segment yet"),
            std::string::npos);
}

TEST_F(TenancyTest, SkewedWritersEvictionsFallOnTheHeavyTenant) {
  // A 16 MB store, three tenants writing 64 KiB blocks at 10:1:1. The light tenants keep
  // re-reading a working set of 16 blocks each; the heavy one streams far past capacity.
  Cluster::Options o;
  o.node_segment_size = "16MB";
  StartCluster(o);
  auto heavy = NewClient("heavy"), l1 = NewClient("light-1"), l2 = NewClient("light-2");
  constexpr size_t kBlock = 64 << 10;
  int light_puts = 0;
  for (int round = 0; round < 60; ++round) {
    for (int i = 0; i < 10; ++i) {
      std::string k = absl::StrCat("h-", round, "-", i);
      ASSERT_TRUE(heavy->Put(k, MakeValue(k, 1, kBlock)).ok()) << k;
    }
    for (auto* c : {l1.get(), l2.get()}) {
      std::string k = absl::StrCat("w-", round % 16);
      if (round < 16) {
        ASSERT_TRUE(c->Put(k, MakeValue(k, 1, kBlock)).ok()) << k;
        ++light_puts;
      } else {
        auto v = c->Get(k);
        ASSERT_TRUE(v.ok()) << "light tenant lost " << k << ": " << v.status();
        EXPECT_TRUE(*v == MakeValue(k, 1, kBlock));
      }
    }
  }
  for (auto* c : {l1.get(), l2.get()}) {
    for (int i = 0; i < 16; ++i) {
      EXPECT_TRUE(*c->Exist(absl::StrCat("w-", i))) << i;
    }
  }
  // Evictions of a tenant for either reason: a put that finds no space evicts ("space"), and so
  // does the master's timer above the high watermark ("watermark"); which of the two gets there
  // first depends on the machine's speed (a loaded machine left it all to the timer).
  auto evictions = [&](const std::string& tenant) {
    double total = 0;
    bool seen = false;
    for (const char* reason : {"space", "watermark"}) {
      auto v = cluster_->Metric(absl::StrCat("granary_tenant_evictions_total{tenant_id=\"", tenant,
                                             "\",reason=\"", reason, "\"}"));
      if (v.ok()) {
        total += *v;
        seen = true;
      }
    }
    return std::make_pair(seen, total);
  };
  auto [heavy_seen, heavy_ev] = evictions("heavy");
  ASSERT_TRUE(heavy_seen) << "no eviction of the heavy tenant was counted";
  EXPECT_GT(heavy_ev, 200);
  for (const char* t : {"light-1", "light-2"}) {
    auto [seen, ev] = evictions(t);
    EXPECT_FALSE(seen && ev > 0) << t << " lost " << ev << " objects";
  }
  std::cerr << "[ measured ] heavy tenant evictions: " << heavy_ev << ", light: 0 of " << light_puts
            << " blocks\n";
}

}  // namespace
}  // namespace granary::testing
