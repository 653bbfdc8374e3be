// TenantManager with a real file store: loading at start (strict), Reload (good, bad, back to
// good), admin changes written to the file first, validation, and the mode switch.

#include "master/tenant/tenant_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "master/tenant/policy.h"
#include "master/tenant/policy_store.h"
#include "master/tenant/quota_ledger.h"
#include "tests/text.h"

namespace granary::master::tenant {
namespace {

using ::granary::testing::Has;
using ::granary::testing::ReadFile;
using ::granary::testing::WriteFile;

constexpr uint64_t kCapacity = 1ull << 40;  // large: effective == requested

class TenantManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "granary_tm_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tenant_quotas.yaml";
  }
  void TearDown() override {
    manager_.reset();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }

  absl::StatusOr<std::unique_ptr<TenantManager>> Create() {
    return TenantManager::CreateWithStore(true, NewFilePolicyStore(path_), &ledger_,
                                          [this] { return capacity_.load(); });
  }
  // Creates the manager from the file, or fails the test.
  TenantManager& Manager() {
    if (!manager_) {
      auto m = Create();
      EXPECT_TRUE(m.ok()) << m.status();
      if (m.ok()) manager_ = std::move(*m);
    }
    return *manager_;
  }
  Policy FilePolicy() {
    auto p = ParsePolicy(ReadFile(path_));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : Policy{};
  }
  uint64_t Requested(const std::string& tenant) {
    auto s = ledger_.Snapshot(tenant);
    return s.has_value() ? s->requested_quota_bytes : 0;
  }

  std::string dir_;
  std::string path_;
  QuotaLedger ledger_{true};
  std::atomic<uint64_t> capacity_{kCapacity};
  std::unique_ptr<TenantManager> manager_;
};

const char kTwoTenants[] =
    "version: 1\n"
    "tenants:\n"
    "  - name: tenant-a\n"
    "    quota: 2KB\n"
    "    max_entries: 10\n"
    "  - name: tenant-b\n"
    "    quota: 5000\n";

// ---------------------------------------------------------------------------------------------
// Create

TEST_F(TenantManagerTest, CreateLoadsTheFileAndAppliesItToTheLedger) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  EXPECT_TRUE(m.enabled());
  EXPECT_TRUE(m.store_status().ok());
  EXPECT_EQ(m.store_description(), "file:" + path_);
  ASSERT_EQ(m.policy().tenants.size(), 2u);
  EXPECT_EQ(Requested("tenant-a"), 2048u);
  EXPECT_EQ(Requested("tenant-b"), 5000u);
  auto a = ledger_.Snapshot("tenant-a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->max_entries, std::optional<uint64_t>(10));
  EXPECT_TRUE(a->has_explicit_policy);
  EXPECT_EQ(a->effective_quota_bytes, 2048u);
}

TEST_F(TenantManagerTest, CreateFailsNamingThePathWhenTheFileIsMissing) {
  auto m = Create();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound) << m.status();
  EXPECT_TRUE(Has(std::string(m.status().message()), path_)) << m.status();
  EXPECT_TRUE(ledger_.SnapshotAll().empty());
}

TEST_F(TenantManagerTest, CreateFailsNamingThePathWhenTheFileIsInvalid) {
  WriteFile(path_, "version: 1\ntenants:\n  - name: tenant-a\n    quota: lots\n");
  auto m = Create();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_TRUE(Has(std::string(m.status().message()), path_)) << m.status();
  EXPECT_TRUE(Has(std::string(m.status().message()), "quota")) << m.status();
  EXPECT_TRUE(ledger_.SnapshotAll().empty());
}

TEST_F(TenantManagerTest, CreateWithEmptyTenantListGivesEmptyPolicy) {
  WriteFile(path_, "version: 1\ntenants: []\n");
  TenantManager& m = Manager();
  EXPECT_TRUE(m.policy().tenants.empty());
  EXPECT_TRUE(ledger_.SnapshotAll().empty());
}

TEST_F(TenantManagerTest, DisabledManagerNeedsNoStoreAndRefusesChanges) {
  QuotaLedger ledger(false);
  auto m = TenantManager::CreateWithStore(false, nullptr, &ledger, [] { return kCapacity; });
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->enabled());
  EXPECT_EQ((*m)->store_description(), "none");
  EXPECT_TRUE((*m)->store_status().ok());
  for (absl::Status st :
       {(*m)->Upsert("tenant-a", 100, std::nullopt), (*m)->Delete("tenant-a"), (*m)->Reload()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_TRUE(absl::StartsWith(st.message(), "UNAVAILABLE_IN_CURRENT_MODE: ")) << st;
  }
  EXPECT_TRUE(ledger.SnapshotAll().empty());
  EXPECT_FALSE(::access(path_.c_str(), F_OK) == 0);
}

// ---------------------------------------------------------------------------------------------
// Reload

TEST_F(TenantManagerTest, ReloadPicksUpAValidChangedFile) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  WriteFile(path_,
            "version: 1\n"
            "tenants:\n"
            "  - name: tenant-a\n"
            "    quota: 4KB\n"
            "  - name: tenant-c\n"
            "    quota: 7\n");
  ASSERT_TRUE(m.Reload().ok());
  EXPECT_EQ(Requested("tenant-a"), 4096u);
  EXPECT_EQ(ledger_.Snapshot("tenant-a")->max_entries, std::nullopt);
  EXPECT_EQ(Requested("tenant-c"), 7u);
  // tenant-b held nothing: it is gone, not closed.
  EXPECT_FALSE(ledger_.Snapshot("tenant-b").has_value());
  ASSERT_EQ(m.policy().tenants.size(), 2u);
  EXPECT_EQ(m.policy().tenants[1].name, "tenant-c");
  EXPECT_TRUE(m.store_status().ok());
}

TEST_F(TenantManagerTest, ReloadKeepsChargesOfTenantsThatStay) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  ASSERT_TRUE(ledger_.Charge("tenant-a", 1000).ok());
  ledger_.Commit("tenant-a", 1000);
  WriteFile(path_, "version: 1\ntenants:\n  - name: tenant-a\n    quota: 500\n");
  ASSERT_TRUE(m.Reload().ok());
  auto a = ledger_.Snapshot("tenant-a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->charged_bytes, 1000u);
  EXPECT_EQ(a->entries, 1u);
  EXPECT_TRUE(a->over_quota);  // the lowered quota is below what it holds
}

TEST_F(TenantManagerTest, ReloadOfAnInvalidFileFailsAndKeepsTheRunningPolicy) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  const Policy before = m.policy();
  WriteFile(path_, "version: 1\ntenants:\n  - name: _reserved\n    quota: 1GB\n");
  absl::Status st = m.Reload();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(Has(std::string(st.message()), path_)) << st;
  EXPECT_TRUE(Has(std::string(st.message()), "_reserved")) << st;
  // The running policy and the ledger are unchanged.
  EXPECT_EQ(m.policy(), before);
  EXPECT_EQ(Requested("tenant-a"), 2048u);
  EXPECT_EQ(Requested("tenant-b"), 5000u);
  EXPECT_FALSE(ledger_.Snapshot("_reserved").has_value());
  // And the store status says why.
  absl::Status status = m.store_status();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.message(), st.message());
}

TEST_F(TenantManagerTest, ReloadOfAMissingFileFailsAndKeepsTheRunningPolicy) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  absl::Status st = m.Reload();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(m.store_status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.policy().tenants.size(), 2u);
  EXPECT_EQ(Requested("tenant-b"), 5000u);
}

TEST_F(TenantManagerTest, ALaterValidFileClearsTheStoreError) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  WriteFile(path_, "version: 2\ntenants: []\n");
  ASSERT_FALSE(m.Reload().ok());
  ASSERT_FALSE(m.store_status().ok());
  // A second failure with the same error keeps reporting it.
  ASSERT_FALSE(m.Reload().ok());
  ASSERT_FALSE(m.store_status().ok());
  WriteFile(path_, "version: 1\ntenants:\n  - name: tenant-b\n    quota: 9\n");
  ASSERT_TRUE(m.Reload().ok());
  EXPECT_TRUE(m.store_status().ok()) << m.store_status();
  EXPECT_EQ(Requested("tenant-b"), 9u);
  EXPECT_FALSE(ledger_.Snapshot("tenant-a").has_value());
}

TEST_F(TenantManagerTest, ReloadOfAnUnchangedFileAfterAnErrorClearsTheError) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  WriteFile(path_, "not: [valid");
  ASSERT_FALSE(m.Reload().ok());
  WriteFile(path_, kTwoTenants);  // the same policy as the running one
  ASSERT_TRUE(m.Reload().ok());
  EXPECT_TRUE(m.store_status().ok()) << m.store_status();
}

TEST_F(TenantManagerTest, PollingPicksUpAChangedFile) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  m.StartPolling(10);
  WriteFile(path_, "version: 1\ntenants:\n  - name: tenant-a\n    quota: 3\n");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Requested("tenant-a") != 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Requested("tenant-a"), 3u);
  EXPECT_FALSE(ledger_.Snapshot("tenant-b").has_value());
  // Destroying the manager stops the poller (the test would hang otherwise).
  manager_.reset();
}

// ---------------------------------------------------------------------------------------------
// Upsert and Delete

TEST_F(TenantManagerTest, UpsertCreatesATenantAndWritesTheFile) {
  WriteFile(path_, "version: 1\ntenants: []\n");
  TenantManager& m = Manager();
  ASSERT_TRUE(m.Upsert("tenant-z", 12345, 77).ok());
  ASSERT_TRUE(m.Upsert("tenant-m", 1, std::nullopt).ok());
  Policy want{{{"tenant-m", 1, std::nullopt}, {"tenant-z", 12345, 77}}};
  EXPECT_EQ(FilePolicy(), want);
  EXPECT_EQ(m.policy(), want);
  EXPECT_EQ(Requested("tenant-z"), 12345u);
  EXPECT_EQ(ledger_.Snapshot("tenant-z")->max_entries, std::optional<uint64_t>(77));
  // A fresh manager on the same file starts with the same policy.
  QuotaLedger other(true);
  auto again = TenantManager::CreateWithStore(true, NewFilePolicyStore(path_), &other,
                                              [] { return kCapacity; });
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->policy(), want);
}

TEST_F(TenantManagerTest, UpsertUpdatesAnExistingTenantAndWritesTheFile) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  ASSERT_TRUE(m.Upsert("tenant-a", 999, std::nullopt).ok());
  Policy want{{{"tenant-a", 999, std::nullopt}, {"tenant-b", 5000, std::nullopt}}};
  EXPECT_EQ(FilePolicy(), want);
  EXPECT_EQ(Requested("tenant-a"), 999u);
  EXPECT_EQ(ledger_.Snapshot("tenant-a")->max_entries, std::nullopt);
}

TEST_F(TenantManagerTest, UpsertOfTheMaximumQuotaIsScaledToCapacity) {
  WriteFile(path_, "version: 1\ntenants: []\n");
  TenantManager& m = Manager();
  const uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  ASSERT_TRUE(m.Upsert("tenant-a", kMax, std::nullopt).ok());
  EXPECT_EQ(FilePolicy().tenants.at(0).quota_bytes, kMax);
  auto a = ledger_.Snapshot("tenant-a");
  EXPECT_EQ(a->requested_quota_bytes, kMax);
  EXPECT_EQ(a->effective_quota_bytes, kCapacity);
}

TEST_F(TenantManagerTest, UpsertRejectsBadInputAndLeavesTheFileAlone) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  const std::string before = ReadFile(path_);
  struct Case {
    std::string tenant;
    uint64_t quota;
    std::optional<uint64_t> max_entries;
    std::string mentions;
  };
  for (const Case& c :
       {Case{"_probe", 1, std::nullopt, "_probe"}, Case{"", 1, std::nullopt, "empty"},
        Case{std::string(129, 'x'), 1, std::nullopt, "129"},
        Case{"a\x01"
             "b",
             1, std::nullopt, "control"},
        Case{"tenant-a", 0, std::nullopt, "requested_quota_bytes"},
        Case{"tenant-a", (1ull << 63), std::nullopt, "requested_quota_bytes"},
        Case{"tenant-a", 10, 0, "max_entries"}}) {
    absl::Status st = m.Upsert(c.tenant, c.quota, c.max_entries);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.mentions << ": " << st;
    EXPECT_TRUE(Has(absl::AsciiStrToLower(st.message()), absl::AsciiStrToLower(c.mentions))) << st;
  }
  EXPECT_EQ(ReadFile(path_), before);
  EXPECT_EQ(Requested("tenant-a"), 2048u);
  EXPECT_FALSE(ledger_.Snapshot("_probe").has_value());
}

TEST_F(TenantManagerTest, DeleteRemovesTheTenantFromTheFileAndTheLedger) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  ASSERT_TRUE(m.Delete("tenant-a").ok());
  Policy want{{{"tenant-b", 5000, std::nullopt}}};
  EXPECT_EQ(FilePolicy(), want);
  EXPECT_EQ(m.policy(), want);
  EXPECT_FALSE(ledger_.Snapshot("tenant-a").has_value());
  ASSERT_TRUE(m.Delete("tenant-b").ok());
  EXPECT_EQ(FilePolicy(), Policy{});
  EXPECT_TRUE(ledger_.SnapshotAll().empty());
}

TEST_F(TenantManagerTest, DeleteOfAnUnknownTenantIsNotFound) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  const std::string before = ReadFile(path_);
  absl::Status st = m.Delete("tenant-q");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "TENANT_NOT_FOUND: ")) << st;
  EXPECT_TRUE(Has(std::string(st.message()), "tenant-q")) << st;
  EXPECT_EQ(ReadFile(path_), before);
}

TEST_F(TenantManagerTest, DeleteOfATenantThatHoldsChargeIsRefused) {
  WriteFile(path_, kTwoTenants);
  TenantManager& m = Manager();
  const std::string before = ReadFile(path_);
  // In flight only: no entry yet, but charged.
  ASSERT_TRUE(ledger_.Charge("tenant-a", 100).ok());
  absl::Status st = m.Delete("tenant-a");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "TENANT_NOT_EMPTY: ")) << st;
  // Committed: one entry.
  ledger_.Commit("tenant-a", 100);
  st = m.Delete("tenant-a");
  EXPECT_TRUE(absl::StartsWith(st.message(), "TENANT_NOT_EMPTY: ")) << st;
  EXPECT_TRUE(Has(std::string(st.message()), "1 object")) << st;
  EXPECT_EQ(ReadFile(path_), before);
  EXPECT_EQ(Requested("tenant-a"), 2048u);
  // Once it holds nothing, it can go.
  ledger_.Release("tenant-a", 100);
  EXPECT_TRUE(m.Delete("tenant-a").ok());
  EXPECT_EQ(FilePolicy(), (Policy{{{"tenant-b", 5000, std::nullopt}}}));
}

TEST_F(TenantManagerTest, CapacityIsReadAtEveryChange) {
  WriteFile(path_, "version: 1\ntenants: []\n");
  capacity_ = 300;
  TenantManager& m = Manager();
  ASSERT_TRUE(m.Upsert("tenant-a", 200, std::nullopt).ok());
  EXPECT_EQ(ledger_.Snapshot("tenant-a")->effective_quota_bytes, 200u);
  ASSERT_TRUE(m.Upsert("tenant-b", 200, std::nullopt).ok());
  // 400 requested over 300: 150 each.
  EXPECT_EQ(ledger_.Snapshot("tenant-a")->effective_quota_bytes, 150u);
  EXPECT_EQ(ledger_.Snapshot("tenant-b")->effective_quota_bytes, 150u);
  capacity_ = 1000;
  ASSERT_TRUE(m.Upsert("tenant-c", 100, std::nullopt).ok());
  EXPECT_EQ(ledger_.Snapshot("tenant-a")->effective_quota_bytes, 200u);
}

}  // namespace
}  // namespace granary::master::tenant
