#pragma once

// The master's unit-test fixture: one MasterService driven in-process with a FakeClock, as the
// RPC adapter drives it. Sessions are plain ids, nodes mount segments with made-up addresses, and
// no bytes ever move. Each test file aliases it under the name of the part it tests
// (`using ObjectStoreTest = MasterFixture;`) or derives from it to add its own calls. The service
// is created on first use, so a test may set `opts_` before it calls anything.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/text.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;

using ::granary::testing::Has;

// Value size whose allocation (64-byte header + value) is exactly `alloc` bytes.
constexpr uint64_t ValueFor(uint64_t alloc) { return alloc - proto::kAllocHeaderSize; }

class MasterFixture : public ::testing::Test {
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
    EXPECT_EQ(test_calls::Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return sid;
  }

  SessionId Node() {
    SessionId sid = next_sid_++;
    auto rep = Hello(sid, proto::Role::kNode, "");
    EXPECT_EQ(test_calls::Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
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
    EXPECT_EQ(test_calls::Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    segment_base_[rep.segment_id] = base;
    segment_size_[rep.segment_id] = size;
    segment_node_[rep.segment_id] = node_id;
    return rep.segment_id;
  }

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
  proto::WireStatus KeyGenOp(
      proto::BatchStatusReply (MasterService::*op)(SessionId, const proto::KeyGenRequest&),
      SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), op, sid, key, gen);
  }
  proto::WireStatus PutEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutEnd, sid, key, gen);
  }
  proto::WireStatus PutRevoke(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutRevoke, sid, key, gen);
  }
  proto::WireStatus GetEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), &MasterService::GetEnd, sid, key, gen, leases_.Of(sid, key));
  }

  proto::GetResult Get(SessionId sid, const std::string& key) {
    return leases_.Took(sid, key, test_calls::Get(svc(), sid, key));
  }
  proto::WireStatus KeysOp(proto::BatchStatusReply (MasterService::*op)(SessionId,
                                                                        const proto::KeysRequest&),
                           SessionId sid, const std::string& key) {
    return test_calls::KeysOp(svc(), op, sid, key);
  }
  proto::WireStatus Exist(SessionId sid, const std::string& key) {
    return KeysOp(&MasterService::Exist, sid, key);
  }
  proto::WireStatus Remove(SessionId sid, const std::string& key, bool force = false) {
    return test_calls::Remove(svc(), sid, key, force);
  }

  // PutStart + PutEnd; returns the generation.
  uint64_t Put(SessionId sid, const std::string& key, uint64_t size, int replicas = 1) {
    auto ps = PutStart(sid, key, size, replicas);
    EXPECT_EQ(test_calls::Code(ps.status), absl::StatusCode::kOk)
        << key << ": " << ps.status.message;
    auto pe = PutEnd(sid, key, ps.generation);
    EXPECT_EQ(test_calls::Code(pe), absl::StatusCode::kOk) << key << ": " << pe.message;
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
    EXPECT_EQ(test_calls::Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    std::vector<std::string> keys;
    for (const auto& o : rep.objects) keys.push_back(o.key);
    if (more) *more = rep.more;
    return keys;
  }

  // Every replica descriptor lies inside its mounted segment and is long enough.
  void ExpectInside(const std::vector<proto::ReplicaDesc>& rs, uint64_t value_size) {
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
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  SessionId next_sid_ = 1;
  uint64_t next_base_ = 1;
  test_calls::LeaseTokens leases_;  // what each session's GetEnd echoes
  std::map<uint64_t, uint64_t> segment_base_, segment_size_;
  std::map<uint64_t, std::string> segment_node_;
};

}  // namespace granary::master
