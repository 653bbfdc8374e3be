// The tenant quota admin API (docs/architecture.md section 5) over real HTTP: an AdminHttp on
// 127.0.0.1:0 in front of an in-process MasterService (FakeClock) and a TenantManager whose store
// is a real file that the test can make fail to save or load.

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/admin_http.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "master/tenant/policy_store.h"
#include "master/tenant/tenant_manager.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::master {
namespace {

using nlohmann::json;
using tenant::Policy;
using tenant::PolicyStore;
using tenant::TenantManager;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kApi[] = "/api/v1/tenant_quotas";

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".edit";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);
}

// A real file store whose Save and Load can be made to fail (a full disk, an unreachable etcd).
class FlakyStore : public PolicyStore {
 public:
  FlakyStore(std::unique_ptr<PolicyStore> inner, std::atomic<bool>* fail_save,
             std::atomic<bool>* fail_load)
      : inner_(std::move(inner)), fail_save_(fail_save), fail_load_(fail_load) {}
  absl::StatusOr<Policy> Load() override {
    if (fail_load_->load()) return absl::UnavailableError("store unreachable (injected)");
    return inner_->Load();
  }
  absl::Status Save(const Policy& policy) override {
    ++saves_attempted;
    if (fail_save_->load()) return absl::UnavailableError("disk full (injected)");
    return inner_->Save(policy);
  }
  std::string Describe() const override { return inner_->Describe(); }
  std::atomic<int> saves_attempted{0};

 private:
  std::unique_ptr<PolicyStore> inner_;
  std::atomic<bool>* fail_save_;
  std::atomic<bool>* fail_load_;
};

struct Reply {
  int status = 0;
  json body;
  std::string text;
  // The error envelope's parts ("" if absent).
  std::string code() const {
    return body.is_object() && body.contains("error") ? body["error"].value("code", "") : "";
  }
  std::string message() const {
    return body.is_object() && body.contains("error") ? body["error"].value("message", "") : "";
  }
};

std::ostream& operator<<(std::ostream& os, const Reply& r) {
  return os << "HTTP " << r.status << " " << r.text;
}

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "granary_admin_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tenant_quotas.yaml";
    WriteFile(path_, "version: 1\ntenants: []\n");
    opts_.client_ttl_ms = 3'600'000;
    opts_.put_start_timeout_ms = 600'000;
  }
  void TearDown() override {
    http_.reset();  // stop serving before what the handlers use goes
    manager_.reset();
    svc_.reset();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }

  // Starts everything: a service with one node of `capacity` bytes, the manager and the API.
  void Start(bool multi_tenant = true, uint64_t capacity = kMiB) {
    opts_.enable_multi_tenants = multi_tenant;
    svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    if (capacity > 0) AddNode("n1", capacity);
    std::unique_ptr<PolicyStore> store;
    if (multi_tenant) {
      auto flaky =
          std::make_unique<FlakyStore>(tenant::NewFilePolicyStore(path_), &fail_save_, &fail_load_);
      store_ = flaky.get();
      store = std::move(flaky);
    }
    MasterService* svc = svc_.get();
    auto m = TenantManager::CreateWithStore(multi_tenant, std::move(store), svc_->ledger(),
                                            [svc] { return svc->capacity(); });
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
    svc_->SetTokenCheck(manager_->MakeTokenCheck(token_file_, false));  // as the server does
    auto h = AdminHttp::Create("127.0.0.1", 0, svc_.get(), manager_.get(), &metrics_,
                               [this] { return active_.load(); });
    ASSERT_TRUE(h.ok()) << h.status();
    http_ = std::move(*h);
    ASSERT_NE(http_->port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_connection_timeout(5);
    client_->set_read_timeout(10);
  }

  SessionId AddNode(const std::string& node_id, uint64_t size, const std::string& pool = "") {
    SessionId n = next_sid_++;
    proto::HelloRequest h;
    h.role = proto::Role::kNode;
    h.client_id = node_id;
    EXPECT_EQ(svc_->Hello(n, h).status.code, 0);
    proto::MountSegmentRequest m;
    m.name = node_id + "-seg0";
    m.node_id = node_id;
    m.node_address = node_id + ":7000";
    m.base = 0x7f0000000000ull + n * 0x100000000ull;
    m.size = size;
    m.rkey = "rkey";
    m.worker_address = "worker-" + node_id;
    m.host_id = "host";
    m.pool = pool;
    auto rep = svc_->MountSegment(n, m);
    EXPECT_EQ(rep.status.code, 0) << rep.status.message;
    return n;
  }

  SessionId Client(const std::string& tenant) {
    SessionId sid = next_sid_++;
    proto::HelloRequest h;
    h.role = proto::Role::kClient;
    h.client_id = absl::StrCat("c", sid);
    h.tenant_id = tenant;
    auto rep = svc_->Hello(sid, h);
    EXPECT_EQ(rep.status.code, 0) << rep.status.message;
    return sid;
  }
  // PutStart; returns the generation (0 on failure, which fails the test).
  uint64_t PutStart(SessionId sid, const std::string& key, uint64_t size) {
    proto::PutStartRequest r;
    r.entries.push_back({key, size});
    r.replica_num = 1;
    auto rep = svc_->PutStart(sid, r);
    EXPECT_EQ(rep.status.code, 0) << rep.status.message;
    if (rep.results.size() != 1) return 0;
    EXPECT_EQ(rep.results[0].status.code, 0) << rep.results[0].status.message;
    return rep.results[0].generation;
  }
  void PutEnd(SessionId sid, const std::string& key, uint64_t gen) {
    proto::KeyGenRequest r;
    r.entries.push_back({key, gen});
    auto rep = svc_->PutEnd(sid, r);
    ASSERT_EQ(rep.results.size(), 1u);
    EXPECT_EQ(rep.results[0].code, 0) << rep.results[0].message;
  }
  void Put(SessionId sid, const std::string& key, uint64_t size) {
    PutEnd(sid, key, PutStart(sid, key, size));
  }
  void Remove(SessionId sid, const std::string& key) {
    proto::RemoveRequest r;
    r.keys.push_back(key);
    auto rep = svc_->Remove(sid, r);
    ASSERT_EQ(rep.results.size(), 1u);
    EXPECT_EQ(rep.results[0].code, 0) << rep.results[0].message;
  }

  static Reply ToReply(const httplib::Result& res) {
    Reply r;
    EXPECT_TRUE(res) << "HTTP request failed: " << httplib::to_string(res.error());
    if (!res) return r;
    r.status = res->status;
    r.text = res->body;
    r.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    return r;
  }
  Reply Get(const std::string& path) { return ToReply(client_->Get(path.c_str())); }
  Reply Put(const std::string& path, const std::string& body) {
    return ToReply(client_->Put(path.c_str(), body, "application/json"));
  }
  Reply Delete(const std::string& path) { return ToReply(client_->Delete(path.c_str())); }
  static std::string Of(const std::string& tenant) {
    return absl::StrCat(kApi, "?tenant_id=", tenant);
  }
  static std::string Quota(uint64_t bytes) {
    return absl::StrCat("{\"requested_quota_bytes\": ", bytes, "}");
  }
  // PUT that must succeed.
  json Upsert(const std::string& tenant, const std::string& body) {
    Reply r = Put(Of(tenant), body);
    EXPECT_EQ(r.status, 200) << r;
    return r.body.is_object() ? r.body.value("data", json()) : json();
  }
  // GET one that must succeed; returns data.
  json GetOne(const std::string& tenant) {
    Reply r = Get(Of(tenant));
    EXPECT_EQ(r.status, 200) << r;
    EXPECT_EQ(r.body.value("success", false), true) << r;
    return r.body.is_object() ? r.body.value("data", json()) : json();
  }
  Policy FilePolicy() {
    auto p = tenant::ParsePolicy(ReadFile(path_));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : Policy{};
  }
  // An error reply: HTTP status, success false, error code, and a message mentioning `mentions`.
  static void ExpectError(const Reply& r, int status, const std::string& code,
                          const std::string& mentions = "") {
    EXPECT_EQ(r.status, status) << r;
    ASSERT_TRUE(r.body.is_object()) << r;
    EXPECT_EQ(r.body.value("success", true), false) << r;
    EXPECT_EQ(r.code(), code) << r;
    EXPECT_FALSE(r.message().empty()) << r;
    if (!mentions.empty()) {
      EXPECT_TRUE(Has(r.message(), mentions)) << "want '" << mentions << "': " << r;
    }
  }

  MasterOptions opts_;
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::string dir_, path_;
  std::atomic<bool> active_{true};
  std::atomic<bool> fail_save_{false};
  std::atomic<bool> fail_load_{false};
  FlakyStore* store_ = nullptr;
  tenant::TokenHashes token_file_;  // --tenant_tokens_file entries
  std::unique_ptr<MasterService> svc_;
  std::unique_ptr<TenantManager> manager_;
  std::unique_ptr<AdminHttp> http_;
  std::unique_ptr<httplib::Client> client_;
  SessionId next_sid_ = 1;
};

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

TEST_F(AdminApiTest, ListOfNoTenantsIsAnEmptyArray) {
  Start();
  Reply r = Get(kApi);
  ASSERT_EQ(r.status, 200) << r;
  EXPECT_EQ(r.body, (json{{"success", true}, {"data", json::array()}})) << r;
}

TEST_F(AdminApiTest, ListReturnsEverySnapshotSortedByTenant) {
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

TEST_F(AdminApiTest, GetOneReturnsEverySnapshotField) {
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
TEST_F(AdminApiTest, HasTokenIsShownAndTheHashIsNeverEchoed) {
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

TEST_F(AdminApiTest, GetShowsOverQuotaAfterTheQuotaIsLoweredBelowTheCharge) {
  Start();
  Upsert("tenant-a", Quota(kMiB));
  SessionId c = Client("tenant-a");
  Put(c, "k", 4000);
  json d = Upsert("tenant-a", Quota(100));
  EXPECT_EQ(d["over_quota"], true) << d;
  EXPECT_EQ(GetOne("tenant-a")["over_quota"], true);
}

TEST_F(AdminApiTest, GetShowsAdmissionClosedForATenantDroppedWhileItHoldsData) {
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

TEST_F(AdminApiTest, GetOfAnUnknownTenantIs404TenantNotFound) {
  Start();
  Upsert("tenant-a", Quota(1000));
  ExpectError(Get(Of("tenant-x")), 404, "TENANT_NOT_FOUND", "tenant-x");
}

// ---------------------------------------------------------------------------------------------
// PUT

TEST_F(AdminApiTest, PutCreatesATenantAndSavesItToTheFile) {
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

TEST_F(AdminApiTest, PutUpdatesAnExistingTenant) {
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

TEST_F(AdminApiTest, PutAcceptsTheLargestQuotaAndScalesItToCapacity) {
  Start();
  const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  json d = Upsert("tenant-a", Quota(kMax));
  EXPECT_EQ(d["requested_quota_bytes"], kMax) << d;
  EXPECT_EQ(d["effective_quota_bytes"], kMiB) << d;
  EXPECT_EQ(FilePolicy().tenants.at(0).quota_bytes, kMax);
}

TEST_F(AdminApiTest, PutRejectsABadBodyNamingTheFieldOrValue) {
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
TEST_F(AdminApiTest, PutSetsTheDefaultTier) {
  Start();
  EXPECT_EQ(Upsert("tenant-a", Quota(4096))["default_tier"], "host");  // a new tenant's
  json d = Upsert("tenant-a", R"({"requested_quota_bytes": 4096, "default_tier": "gpu"})");
  EXPECT_EQ(d["default_tier"], "gpu") << d;
  ASSERT_NE(FilePolicy().Find("tenant-a"), nullptr);
  EXPECT_EQ(FilePolicy().Find("tenant-a")->default_tier, TierPreference::kGpu);
  EXPECT_EQ(svc_->ledger()->DefaultTier("tenant-a"), TierPreference::kGpu);
  Upsert("tenant-a", Quota(8192));  // no default_tier: kept
  EXPECT_EQ(GetOne("tenant-a")["default_tier"], "gpu");
  Upsert("tenant-a", R"({"requested_quota_bytes": 8192, "default_tier": "any"})");
  EXPECT_EQ(GetOne("tenant-a")["default_tier"], "any");
  EXPECT_EQ(svc_->ledger()->DefaultTier("tenant-a"), TierPreference::kAny);
}

// pool_spill: set by PUT, saved to the policy file, kept by a PUT that leaves it out, shown by
// GET with the tenant's pool (its capacity and usage) once a node mounts one.
TEST_F(AdminApiTest, PutSetsPoolSpillAndGetShowsThePool) {
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

TEST_F(AdminApiTest, PutAndDeleteWithoutTenantIdAre400) {
  Start();
  ExpectError(Put(kApi, Quota(100)), 400, "INVALID_ARGUMENT", "tenant_id");
  ExpectError(Delete(kApi), 400, "INVALID_ARGUMENT", "tenant_id");
  EXPECT_EQ(FilePolicy(), Policy{});
}

TEST_F(AdminApiTest, InvalidTenantIdsAre400InvalidTenantId) {
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
TEST_F(AdminApiTest, ListingsAndMetricsStayValidWithATenantIdThatIsNotUtf8) {
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

TEST_F(AdminApiTest, DeleteOfAnUnknownTenantIs404TenantNotFound) {
  Start();
  ExpectError(Delete(Of("tenant-x")), 404, "TENANT_NOT_FOUND", "tenant-x");
}

TEST_F(AdminApiTest, DeleteOfATenantThatOwnsAnObjectIs409UntilItIsRemoved) {
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

TEST_F(AdminApiTest, MultiTenantOffAnswers409UnavailableInCurrentMode) {
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

TEST_F(AdminApiTest, StandbyAnswers503OnEveryTenantCall) {
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

TEST_F(AdminApiTest, FailedSaveIs503AndChangesNeitherPolicyNorLedgerNorFile) {
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

TEST_F(AdminApiTest, EffectiveQuotasAreLargestRemainderSharesOfCapacity) {
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

// ---------------------------------------------------------------------------------------------
// /get_all_segments (Mooncake's path; SGLang polls it)

TEST_F(AdminApiTest, GetAllSegmentsListsOneMountedSegmentNamePerLine) {
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

TEST_F(AdminApiTest, MetricsShowPerTenantChargeAndPolicyStoreUp) {
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

TEST_F(AdminApiTest, SnapshotsAndMetricsCountEvictionsPerTenant) {
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

TEST_F(AdminApiTest, HealthAndMetricsReportThePolicyStoreState) {
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
