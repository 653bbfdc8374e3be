// The tenant quota admin API of the admin HTTP server (master/admin_http.h, docs/architecture.md
// section 5) over real HTTP, on admin_http_fixture.h: GET, PUT and DELETE of tenants, the modes
// and roles that refuse them, a save that fails, and effective quotas.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "master/tenant/policy.h"
#include "tests/unit/master/admin_http_fixture.h"

namespace granary::master {
namespace {

using AdminHttpTest = AdminHttpFixture;

const char* const kSnapshotFields[] = {"tenant_id",
                                       "requested_quota_bytes",
                                       "effective_quota_bytes",
                                       "charged_bytes",
                                       "admission_closed",
                                       "over_quota",
                                       "has_explicit_policy",
                                       "inflight_bytes",
                                       "entries",
                                       "max_entries",
                                       "has_token",
                                       "evicted_objects",
                                       "evicted_bytes",
                                       "pool_spill",
                                       "default_tier",
                                       "pool"};

// ---------------------------------------------------------------------------------------------
// GET

TEST_F(AdminHttpTest, ListOfNoTenantsIsAnEmptyArray) {
  Start();
  Reply r = Get(kApi);
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.body, (json{{"success", true}, {"data", json::array()}})) << r;
}

TEST_F(AdminHttpTest, ListReturnsEverySnapshotSortedByTenant) {
  Start();
  Upsert("tenant-b", Quota(2000));
  Upsert("tenant-a", Quota(1000));
  Reply r = Get(kApi);
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.body.value("success", false), true) << r;
  ASSERT_TRUE(r.body["data"].is_array()) << r;
  ASSERT_EQ(r.body["data"].size(), 2u) << r;
  EXPECT_EQ(r.body["data"][0]["tenant_id"], "tenant-a");
  EXPECT_EQ(r.body["data"][0]["requested_quota_bytes"], 1000u);
  EXPECT_EQ(r.body["data"][1]["tenant_id"], "tenant-b");
  EXPECT_EQ(r.body["data"][1]["requested_quota_bytes"], 2000u);
  for (const json& t : r.body["data"]) {
    for (const char* f : kSnapshotFields) EXPECT_TRUE(t.contains(f)) << f << " in " << t;
  }
}

TEST_F(AdminHttpTest, GetOneReturnsEverySnapshotField) {
  Start();
  Upsert("tenant-a", R"({"requested_quota_bytes": 524288, "max_entries": 100})");
  SessionId c = Client("tenant-a");
  Put(c, "done", 1000);                      // 1088 bytes allocated, committed
  uint64_t gen = PutStart(c, "open", 2000);  // 2112 bytes, in flight
  ASSERT_NE(gen, 0u);
  json d = GetOne("tenant-a");
  EXPECT_EQ(d.size(), std::size(kSnapshotFields)) << d;
  EXPECT_EQ(d["tenant_id"], "tenant-a");
  EXPECT_EQ(d["requested_quota_bytes"], 524288u);
  EXPECT_EQ(d["effective_quota_bytes"], 524288u);
  EXPECT_EQ(d["charged_bytes"], 1088u + 2112u);
  EXPECT_EQ(d["inflight_bytes"], 2112u);
  EXPECT_EQ(d["entries"], 1u);
  EXPECT_EQ(d["max_entries"], 100u);
  EXPECT_EQ(d["admission_closed"], false);
  EXPECT_EQ(d["over_quota"], false);
  EXPECT_EQ(d["has_explicit_policy"], true);
  // Without an entry quota, max_entries is null.
  Upsert("tenant-b", Quota(1));
  EXPECT_TRUE(GetOne("tenant-b")["max_entries"].is_null());
}

// A tenant's token shows only as has_token; its hash never leaves the master. A quota change
// through the API keeps the token in the stored policy.
TEST_F(AdminHttpTest, HasTokenIsShownAndTheHashIsNeverEchoed) {
  const std::string hash = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  WriteFile(path_, absl::StrCat("version: 1\ntenants:\n  - name: tenant-a\n    quota: 1000\n",
                                "    token_sha256: ", hash, "\n  - name: tenant-b\n",
                                "    quota: 2000\n"));
  token_file_ = {{"tenant-c", std::string(64, 'c')}};
  Start();
  Upsert("tenant-c", Quota(3000));
  Reply list = Get(kApi);
  ASSERT_EQ(list.status, 200) << list;
  ASSERT_EQ(list.body["data"].size(), 3u) << list;
  EXPECT_EQ(list.body["data"][0]["has_token"], true) << list;   // policy
  EXPECT_EQ(list.body["data"][1]["has_token"], false) << list;  // none
  EXPECT_EQ(list.body["data"][2]["has_token"], true) << list;   // tokens file
  EXPECT_FALSE(Has(list.text, hash)) << list;
  EXPECT_FALSE(Has(list.text, std::string(64, 'c'))) << list;
  EXPECT_FALSE(Has(list.text, "token_sha256")) << list;

  Reply one = Get(Of("tenant-a"));
  EXPECT_EQ(one.body["data"]["has_token"], true) << one;
  EXPECT_FALSE(Has(one.text, hash)) << one;

  Reply put = Put(Of("tenant-a"), Quota(5000));
  ASSERT_EQ(put.status, 200) << put;
  EXPECT_EQ(put.body["data"]["has_token"], true) << put;
  EXPECT_FALSE(Has(put.text, hash)) << put;
  const Policy file = FilePolicy();
  const tenant::TenantPolicy* saved = file.Find("tenant-a");
  ASSERT_NE(saved, nullptr);
  EXPECT_EQ(saved->quota_bytes, 5000u);
  EXPECT_EQ(saved->token_sha256, hash);
}

TEST_F(AdminHttpTest, GetShowsOverQuotaAfterTheQuotaIsLoweredBelowTheCharge) {
  Start();
  Upsert("tenant-a", Quota(kMiB));
  SessionId c = Client("tenant-a");
  Put(c, "k", 4000);
  json d = Upsert("tenant-a", Quota(100));
  EXPECT_EQ(d["over_quota"], true) << d;
  EXPECT_EQ(GetOne("tenant-a")["over_quota"], true);
}

TEST_F(AdminHttpTest, GetShowsAdmissionClosedForATenantDroppedWhileItHoldsData) {
  Start();
  Upsert("tenant-a", Quota(kMiB));
  Upsert("tenant-b", Quota(kMiB));
  Put(Client("tenant-a"), "k", 4000);
  WriteFile(path_, "version: 1\ntenants:\n  - name: tenant-b\n    quota: 1MB\n");
  ASSERT_TRUE(manager_->Reload().ok());
  json d = GetOne("tenant-a");
  EXPECT_EQ(d["admission_closed"], true) << d;
  EXPECT_EQ(d["has_explicit_policy"], false) << d;
  EXPECT_EQ(d["requested_quota_bytes"], 0u) << d;
  EXPECT_EQ(d["entries"], 1u) << d;
  // It has no policy entry to delete.
  ExpectError(Delete(Of("tenant-a")), 404, "TENANT_NOT_FOUND", "tenant-a");
}

TEST_F(AdminHttpTest, GetOfAnUnknownTenantIs404TenantNotFound) {
  Start();
  Upsert("tenant-a", Quota(1000));
  ExpectError(Get(Of("tenant-x")), 404, "TENANT_NOT_FOUND", "tenant-x");
}

// ---------------------------------------------------------------------------------------------
// PUT

TEST_F(AdminHttpTest, PutCreatesATenantAndSavesItToTheFile) {
  Start();
  Reply r = Put(Of("tenant-a"), R"({"requested_quota_bytes": 4096, "max_entries": 7})");
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.body.value("success", false), true) << r;
  EXPECT_EQ(r.body["data"]["tenant_id"], "tenant-a") << r;
  EXPECT_EQ(r.body["data"]["requested_quota_bytes"], 4096u) << r;
  EXPECT_EQ(r.body["data"]["max_entries"], 7u) << r;
  EXPECT_EQ(FilePolicy(), (Policy{{{"tenant-a", 4096, 7}}}));
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], 4096u);
  // The new tenant may write.
  Put(Client("tenant-a"), "k", 100);
}

TEST_F(AdminHttpTest, PutUpdatesAnExistingTenant) {
  Start();
  Upsert("tenant-a", R"({"requested_quota_bytes": 4096, "max_entries": 7})");
  json d = Upsert("tenant-a", R"({"requested_quota_bytes": 8192})");
  EXPECT_EQ(d["requested_quota_bytes"], 8192u) << d;
  EXPECT_TRUE(d["max_entries"].is_null()) << d;
  // An explicit null max_entries is the same as none.
  Upsert("tenant-a", R"({"requested_quota_bytes": 8193, "max_entries": null})");
  EXPECT_EQ(FilePolicy(), (Policy{{{"tenant-a", 8193, std::nullopt}}}));
  Reply list = Get(kApi);
  EXPECT_EQ(list.body["data"].size(), 1u) << list;
}

TEST_F(AdminHttpTest, PutAcceptsTheLargestQuotaAndScalesItToCapacity) {
  Start();
  const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  json d = Upsert("tenant-a", Quota(kMax));
  EXPECT_EQ(d["requested_quota_bytes"], kMax) << d;
  EXPECT_EQ(d["effective_quota_bytes"], kMiB) << d;
  EXPECT_EQ(FilePolicy().tenants.at(0).quota_bytes, kMax);
}

TEST_F(AdminHttpTest, PutRejectsABadBodyNamingTheFieldOrValue) {
  Start();
  Upsert("tenant-a", Quota(1000));
  const std::string before = ReadFile(path_);
  struct Case {
    std::string body;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {"not json", "not JSON"},
      {"", "not JSON"},
      {R"({"requested_quota_bytes": 5)", "not JSON"},
      {"[1, 2]", "JSON object"},
      {"5", "JSON object"},
      {R"("requested_quota_bytes")", "JSON object"},
      {R"({"requested_quota_bytes": "5GB"})", "\"5GB\""},
      {R"({"requested_quota_bytes": 1.5})", "1.5"},
      {R"({"requested_quota_bytes": true})", "requested_quota_bytes must be an integer"},
      {R"({"requested_quota_bytes": null})", "requested_quota_bytes must be an integer"},
      {R"({"requested_quota_bytes": 0})", "requested_quota_bytes 0"},
      {R"({"requested_quota_bytes": -5})", "requested_quota_bytes -5"},
      {R"({"requested_quota_bytes": 9223372036854775808})", "9223372036854775808"},
      // Past 64 bits: shown as the integer it is, not as 1.8446744073709552e+19.
      {R"({"requested_quota_bytes": 18446744073709551616})",
       "requested_quota_bytes: the integer 18446744073709551616 does not fit in 64 bits"},
      // Parsed strictly: a key twice is refused, not "last wins".
      {R"({"requested_quota_bytes": 100, "requested_quota_bytes": 200})",
       "duplicate key 'requested_quota_bytes'"},
      {R"({"requested_quota_bytes": 100, "max_entries": 5, "max_entries": 5})",
       "duplicate key 'max_entries'"},
      // A string that is not UTF-8: refused by the parser, and the message stays UTF-8.
      {"{\"requested_quota_bytes\": 100, \"default_tier\": \"\xff\"}", "not JSON"},
      {R"({"requested_quota_bytes": 100, "default_tier": "\u00ff"})", "tier '\\xc3\\xbf'"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than 32"},
      {R"({"requested_quota_bytes": 100, "quota": 5})", "unknown field 'quota'"},
      {R"({"requested_quota_bytes": 100, "max_entries": 0})", "max_entries 0"},
      {R"({"requested_quota_bytes": 100, "max_entries": "many"})", "max_entries"},
      {R"({"requested_quota_bytes": 100, "max_entries": -1})", "max_entries -1"},
      {"{}", "requested_quota_bytes is required"},
      {R"({"max_entries": 5})", "requested_quota_bytes is required"},
      {R"({"requested_quota_bytes": 100, "pool_spill": "yes"})",
       "pool_spill must be true or false, got \"yes\""},
      {R"({"requested_quota_bytes": 100, "pool_spill": 1})",
       "pool_spill must be true or false, got 1"},
      {R"({"requested_quota_bytes": 100, "pool_spill": null})",
       "pool_spill must be true or false, got null"},
      {R"({"requested_quota_bytes": 100, "default_tier": "ssd"})",
       "tier 'ssd' is not one of host, gpu, any"},
      {R"({"requested_quota_bytes": 100, "default_tier": 1})",
       "default_tier must be \"host\", \"gpu\" or \"any\", got 1"},
  };
  for (const Case& c : cases) {
    for (const std::string& tenant : {std::string("tenant-a"), std::string("tenant-new")}) {
      SCOPED_TRACE(absl::StrCat("tenant ", tenant, " body '", c.body, "'"));
      ExpectError(Put(Of(tenant), c.body), 400, "INVALID_ARGUMENT", c.mentions);
    }
  }
  // Nothing changed: not the running quota, not the file, and no tenant was created.
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], 1000u);
  ExpectError(Get(Of("tenant-new")), 404, "TENANT_NOT_FOUND");
  EXPECT_EQ(ReadFile(path_), before);
}

// default_tier: set by PUT, saved to the policy file, kept by a PUT that leaves it out, shown by
// GET, and applied to the ledger the master places puts by.
TEST_F(AdminHttpTest, PutSetsTheDefaultTier) {
  Start();
  EXPECT_EQ(Upsert("tenant-a", Quota(4096))["default_tier"], "host");  // a new tenant's
  json d = Upsert("tenant-a", R"({"requested_quota_bytes": 4096, "default_tier": "gpu"})");
  EXPECT_EQ(d["default_tier"], "gpu") << d;
  ASSERT_NE(FilePolicy().Find("tenant-a"), nullptr);
  EXPECT_EQ(FilePolicy().Find("tenant-a")->default_tier, common::TierPreference::kGpu);
  EXPECT_EQ(svc_->ledger()->DefaultTier("tenant-a"), common::TierPreference::kGpu);
  Upsert("tenant-a", Quota(8192));  // no default_tier: kept
  EXPECT_EQ(GetOne("tenant-a")["default_tier"], "gpu");
  Upsert("tenant-a", R"({"requested_quota_bytes": 8192, "default_tier": "any"})");
  EXPECT_EQ(GetOne("tenant-a")["default_tier"], "any");
  EXPECT_EQ(svc_->ledger()->DefaultTier("tenant-a"), common::TierPreference::kAny);
}

// pool_spill: set by PUT, saved to the policy file, kept by a PUT that leaves it out, shown by
// GET with the tenant's pool (its capacity and usage) once a node mounts one.
TEST_F(AdminHttpTest, PutSetsPoolSpillAndGetShowsThePool) {
  Start();
  json d = Upsert("tenant-a", R"({"requested_quota_bytes": 4096, "pool_spill": true})");
  EXPECT_EQ(d["pool_spill"], true) << d;
  EXPECT_TRUE(d["pool"].is_null()) << d;  // no pool mounted yet
  ASSERT_NE(FilePolicy().Find("tenant-a"), nullptr);
  EXPECT_TRUE(FilePolicy().Find("tenant-a")->pool_spill);
  Upsert("tenant-a", Quota(8192));  // no pool_spill: kept
  EXPECT_EQ(GetOne("tenant-a")["pool_spill"], true);
  Upsert("tenant-a", R"({"requested_quota_bytes": 8192, "pool_spill": false})");
  EXPECT_EQ(GetOne("tenant-a")["pool_spill"], false);
  EXPECT_FALSE(FilePolicy().Find("tenant-a")->pool_spill);
  EXPECT_EQ(GetOne("tenant-a")["pool_spill"], false);

  AddNode("pool-a", 2 * kMiB, "tenant-a");
  Put(Client("tenant-a"), "k", 1000);  // lands in the pool: 1088 bytes
  json pool = GetOne("tenant-a")["pool"];
  ASSERT_TRUE(pool.is_object()) << pool;
  EXPECT_EQ(pool["tenant_id"], "tenant-a");
  EXPECT_EQ(pool["capacity_bytes"], 2 * kMiB);
  EXPECT_EQ(pool["used_bytes"], 1088u);
  EXPECT_EQ(pool["segments"], 1u);

  Reply segs = Get("/api/v1/segments");
  ASSERT_EQ(segs.status, 200) << segs;
  ASSERT_EQ(segs.body["pools"].size(), 1u) << segs;
  EXPECT_EQ(segs.body["pools"][0]["tenant_id"], "tenant-a");
  EXPECT_EQ(segs.body["pools"][0]["used_bytes"], 1088u);
  bool found = false;
  for (const json& seg : segs.body["data"]) {
    if (seg["pool"] == "tenant-a") {
      found = true;
      EXPECT_EQ(seg["used_bytes"], 1088u) << seg;
    }
  }
  EXPECT_TRUE(found) << segs;

  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_TRUE(
      Has(m->body, absl::StrCat("granary_pool_capacity_bytes{tenant=\"tenant-a\"} ", 2 * kMiB)))
      << m->body;
  EXPECT_TRUE(Has(m->body, "granary_pool_used_bytes{tenant=\"tenant-a\"} 1088")) << m->body;
}

TEST_F(AdminHttpTest, PutAndDeleteWithoutTenantIdAre400) {
  Start();
  ExpectError(Put(kApi, Quota(100)), 400, "INVALID_ARGUMENT", "tenant_id");
  ExpectError(Delete(kApi), 400, "INVALID_ARGUMENT", "tenant_id");
  EXPECT_EQ(FilePolicy(), Policy{});
}

TEST_F(AdminHttpTest, InvalidTenantIdsAre400InvalidTenantId) {
  Start();
  const std::vector<std::pair<std::string, std::string>> ids = {
      {"_probe", "_probe"},                         // reserved for the master
      {std::string(129, 'a'), "129"},               // too long
      {"a%01b", "control"},                         // control character (URL-encoded)
      {"a%00b", "NUL"},                             // NUL
      {"a%0Ab", "control"},                         // newline
      {"", "empty"},                                // ?tenant_id=
      {"a%ffb", "'a\\xffb': must be valid UTF-8"},  // not UTF-8: refused, shown escaped
      {"%c0%af", "must be valid UTF-8"},            // overlong
  };
  for (const auto& [id, mentions] : ids) {
    SCOPED_TRACE("tenant_id=" + id);
    ExpectError(Get(Of(id)), 400, "INVALID_TENANT_ID", mentions);
    ExpectError(Put(Of(id), Quota(100)), 400, "INVALID_TENANT_ID", mentions);
    ExpectError(Delete(Of(id)), 400, "INVALID_TENANT_ID", mentions);
  }
  EXPECT_EQ(FilePolicy(), Policy{});
  // 128 bytes and an underscore that is not leading are fine.
  Upsert(std::string(128, 'a'), Quota(100));
  Upsert("a_b", Quota(100));
  EXPECT_EQ(FilePolicy().tenants.size(), 2u);
}

// A tenant whose id is not UTF-8 that reached the ledger anyway (saved by an older master):
// listings and /metrics show it escaped and stay valid, rather than failing for everyone.
TEST_F(AdminHttpTest, ListingsAndMetricsStayValidWithATenantIdThatIsNotUtf8) {
  Start();
  Policy old;
  old.tenants.push_back({.name = "old\xff", .quota_bytes = 4096});
  old.tenants.push_back({.name = "tenant-a", .quota_bytes = 4096});
  svc_->ledger()->ApplyPolicy(old, kMiB);
  Reply list = Get(kApi);
  ASSERT_EQ(list.status, 200) << list;
  ASSERT_EQ(list.body["data"].size(), 2u) << list;
  EXPECT_EQ(list.body["data"][0]["tenant_id"], "old\\xff") << list;
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_TRUE(Has(m->body, "tenant_id=\"old\\\\xff\"")) << m->body;
  EXPECT_EQ(m->body.find('\xff'), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// DELETE

TEST_F(AdminHttpTest, DeleteOfAnUnknownTenantIs404TenantNotFound) {
  Start();
  ExpectError(Delete(Of("tenant-x")), 404, "TENANT_NOT_FOUND", "tenant-x");
}

TEST_F(AdminHttpTest, DeleteOfATenantThatOwnsAnObjectIs409UntilItIsRemoved) {
  Start();
  Upsert("tenant-a", Quota(kMiB));
  Upsert("tenant-b", Quota(kMiB));
  SessionId c = Client("tenant-a");
  // In flight only: charged, no entry yet.
  uint64_t gen = PutStart(c, "k", 1000);
  ExpectError(Delete(Of("tenant-a")), 409, "TENANT_NOT_EMPTY", "tenant-a");
  PutEnd(c, "k", gen);
  ExpectError(Delete(Of("tenant-a")), 409, "TENANT_NOT_EMPTY", "1 object");
  // Still there, in the API and in the file.
  EXPECT_EQ(GetOne("tenant-a")["entries"], 1u);
  EXPECT_NE(FilePolicy().Find("tenant-a"), nullptr);

  Remove(c, "k");
  Reply r = Delete(Of("tenant-a"));
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.body.value("success", false), true) << r;
  EXPECT_EQ(r.body["data"]["tenant_id"], "tenant-a") << r;
  EXPECT_EQ(r.body["data"]["deleted"], true) << r;
  ExpectError(Get(Of("tenant-a")), 404, "TENANT_NOT_FOUND");
  EXPECT_EQ(FilePolicy(), (Policy{{{"tenant-b", kMiB, std::nullopt}}}));
  // And the tenant may no longer write.
  proto::PutStartRequest p;
  p.entries.push_back({"k2", 10});
  auto rep = svc_->PutStart(c, p);
  ASSERT_EQ(rep.results.size(), 1u);
  EXPECT_EQ(rep.results[0].status.reason, ErrorReason::kTenantNotRegistered)
      << rep.results[0].status.message;
}

// ---------------------------------------------------------------------------------------------
// Modes and roles

TEST_F(AdminHttpTest, MultiTenantOffAnswers409UnavailableInCurrentMode) {
  Start(/*multi_tenant=*/false);
  ExpectError(Get(kApi), 409, "UNAVAILABLE_IN_CURRENT_MODE", "multi-tenant");
  ExpectError(Get(Of("tenant-a")), 409, "UNAVAILABLE_IN_CURRENT_MODE");
  ExpectError(Put(Of("tenant-a"), Quota(100)), 409, "UNAVAILABLE_IN_CURRENT_MODE");
  ExpectError(Delete(Of("tenant-a")), 409, "UNAVAILABLE_IN_CURRENT_MODE");
  EXPECT_EQ(ReadFile(path_), "version: 1\ntenants: []\n");
  // The rest of the HTTP side works.
  Reply health = Get("/health");
  EXPECT_EQ(health.status, 200) << health;
  EXPECT_EQ(health.body["multi_tenant"], false) << health;
  EXPECT_EQ(health.body["policy_store"], "none") << health;
}

TEST_F(AdminHttpTest, StandbyAnswers503OnEveryTenantCall) {
  Start();
  Upsert("tenant-a", Quota(1000));
  const std::string before = ReadFile(path_);
  active_ = false;
  ExpectError(Get(kApi), 503, "NOT_ACTIVE");
  ExpectError(Get(Of("tenant-a")), 503, "NOT_ACTIVE");
  ExpectError(Put(Of("tenant-a"), Quota(5)), 503, "NOT_ACTIVE");
  ExpectError(Put(Of("tenant-b"), Quota(5)), 503, "NOT_ACTIVE");
  ExpectError(Delete(Of("tenant-a")), 503, "NOT_ACTIVE");
  EXPECT_EQ(Get("/role").body["role"], "standby");
  EXPECT_EQ(ReadFile(path_), before);
  active_ = true;
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], 1000u);
  ExpectError(Get(Of("tenant-b")), 404, "TENANT_NOT_FOUND");
  EXPECT_EQ(Get("/role").body["role"], "active");
}

// ---------------------------------------------------------------------------------------------
// A failed save changes nothing

TEST_F(AdminHttpTest, FailedSaveIs503AndChangesNeitherPolicyNorLedgerNorFile) {
  Start();
  Upsert("tenant-a", R"({"requested_quota_bytes": 1000, "max_entries": 3})");
  Put(Client("tenant-a"), "k", 100);
  const std::string file_before = ReadFile(path_);
  const Policy policy_before = manager_->policy();
  const json snap_before = GetOne("tenant-a");
  fail_save_ = true;
  const int saves = store_->saves_attempted.load();

  Reply r = Put(Of("tenant-a"), R"({"requested_quota_bytes": 2000})");
  ExpectError(r, 503, "UNAVAILABLE", "disk full");
  EXPECT_TRUE(Has(r.message(), "nothing changed")) << r;
  ExpectError(Put(Of("tenant-b"), Quota(5)), 503, "UNAVAILABLE");
  EXPECT_GT(store_->saves_attempted.load(), saves);

  // The running policy, the ledger and the file are as before.
  EXPECT_EQ(manager_->policy(), policy_before);
  EXPECT_EQ(GetOne("tenant-a"), snap_before);
  ExpectError(Get(Of("tenant-b")), 404, "TENANT_NOT_FOUND");
  EXPECT_EQ(ReadFile(path_), file_before);
  // A delete that cannot be saved does not happen either.
  Remove(Client("tenant-a"), "k");
  ExpectError(Delete(Of("tenant-a")), 503, "UNAVAILABLE");
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], 1000u);
  EXPECT_EQ(ReadFile(path_), file_before);

  fail_save_ = false;
  EXPECT_EQ(Upsert("tenant-a", Quota(2000))["requested_quota_bytes"], 2000u);
  EXPECT_EQ(FilePolicy().Find("tenant-a")->quota_bytes, 2000u);
}

// ---------------------------------------------------------------------------------------------
// Effective quota

TEST_F(AdminHttpTest, EffectiveQuotasAreLargestRemainderSharesOfCapacity) {
  Start(/*multi_tenant=*/true, /*capacity=*/kMiB);
  Upsert("tenant-a", Quota(kMiB / 2));
  EXPECT_EQ(GetOne("tenant-a")["effective_quota_bytes"], kMiB / 2);
  Upsert("tenant-b", Quota(kMiB));
  // 1.5 MiB requested over 1 MiB: a gets 349525.33, b 699050.67; the one byte left over goes to
  // the larger remainder (b).
  EXPECT_EQ(GetOne("tenant-a")["effective_quota_bytes"], 349525u);
  EXPECT_EQ(GetOne("tenant-b")["effective_quota_bytes"], 699051u);
  EXPECT_EQ(GetOne("tenant-a")["requested_quota_bytes"], kMiB / 2);
  // A request above the capacity counts as the capacity: b asking for 2 MiB gets the same share.
  Upsert("tenant-b", Quota(2 * kMiB));
  EXPECT_EQ(GetOne("tenant-b")["effective_quota_bytes"], 699051u);
  EXPECT_EQ(GetOne("tenant-b")["requested_quota_bytes"], 2 * kMiB);
  // Equal remainders: the leftover byte goes by name.
  Upsert("tenant-a", Quota(kMiB));
  Upsert("tenant-b", Quota(kMiB));
  Upsert("tenant-c", Quota(kMiB));
  Reply list = Get(kApi);
  ASSERT_EQ(list.body["data"].size(), 3u) << list;
  EXPECT_EQ(list.body["data"][0]["effective_quota_bytes"], 349526u) << list;
  EXPECT_EQ(list.body["data"][1]["effective_quota_bytes"], 349525u) << list;
  EXPECT_EQ(list.body["data"][2]["effective_quota_bytes"], 349525u) << list;
  // More capacity: requests fit, effective == requested.
  AddNode("n2", 2 * kMiB);
  EXPECT_EQ(GetOne("tenant-c")["effective_quota_bytes"], kMiB);
}

}  // namespace
}  // namespace granary::master
