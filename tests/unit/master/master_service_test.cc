// MasterService: the master's whole logic, driven in-process with a FakeClock. Sessions are
// plain ids; nodes mount segments with made-up addresses; no bytes ever move.

#include "master/master_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::ReplicaDesc;
using proto::WireStatus;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

using test_calls::Code;

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Value size whose allocation (64-byte header + value) is exactly `alloc` bytes.
constexpr uint64_t ValueFor(uint64_t alloc) { return alloc - proto::kAllocHeaderSize; }

class MasterServiceTest : public ::testing::Test {
 protected:
  MasterService& svc() {
    if (!svc_) svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    return *svc_;
  }

  proto::HelloReply Hello(SessionId sid, proto::Role role, const std::string& tenant,
                          uint16_t version = proto::kProtocolVersion) {
    proto::HelloRequest h;
    h.role = role;
    h.client_id = absl::StrCat("uuid-", sid);
    h.tenant_id = tenant;
    h.protocol_version = version;
    return svc().Hello(sid, h);
  }

  SessionId Client(const std::string& tenant = "acme") {
    SessionId sid = next_sid_++;
    auto rep = Hello(sid, proto::Role::kClient, tenant);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return sid;
  }

  SessionId Node() {
    SessionId sid = next_sid_++;
    auto rep = Hello(sid, proto::Role::kNode, "");
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return sid;
  }

  uint64_t Mount(SessionId node, const std::string& node_id, const std::string& name, uint64_t base,
                 uint64_t size, const std::string& pool = "") {
    proto::MountSegmentRequest m;
    m.pool = pool;
    m.name = name;
    m.node_id = node_id;
    m.node_address = node_id + ":7000";
    m.base = base;
    m.size = size;
    m.rkey = "rkey-" + name;
    m.worker_address = "worker-" + node_id;
    m.host_id = "host";
    auto rep = svc().MountSegment(node, m);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    segment_base_[rep.segment_id] = base;
    segment_size_[rep.segment_id] = size;
    segment_node_[rep.segment_id] = node_id;
    return rep.segment_id;
  }

  // A node session with one segment.
  // A node session with one segment; `pool` names the tenant of a dedicated pool.
  SessionId NodeWith(const std::string& node_id, uint64_t size, uint64_t* segment_id = nullptr,
                     const std::string& pool = "") {
    SessionId n = Node();
    uint64_t base = 0x7f0000000000ull + (next_base_++) * 0x100000000ull;
    uint64_t id = Mount(n, node_id, node_id + "-seg0", base, size, pool);
    if (segment_id) *segment_id = id;
    return n;
  }

  proto::PutStartResult PutStart(SessionId sid, const std::string& key, uint64_t size,
                                 int replicas = 1) {
    return test_calls::PutStart(svc(), sid, key, size, replicas);
  }
  WireStatus KeyGenOp(proto::BatchStatusReply (MasterService::*op)(SessionId,
                                                                   const proto::KeyGenRequest&),
                      SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), op, sid, key, gen);
  }
  WireStatus PutEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutEnd, sid, key, gen);
  }
  WireStatus PutRevoke(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutRevoke, sid, key, gen);
  }
  WireStatus GetEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), &MasterService::GetEnd, sid, key, gen, leases_.Of(sid, key));
  }

  proto::GetResult Get(SessionId sid, const std::string& key) {
    return leases_.Took(sid, key, test_calls::Get(svc(), sid, key));
  }
  WireStatus KeysOp(proto::BatchStatusReply (MasterService::*op)(SessionId,
                                                                 const proto::KeysRequest&),
                    SessionId sid, const std::string& key) {
    return test_calls::KeysOp(svc(), op, sid, key);
  }
  WireStatus Exist(SessionId sid, const std::string& key) {
    return KeysOp(&MasterService::Exist, sid, key);
  }
  WireStatus Remove(SessionId sid, const std::string& key, bool force = false) {
    return test_calls::Remove(svc(), sid, key, force);
  }

  // PutStart + PutEnd; returns the generation.
  uint64_t Put(SessionId sid, const std::string& key, uint64_t size, int replicas = 1) {
    auto ps = PutStart(sid, key, size, replicas);
    EXPECT_EQ(Code(ps.status), absl::StatusCode::kOk) << key << ": " << ps.status.message;
    auto pe = PutEnd(sid, key, ps.generation);
    EXPECT_EQ(Code(pe), absl::StatusCode::kOk) << key << ": " << pe.message;
    return ps.generation;
  }

  std::vector<std::string> ListKeys(SessionId sid, const std::string& prefix = "",
                                    const std::string& start_after = "", uint32_t limit = 1000,
                                    bool* more = nullptr) {
    proto::ListRequest r;
    r.prefix = prefix;
    r.start_after = start_after;
    r.limit = limit;
    auto rep = svc().List(sid, r);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    std::vector<std::string> keys;
    for (const auto& o : rep.objects) keys.push_back(o.key);
    if (more) *more = rep.more;
    return keys;
  }

  // Every replica descriptor lies inside its mounted segment and is long enough.
  void ExpectInside(const std::vector<ReplicaDesc>& rs, uint64_t value_size) {
    for (const auto& r : rs) {
      ASSERT_TRUE(segment_base_.count(r.segment_id)) << "unknown segment " << r.segment_id;
      uint64_t base = segment_base_[r.segment_id], size = segment_size_[r.segment_id];
      EXPECT_GE(r.address, base);
      EXPECT_LE(r.address + r.length, base + size);
      EXPECT_GE(r.length, proto::kAllocHeaderSize + value_size);
      EXPECT_EQ(r.address % proto::kAllocAlignment, 0u);
    }
  }

  MasterOptions opts_;
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  SessionId next_sid_ = 1;
  uint64_t next_base_ = 1;
  test_calls::LeaseTokens leases_;  // what each session's GetEnd echoes
  std::map<uint64_t, uint64_t> segment_base_, segment_size_;
  std::map<uint64_t, std::string> segment_node_;
};

// ---------------------------------------------------------------------------------------------
// Hello

// A peer older than the master's version window is refused, naming both versions; a newer one
// is served (its connection's handshake agreed on the master's version: docs/protocol.md).
TEST_F(MasterServiceTest, HelloRejectsAProtocolVersionBelowTheWindow) {
  const uint16_t old_version = proto::kMinProtocolVersion - 1;
  auto rep = Hello(1, proto::Role::kClient, "acme", old_version);
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(rep.status.message, absl::StrCat("protocol version ", old_version)))
      << rep.status.message;
  EXPECT_TRUE(Has(rep.status.message, absl::StrCat(proto::kProtocolVersion))) << rep.status.message;
  // No session was created: requests on it still fail.
  EXPECT_EQ(Code(Get(1, "k").status), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(svc().GetStats().sessions, 0u);
}

TEST_F(MasterServiceTest, HelloServesEveryVersionOfTheWindowAndNewerPeers) {
  EXPECT_EQ(Code(Hello(1, proto::Role::kClient, "acme", proto::kMinProtocolVersion).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, "acme", proto::kProtocolVersion + 1).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().sessions, 2u);
}

TEST_F(MasterServiceTest, HelloRejectsEmptyTenant) {
  auto rep = Hello(1, proto::Role::kClient, "");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "tenant")) << rep.status.message;
  EXPECT_EQ(Code(Get(1, "k").status), absl::StatusCode::kFailedPrecondition);
}

TEST_F(MasterServiceTest, HelloRejectsTenantStartingWithUnderscore) {
  auto rep = Hello(1, proto::Role::kClient, "_system");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "_system")) << rep.status.message;
  // An underscore elsewhere is fine.
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, "a_b").status), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, HelloRejectsTenantWithControlCharacter) {
  SessionId sid = 1;
  for (const std::string& t : {std::string("a\tb"), std::string("a\nb"), std::string("ab\x7f"),
                               std::string("a\0b", 3), std::string("\x01x")}) {
    auto rep = Hello(sid, proto::Role::kClient, t);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument) << "tenant of " << t.size();
    EXPECT_EQ(Code(Get(sid, "k").status), absl::StatusCode::kFailedPrecondition);
    ++sid;
  }
}

TEST_F(MasterServiceTest, HelloRejectsTenantLongerThan128Bytes) {
  auto rep = Hello(1, proto::Role::kClient, std::string(129, 't'));
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "129")) << rep.status.message;
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, std::string(128, 't')).status),
            absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, HelloTwiceOnOneSessionFails) {
  SessionId c = Client("acme");
  auto rep = Hello(c, proto::Role::kClient, "other");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kFailedPrecondition);
  // The session keeps its first tenant.
  NodeWith("n1", kMiB);
  Put(c, "k", 10);
  SessionId same = Client("acme");
  EXPECT_EQ(Code(Get(same, "k").status), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, RequestsWithoutHelloFailWithFailedPrecondition) {
  NodeWith("n1", kMiB);
  const SessionId ghost = 999;
  const auto kFP = absl::StatusCode::kFailedPrecondition;
  EXPECT_EQ(Code(PutStart(ghost, "k", 10).status), kFP);
  EXPECT_TRUE(Has(PutStart(ghost, "k", 10).status.message, "Hello"));
  EXPECT_EQ(Code(PutEnd(ghost, "k", 1)), kFP);
  EXPECT_EQ(Code(PutRevoke(ghost, "k", 1)), kFP);
  EXPECT_EQ(Code(Get(ghost, "k").status), kFP);
  EXPECT_EQ(Code(GetEnd(ghost, "k", 1)), kFP);
  EXPECT_EQ(Code(Exist(ghost, "k")), kFP);
  EXPECT_EQ(Code(Remove(ghost, "k")), kFP);
  EXPECT_EQ(Code(svc().List(ghost, proto::ListRequest{}).status), kFP);
  EXPECT_EQ(Code(svc().Segments(ghost).status), kFP);
  EXPECT_EQ(Code(svc().Heartbeat(ghost).status), kFP);
  proto::MountSegmentRequest m;
  m.name = "s";
  m.node_id = "n9";
  m.node_address = "a";
  m.size = kMiB;
  m.rkey = "r";
  m.worker_address = "w";
  EXPECT_EQ(Code(svc().MountSegment(ghost, m).status), kFP);
  // A client session may not mount segments either.
  SessionId c = Client();
  EXPECT_EQ(Code(svc().MountSegment(c, m).status), kFP);
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().segments, 1u);
}

// A node session binds no tenant: it may heartbeat, mount and list segments, but object requests
// would act in a namespace that no client can see (or in the master's reserved '_' one).
TEST_F(MasterServiceTest, NodeSessionsCannotMakeObjectRequests) {
  NodeWith("n1", kMiB);
  SessionId node = next_sid_++;
  ASSERT_EQ(Code(Hello(node, proto::Role::kNode, "_probe").status), absl::StatusCode::kOk);
  const auto kFP = absl::StatusCode::kFailedPrecondition;
  auto ps = PutStart(node, "k", 100);
  EXPECT_EQ(Code(ps.status), kFP) << ps.status.message;
  EXPECT_EQ(Code(Get(node, "k").status), kFP);
  EXPECT_EQ(Code(Exist(node, "k")), kFP);
  EXPECT_EQ(Code(Remove(node, "k")), kFP);
  EXPECT_EQ(Code(PutEnd(node, "k", 1)), kFP);
  EXPECT_EQ(Code(svc().List(node, proto::ListRequest{}).status), kFP);
  EXPECT_EQ(svc().GetStats().used, 0u);
  // What a node does need still works.
  EXPECT_EQ(Code(svc().Heartbeat(node).status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().Segments(node).segments.size(), 1u);
  EXPECT_EQ(Code(svc().Segments(node).status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().Segments(Client()).segments.size(), 1u);
}

TEST_F(MasterServiceTest, MountSegmentValidatesTheSegment) {
  SessionId n = Node();
  auto mount = [&](auto edit) {
    proto::MountSegmentRequest m;
    m.name = "seg";
    m.node_id = "n1";
    m.node_address = "n1:7000";
    m.base = 0x100000000ull;
    m.size = kMiB;
    m.rkey = "rk";
    m.worker_address = "wa";
    edit(m);
    return svc().MountSegment(n, m);
  };
  const auto kIA = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(Code(mount([](auto& m) { m.size = 64; }).status), kIA);
  EXPECT_EQ(Code(mount([](auto& m) { m.rkey.clear(); }).status), kIA);
  EXPECT_EQ(Code(mount([](auto& m) { m.worker_address.clear(); }).status), kIA);
  EXPECT_EQ(Code(mount([](auto& m) { m.node_address.clear(); }).status), kIA);
  // Placement keeps replicas on distinct node ids: a segment must say which node it is on.
  EXPECT_EQ(Code(mount([](auto& m) { m.node_id.clear(); }).status), kIA);
  // base + size must not wrap: replica addresses are base + offset.
  auto wrap = mount([](auto& m) { m.base = ~0ull - kKiB; });
  EXPECT_EQ(Code(wrap.status), kIA) << wrap.status.message;
  EXPECT_EQ(svc().GetStats().segments, 0u);
  auto ok = mount([](auto&) {});
  ASSERT_EQ(Code(ok.status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(mount([](auto&) {}).status), absl::StatusCode::kAlreadyExists);
  // The same name on another node is fine.
  EXPECT_EQ(Code(mount([](auto& m) { m.node_id = "n2"; }).status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().segments, 2u);
  EXPECT_EQ(svc().GetStats().capacity, 2 * kMiB);
}

// ---------------------------------------------------------------------------------------------
// Put lifecycle

TEST_F(MasterServiceTest, PutLifecycleStartEndGetExistRemove) {
  uint64_t seg = 0;
  NodeWith("n1", kMiB, &seg);
  SessionId c = Client();
  const uint64_t kSize = 1000;

  auto ps = PutStart(c, "key", kSize);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  EXPECT_NE(ps.generation, 0u);
  ASSERT_EQ(ps.replicas.size(), 1u);
  EXPECT_EQ(ps.replicas[0].segment_id, seg);
  ExpectInside(ps.replicas, kSize);
  EXPECT_GT(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(svc().GetStats().pending_deadlines, 1u);

  // Not readable before PutEnd.
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kNotFound);
  // Not removable while in progress, and not startable twice.
  EXPECT_EQ(Code(Remove(c, "key")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(PutStart(c, "key", kSize).status), absl::StatusCode::kAlreadyExists);
  // PutEnd of the wrong generation is refused and commits nothing.
  EXPECT_EQ(Code(PutEnd(c, "key", ps.generation + 1)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);

  ASSERT_EQ(Code(PutEnd(c, "key", ps.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().processing, 0u);
  EXPECT_EQ(svc().GetStats().objects, 1u);
  // The committed put's deadline is moot: the wheel no longer holds it.
  EXPECT_EQ(svc().GetStats().pending_deadlines, 0u);

  auto g = Get(c, "key");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << g.status.message;
  EXPECT_EQ(g.generation, ps.generation);
  EXPECT_EQ(g.size, kSize);
  EXPECT_EQ(g.lease_ms, static_cast<uint32_t>(opts_.kv_lease_ttl_ms));
  ASSERT_EQ(g.replicas.size(), ps.replicas.size());
  EXPECT_EQ(g.replicas[0].segment_id, ps.replicas[0].segment_id);
  EXPECT_EQ(g.replicas[0].address, ps.replicas[0].address);
  EXPECT_EQ(g.replicas[0].length, ps.replicas[0].length);
  EXPECT_EQ(Code(GetEnd(c, "key", g.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kOk);

  // Complete objects are immutable: a second PutStart is refused.
  auto again = PutStart(c, "key", kSize);
  EXPECT_EQ(Code(again.status), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Has(again.status.message, "key")) << again.status.message;

  ASSERT_EQ(Code(Remove(c, "key")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Remove(c, "key")), absl::StatusCode::kNotFound);
  // The key can be written again, with a new generation.
  auto ps2 = PutStart(c, "key", kSize);
  ASSERT_EQ(Code(ps2.status), absl::StatusCode::kOk);
  EXPECT_NE(ps2.generation, ps.generation);
}

// HA: generations are term << 44 | counter once elected, so a later leader's grants always
// outrank an earlier one's (docs/architecture.md, "Election and fencing as built").
TEST_F(MasterServiceTest, HaGenerationsComeFromTheTermAndRiseAcrossTerms) {
  opts_.enable_ha = true;
  opts_.etcd_endpoints = "127.0.0.1:2379";
  svc().BecomeActive(3);
  NodeWith("n1", 64 * kMiB);
  SessionId c = Client();
  const uint64_t g1 = Put(c, "a", 1000);
  const uint64_t g2 = Put(c, "b", 1000);
  EXPECT_EQ(g1 >> 44, 3u);
  EXPECT_EQ(g2, g1 + 1);
  svc().BecomeActive(4);
  const uint64_t g3 = Put(c, "c", 1000);
  EXPECT_EQ(g3 >> 44, 4u);
  EXPECT_GT(g3, g2);
}

TEST_F(MasterServiceTest, PutRevokeFreesTheAllocation) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 5000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation + 1)), absl::StatusCode::kNotFound);
  EXPECT_GT(svc().GetStats().used, 0u);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  // A complete object cannot be revoked.
  uint64_t gen = Put(c, "k2", 10);
  EXPECT_EQ(Code(PutRevoke(c, "k2", gen)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "k2")), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, ConcurrentAllocationsDoNotOverlap) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (int i = 0; i < 50; ++i) {
    uint64_t size = 100 + 397 * i;
    auto ps = PutStart(c, absl::StrCat("k", i), size);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << i << ": " << ps.status.message;
    ExpectInside(ps.replicas, size);
    ranges.emplace_back(ps.replicas[0].address, ps.replicas[0].address + ps.replicas[0].length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST_F(MasterServiceTest, BatchPutStartReportsPerKey) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  proto::PutStartRequest r;
  r.entries = {{"good1", 10}, {"", 10}, {"good2", 0}, {"good3", 20}};
  auto rep = svc().PutStart(c, r);
  ASSERT_EQ(Code(rep.status), absl::StatusCode::kOk);
  ASSERT_EQ(rep.results.size(), 4u);
  EXPECT_EQ(Code(rep.results[0].status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(rep.results[1].status), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(rep.results[2].status), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(rep.results[3].status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().processing, 2u);
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST_F(MasterServiceTest, PutStartValidatesSizeKeyAndReplicaNum) {
  NodeWith("n1", kMiB);
  NodeWith("n2", kMiB);
  SessionId c = Client();
  const auto kIA = absl::StatusCode::kInvalidArgument;

  auto r = PutStart(c, "k", 0);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "size 0")) << r.status.message;

  r = PutStart(c, "k", proto::kMaxValueBytes + 1);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, absl::StrCat(proto::kMaxValueBytes + 1))) << r.status.message;

  r = PutStart(c, "", 10);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "key")) << r.status.message;

  r = PutStart(c, std::string(proto::kMaxKeyBytes + 1, 'k'), 10);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, absl::StrCat(proto::kMaxKeyBytes + 1))) << r.status.message;

  r = PutStart(c, "k", 10, 0);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "replica_num 0")) << r.status.message;

  r = PutStart(c, "k", 10, 9);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "replica_num 9")) << r.status.message;

  // Nothing was allocated by the refused requests.
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);

  // The limits themselves are accepted.
  EXPECT_EQ(Code(PutStart(c, std::string(proto::kMaxKeyBytes, 'k'), 1).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutStart(c, "two", 1, 2).status), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Replicas

TEST_F(MasterServiceTest, TwoReplicasLandOnDistinctNodes) {
  // Node A has two segments, node B one: both replicas must never sit on node A.
  SessionId a = Node();
  Mount(a, "nodeA", "a0", 0x100000000ull, kMiB);
  Mount(a, "nodeA", "a1", 0x200000000ull, kMiB);
  SessionId b = Node();
  Mount(b, "nodeB", "b0", 0x300000000ull, kMiB);
  SessionId c = Client();
  for (int i = 0; i < 12; ++i) {
    auto ps = PutStart(c, absl::StrCat("k", i), 1000, 2);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
    ASSERT_EQ(ps.replicas.size(), 2u);
    ExpectInside(ps.replicas, 1000);
    EXPECT_NE(ps.replicas[0].segment_id, ps.replicas[1].segment_id);
    EXPECT_NE(segment_node_[ps.replicas[0].segment_id], segment_node_[ps.replicas[1].segment_id]);
    ASSERT_EQ(Code(PutEnd(c, absl::StrCat("k", i), ps.generation)), absl::StatusCode::kOk);
    auto g = Get(c, absl::StrCat("k", i));
    ASSERT_EQ(g.replicas.size(), 2u);
    ASSERT_EQ(Code(GetEnd(c, absl::StrCat("k", i), g.generation)), absl::StatusCode::kOk);
  }
}

TEST_F(MasterServiceTest, TwoReplicasOnOneNodeFailNamingTheNodeCount) {
  SessionId a = Node();
  Mount(a, "nodeA", "a0", 0x100000000ull, kMiB);
  Mount(a, "nodeA", "a1", 0x200000000ull, kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(ps.status.message, "1 node")) << ps.status.message;
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
}

// A put that no amount of eviction could place must not evict anything.
TEST_F(MasterServiceTest, ImpossibleReplicaCountDoesNotEvict) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  for (int i = 0; i < 8; ++i) Put(c, absl::StrCat("k", i), ValueFor(64 * kKiB));
  const auto before = svc().GetStats();
  auto ps = PutStart(c, "two", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc().GetStats().objects, before.objects);
  EXPECT_EQ(svc().GetStats().used, before.used);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(Code(Exist(c, absl::StrCat("k", i))), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, ValueLargerThanEverySegmentDoesNotEvict) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  for (int i = 0; i < 8; ++i) Put(c, absl::StrCat("k", i), ValueFor(64 * kKiB));
  const auto before = svc().GetStats();
  auto ps = PutStart(c, "huge", 2 * kMiB);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc().GetStats().objects, before.objects);
  EXPECT_EQ(svc().GetStats().used, before.used);
}

// ---------------------------------------------------------------------------------------------
// Deadlines

TEST_F(MasterServiceTest, PutDeadlineFreesUncommittedAllocation) {
  opts_.put_start_timeout_ms = 30'000;
  opts_.client_ttl_ms = 600'000;  // the silent node must not expire here
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  auto ps = PutStart(c, "k", 4000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  const uint64_t used = svc().GetStats().used;
  ASSERT_GT(used, 0u);

  // Before the deadline nothing is freed, however often Tick runs.
  for (int i = 0; i < 29; ++i) {
    clock_.AdvanceMs(1000);
    svc().Heartbeat(c);
    svc().Tick();
  }
  clock_.AdvanceMs(999);
  svc().Heartbeat(c);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, used);
  EXPECT_EQ(svc().GetStats().processing, 1u);

  clock_.AdvanceMs(2);
  svc().Heartbeat(c);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  // The key is free again.
  EXPECT_EQ(Code(PutStart(c, "k", 4000).status), absl::StatusCode::kOk);
}

// The first Tick may come long after the PutStart (a master that just started, a stalled
// ticker): the deadline must still fire.
TEST_F(MasterServiceTest, PutDeadlineFiresWhenFirstTickIsLate) {
  opts_.put_start_timeout_ms = 30'000;
  opts_.client_ttl_ms = 600'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 4000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  clock_.AdvanceMs(35'000);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
}

TEST_F(MasterServiceTest, CommittedPutSurvivesItsDeadline) {
  opts_.put_start_timeout_ms = 1'000;
  opts_.client_ttl_ms = 600'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  uint64_t gen = Put(c, "k", 4000);
  clock_.AdvanceMs(5'000);
  svc().Tick();
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  EXPECT_EQ(g.generation, gen);
  EXPECT_GT(svc().GetStats().used, 0u);
}

TEST_F(MasterServiceTest, DeadlineOfOldGenerationDoesNotTouchANewerPut) {
  opts_.put_start_timeout_ms = 1'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  auto old_put = PutStart(c, "k", 100);
  ASSERT_EQ(Code(PutRevoke(c, "k", old_put.generation)), absl::StatusCode::kOk);
  clock_.AdvanceMs(500);
  auto fresh = PutStart(c, "k", 100);
  ASSERT_EQ(Code(fresh.status), absl::StatusCode::kOk);
  clock_.AdvanceMs(600);  // past the old deadline, before the new one
  svc().Tick();
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(Code(PutEnd(c, "k", fresh.generation)), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Session death

TEST_F(MasterServiceTest, SessionClosedFreesInFlightPutsAndKeepsCompleteObjects) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Put(c, "done", 1000);
  const uint64_t used_done = svc().GetStats().used;
  ASSERT_EQ(Code(PutStart(c, "pending1", 1000).status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(PutStart(c, "pending2", 20000).status), absl::StatusCode::kOk);
  EXPECT_GT(svc().GetStats().used, used_done);

  svc().SessionClosed(c);
  EXPECT_EQ(svc().GetStats().used, used_done);
  EXPECT_EQ(svc().GetStats().objects, 1u);
  EXPECT_EQ(svc().GetStats().processing, 0u);
  // The dead session can do nothing more.
  EXPECT_EQ(Code(Get(c, "done").status), absl::StatusCode::kFailedPrecondition);

  SessionId other = Client();
  EXPECT_EQ(Code(Get(other, "done").status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Get(other, "pending1").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutStart(other, "pending1", 10).status), absl::StatusCode::kOk);
  // Closing twice (adapter and Tick racing) is harmless.
  svc().SessionClosed(c);
  EXPECT_EQ(svc().GetStats().objects, 2u);
}

TEST_F(MasterServiceTest, SessionClosedDoesNotFreeAnotherSessionsPutOfTheSameKey) {
  NodeWith("n1", kMiB);
  SessionId a = Client();
  SessionId b = Client();
  auto pa = PutStart(a, "k", 100);
  ASSERT_EQ(Code(PutRevoke(b, "k", pa.generation)), absl::StatusCode::kOk);  // same tenant
  auto pb = PutStart(b, "k", 100);
  ASSERT_EQ(Code(pb.status), absl::StatusCode::kOk);
  svc().SessionClosed(a);
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(Code(PutEnd(b, "k", pb.generation)), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, SilentSessionExpiresAndItsPutsAreFreed) {
  opts_.client_ttl_ms = 10'000;
  opts_.put_start_timeout_ms = 600'000;  // deadlines out of the way
  NodeWith("n1", kMiB);
  SessionId node = 1;  // the node above
  SessionId alive = Client();
  SessionId silent = Client();
  auto pa = PutStart(alive, "alive", 1000);
  auto ps = PutStart(silent, "silent", 1000);
  ASSERT_EQ(Code(pa.status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  const uint64_t used_both = svc().GetStats().used;

  std::vector<SessionId> dead;
  for (int step = 0; step < 10; ++step) {  // 10 s: not yet past the TTL
    clock_.AdvanceMs(1000);
    EXPECT_EQ(Code(svc().Heartbeat(alive).status), absl::StatusCode::kOk);
    EXPECT_EQ(Code(svc().Heartbeat(node).status), absl::StatusCode::kOk);
    auto d = svc().Tick();
    dead.insert(dead.end(), d.begin(), d.end());
  }
  EXPECT_TRUE(dead.empty());
  EXPECT_EQ(svc().GetStats().used, used_both);

  clock_.AdvanceMs(1000);
  svc().Heartbeat(alive);
  svc().Heartbeat(node);
  dead = svc().Tick();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0], silent);
  EXPECT_LT(svc().GetStats().used, used_both);
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(svc().GetStats().sessions, 2u);
  EXPECT_EQ(Code(svc().Heartbeat(silent).status), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(PutEnd(alive, "alive", pa.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutEnd(alive, "silent", ps.generation)), absl::StatusCode::kNotFound);
  // A later Tick does not report it again.
  EXPECT_TRUE(svc().Tick().empty());
}

TEST_F(MasterServiceTest, SilentNodeExpiresAndItsSegmentsGo) {
  opts_.client_ttl_ms = 10'000;
  NodeWith("n1", kMiB);
  SessionId node = 1;
  SessionId c = Client();
  Put(c, "k", 1000);
  clock_.AdvanceMs(10'001);
  svc().Heartbeat(c);
  auto dead = svc().Tick();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0], node);
  EXPECT_EQ(svc().GetStats().segments, 0u);
  EXPECT_EQ(Code(Get(c, "k").status), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// Node death

TEST_F(MasterServiceTest, NodeClosedUnmountsSegmentsAndDropsSoleReplicas) {
  SessionId n1 = NodeWith("n1", kMiB);
  SessionId n2 = NodeWith("n2", kMiB);
  SessionId c = Client();
  // Place single-replica objects until both nodes hold some.
  std::map<std::string, std::string> node_of;
  for (int i = 0; i < 10; ++i) {
    std::string k = absl::StrCat("k", i);
    auto ps = PutStart(c, k, 1000);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
    node_of[k] = segment_node_[ps.replicas[0].segment_id];
    ASSERT_EQ(Code(PutEnd(c, k, ps.generation)), absl::StatusCode::kOk);
  }
  size_t on_n1 = 0;
  for (auto& [k, n] : node_of) on_n1 += n == "n1";
  ASSERT_GT(on_n1, 0u);
  ASSERT_LT(on_n1, node_of.size());
  // An in-flight put on n1 dies with it too.
  std::string pending_key;
  uint64_t pending_gen = 0;
  for (int i = 0; pending_key.empty(); ++i) {
    std::string k = absl::StrCat("p", i);
    auto ps = PutStart(c, k, 100);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
    if (segment_node_[ps.replicas[0].segment_id] == "n1") {
      pending_key = k;
      pending_gen = ps.generation;
    } else {
      ASSERT_EQ(Code(PutRevoke(c, k, ps.generation)), absl::StatusCode::kOk);
    }
  }

  svc().SessionClosed(n1);
  EXPECT_EQ(svc().GetStats().segments, 1u);
  EXPECT_EQ(svc().GetStats().capacity, kMiB);
  for (auto& [k, n] : node_of) {
    auto g = Get(c, k);
    if (n == "n1") {
      EXPECT_EQ(Code(g.status), absl::StatusCode::kNotFound) << k;
    } else {
      ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << k;
      EXPECT_EQ(g.replicas.size(), 1u);
      GetEnd(c, k, g.generation);
    }
  }
  EXPECT_EQ(svc().GetStats().objects, node_of.size() - on_n1);
  EXPECT_EQ(Code(PutEnd(c, pending_key, pending_gen)), absl::StatusCode::kNotFound);
  for (const auto& s : svc().ListSegments()) EXPECT_EQ(s.node_id, "n2");

  // Everything left is removable and the survivor's accounting returns to zero.
  for (auto& [k, n] : node_of) {
    if (n != "n1") {
      EXPECT_EQ(Code(Remove(c, k)), absl::StatusCode::kOk);
    }
  }
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  svc().SessionClosed(n2);
  EXPECT_EQ(Code(PutStart(c, "x", 10).status), absl::StatusCode::kResourceExhausted);
}

TEST_F(MasterServiceTest, NodeDeathLeavesTwoReplicaObjectReadableOnTheSurvivor) {
  uint64_t seg1 = 0, seg2 = 0;
  SessionId n1 = NodeWith("n1", kMiB, &seg1);
  NodeWith("n2", kMiB, &seg2);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 5000, 2);
  ASSERT_EQ(Get(c, "k").replicas.size(), 2u);
  GetEnd(c, "k", gen);

  svc().SessionClosed(n1);
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << g.status.message;
  EXPECT_EQ(g.generation, gen);
  ASSERT_EQ(g.replicas.size(), 1u);
  EXPECT_EQ(g.replicas[0].segment_id, seg2);
  ExpectInside(g.replicas, 5000);
  GetEnd(c, "k", gen);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

TEST_F(MasterServiceTest, UnmountSegmentOnlyByItsOwner) {
  uint64_t seg1 = 0;
  SessionId n1 = NodeWith("n1", kMiB, &seg1);
  SessionId n2 = NodeWith("n2", kMiB);
  proto::UnmountSegmentRequest u;
  u.segment_id = seg1;
  EXPECT_EQ(Code(svc().UnmountSegment(n2, u).status), absl::StatusCode::kNotFound);
  EXPECT_EQ(svc().GetStats().segments, 2u);
  EXPECT_EQ(Code(svc().UnmountSegment(n1, u).status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().segments, 1u);
}

// ---------------------------------------------------------------------------------------------
// Leases

TEST_F(MasterServiceTest, LeaseBlocksRemoveUntilGetEnd) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 100);
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  auto rm = Remove(c, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(rm.message, "lease")) << rm.message;
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease) << rm.message;
  EXPECT_EQ(Code(GetEnd(c, "k", gen + 1)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(GetEnd(c, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

TEST_F(MasterServiceTest, ForceRemovesALeasedObjectButNotAPutInProgress) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 100);
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);  // the read lease is held
  auto rm = Remove(c, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease) << rm.message;
  EXPECT_EQ(Code(Remove(c, "k", /*force=*/true)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Get(c, "k").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(GetEnd(c, "k", gen)), absl::StatusCode::kNotFound);  // the late reader: harmless
  EXPECT_EQ(svc().GetStats().used, 0u);
  // A put in progress is refused even with force (its writer is still writing).
  auto ps = PutStart(c, "p", 100);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  auto rp = Remove(c, "p", /*force=*/true);
  EXPECT_EQ(Code(rp), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(rp.reason, ErrorReason::kHasLease);
  EXPECT_EQ(Code(Remove(c, "missing", /*force=*/true)), absl::StatusCode::kNotFound);
}

// A copy leases its object; a forced Remove takes the object anyway, and a new put of the key
// makes another object: the copy's end must neither add its replica to that one nor release a
// lease it does not hold.
TEST_F(MasterServiceTest, CopyOfAForceRemovedKeyDoesNotJoinItsReplacement) {
  NodeWith("n1", kMiB);
  NodeWith("n2", kMiB);
  SessionId c = Client();
  Put(c, "k", 100);
  proto::CopyStartRequest cr;
  cr.entries.push_back({"k", "n2"});
  auto cs = test_calls::OnlyResult(svc().CopyStart(c, cr, /*move=*/false));
  ASSERT_EQ(Code(cs.status), absl::StatusCode::kOk) << cs.status.message;
  ASSERT_EQ(Code(Remove(c, "k", /*force=*/true)), absl::StatusCode::kOk);
  Put(c, "k", 100);
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);  // a reader of the new object
  proto::CopyEndRequest end;
  end.entries.push_back({"k", cs.generation, cs.dest.segment_id});
  EXPECT_EQ(Code(test_calls::OnlyResult(svc().CopyEnd(c, end, false))),
            absl::StatusCode::kNotFound);
  proto::ListRequest lr;
  lr.prefix = "k";
  auto list = svc().List(c, lr);
  ASSERT_EQ(list.objects.size(), 1u);
  EXPECT_EQ(list.objects[0].replica_count, 1u);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);  // its lease holds
  EXPECT_EQ(Code(Remove(c, "k", /*force=*/true)), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);  // nothing left behind
}

TEST_F(MasterServiceTest, LeaseWithTwoReadersNeedsBothGetEnds) {
  NodeWith("n1", kMiB);
  SessionId r1 = Client();
  SessionId r2 = Client();
  uint64_t gen = Put(r1, "k", 100);
  ASSERT_EQ(Code(Get(r1, "k").status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Get(r2, "k").status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(GetEnd(r1, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(r1, "k")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(GetEnd(r2, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(r1, "k")), absl::StatusCode::kOk);
}

TEST_F(MasterServiceTest, LeaseRunsOutWithoutGetEnd) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Put(c, "k", 100);
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);
  clock_.AdvanceMs(4'999);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);
  clock_.AdvanceMs(2);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

// A Get after every lease ran out starts the count afresh; the reader whose lease ran out, ending
// late, must not end the lease of the reader who came after it (GetEnd echoes its own lease's
// token, and a lease past its end is not counted off).
TEST_F(MasterServiceTest, LateGetEndDoesNotCancelAnotherReadersLease) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId slow = Client();
  SessionId later = Client();
  uint64_t gen = Put(slow, "k", 100);
  ASSERT_EQ(Code(Get(slow, "k").status), absl::StatusCode::kOk);
  clock_.AdvanceMs(6'000);  // slow's lease ran out
  ASSERT_EQ(Code(Get(later, "k").status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(slow, "k", gen)), absl::StatusCode::kOk);  // slow ends late
  // later's lease (until +5 s) still holds, against Remove and eviction alike.
  auto rm = Remove(slow, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease);
  clock_.AdvanceMs(1'000);
  EXPECT_EQ(Code(Remove(slow, "k")), absl::StatusCode::kFailedPrecondition);
  // later's own GetEnd ends it at once.
  ASSERT_EQ(Code(GetEnd(later, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(slow, "k")), absl::StatusCode::kOk);
}

// The same when the late reader's lease ran out while the other reader's was held: the late end
// changes nothing, the live reader's end frees the object.
TEST_F(MasterServiceTest, LateGetEndAmongOverlappingLeases) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId a = Client();
  SessionId b = Client();
  uint64_t gen = Put(a, "k", 100);
  ASSERT_EQ(Code(Get(a, "k").status), absl::StatusCode::kOk);  // until 5 s
  clock_.AdvanceMs(3'000);
  ASSERT_EQ(Code(Get(b, "k").status), absl::StatusCode::kOk);  // until 8 s
  clock_.AdvanceMs(3'000);                                     // a's ran out, b's holds
  ASSERT_EQ(Code(GetEnd(a, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(a, "k")), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(Code(GetEnd(b, "k", gen)), absl::StatusCode::kOk);
  // a's lease was never counted off: the object is free once b's end (8 s) has passed.
  clock_.AdvanceMs(2'001);
  EXPECT_EQ(Code(Remove(a, "k")), absl::StatusCode::kOk);
}

// A read of an object being copied must not shorten the copy's lease (which runs to the copy's
// deadline, past the read lease's end).
TEST_F(MasterServiceTest, ReadDoesNotShortenACopysLease) {
  opts_.kv_lease_ttl_ms = 5'000;
  opts_.put_start_timeout_ms = 30'000;
  NodeWith("n1", kMiB);
  NodeWith("n2", kMiB);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 100);
  proto::CopyStartRequest cr;
  cr.entries.push_back({"k", "n2"});
  auto cs = test_calls::OnlyResult(svc().CopyStart(c, cr, /*move=*/false));
  ASSERT_EQ(Code(cs.status), absl::StatusCode::kOk) << cs.status.message;
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(c, "k", gen)), absl::StatusCode::kOk);
  clock_.AdvanceMs(6'000);  // past the read lease, before the copy's deadline
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------------------------------------
// Eviction

class EvictionTest : public MasterServiceTest {
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

TEST_F(EvictionTest, PutEvictsLeastRecentlyUsedFirst) {
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

TEST_F(EvictionTest, LargerPutEvictsSeveralOldestObjects) {
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

TEST_F(EvictionTest, LeasedObjectsAreNeverEvicted) {
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

TEST_F(EvictionTest, InFlightPutsAreNeverEvicted) {
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

TEST_F(EvictionTest, TickAboveHighWatermarkEvictsEvictionRatioOfCapacity) {
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

// ---------------------------------------------------------------------------------------------
// Tenants

TEST_F(MasterServiceTest, TenantsHaveSeparateKeySpaces) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  SessionId b = Client("beta");
  uint64_t ga = Put(a, "shared", 100);
  uint64_t gb = Put(b, "shared", 200);
  ASSERT_NE(ga, gb);
  auto ra = Get(a, "shared");
  auto rb = Get(b, "shared");
  EXPECT_EQ(ra.generation, ga);
  EXPECT_EQ(ra.size, 100u);
  EXPECT_EQ(rb.generation, gb);
  EXPECT_EQ(rb.size, 200u);
  // B cannot end A's lease by naming A's generation.
  EXPECT_EQ(Code(GetEnd(b, "shared", ga)), absl::StatusCode::kNotFound);
  ASSERT_EQ(Code(GetEnd(a, "shared", ga)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(b, "shared", gb)), absl::StatusCode::kOk);

  ASSERT_EQ(Code(Remove(a, "shared")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Get(a, "shared").status), absl::StatusCode::kNotFound);
  auto rb2 = Get(b, "shared");
  ASSERT_EQ(Code(rb2.status), absl::StatusCode::kOk);
  EXPECT_EQ(rb2.generation, gb);

  // B cannot commit or revoke A's put in progress, even knowing its generation.
  auto pa = PutStart(a, "pending", 100);
  ASSERT_EQ(Code(pa.status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutEnd(b, "pending", pa.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutRevoke(b, "pending", pa.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(b, "pending")), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutEnd(a, "pending", pa.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(b, "pending")), absl::StatusCode::kNotFound);
}

TEST_F(MasterServiceTest, ListIsTenantScopedSortedPrefixedAndPaged) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  SessionId b = Client("beta");
  SessionId ab = Client("alphabet");  // a tenant whose name extends another's
  for (const char* k : {"p/3", "p/1", "q/1", "p/2", "p/10"}) Put(a, k, 10);
  for (const char* k : {"p/1", "p/zz"}) Put(b, k, 10);
  Put(ab, "p/0", 10);
  ASSERT_EQ(Code(PutStart(a, "p/4", 10).status), absl::StatusCode::kOk);  // in progress

  bool more = true;
  EXPECT_EQ(ListKeys(a, "", "", 1000, &more),
            (std::vector<std::string>{"p/1", "p/10", "p/2", "p/3", "p/4", "q/1"}));
  EXPECT_FALSE(more);
  EXPECT_EQ(ListKeys(b), (std::vector<std::string>{"p/1", "p/zz"}));
  EXPECT_EQ(ListKeys(ab), (std::vector<std::string>{"p/0"}));
  EXPECT_EQ(ListKeys(a, "q"), (std::vector<std::string>{"q/1"}));
  EXPECT_TRUE(ListKeys(a, "z").empty());

  // Paging over the prefix "p/".
  EXPECT_EQ(ListKeys(a, "p/", "", 2, &more), (std::vector<std::string>{"p/1", "p/10"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(ListKeys(a, "p/", "p/10", 2, &more), (std::vector<std::string>{"p/2", "p/3"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(ListKeys(a, "p/", "p/3", 2, &more), (std::vector<std::string>{"p/4"}));
  EXPECT_FALSE(more);
  // Exactly `limit` left: no more.
  EXPECT_EQ(ListKeys(a, "p/", "p/2", 2, &more), (std::vector<std::string>{"p/3", "p/4"}));
  EXPECT_FALSE(more);
  // start_after need not be an existing key.
  EXPECT_EQ(ListKeys(a, "", "p/25", 10, &more), (std::vector<std::string>{"p/3", "p/4", "q/1"}));

  // Object details: state and replica count.
  proto::ListRequest r;
  r.prefix = "p/";
  auto rep = svc().List(a, r);
  ASSERT_EQ(rep.objects.size(), 5u);
  EXPECT_EQ(rep.objects[4].key, "p/4");
  EXPECT_EQ(rep.objects[4].state, proto::ObjectState::kProcessing);
  EXPECT_EQ(rep.objects[0].state, proto::ObjectState::kComplete);
  EXPECT_EQ(rep.objects[0].size, 10u);
  EXPECT_EQ(rep.objects[0].replica_count, 1u);
}

// A list keeps only the `limit` smallest keys while it walks the shards (memory for what it
// returns, not for every key of the tenant): whatever the shard order, the page is the sorted
// head, and `more` says whether anything was left out.
TEST_F(MasterServiceTest, ListReturnsTheSmallestKeysFromEveryShardWithinTheLimit) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) keys.push_back(absl::StrCat("k/", (i * 37) % 150 + 1000));
  for (const std::string& k : keys) Put(a, k, 8);
  std::sort(keys.begin(), keys.end());
  for (uint32_t limit : {1u, 2u, 7u, 149u, 150u, 151u, 1000u}) {
    bool more = false;
    const size_t n = std::min<size_t>(limit, keys.size());
    EXPECT_EQ(ListKeys(a, "k/", "", limit, &more),
              std::vector<std::string>(keys.begin(), keys.begin() + n))
        << limit;
    EXPECT_EQ(more, limit < keys.size()) << limit;
  }
  bool more = false;
  EXPECT_EQ(ListKeys(a, "k/", keys[100], 10, &more),
            std::vector<std::string>(keys.begin() + 101, keys.begin() + 111));
  EXPECT_TRUE(more);
}

// ---------------------------------------------------------------------------------------------
// Concurrency

TEST_F(MasterServiceTest, ConcurrentRandomOperationsLeakNothing) {
  opts_.put_start_timeout_ms = 2'000;  // some deadlines fire during the run
  opts_.client_ttl_ms = 3'600'000;
  opts_.kv_lease_ttl_ms = 1'000;
  // Revoked and expired puts free their space at once: with a hold, how much is held depends on
  // how many operations the threads get through between two ticks, which the machine decides.
  opts_.aborted_put_hold_ms = 0;
  // Two nodes, small enough that eviction runs too.
  NodeWith("n1", 1 * kMiB);
  NodeWith("n2", 1 * kMiB);
  constexpr int kThreads = 8;
  constexpr int kOps = 2000;
  constexpr int kKeys = 64;
  std::vector<SessionId> sessions;
  for (int t = 0; t < kThreads; ++t) sessions.push_back(Client("acme"));
  MasterService& s = svc();

  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread ticker([&] {
    while (!done.load()) {
      clock_.AdvanceMs(40);  // deadlines (2 s) and leases (1 s) run out mid-run
      s.Heartbeat(1);        // the two nodes
      s.Heartbeat(2);
      if (!s.Tick().empty()) ++failures;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      SessionId sid = sessions[t];
      std::vector<std::pair<std::string, uint64_t>> puts;
      std::vector<proto::KeyGen> reads;  // the leases taken, as GetEnd echoes them
      auto key = [&] { return absl::StrCat("key", rng() % kKeys); };
      for (int i = 0; i < kOps; ++i) {
        switch (rng() % 8) {
          case 0:
          case 1: {
            proto::PutStartRequest r;
            r.entries.push_back({key(), 1 + rng() % (128 * kKiB)});
            r.replica_num = static_cast<uint8_t>(1 + rng() % 2);
            auto rep = s.PutStart(sid, r);
            if (rep.status.code != 0 || rep.results.size() != 1) {
              ++failures;
              break;
            }
            auto& res = rep.results[0];
            if (res.status.code == 0) {
              if (res.replicas.size() != r.replica_num) ++failures;
              puts.emplace_back(r.entries[0].key, res.generation);
            }
            break;
          }
          case 2:
          case 3:
            if (!puts.empty()) {
              size_t j = rng() % puts.size();
              proto::KeyGenRequest r;
              r.entries.push_back({puts[j].first, puts[j].second});
              puts.erase(puts.begin() + j);
              s.PutEnd(sid, r);
            }
            break;
          case 4: {
            proto::GetRequest r;
            r.keys.push_back(key());
            auto rep = s.Get(sid, r);
            if (rep.results.size() != 1) {
              ++failures;
              break;
            }
            if (rep.results[0].status.code == 0) {
              reads.push_back({r.keys[0], rep.results[0].generation, rep.results[0].lease_token});
            }
            break;
          }
          case 5:
            if (!reads.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back(reads.back());
              reads.pop_back();
              s.GetEnd(sid, r);
            }
            break;
          case 6: {
            proto::RemoveRequest r;
            r.keys.push_back(key());
            r.force = rng() % 8 == 0;
            s.Remove(sid, r);
            if (rng() % 4 == 0) s.Exist(sid, proto::KeysRequest{r.keys});
            break;
          }
          case 7:
            if (!puts.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back({puts.back().first, puts.back().second});
              puts.pop_back();
              s.PutRevoke(sid, r);
            } else if (rng() % 8 == 0) {
              proto::ListRequest lr;
              lr.limit = 10;
              s.List(sid, lr);
            }
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  ticker.join();
  EXPECT_EQ(failures.load(), 0);
  // The run exercised what it is meant to: space pressure and eviction, and expiry.
  auto counter = [&](const char* name, MetricLabels labels = {}) {
    return metrics_.Counter(name, "", labels)->value();
  };
  EXPECT_GT(counter("granary_master_evicted_objects_total"), 0u);
  EXPECT_GT(counter("granary_master_ops_total", {{"op", "put_end"}}), 1000u);
  EXPECT_GT(counter("granary_master_ops_total", {{"op", "get"}}), 1000u);
  EXPECT_LT(counter("granary_master_get_misses_total"),
            counter("granary_master_ops_total", {{"op", "get"}}));

  // Let every lease run out, then take everything down.
  clock_.AdvanceMs(opts_.kv_lease_ttl_ms + 1);
  SessionId admin = Client("acme");
  proto::ListRequest lr;
  lr.limit = proto::kMaxListLimit;
  auto all = s.List(admin, lr);
  ASSERT_EQ(all.status.code, 0);
  EXPECT_FALSE(all.more);
  // The counts /metrics reports, kept as objects change, agree with the table itself.
  uint64_t processing = 0;
  for (const auto& o : all.objects) processing += o.state == proto::ObjectState::kProcessing;
  EXPECT_EQ(s.GetStats().objects, all.objects.size());
  EXPECT_EQ(s.GetStats().processing, processing);
  for (const auto& o : all.objects) {
    if (o.state == proto::ObjectState::kProcessing) {
      EXPECT_EQ(Code(PutRevoke(admin, o.key, o.generation)), absl::StatusCode::kOk) << o.key;
    } else {
      EXPECT_EQ(Code(Remove(admin, o.key)), absl::StatusCode::kOk) << o.key;
    }
  }
  auto st = s.GetStats();
  EXPECT_EQ(st.objects, 0u);
  EXPECT_EQ(st.processing, 0u);
  EXPECT_EQ(st.used, 0u);
  for (const auto& seg : s.ListSegments()) EXPECT_EQ(seg.used, 0u) << seg.name;
  // And the full capacity is usable again.
  EXPECT_EQ(Code(PutStart(admin, "after", ValueFor(kMiB), 2).status), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Placement and pools: a `--pool=T` segment is tenant T's alone; Put places on shared segments.

class PoolTest : public MasterServiceTest {
 protected:
  proto::CopyStartResult CopyStart(SessionId sid, const std::string& key, const std::string& target,
                                   bool move) {
    proto::CopyStartRequest r;
    r.entries.push_back({key, target});
    return test_calls::OnlyResult(svc().CopyStart(sid, r, move));
  }
};

TEST_F(PoolTest, CopyAndMoveNeverLandOnAnotherTenantsPool) {
  NodeWith("shared", kMiB);
  uint64_t pool_seg = 0;
  NodeWith("beta-node", kMiB, &pool_seg, "beta");
  SessionId acme = Client("acme");
  for (bool move : {false, true}) {
    const std::string key = move ? "moved" : "copied";
    Put(acme, key, ValueFor(64 * kKiB));
    auto cs = CopyStart(acme, key, "beta-node", move);
    EXPECT_EQ(Code(cs.status), absl::StatusCode::kFailedPrecondition)
        << (move ? "move" : "copy") << " landed on segment " << cs.dest.segment_id;
    EXPECT_TRUE(Has(cs.status.message, "acme")) << cs.status.message;
  }
  for (const auto& seg : svc().ListSegments()) {
    if (seg.segment_id == pool_seg) {
      EXPECT_EQ(seg.used, 0u);
    }
  }
}

TEST_F(PoolTest, CopyLandsOnTheTenantsOwnPool) {
  NodeWith("shared", kMiB);
  SessionId acme = Client("acme");
  Put(acme, "k", ValueFor(64 * kKiB));  // before the pool exists: on the shared segment
  uint64_t pool_seg = 0;
  NodeWith("acme-node", kMiB, &pool_seg, "acme");
  auto cs = CopyStart(acme, "k", "acme-node", /*move=*/false);
  ASSERT_EQ(Code(cs.status), absl::StatusCode::kOk) << cs.status.message;
  EXPECT_EQ(cs.dest.segment_id, pool_seg);
  proto::CopyEndRequest end;
  end.entries.push_back({"k", cs.generation, cs.dest.segment_id});
  EXPECT_EQ(Code(test_calls::OnlyResult(svc().CopyEnd(acme, end, false))), absl::StatusCode::kOk);
  EXPECT_EQ(Get(acme, "k").replicas.size(), 2u);
}

TEST_F(PoolTest, PutPlacesOnlyTheOwnersObjectsOnAPool) {
  uint64_t pool_seg = 0;
  NodeWith("acme-node", kMiB, &pool_seg, "acme");
  SessionId acme = Client("acme");
  auto own = PutStart(acme, "k", ValueFor(64 * kKiB));
  ASSERT_EQ(Code(own.status), absl::StatusCode::kOk) << own.status.message;
  ASSERT_EQ(own.replicas.size(), 1u);
  EXPECT_EQ(own.replicas[0].segment_id, pool_seg);
  // Another tenant finds no segment it may use.
  EXPECT_EQ(Code(PutStart(Client("beta"), "k", ValueFor(64 * kKiB)).status),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(PoolTest, PoolSegmentsAreNotSharedCapacity) {
  opts_.eviction_high_watermark_ratio = 0.9;
  opts_.eviction_ratio = 0.05;
  opts_.client_ttl_ms = 3'600'000;
  NodeWith("shared", kMiB);
  NodeWith("beta-node", 4 * kMiB, nullptr, "beta");
  // Quotas scale against what Puts can fill: the shared megabyte.
  EXPECT_EQ(svc().capacity(), kMiB);
  EXPECT_EQ(svc().ledger()->capacity(), kMiB);
  // 15 x 64 KiB = 93.75% of the shared segment: above the watermark, so a Tick evicts.
  SessionId acme = Client("acme");
  for (int i = 0; i < 15; ++i) {
    Put(acme, absl::StrCat("k", i), ValueFor(64 * kKiB));
    clock_.AdvanceMs(1);
  }
  svc().Tick();
  EXPECT_EQ(Code(Exist(acme, "k0")), absl::StatusCode::kNotFound);
  EXPECT_LT(svc().GetStats().objects, 15u);
}

// ---------------------------------------------------------------------------------------------
// /metrics in constant time: a scrape reads counts kept as objects change, never the table.

// The fastest of `n` renders of the registry, in microseconds.
double FastestScrapeUs(const MetricsRegistry& metrics, int n) {
  double best = 1e18;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::string text = metrics.Render();
    auto t1 = std::chrono::steady_clock::now();
    EXPECT_TRUE(Has(text, "granary_master_objects "));
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return best;
}

TEST_F(MasterServiceTest, AScrapeAtAMillionObjectsCostsWhatAnEmptyOneDoes) {
  constexpr uint64_t kObjects = 1'000'000;
  NodeWith("n1", 1ull << 30);
  SessionId c = Client();
  const double empty_us = FastestScrapeUs(metrics_, 20);
  uint64_t stored = 0;
  while (stored < kObjects) {
    proto::PutStartRequest ps;
    ps.replica_num = 1;
    const uint64_t n = std::min<uint64_t>(proto::kMaxBatch, kObjects - stored);
    for (uint64_t i = 0; i < n; ++i) ps.entries.push_back({absl::StrCat("m/", stored + i), 64});
    auto started = svc().PutStart(c, ps);
    ASSERT_EQ(Code(started.status), absl::StatusCode::kOk) << started.status.message;
    proto::KeyGenRequest end;
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Code(started.results[i].status), absl::StatusCode::kOk);
      end.entries.push_back({ps.entries[i].key, started.results[i].generation});
    }
    // The last batch stays in progress, so the scrape has processing objects to report.
    if (stored + n < kObjects) svc().PutEnd(c, end);
    stored += n;
  }
  const uint64_t last_batch =
      kObjects % proto::kMaxBatch == 0 ? proto::kMaxBatch : kObjects % proto::kMaxBatch;
  const double full_us = FastestScrapeUs(metrics_, 20);
  std::string text = metrics_.Render();
  EXPECT_TRUE(Has(text, absl::StrCat("granary_master_objects ", kObjects, "\n"))) << text;
  EXPECT_TRUE(Has(text, absl::StrCat("granary_master_objects_processing ", last_batch, "\n")))
      << text;
  // Walking a million objects under the shard locks took tens of milliseconds against a
  // fraction of one for an empty master.
  EXPECT_LT(full_us, 2 * empty_us + 50) << "empty " << empty_us << " us, full " << full_us << " us";
  printf("scrape: empty %.0f us, at %llu objects %.0f us\n", empty_us,
         static_cast<unsigned long long>(kObjects), full_us);
}

}  // namespace
}  // namespace granary::master
