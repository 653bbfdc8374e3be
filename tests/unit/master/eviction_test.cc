// Eviction order and the entry-count quota (docs/architecture.md sections 4 and 5): over-quota
// tenants first, then tenants furthest above their fair share, then global LRU; leased and
// hard-pinned objects never, soft-pinned last; max_entries evicts a tenant's own oldest and never
// rejects. Then a full segment: least recently used first, and the high watermark.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "proto/alloc_header.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using test_calls::Code;

constexpr uint64_t kObj = 64 * 1024 - proto::kAllocHeaderSize;  // allocates exactly 64 KiB

class EvictionTest : public ::testing::Test {
 protected:
  void Start(bool quota, uint64_t segment_bytes) {
    opts_.enable_multi_tenants = quota;
    svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    proto::HelloRequest h;
    h.role = proto::Role::kNode;
    h.client_id = "node";
    ASSERT_EQ(Code(svc_->Hello(1, h).status), absl::StatusCode::kOk);
    proto::MountSegmentRequest m;
    m.name = "seg";
    m.node_id = "n1";
    m.node_address = "n1:1";
    m.base = 1 << 30;
    m.size = segment_bytes;
    m.rkey = "r";
    m.worker_address = "w";
    ASSERT_EQ(Code(svc_->MountSegment(1, m).status), absl::StatusCode::kOk);
  }
  SessionId Client(const std::string& tenant) {
    EXPECT_EQ(Code(test_calls::Hello(*svc_, next_, proto::Role::kClient, tenant)),
              absl::StatusCode::kOk);
    return next_++;
  }
  absl::Status Put(SessionId s, const std::string& key, uint32_t flags = 0) {
    clock_.AdvanceMs(1);  // distinct access times
    return test_calls::PutCommitted(*svc_, s, key, kObj, flags);
  }
  bool Exists(SessionId s, const std::string& key) {
    return Code(svc_->Exist(s, proto::KeysRequest{{key}}).results[0]) == absl::StatusCode::kOk;
  }
  void Touch(SessionId s, const std::string& key) {
    clock_.AdvanceMs(1);
    auto g = svc_->Get(s, proto::GetRequest{{key}});
    ASSERT_EQ(Code(g.results[0].status), absl::StatusCode::kOk) << key;
    svc_->GetEnd(s,
                 proto::KeyGenRequest{{{key, g.results[0].generation, g.results[0].lease_token}}});
  }
  double Evictions(const std::string& tenant, const std::string& reason) {
    return static_cast<double>(metrics_
                                   .Counter("granary_tenant_evictions_total", "",
                                            {{"tenant_id", tenant}, {"reason", reason}})
                                   ->value());
  }

  MasterOptions opts_;
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  SessionId next_ = 10;
};

TEST_F(EvictionTest, MaxEntriesEvictsTheTenantsOldestAndNeverRejects) {
  Start(/*quota=*/true, 64 << 20);
  tenant::Policy p;
  p.tenants.push_back({"heavy", 1ull << 30, 3});
  p.tenants.push_back({"other", 1ull << 30, std::nullopt});
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  SessionId h = Client("heavy"), o = Client("other");
  ASSERT_TRUE(Put(o, "o-0").ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Put(h, absl::StrCat("h-", i)).ok()) << i;
  EXPECT_EQ(svc_->ledger()->Snapshot("heavy")->entries, 3u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Exists(h, absl::StrCat("h-", i))) << i;
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(Exists(h, absl::StrCat("h-", i))) << i;
  EXPECT_TRUE(Exists(o, "o-0"));
  EXPECT_EQ(Evictions("heavy", "max_entries"), 3);
  // The tenant's snapshot (the admin API, the dashboard) counts them too; not the other's.
  EXPECT_EQ(svc_->ledger()->Snapshot("heavy")->evicted_objects, 3u);
  EXPECT_EQ(svc_->ledger()->Snapshot("heavy")->evicted_bytes, 3u * 64 * 1024);
  EXPECT_EQ(svc_->ledger()->Snapshot("other")->evicted_objects, 0u);
  // A read is never refused for it.
  Touch(h, "h-5");
}

TEST_F(EvictionTest, MaxEntriesKeepsRecentlyReadEntries) {
  Start(true, 64 << 20);
  tenant::Policy p;
  p.tenants.push_back({"t", 1ull << 30, 2});
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  SessionId t = Client("t");
  ASSERT_TRUE(Put(t, "a").ok());
  ASSERT_TRUE(Put(t, "b").ok());
  Touch(t, "a");  // now b is the least recently used
  ASSERT_TRUE(Put(t, "c").ok());
  EXPECT_TRUE(Exists(t, "a"));
  EXPECT_FALSE(Exists(t, "b"));
  EXPECT_TRUE(Exists(t, "c"));
}

TEST_F(EvictionTest, TenantFurthestAboveFairShareIsEvictedBeforeOlderLightTenants) {
  // 48 objects of 64 KiB fit; three tenants, so the fair share is 16 objects each.
  Start(false, 48 * 64 * 1024);
  SessionId heavy = Client("heavy"), l1 = Client("light-1"), l2 = Client("light-2");
  // The light tenants write first (their objects are the oldest in the store).
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Put(l1, absl::StrCat("l1-", i)).ok());
    ASSERT_TRUE(Put(l2, absl::StrCat("l2-", i)).ok());
  }
  // Then the heavy tenant writes ten times the light ones' volume, far past capacity.
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(Put(heavy, absl::StrCat("h-", i)).ok()) << i;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(Exists(l1, absl::StrCat("l1-", i))) << i;
    EXPECT_TRUE(Exists(l2, absl::StrCat("l2-", i))) << i;
  }
  EXPECT_EQ(Evictions("light-1", "space"), 0);
  EXPECT_EQ(Evictions("light-2", "space"), 0);
  EXPECT_GT(Evictions("heavy", "space"), 300);
}

TEST_F(EvictionTest, WithinFairShareTheOldestGoesFirst) {
  Start(false, 8 * 64 * 1024);
  SessionId a = Client("a");
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Put(a, absl::StrCat("k", i)).ok());
  Touch(a, "k0");
  ASSERT_TRUE(Put(a, "k8").ok());
  EXPECT_TRUE(Exists(a, "k0"));
  EXPECT_FALSE(Exists(a, "k1"));
}

TEST_F(EvictionTest, HardPinnedNeverAndSoftPinnedLast) {
  Start(false, 8 * 64 * 1024);
  SessionId a = Client("a");
  ASSERT_TRUE(Put(a, "hard", kPutFlagHardPin).ok());
  ASSERT_TRUE(Put(a, "soft", kPutFlagSoftPin).ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Put(a, absl::StrCat("k", i)).ok());
  // Full. Each new put evicts an unpinned object before the soft-pinned one.
  for (int i = 6; i < 12; ++i) {
    ASSERT_TRUE(Put(a, absl::StrCat("k", i)).ok()) << i;
    EXPECT_TRUE(Exists(a, "soft")) << "soft-pinned evicted while unpinned objects remained";
  }
  // Only pinned objects and the newest remain evictable: the soft pin goes, the hard never.
  ASSERT_TRUE(svc_->Evict(7 * 64 * 1024, "test") > 0);
  EXPECT_FALSE(Exists(a, "soft"));
  EXPECT_TRUE(Exists(a, "hard"));
  // Explicit Remove of a hard-pinned object still works.
  EXPECT_EQ(Code(svc_->Remove(a, proto::RemoveRequest{{"hard"}}).results[0]),
            absl::StatusCode::kOk);
}

TEST_F(EvictionTest, OverQuotaTenantGoesBeforeEveryoneElse) {
  Start(true, 16 * 64 * 1024);
  tenant::Policy p;
  p.tenants.push_back({"a", 8 * 64 * 1024, std::nullopt});
  p.tenants.push_back({"b", 8 * 64 * 1024, std::nullopt});
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  SessionId a = Client("a"), b = Client("b");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put(b, absl::StrCat("b", i)).ok());  // oldest
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Put(a, absl::StrCat("a", i)).ok());
  p.tenants[0].quota_bytes = 2 * 64 * 1024;  // a is now over quota
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  ASSERT_TRUE(svc_->ledger()->Snapshot("a")->over_quota);
  svc_->Evict(2 * 64 * 1024, "test");
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Exists(b, absl::StrCat("b", i))) << i;
  EXPECT_FALSE(Exists(a, "a0"));
  EXPECT_FALSE(Exists(a, "a1"));
}

TEST_F(EvictionTest, GlobalLruAcrossTenantsTakesExactlyTheLeastRecentlyRead) {
  // 256 objects of 64 KiB fill the segment; two tenants hold 128 each, their fair share, so
  // victims are taken by global LRU across both (each tenant's candidates form a heap; the
  // victims interleave them).
  Start(false, 256 * 64 * 1024);
  SessionId a = Client("a"), b = Client("b");
  std::vector<std::pair<SessionId, std::string>> all;
  for (int i = 0; i < 128; ++i) {
    all.emplace_back(a, absl::StrCat("a-", i));
    all.emplace_back(b, absl::StrCat("b-", i));
  }
  for (const auto& [s, k] : all) ASSERT_TRUE(Put(s, k).ok()) << k;
  // Read every object once, in a random order: that order is now the LRU order.
  std::mt19937 rng(7);
  std::shuffle(all.begin(), all.end(), rng);
  for (const auto& [s, k] : all) Touch(s, k);
  ASSERT_EQ(svc_->Evict(37 * 64 * 1024, "test"), 37u * 64 * 1024);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(Exists(all[i].first, all[i].second), i >= 37) << all[i].second << " read " << i;
  }
  EXPECT_EQ(Evictions("a", "test") + Evictions("b", "test"), 37);
  // Without quota the ledger still keeps accounts, and their eviction counts add up too.
  EXPECT_EQ(svc_->ledger()->Snapshot("a")->evicted_objects +
                svc_->ledger()->Snapshot("b")->evicted_objects,
            37u);
  EXPECT_EQ(svc_->ledger()->Snapshot("a")->evicted_objects, Evictions("a", "test"));
}

TEST_F(EvictionTest, AtItsCapsATenantEvictsARoundOfItsOldestNotOneEntryPerPut) {
  // A round for one tenant scans the whole table, so it frees eviction_ratio (5%) of the cap,
  // oldest first: a tenant at its cap pays the scan once per that many puts.
  Start(/*quota=*/true, 1024 * 64 * 1024);
  tenant::Policy p;
  // The requested quotas sum to less than capacity, so none is scaled down.
  p.tenants.push_back({"entries", 512 * 64 * 1024, 100});
  p.tenants.push_back({"bytes", 100 * 64 * 1024, std::nullopt});
  p.tenants.push_back({"other", 256 * 64 * 1024, std::nullopt});
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  SessionId e = Client("entries"), b = Client("bytes"), o = Client("other");
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Put(o, absl::StrCat("o-", i)).ok());
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(Put(e, absl::StrCat("e-", i)).ok()) << i;
    ASSERT_TRUE(Put(b, absl::StrCat("b-", i)).ok()) << i;
  }
  EXPECT_EQ(Evictions("entries", "max_entries"), 0);
  EXPECT_EQ(Evictions("bytes", "quota"), 0);
  Touch(e, "e-0");  // read: no longer the oldest
  // One entry past max_entries evicts 5: the five least recently used.
  ASSERT_TRUE(Put(e, "e-100").ok());
  EXPECT_EQ(Evictions("entries", "max_entries"), 5);
  EXPECT_EQ(svc_->ledger()->Snapshot("entries")->entries, 96u);
  EXPECT_TRUE(Exists(e, "e-0"));
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(Exists(e, absl::StrCat("e-", i))) << i;
  for (int i = 6; i <= 100; ++i) EXPECT_TRUE(Exists(e, absl::StrCat("e-", i))) << i;
  // The next four puts fit under the cap again: no round.
  for (int i = 101; i < 105; ++i) ASSERT_TRUE(Put(e, absl::StrCat("e-", i)).ok()) << i;
  EXPECT_EQ(Evictions("entries", "max_entries"), 5);
  // One object past the byte quota frees 5 objects' worth (5% of 100 objects), the oldest.
  ASSERT_TRUE(Put(b, "b-100").ok());
  EXPECT_EQ(Evictions("bytes", "quota"), 5);
  EXPECT_EQ(svc_->ledger()->Snapshot("bytes")->evicted_objects, 5u);
  EXPECT_EQ(svc_->ledger()->Snapshot("entries")->evicted_objects, 5u);
  EXPECT_EQ(svc_->ledger()->Snapshot("other")->evicted_objects, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Exists(b, absl::StrCat("b-", i))) << i;
  for (int i = 5; i <= 100; ++i) EXPECT_TRUE(Exists(b, absl::StrCat("b-", i))) << i;
  // Nobody else's objects were touched.
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(Exists(o, absl::StrCat("o-", i))) << i;
}

// ---------------------------------------------------------------------------------------------
// A full segment: least recently used first, never what is leased or in flight, and the high
// watermark (master_fixture.h's MasterFixture).

class FullSegmentEvictionTest : public MasterFixture {
 protected:
  static constexpr uint64_t kObj = 64 * kKiB;  // allocation size; 16 fill the 1 MiB segment
  static constexpr int kCount = 16;

  void Fill(SessionId c) {
    for (int i = 0; i < kCount; ++i) {
      Put(c, absl::StrCat("obj", i), ValueFor(kObj));
      clock_.AdvanceMs(10);
    }
    ASSERT_EQ(svc().GetStats().used, svc().GetStats().capacity);
  }
};

TEST_F(FullSegmentEvictionTest, PutEvictsLeastRecentlyUsedFirst) {
  opts_.eviction_ratio = 0.05;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Fill(c);
  // Touch the two oldest: obj2 becomes the least recently used.
  for (int i : {0, 1}) {
    auto g = Get(c, absl::StrCat("obj", i));
    ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
    ASSERT_EQ(Code(GetEnd(c, absl::StrCat("obj", i), g.generation)), absl::StatusCode::kOk);
    clock_.AdvanceMs(10);
  }
  auto ps = PutStart(c, "new", ValueFor(kObj));
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  EXPECT_EQ(Code(Exist(c, "obj0")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(c, "obj1")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(c, "obj2")), absl::StatusCode::kNotFound);
  for (int i = 3; i < kCount; ++i) {
    EXPECT_EQ(Code(Exist(c, absl::StrCat("obj", i))), absl::StatusCode::kOk) << i;
  }
  EXPECT_EQ(svc().GetStats().objects, static_cast<uint64_t>(kCount));
}

TEST_F(FullSegmentEvictionTest, LargerPutEvictsSeveralOldestObjects) {
  opts_.eviction_ratio = 0.01;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Fill(c);
  // Needs three adjacent 64 KiB blocks: obj0..obj2 are the oldest and adjacent.
  auto ps = PutStart(c, "big", ValueFor(3 * kObj));
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Code(Exist(c, absl::StrCat("obj", i))), absl::StatusCode::kNotFound) << i;
  }
  for (int i = 3; i < kCount; ++i) {
    EXPECT_EQ(Code(Exist(c, absl::StrCat("obj", i))), absl::StatusCode::kOk) << i;
  }
}

TEST_F(FullSegmentEvictionTest, LeasedObjectsAreNeverEvicted) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Fill(c);
  std::vector<uint64_t> gens;
  for (int i = 0; i < kCount; ++i) {
    auto g = Get(c, absl::StrCat("obj", i));
    ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
    gens.push_back(g.generation);
  }
  auto ps = PutStart(c, "new", ValueFor(kObj));
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc().GetStats().objects, static_cast<uint64_t>(kCount));
  // Watermark eviction respects leases too.
  svc().Tick();
  EXPECT_EQ(svc().GetStats().objects, static_cast<uint64_t>(kCount));

  // Release the lease of obj7 only: that is the one that goes.
  ASSERT_EQ(Code(GetEnd(c, "obj7", gens[7])), absl::StatusCode::kOk);
  ps = PutStart(c, "new", ValueFor(kObj));
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  EXPECT_EQ(Code(Exist(c, "obj7")), absl::StatusCode::kNotFound);
  for (int i = 0; i < kCount; ++i) {
    if (i != 7) {
      EXPECT_EQ(Code(Exist(c, absl::StrCat("obj", i))), absl::StatusCode::kOk) << i;
    }
  }
}

TEST_F(FullSegmentEvictionTest, InFlightPutsAreNeverEvicted) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(Code(PutStart(c, absl::StrCat("obj", i), ValueFor(kObj)).status),
              absl::StatusCode::kOk);
  }
  EXPECT_EQ(Code(PutStart(c, "new", ValueFor(kObj)).status), absl::StatusCode::kResourceExhausted);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().processing, static_cast<uint64_t>(kCount));
}

TEST_F(FullSegmentEvictionTest, TickAboveHighWatermarkEvictsEvictionRatioOfCapacity) {
  opts_.eviction_high_watermark_ratio = 0.9;
  opts_.eviction_ratio = 0.05;
  opts_.client_ttl_ms = 3'600'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  constexpr uint64_t kSmall = 4 * kKiB;
  // 225 x 4 KiB = 87.9%: below the watermark, Tick evicts nothing.
  int n = 0;
  for (; n < 225; ++n) {
    Put(c, absl::StrCat("s", n), ValueFor(kSmall));
    clock_.AdvanceMs(1);
  }
  svc().Tick();
  EXPECT_EQ(svc().GetStats().objects, 225u);
  for (; n < 240; ++n) {  // 93.75%
    Put(c, absl::StrCat("s", n), ValueFor(kSmall));
    clock_.AdvanceMs(1);
  }
  const uint64_t cap = svc().GetStats().capacity;
  const uint64_t before = svc().GetStats().used;
  ASSERT_GT(static_cast<double>(before), 0.9 * cap);
  svc().Tick();
  const uint64_t after = svc().GetStats().used;
  const uint64_t freed = before - after;
  EXPECT_GE(freed, static_cast<uint64_t>(0.05 * cap));
  EXPECT_LE(freed, static_cast<uint64_t>(0.05 * cap) + kSmall);
  // The oldest went, the newest stayed.
  const uint64_t evicted = freed / kSmall;
  for (uint64_t i = 0; i < evicted; ++i) {
    EXPECT_EQ(Code(Exist(c, absl::StrCat("s", i))), absl::StatusCode::kNotFound) << i;
  }
  for (int i = static_cast<int>(evicted); i < 240; ++i) {
    EXPECT_EQ(Code(Exist(c, absl::StrCat("s", i))), absl::StatusCode::kOk) << i;
  }
  // Now below the watermark: another Tick leaves everything alone.
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, after);
}

}  // namespace
}  // namespace granary::master
