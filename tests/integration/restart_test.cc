// A master restart without HA keeps the cache (docs/architecture.md, "Node inventories and
// master restart"): real master, nodes and clients as processes; the master is killed with
// SIGKILL and started again at the same address, and rebuilds its objects, allocators and
// charges from the inventories the nodes report when they re-mount.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "tests/integration/cluster.h"
#include "tests/integration/restore_checks.h"

namespace granary::testing {
namespace {

using nlohmann::json;

constexpr int kPerTenant = 5000;
constexpr size_t kBatch = 500;
// The restarted master quarantines unreported space for put_start_timeout + margin.
constexpr double kPutTimeoutSec = 3;
constexpr int kMarginMs = 500;

struct Stored {
  std::string tenant;
  std::string key;
  size_t size = 0;
};

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_restart_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    policy_path_ = std::string(tmpl) + "/tenant_quotas.yaml";
    std::ofstream(policy_path_) << "version: 1\ntenants:\n  - name: tenant-a\n    quota: 48MB\n"
                                   "  - name: tenant-b\n    quota: 48MB\n";
    Cluster::Options o;
    o.nodes = 2;
    o.node_segment_size = "64MB";
    o.client_ttl_sec = 3;
    o.put_start_timeout_sec = kPutTimeoutSec;
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_type=file",
                      "--tenant_quota_connector_uri=" + policy_path_,
                      absl::StrCat("--restart_quarantine_margin_ms=", kMarginMs)};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }

  std::unique_ptr<client::ClientImpl> NewClient(const std::string& tenant, int replicas = 1) {
    ClientOptions o = cluster_->ClientOpts(tenant);
    o.replica_num = replicas;
    auto c = client::ClientImpl::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  json Tenant(const std::string& id) {
    auto body = HttpGet(cluster_->master_http_port(), "/api/v1/tenant_quotas?tenant_id=" + id);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? json::parse(*body)["data"] : json();
  }
  json Objects(const std::string& tenant) {
    auto body =
        HttpGet(cluster_->master_http_port(), "/api/v1/objects?limit=100000&tenant_id=" + tenant);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? json::parse(*body)["data"] : json::array();
  }
  template <typename Pred>
  bool WaitForMetric(const std::string& sample, Pred pred, double timeout_sec) {
    return WaitForMasterMetric(cluster_.get(), sample, pred, timeout_sec);
  }
  // Puts `keys` (value MakeValue(key, 1, size)), in batches.
  void PutAll(Client* c, const std::vector<Stored>& objs) {
    for (size_t i = 0; i < objs.size(); i += kBatch) {
      std::vector<std::string> keys;
      std::vector<std::string> values;
      for (size_t j = i; j < std::min(objs.size(), i + kBatch); ++j) {
        keys.push_back(objs[j].key);
        values.push_back(MakeValue(objs[j].key, 1, objs[j].size));
      }
      std::vector<absl::string_view> views(values.begin(), values.end());
      auto st = c->BatchPut(keys, views);
      for (size_t j = 0; j < st.size(); ++j) ASSERT_TRUE(st[j].ok()) << keys[j] << ": " << st[j];
    }
  }
  // Every object reads back byte-exact.
  void ReadAll(Client* c, const std::vector<Stored>& objs) {
    for (size_t i = 0; i < objs.size(); i += kBatch) {
      std::vector<std::string> keys;
      for (size_t j = i; j < std::min(objs.size(), i + kBatch); ++j) keys.push_back(objs[j].key);
      auto got = c->BatchGet(keys);
      ASSERT_EQ(got.size(), keys.size());
      for (size_t j = 0; j < got.size(); ++j) {
        const Stored& o = objs[i + j];
        ASSERT_TRUE(got[j].ok()) << o.tenant << "/" << o.key << ": " << got[j].status();
        ASSERT_TRUE(*got[j] == MakeValue(o.key, 1, o.size)) << o.tenant << "/" << o.key;
      }
    }
  }

  std::string policy_path_;
  std::unique_ptr<Cluster> cluster_;
};

std::map<std::string, std::tuple<uint64_t, uint64_t, uint64_t>> ByKey(const json& list) {
  std::map<std::string, std::tuple<uint64_t, uint64_t, uint64_t>> out;
  for (const auto& o : list) {
    out[o["key"].get<std::string>()] = {o["size"].get<uint64_t>(), o["generation"].get<uint64_t>(),
                                        o["replicas"].get<uint64_t>()};
  }
  return out;
}

TEST_F(RestartTest, KillNineOfTheMasterKeepsEveryObjectItsBytesAndEveryTenantsCharge) {
  auto a = NewClient("tenant-a");
  auto b = NewClient("tenant-b");
  auto b2 = NewClient("tenant-b", /*replicas=*/2);  // both nodes hold these
  ASSERT_TRUE(a && b && b2);
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(256, 4096);
  std::vector<Stored> objs_a, objs_b1, objs_b2;
  for (int i = 0; i < kPerTenant; ++i) {
    objs_a.push_back({"tenant-a", absl::StrCat("a/", i), size(rng)});
    // Tenant B uses the same key names as A: tenants never share a key.
    (i % 5 == 0 ? objs_b2 : objs_b1).push_back({"tenant-b", absl::StrCat("a/", i), size(rng)});
  }
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(PutAll(b.get(), objs_b1));
  ASSERT_NO_FATAL_FAILURE(PutAll(b2.get(), objs_b2));
  const uint64_t replicas = objs_a.size() + objs_b1.size() + 2 * objs_b2.size();

  // The records travel asynchronously: wait until the master has handed every one to a node.
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_records_sent_total", [&](double v) { return v >= replicas; }, 10))
      << "commit records did not reach the nodes";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last reply is applied
  const json ta = Tenant("tenant-a"), tb = Tenant("tenant-b");
  const auto before_a = ByKey(Objects("tenant-a")), before_b = ByKey(Objects("tenant-b"));
  ASSERT_EQ(before_a.size(), static_cast<size_t>(kPerTenant));
  ASSERT_EQ(before_b.size(), static_cast<size_t>(kPerTenant));

  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->RestartMaster().ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2, 20).ok()) << "nodes did not re-mount";
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_restored_total", [&](double v) { return v >= replicas; }, 20))
      << "the nodes' inventories were not restored";
  const double rebuild_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::cerr << "kill -9 -> " << replicas << " replicas restored: " << rebuild_s << " s\n";
  EXPECT_EQ(*cluster_->Metric("granary_master_inventory_restored_total"), replicas);
  EXPECT_EQ(*cluster_->Metric("granary_master_inventory_rejected_total"), 0);

  // Charges and entries are re-derived exactly; the table holds the same versions.
  for (const auto& [id, before] : {std::pair{"tenant-a", ta}, std::pair{"tenant-b", tb}}) {
    const json after = Tenant(id);
    EXPECT_EQ(after["charged_bytes"], before["charged_bytes"]) << id;
    EXPECT_EQ(after["entries"], before["entries"]) << id;
    EXPECT_EQ(after["inflight_bytes"], 0) << id;
  }
  EXPECT_EQ(Tenant("tenant-a")["entries"], kPerTenant);
  EXPECT_EQ(ByKey(Objects("tenant-a")), before_a);
  EXPECT_EQ(ByKey(Objects("tenant-b")), before_b);

  // The same client objects read every object back, byte-exact.
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b1));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b2));

  // Unreported space is quarantined for the write window, then allocatable again.
  ASSERT_TRUE(WaitForMetric(
      "granary_master_quarantined_bytes", [](double v) { return v == 0; }, kPutTimeoutSec + 10));
  EXPECT_GT(*cluster_->Metric("granary_master_quarantined_bytes_total"), 0);
  std::vector<Stored> fresh;
  for (int i = 0; i < 1000; ++i) fresh.push_back({"tenant-a", absl::StrCat("new/", i), size(rng)});
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), fresh));
  ASSERT_NO_FATAL_FAILURE(ExpectNoOverlap(Objects("tenant-a"), Objects("tenant-b")));
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), fresh));
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b2));
}

TEST_F(RestartTest, PutInFlightAcrossTheRestartFailsRetryablyAndItsRetrySucceeds) {
  auto c = NewClient("tenant-a");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Put("kept", MakeValue("kept", 1, 4096)).ok());
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_records_sent_total", [](double v) { return v >= 1; }, 10));
  // A put started at the old master: allocated, not committed.
  auto started = c->PutStart({"in-flight"}, {8192});
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(started->results[0].status.ToStatus().ok());
  const uint64_t gen = started->results[0].generation;

  ASSERT_TRUE(cluster_->RestartMaster().ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2, 20).ok());
  // The client's call reconnects to the new master, which never knew this allocation.
  auto ended = c->Call<proto::KeyGenRequest, proto::BatchStatusReply>(
      proto::MsgType::kPutEnd, proto::KeyGenRequest{{{"in-flight", gen}}});
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->results.size(), 1u);
  EXPECT_EQ(ended->results[0].ToStatus().code(), absl::StatusCode::kUnavailable)
      << ended->results[0].ToStatus();

  // The retry: UNAVAILABLE while the space is quarantined, then it lands.
  absl::Status st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    st = c->Put("in-flight", MakeValue("in-flight", 2, 8192));
    if (st.ok() || !absl::IsUnavailable(st)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(st.ok()) << st;
  auto v = c->Get("in-flight");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v == MakeValue("in-flight", 2, 8192));
  auto kept = c->Get("kept");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept == MakeValue("kept", 1, 4096));
}

}  // namespace
}  // namespace granary::testing
