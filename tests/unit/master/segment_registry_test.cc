// The master's segments (master/segment_registry.h) through the MasterService facade: what a
// mount must carry, and who may unmount. In-process with a FakeClock (master_fixture.h).

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "master/master_service.h"
#include "proto/messages.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using test_calls::Code;

using SegmentRegistryTest = MasterFixture;

TEST_F(SegmentRegistryTest, MountSegmentValidatesTheSegment) {
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

TEST_F(SegmentRegistryTest, UnmountSegmentOnlyByItsOwner) {
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

}  // namespace
}  // namespace granary::master
