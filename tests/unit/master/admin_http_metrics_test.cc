// The read-only pages of the admin HTTP server (master/admin_http.h) over real HTTP, on
// admin_http_fixture.h: Mooncake's /get_all_segments, and per-tenant figures and the policy
// store's state in /metrics and /health.

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/unit/master/admin_http_fixture.h"

namespace granary::master {
namespace {

using AdminHttpMetricsTest = AdminHttpFixture;

// ---------------------------------------------------------------------------------------------
// /get_all_segments (Mooncake's path; SGLang polls it)

TEST_F(AdminHttpMetricsTest, GetAllSegmentsListsOneMountedSegmentNamePerLine) {
  Start(/*multi_tenant=*/false, /*capacity=*/0);
  auto empty = client_->Get("/get_all_segments");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 200);
  EXPECT_EQ(empty->body, "");  // nothing mounted: SGLang keeps waiting
  SessionId n1 = AddNode("n1", kMiB);
  AddNode("n2", kMiB);
  auto two = client_->Get("/get_all_segments");
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 200);
  EXPECT_EQ(two->body, "n1-seg0\nn2-seg0\n");
  svc_->SessionClosed(n1);  // the node goes: its segment is unmounted
  auto one = client_->Get("/get_all_segments");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->body, "n2-seg0\n");
}

// ---------------------------------------------------------------------------------------------
// /metrics and /health

TEST_F(AdminHttpMetricsTest, MetricsShowPerTenantChargeAndPolicyStoreUp) {
  Start();
  Upsert("tenant-a", Quota(kMiB));
  Put(Client("tenant-a"), "k", 1000);
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::string& text = res->body;
  EXPECT_TRUE(Has(text, "granary_tenant_quota_charged_bytes{tenant_id=\"tenant-a\"} 1088\n"))
      << text;
  EXPECT_TRUE(Has(text, "granary_tenant_quota_requested_bytes{tenant_id=\"tenant-a\"} 1048576\n"))
      << text;
  EXPECT_TRUE(Has(text, "granary_tenant_entries{tenant_id=\"tenant-a\"} 1\n")) << text;
  EXPECT_TRUE(Has(text, "\ngranary_tenant_policy_store_up 1\n")) << text;
}

TEST_F(AdminHttpMetricsTest, SnapshotsAndMetricsCountEvictionsPerTenant) {
  Start();
  Upsert("tenant-a", R"({"requested_quota_bytes": 1048576, "max_entries": 2})");
  Upsert("tenant-b", Quota(kMiB / 4));
  SessionId a = Client("tenant-a"), b = Client("tenant-b");
  // Each object charges 1000 + 64 bytes, rounded up to 64: 1088. Past max_entries 2, the third
  // and fourth puts each evict tenant-a's oldest.
  for (int i = 0; i < 4; ++i) Put(a, absl::StrCat("k", i), 1000);
  Put(b, "k", 1000);
  Remove(b, "k");  // a remove is not an eviction
  json snap = GetOne("tenant-a");
  EXPECT_EQ(snap["entries"], 2u) << snap;
  EXPECT_EQ(snap["evicted_objects"], 2u) << snap;
  EXPECT_EQ(snap["evicted_bytes"], 2u * 1088) << snap;
  EXPECT_EQ(GetOne("tenant-b")["evicted_objects"], 0u);
  // The list carries the same fields.
  Reply all = Get(kApi);
  ASSERT_EQ(all.status, 200) << all;
  ASSERT_EQ(all.body["data"].size(), 2u) << all;
  EXPECT_EQ(all.body["data"][0]["evicted_objects"], 2u) << all;
  EXPECT_EQ(all.body["data"][1]["evicted_bytes"], 0u) << all;

  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_TRUE(Has(m->body, "granary_tenant_evicted_objects_total{tenant_id=\"tenant-a\"} 2\n"))
      << m->body;
  EXPECT_TRUE(Has(m->body, "granary_tenant_evicted_bytes_total{tenant_id=\"tenant-a\"} 2176\n"))
      << m->body;
  EXPECT_TRUE(Has(m->body, "granary_tenant_evicted_objects_total{tenant_id=\"tenant-b\"} 0\n"))
      << m->body;
}

TEST_F(AdminHttpMetricsTest, HealthAndMetricsReportThePolicyStoreState) {
  Start();
  Reply h = Get("/health");
  ASSERT_EQ(h.status, 200) << h;
  EXPECT_EQ(h.body["policy_store_ok"], true) << h;
  EXPECT_EQ(h.body["status"], "ok") << h;
  EXPECT_EQ(h.body["multi_tenant"], true) << h;
  EXPECT_EQ(h.body["policy_store"], "file:" + path_) << h;
  EXPECT_FALSE(h.body.contains("policy_store_error")) << h;

  // The store becomes unreadable: the running policy stays, the state says so.
  Upsert("tenant-a", Quota(1000));
  fail_load_ = true;
  ASSERT_FALSE(manager_->Reload().ok());
  h = Get("/health");
  EXPECT_EQ(h.body["policy_store_ok"], false) << h;
  EXPECT_EQ(h.body["status"], "degraded") << h;
  EXPECT_TRUE(Has(h.body.value("policy_store_error", ""), "unreachable")) << h;
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_TRUE(Has(m->body, "\ngranary_tenant_policy_store_up 0\n")) << m->body;
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], 1000u);

  fail_load_ = false;
  ASSERT_TRUE(manager_->Reload().ok());
  EXPECT_EQ(Get("/health").body["policy_store_ok"], true);
  m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_TRUE(Has(m->body, "\ngranary_tenant_policy_store_up 1\n")) << m->body;
}

}  // namespace
}  // namespace granary::master
