// Placement by tier (issue 15 point 3): a put's tier preference (host, gpu, any, or the
// tenant's default_tier from the policy), eviction within the tier a put needs room on, and the
// per-tier eviction counts of /metrics and /api/v1/segments.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "proto/alloc_header.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

constexpr uint64_t kObj = 64 * 1024 - proto::kAllocHeaderSize;  // allocates exactly 64 KiB
constexpr uint64_t kSlot = 64 * 1024;

uint32_t TierFlags(common::TierPreference t) { return proto::PutTierFlags(t); }

class TierPlacementTest : public ::testing::Test {
 protected:
  // A node with a host segment of host_slots objects and one with a GPU segment of gpu_slots.
  void Start(uint64_t host_slots, uint64_t gpu_slots, bool quota = false) {
    opts_.enable_multi_tenants = quota;
    svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    if (host_slots > 0) host_ = Mount(1, "host-node", host_slots * kSlot, proto::Tier::kHost);
    if (gpu_slots > 0) gpu_ = Mount(2, "gpu-node", gpu_slots * kSlot, proto::Tier::kGpu);
  }
  uint64_t Mount(SessionId sid, const std::string& node, uint64_t size, proto::Tier tier) {
    EXPECT_EQ(test_calls::Code(test_calls::Hello(*svc_, sid, proto::Role::kNode, node)),
              absl::StatusCode::kOk);
    proto::MountSegmentRequest m;
    m.name = node + "-seg";
    m.node_id = node;
    m.node_address = node + ":1";
    m.base = (1ull << 32) * sid;
    m.size = size;
    m.tier = tier;
    m.rkey = "r";
    m.worker_address = "w";
    if (tier == proto::Tier::kGpu) {  // mounted with its IPC handle
      m.gpu_ipc = "ipc";
      m.gpu_uuid = std::string(16, 'u');
    }
    auto rep = svc_->MountSegment(sid, m);
    EXPECT_EQ(test_calls::Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return rep.segment_id;
  }
  SessionId Client(const std::string& tenant) {
    EXPECT_EQ(test_calls::Code(test_calls::Hello(*svc_, next_, proto::Role::kClient, tenant)),
              absl::StatusCode::kOk);
    return next_++;
  }
  absl::Status Put(SessionId s, const std::string& key, uint32_t flags = 0) {
    clock_.AdvanceMs(1);  // distinct access times
    return test_calls::PutCommitted(*svc_, s, key, kObj, flags);
  }
  // The segment of the object's replica (0 when it is not there), without leaving a lease.
  uint64_t SegmentOf(SessionId s, const std::string& key) {
    proto::GetResult g = test_calls::Get(*svc_, s, key);
    if (test_calls::Code(g.status) != absl::StatusCode::kOk || g.replicas.empty()) return 0;
    svc_->GetEnd(s, proto::KeyGenRequest{{{key, g.generation, g.lease_token}}});
    return g.replicas[0].segment_id;
  }
  bool Exists(SessionId s, const std::string& key) {
    return svc_->Exist(s, proto::KeysRequest{{key}}).results[0].ToStatus().ok();
  }

  MasterOptions opts_;
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  uint64_t host_ = 0, gpu_ = 0;
  SessionId next_ = 10;
};

TEST_F(TierPlacementTest, AnyFillsTheGpuTierThenHostWithoutEvictingGpuObjects) {
  Start(/*host_slots=*/3, /*gpu_slots=*/2);
  const SessionId c = Client("acme");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(Put(c, absl::StrCat("g", i), TierFlags(common::TierPreference::kAny)).ok());
    EXPECT_EQ(SegmentOf(c, absl::StrCat("g", i)), gpu_);
  }
  // The GPU tier is full: `any` goes to host and evicts nothing on the GPU.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Put(c, absl::StrCat("h", i), TierFlags(common::TierPreference::kAny)).ok());
    EXPECT_EQ(SegmentOf(c, absl::StrCat("h", i)), host_);
  }
  EXPECT_TRUE(Exists(c, "g0"));
  EXPECT_TRUE(Exists(c, "g1"));
  // Both full: `any` evicts on host (its oldest), still never on the GPU.
  ASSERT_TRUE(Put(c, "h3", TierFlags(common::TierPreference::kAny)).ok());
  EXPECT_EQ(SegmentOf(c, "h3"), host_);
  EXPECT_TRUE(Exists(c, "g0"));
  EXPECT_TRUE(Exists(c, "g1"));
  EXPECT_FALSE(Exists(c, "h0"));
  EXPECT_EQ(svc_->Evicted(proto::Tier::kGpu).objects, 0u);
  EXPECT_GE(svc_->Evicted(proto::Tier::kHost).objects, 1u);
}

TEST_F(TierPlacementTest, AGpuPutEvictsWithinTheGpuTierOnly) {
  Start(/*host_slots=*/2, /*gpu_slots=*/2);
  const SessionId c = Client("acme");
  // The host objects are the oldest of all: a global LRU would take them first.
  ASSERT_TRUE(Put(c, "h0", TierFlags(common::TierPreference::kHost)).ok());
  ASSERT_TRUE(Put(c, "h1", TierFlags(common::TierPreference::kHost)).ok());
  ASSERT_TRUE(Put(c, "g0", TierFlags(common::TierPreference::kGpu)).ok());
  ASSERT_TRUE(Put(c, "g1", TierFlags(common::TierPreference::kGpu)).ok());
  ASSERT_TRUE(Put(c, "g2", TierFlags(common::TierPreference::kGpu)).ok());
  EXPECT_EQ(SegmentOf(c, "g2"), gpu_);
  EXPECT_FALSE(Exists(c, "g0"));  // the GPU tier's oldest
  EXPECT_TRUE(Exists(c, "h0"));
  EXPECT_TRUE(Exists(c, "h1"));
  const SegmentRegistry::Evictions gpu = svc_->Evicted(proto::Tier::kGpu);
  EXPECT_GE(gpu.objects, 1u);
  EXPECT_EQ(gpu.bytes, gpu.objects * kSlot);
  EXPECT_EQ(svc_->Evicted(proto::Tier::kHost).objects, 0u);
  // And a host put evicts on host, not on the GPU.
  ASSERT_TRUE(Put(c, "h2", TierFlags(common::TierPreference::kHost)).ok());
  EXPECT_FALSE(Exists(c, "h0"));
  EXPECT_TRUE(Exists(c, "g2"));
  EXPECT_EQ(svc_->Evicted(proto::Tier::kGpu).objects, gpu.objects);
  EXPECT_GE(svc_->Evicted(proto::Tier::kHost).objects, 1u);
  // The counts are in /metrics, labelled by tier.
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find(absl::StrCat("granary_master_tier_evicted_objects_total{tier=\"gpu\"} ",
                                   gpu.objects)),
            std::string::npos)
      << text;
}

TEST_F(TierPlacementTest, TheTenantsDefaultTierPlacesPutsThatNameNone) {
  Start(/*host_slots=*/4, /*gpu_slots=*/4);
  tenant::Policy p;
  tenant::TenantPolicy on_gpu{.name = "gpu-first", .quota_bytes = 1ull << 30};
  on_gpu.default_tier = common::TierPreference::kGpu;
  tenant::TenantPolicy on_any{.name = "any-first", .quota_bytes = 1ull << 30};
  on_any.default_tier = common::TierPreference::kAny;
  p.tenants = {on_any, on_gpu, {.name = "plain", .quota_bytes = 1ull << 30}};
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  const SessionId g = Client("gpu-first");
  const SessionId a = Client("any-first");
  const SessionId h = Client("plain");
  ASSERT_TRUE(Put(g, "k").ok());
  EXPECT_EQ(SegmentOf(g, "k"), gpu_);
  ASSERT_TRUE(Put(a, "k").ok());
  EXPECT_EQ(SegmentOf(a, "k"), gpu_);
  ASSERT_TRUE(Put(h, "k").ok());
  EXPECT_EQ(SegmentOf(h, "k"), host_);
  // A put that names its tier overrides the default.
  ASSERT_TRUE(Put(g, "on-host", TierFlags(common::TierPreference::kHost)).ok());
  EXPECT_EQ(SegmentOf(g, "on-host"), host_);
  ASSERT_TRUE(Put(h, "on-gpu", TierFlags(common::TierPreference::kGpu)).ok());
  EXPECT_EQ(SegmentOf(h, "on-gpu"), gpu_);
}

TEST_F(TierPlacementTest, QuotasScaleAgainstEveryTiersCapacity) {
  // Only GPU segments: quotas scaled against host capacity alone would all be 0.
  Start(/*host_slots=*/0, /*gpu_slots=*/4, /*quota=*/true);
  tenant::Policy p;
  tenant::TenantPolicy t{.name = "acme", .quota_bytes = 1ull << 40};
  t.default_tier = common::TierPreference::kGpu;
  p.tenants = {t};
  svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  EXPECT_EQ(svc_->capacity(), 4 * kSlot);
  const SessionId c = Client("acme");
  ASSERT_TRUE(Put(c, "k").ok());
  EXPECT_EQ(SegmentOf(c, "k"), gpu_);
  EXPECT_EQ(svc_->ledger()->Snapshot("acme")->effective_quota_bytes, 4 * kSlot);
}

TEST_F(TierPlacementTest, AnyWithNoRoomOnEitherTierNamesBoth) {
  Start(/*host_slots=*/1, /*gpu_slots=*/1);
  const SessionId c = Client("acme");
  ASSERT_TRUE(Put(c, "g", TierFlags(common::TierPreference::kGpu)).ok());
  ASSERT_TRUE(Put(c, "h", TierFlags(common::TierPreference::kHost)).ok());
  // Hard-pinned on host: nothing there can be evicted.
  ASSERT_EQ(test_calls::Code(test_calls::Remove(*svc_, c, "h")), absl::StatusCode::kOk);
  ASSERT_TRUE(Put(c, "h", TierFlags(common::TierPreference::kHost) | proto::kPutFlagHardPin).ok());
  absl::Status st = Put(c, "x", TierFlags(common::TierPreference::kAny));
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_NE(st.message().find("gpu tier"), std::string::npos) << st;
  EXPECT_NE(st.message().find("host tier"), std::string::npos) << st;
  EXPECT_TRUE(Exists(c, "g"));
  EXPECT_TRUE(Exists(c, "h"));
}

TEST_F(TierPlacementTest, TheWatermarkEvictsEachTierOnItsOwn) {
  opts_.eviction_high_watermark_ratio = 0.5;
  opts_.eviction_ratio = 0.25;
  Start(/*host_slots=*/4, /*gpu_slots=*/4);
  const SessionId c = Client("acme");
  ASSERT_TRUE(Put(c, "h0", TierFlags(common::TierPreference::kHost)).ok());  // host at 25%
  for (int i = 0; i < 3; ++i) {                                              // GPU at 75%
    ASSERT_TRUE(Put(c, absl::StrCat("g", i), TierFlags(common::TierPreference::kGpu)).ok());
  }
  svc_->Tick();
  EXPECT_FALSE(Exists(c, "g0"));  // the GPU tier's oldest
  EXPECT_TRUE(Exists(c, "g2"));
  EXPECT_TRUE(Exists(c, "h0"));  // the oldest of all, but its tier is below the watermark
  EXPECT_EQ(svc_->Evicted(proto::Tier::kGpu).objects, 1u);
  EXPECT_EQ(svc_->Evicted(proto::Tier::kHost).objects, 0u);
}

// Copy and Move of a GPU-tier object: the GPU replica is the source (its node pushes it, the
// client's side), the destination lands on the target's host tier, charged; MoveEnd leaves the
// host copy alone. An object with a host replica beside a GPU one is copied from the host one
// (the destination node reads it one-sided, no bounce).
TEST_F(TierPlacementTest, CopyAndMoveOfAGpuObjectStartFromTheGpuReplicaAndLandOnHost) {
  Start(/*host_slots=*/4, /*gpu_slots=*/4);
  const SessionId c = Client("acme");
  ASSERT_TRUE(Put(c, "g", TierFlags(common::TierPreference::kGpu)).ok());
  ASSERT_TRUE(Put(c, "m", TierFlags(common::TierPreference::kGpu)).ok());
  for (bool move : {false, true}) {
    const std::string key = move ? "m" : "g";
    proto::CopyStartRequest r;
    r.entries.push_back({key, "host-node"});
    proto::CopyStartResult res = test_calls::OnlyResult(svc_->CopyStart(c, r, move));
    ASSERT_EQ(test_calls::Code(res.status), absl::StatusCode::kOk) << res.status.message;
    EXPECT_EQ(res.source.segment_id, gpu_) << key;
    EXPECT_EQ(res.dest.segment_id, host_) << key;
    EXPECT_EQ(res.dest_node_address, "host-node:1");
    EXPECT_GE(res.dest.length, kSlot);
    proto::CopyEndRequest end{{{key, res.generation, res.dest.segment_id}}};
    EXPECT_EQ(test_calls::Code(test_calls::OnlyResult(svc_->CopyEnd(c, end, move))),
              absl::StatusCode::kOk);
  }
  proto::GetResult g = test_calls::Get(*svc_, c, "g");
  ASSERT_EQ(g.replicas.size(), 2u);
  svc_->GetEnd(c, proto::KeyGenRequest{{{"g", g.generation, g.lease_token}}});
  EXPECT_EQ(SegmentOf(c, "m"), host_);
  EXPECT_EQ(test_calls::Get(*svc_, c, "m").replicas.size(), 1u);
  // g on both tiers, copied to a third node: from its host replica.
  const uint64_t third = Mount(3, "host-node-2", 4 * kSlot, proto::Tier::kHost);
  proto::CopyStartRequest r;
  r.entries.push_back({"g", "host-node-2"});
  proto::CopyStartResult res = test_calls::OnlyResult(svc_->CopyStart(c, r, false));
  ASSERT_EQ(test_calls::Code(res.status), absl::StatusCode::kOk) << res.status.message;
  EXPECT_EQ(res.source.segment_id, host_);
  EXPECT_EQ(res.dest.segment_id, third);
  // Revoked: refunded, the object as it was (a Remove works at once: no lease left).
  EXPECT_EQ(test_calls::Code(test_calls::OnlyResult(svc_->CopyRevoke(
                c, proto::CopyEndRequest{{{"g", res.generation, res.dest.segment_id}}}))),
            absl::StatusCode::kOk);
  EXPECT_EQ(test_calls::Code(test_calls::Remove(*svc_, c, "g")), absl::StatusCode::kOk);
}

}  // namespace
}  // namespace granary::master
