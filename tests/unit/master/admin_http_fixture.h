#pragma once

// The admin HTTP server's fixture (master/admin_http.h) over real HTTP: an AdminHttp on
// 127.0.0.1:0 in front of an in-process MasterService (FakeClock) and a TenantManager whose store
// is a real file that the test can make fail to save or load. Used by admin_http_test (the tenant
// quota API) and admin_http_metrics_test (the read-only pages).

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
#include "tests/text.h"

namespace granary::master {

using nlohmann::json;
using tenant::Policy;
using tenant::PolicyStore;
using tenant::TenantManager;

inline constexpr uint64_t kMiB = 1024 * 1024;
inline constexpr char kApi[] = "/api/v1/tenant_quotas";

using ::granary::testing::Has;
using ::granary::testing::ReadFile;
using ::granary::testing::WriteFile;

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

inline std::ostream& operator<<(std::ostream& os, const Reply& r) {
  return os << "HTTP " << r.status << " " << r.text;
}

class AdminHttpFixture : public ::testing::Test {
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
    EXPECT_EQ(svc_->Hello(n, h).status.ToStatus().code(), absl::StatusCode::kOk);
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
    EXPECT_EQ(rep.status.ToStatus().code(), absl::StatusCode::kOk) << rep.status.message;
    return n;
  }

  SessionId Client(const std::string& tenant) {
    SessionId sid = next_sid_++;
    proto::HelloRequest h;
    h.role = proto::Role::kClient;
    h.client_id = absl::StrCat("c", sid);
    h.tenant_id = tenant;
    auto rep = svc_->Hello(sid, h);
    EXPECT_EQ(rep.status.ToStatus().code(), absl::StatusCode::kOk) << rep.status.message;
    return sid;
  }
  // PutStart; returns the generation (0 on failure, which fails the test).
  uint64_t PutStart(SessionId sid, const std::string& key, uint64_t size) {
    proto::PutStartRequest r;
    r.entries.push_back({key, size});
    r.replica_num = 1;
    auto rep = svc_->PutStart(sid, r);
    EXPECT_EQ(rep.status.ToStatus().code(), absl::StatusCode::kOk) << rep.status.message;
    if (rep.results.size() != 1) return 0;
    EXPECT_EQ(rep.results[0].status.ToStatus().code(), absl::StatusCode::kOk)
        << rep.results[0].status.message;
    return rep.results[0].generation;
  }
  void PutEnd(SessionId sid, const std::string& key, uint64_t gen) {
    proto::KeyGenRequest r;
    r.entries.push_back({key, gen});
    auto rep = svc_->PutEnd(sid, r);
    ASSERT_EQ(rep.results.size(), 1u);
    EXPECT_EQ(rep.results[0].ToStatus().code(), absl::StatusCode::kOk) << rep.results[0].message;
  }
  void Put(SessionId sid, const std::string& key, uint64_t size) {
    PutEnd(sid, key, PutStart(sid, key, size));
  }
  void Remove(SessionId sid, const std::string& key) {
    proto::RemoveRequest r;
    r.keys.push_back(key);
    auto rep = svc_->Remove(sid, r);
    ASSERT_EQ(rep.results.size(), 1u);
    EXPECT_EQ(rep.results[0].ToStatus().code(), absl::StatusCode::kOk) << rep.results[0].message;
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
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
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

}  // namespace granary::master
