#include "node/node_service.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {
namespace {

constexpr uint64_t kBaseA = 0x10000;
constexpr uint64_t kSizeA = 0x1000;
constexpr uint64_t kBaseB = 0x40000;
constexpr uint64_t kSizeB = 0x2000;
constexpr uint64_t kMax = ~uint64_t{0};

// Two segments with a gap between them; no memory behind them (the service only does
// arithmetic on the addresses).
std::vector<SegmentSpan> TwoSegments() {
  return {{"host0", kBaseA, kSizeA, proto::Tier::kHost, "rkey-a"},
          {"host1", kBaseB, kSizeB, proto::Tier::kHost, "rkey-b"}};
}

void ExpectInvalid(const absl::Status& st, const std::string& what) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), what)) << "want '" << what << "' in: " << st;
}

TEST(NodeServiceSegmentHolding, RangesInsideASegmentAreFoundByIndex) {
  NodeService s(TwoSegments());
  EXPECT_EQ(s.SegmentHolding(kBaseA, 1), 0u);
  EXPECT_EQ(s.SegmentHolding(kBaseA, kSizeA), 0u);  // the whole segment
  EXPECT_EQ(s.SegmentHolding(kBaseA + kSizeA - 1, 1), 0u);
  EXPECT_EQ(s.SegmentHolding(kBaseB + 0x100, 0x100), 1u);
  EXPECT_EQ(s.SegmentHolding(kBaseB, kSizeB), 1u);
}

TEST(NodeServiceSegmentHolding, RangesStraddlingAnEdgeAreOutside) {
  NodeService s(TwoSegments());
  EXPECT_FALSE(s.SegmentHolding(kBaseA - 1, 2).has_value());           // before the start
  EXPECT_FALSE(s.SegmentHolding(kBaseA + kSizeA - 1, 2).has_value());  // past the end
  EXPECT_FALSE(s.SegmentHolding(kBaseA, kSizeA + 1).has_value());      // one byte too long
  EXPECT_FALSE(s.SegmentHolding(kBaseA + kSizeA, 1).has_value());      // just after it
  EXPECT_FALSE(s.SegmentHolding(kBaseA, kBaseB + kSizeB - kBaseA).has_value());  // both + gap
  EXPECT_FALSE(s.SegmentHolding(kBaseA + kSizeA, 0x100).has_value());            // in the gap
}

TEST(NodeServiceSegmentHolding, ZeroLengthIsOutsideEvenAtAValidAddress) {
  NodeService s(TwoSegments());
  EXPECT_FALSE(s.SegmentHolding(kBaseA, 0).has_value());
  EXPECT_FALSE(s.SegmentHolding(kBaseA + 0x10, 0).has_value());
}

TEST(NodeServiceSegmentHolding, AddressPlusLengthThatWrapsAroundIsOutside) {
  NodeService s(TwoSegments());
  // address + length wraps to a small value inside segment A: must not pass.
  EXPECT_FALSE(s.SegmentHolding(kBaseA + 0x10, kMax).has_value());
  EXPECT_FALSE(s.SegmentHolding(kBaseA + 0x10, kMax - 0x8).has_value());
  EXPECT_FALSE(s.SegmentHolding(kMax, 2).has_value());
  EXPECT_FALSE(s.SegmentHolding(kMax - 0x10, kBaseA + 0x20).has_value());
}

TEST(NodeServiceSegmentHolding, SegmentAtTheTopOfTheAddressSpace) {
  // Its last byte is the highest address whose end (address + 1) still fits in 64 bits.
  NodeService s({{"top", kMax - 0x1000, 0x1000, proto::Tier::kHost, "r"}});
  EXPECT_EQ(s.SegmentHolding(kMax - 1, 1), 0u);
  EXPECT_EQ(s.SegmentHolding(kMax - 0x1000, 0x1000), 0u);
  EXPECT_FALSE(s.SegmentHolding(kMax - 1, 2).has_value());
  EXPECT_FALSE(s.SegmentHolding(kMax, 1).has_value());
  EXPECT_FALSE(s.SegmentHolding(kMax - 0x1000, kMax).has_value());
}

TEST(NodeServiceSegmentHolding, NoSegmentsHoldNothing) {
  NodeService s({});
  EXPECT_FALSE(s.SegmentHolding(kBaseA, 1).has_value());
}

proto::FetchRequest Fetch(uint64_t dest, uint64_t length) {
  proto::FetchRequest f;
  f.source.worker_address = "worker";
  f.source.rkey = "rkey";
  f.source_address = 0x999000;  // remote: the source node checks it with its rkey
  f.dest_address = dest;
  f.length = length;
  return f;
}

TEST(NodeServiceFetch, DestinationInsideASegmentIsAccepted) {
  NodeService s(TwoSegments());
  EXPECT_TRUE(s.CheckFetch(Fetch(kBaseA, kSizeA)).ok());
  EXPECT_TRUE(s.CheckFetch(Fetch(kBaseB + 0x40, 0x1000)).ok());
}

TEST(NodeServiceFetch, DestinationOutsideZeroLengthOrWrappingIsRejectedNamingTheRange) {
  NodeService s(TwoSegments());
  ExpectInvalid(s.CheckFetch(Fetch(kBaseA + kSizeA - 1, 2)),
                "fetch of 2 bytes to address 69631 is outside this node's segments");
  ExpectInvalid(s.CheckFetch(Fetch(kBaseA, 0)), "fetch of 0 bytes");
  ExpectInvalid(s.CheckFetch(Fetch(kBaseA + 1, kMax)), "is outside this node's segments");
  ExpectInvalid(s.CheckFetch(Fetch(0x5, 1)), "to address 5 is outside");  // unknown segment
}

TEST(NodeServiceFetch, SourceWithoutWorkerAddressOrRkeyIsRejected) {
  NodeService s(TwoSegments());
  proto::FetchRequest no_worker = Fetch(kBaseA, 64);
  no_worker.source.worker_address.clear();
  ExpectInvalid(s.CheckFetch(no_worker), "without a source worker address and rkey");
  proto::FetchRequest no_rkey = Fetch(kBaseA, 64);
  no_rkey.source.rkey.clear();
  ExpectInvalid(s.CheckFetch(no_rkey), "without a source worker address and rkey");
}

// The node's deadline for the transfer: 1 ms up to an hour.
TEST(NodeServiceTransfers, TimeoutOutsideOneMillisecondToAnHourIsRejectedNamingIt) {
  NodeService s(TwoSegments());
  proto::PushRequest push;
  push.dest.segment_id = 7;
  push.dest.node_address = "client/1";
  push.dest.rkey = "client-rkey";
  push.dest.worker_address = "client-worker";
  std::vector<size_t> sources;
  for (uint32_t bad : {0u, proto::kMaxNodeTransferTimeoutMs + 1}) {
    proto::FetchRequest f = Fetch(kBaseA, 64);
    f.timeout_ms = bad;
    ExpectInvalid(s.CheckFetch(f), absl::StrCat("fetch timeout_ms ", bad, " is not in 1..3600000"));
    push.timeout_ms = bad;
    ExpectInvalid(s.CheckPush(push, &sources),
                  absl::StrCat("push timeout_ms ", bad, " is not in 1..3600000"));
  }
  for (uint32_t good : {1u, proto::kMaxNodeTransferTimeoutMs}) {
    proto::FetchRequest f = Fetch(kBaseA, 64);
    f.timeout_ms = good;
    EXPECT_TRUE(s.CheckFetch(f).ok()) << good;
    push.timeout_ms = good;
    EXPECT_TRUE(s.CheckPush(push, &sources).ok()) << good;
  }
}

// A client gives the node three quarters of its own transfer timeout, at least 1 ms, at most an
// hour: the node answers while the client still waits.
TEST(NodeServiceTransfers, NodeDeadlineIsThreeQuartersOfTheClientsWithinBounds) {
  EXPECT_EQ(proto::NodeTransferTimeoutMs(30'000), 22'500u);
  EXPECT_EQ(proto::NodeTransferTimeoutMs(2'000), 1'500u);
  EXPECT_EQ(proto::NodeTransferTimeoutMs(1), 1u);
  EXPECT_EQ(proto::NodeTransferTimeoutMs(0), 1u);
  EXPECT_EQ(proto::NodeTransferTimeoutMs(-5), 1u);
  EXPECT_EQ(proto::NodeTransferTimeoutMs(int64_t{1} << 50), proto::kMaxNodeTransferTimeoutMs);
}

// A client buffer at 0x7000'0000 of 1 MiB.
constexpr uint64_t kBuf = 0x70000000;
constexpr uint64_t kBufSize = 1 << 20;

proto::PushRequest Push() {
  proto::PushRequest p;
  p.dest.segment_id = 7;
  p.dest.node_address = "client/1";
  p.dest.rkey = "client-rkey";
  p.dest.worker_address = "client-worker";
  p.dest.base = kBuf;
  p.dest.size = kBufSize;
  return p;
}

TEST(NodeServicePush, EntriesAndHeadersInsideAreAcceptedWithTheirSourceSegments) {
  NodeService s(TwoSegments());
  proto::PushRequest p = Push();
  p.entries.push_back({kBaseB + 0x40, kBuf, 0x100});
  p.entries.push_back({kBaseA + 0x40, kBuf + kBufSize - 0x200, 0x200});  // ends at the end
  p.headers = {kBaseB, kBaseA + kSizeA - proto::kAllocHeaderSize};
  std::vector<size_t> sources = {42};  // cleared first
  ASSERT_TRUE(s.CheckPush(p, &sources).ok());
  EXPECT_EQ(sources, (std::vector<size_t>{1, 0}));
}

TEST(NodeServicePush, EmptyPushIsAccepted) {
  NodeService s(TwoSegments());
  std::vector<size_t> sources;
  EXPECT_TRUE(s.CheckPush(Push(), &sources).ok());
  EXPECT_TRUE(sources.empty());
}

TEST(NodeServicePush, DestinationWithoutWorkerAddressRkeyOrClientIdIsRejected) {
  NodeService s(TwoSegments());
  std::vector<size_t> sources;
  for (int field = 0; field < 3; ++field) {
    proto::PushRequest p = Push();
    (field == 0 ? p.dest.worker_address : field == 1 ? p.dest.rkey : p.dest.node_address).clear();
    ExpectInvalid(s.CheckPush(p, &sources), "push without the client's worker address, rkey");
  }
}

TEST(NodeServicePush, SourceOutsideStraddlingZeroLengthOrWrappingIsRejected) {
  NodeService s(TwoSegments());
  std::vector<size_t> sources;
  const std::vector<proto::PushEntry> bad = {
      {kBaseA + kSizeA - 8, kBuf, 16},  // straddles the end of segment A
      {kBaseA, kBuf, 0},                // zero length
      {kBaseA + 8, kBuf, kMax},         // wraps around
      {0x5, kBuf, 1},                   // in no segment
  };
  for (const proto::PushEntry& e : bad) {
    proto::PushRequest p = Push();
    p.entries = {{kBaseA, kBuf, 8}, e};  // a good entry first: the whole push is refused
    ExpectInvalid(s.CheckPush(p, &sources), "is outside this node's segments");
  }
  proto::PushRequest p = Push();
  p.entries = {{kBaseA + kSizeA - 8, kBuf, 16}};
  ExpectInvalid(s.CheckPush(p, &sources), "push of 16 bytes from address 69624 is outside");
}

TEST(NodeServicePush, DestinationOutsideTheClientsBufferIsRejectedNamingTheBuffer) {
  NodeService s(TwoSegments());
  std::vector<size_t> sources;
  const std::vector<proto::PushEntry> bad = {
      {kBaseA, kBuf - 1, 16},             // starts before the buffer
      {kBaseA, kBuf + kBufSize - 8, 16},  // straddles its end
      {kBaseA, kBuf + kBufSize, 1},       // just after it
      {kBaseA, kMax - 4, 16},             // dest + length wraps around
  };
  for (const proto::PushEntry& e : bad) {
    proto::PushRequest p = Push();
    p.entries = {e};
    ExpectInvalid(s.CheckPush(p, &sources),
                  "is outside the client's buffer at 1879048192 of "
                  "1048576 bytes");
  }
  proto::PushRequest wide = Push();  // longer than the whole buffer (source is big enough)
  wide.dest.size = 8;
  wide.entries = {{kBaseA, kBuf, 16}};
  ExpectInvalid(s.CheckPush(wide, &sources), "outside the client's buffer");
}

TEST(NodeServicePush, HeaderOutsideOrStraddlingIsRejected) {
  NodeService s(TwoSegments());
  std::vector<size_t> sources;
  for (uint64_t h : {kBaseA + kSizeA - proto::kAllocHeaderSize + 1, uint64_t{0x5}, kMax}) {
    proto::PushRequest p = Push();
    p.entries = {{kBaseA, kBuf, 8}};
    p.headers = {kBaseA, h};
    ExpectInvalid(s.CheckPush(p, &sources), "header at address");
  }
}

MountIdentity Who() { return {"node-1", "10.0.0.1:4000", "pool-a", "worker-addr", "boot/7"}; }

// A GPU segment is device memory: a Fetch into it and a Push out of it pass the range checks
// (the node stages them through its bounce slots, node/gpu_bounce.h; UCX never sees the
// segment), and the same range checks hold for it as for a host segment.
TEST(NodeServiceGpu, FetchesAndPushesOfAGpuSegmentPassTheRangeChecks) {
  std::vector<SegmentSpan> spans = TwoSegments();
  spans[1] = {"gpu0", kBaseB, kSizeB, proto::Tier::kGpu, "", "ipc", std::string(16, 'u')};
  NodeService s(std::move(spans));
  EXPECT_TRUE(s.CheckFetch(Fetch(kBaseA, 64)).ok());
  EXPECT_TRUE(s.CheckFetch(Fetch(kBaseB, 64)).ok());
  ExpectInvalid(s.CheckFetch(Fetch(kBaseB + kSizeB - 8, 64)), "outside this node's segments");
  std::vector<size_t> sources;
  proto::PushRequest from_gpu = Push();
  from_gpu.entries.push_back({kBaseB + 0x40, kBuf, 0x100});
  from_gpu.headers = {kBaseB};
  ASSERT_TRUE(s.CheckPush(from_gpu, &sources).ok());
  EXPECT_EQ(sources, std::vector<size_t>{1});
  proto::PushRequest past = Push();
  past.entries.push_back({kBaseB + kSizeB - 0x40, kBuf, 0x100});
  ExpectInvalid(s.CheckPush(past, &sources), "outside this node's segments");
  const proto::MountSegmentRequest m = s.MountRequest(1, MountIdentity{});
  EXPECT_EQ(m.tier, proto::Tier::kGpu);
  EXPECT_EQ(m.gpu_ipc, "ipc");
  EXPECT_EQ(m.gpu_uuid, std::string(16, 'u'));
  EXPECT_TRUE(m.rkey.empty());
}

TEST(NodeServiceMount, MountRequestCarriesTheSegmentAndTheNode) {
  NodeService s(TwoSegments());
  proto::MountSegmentRequest m = s.MountRequest(1, Who());
  proto::MountSegmentRequest want{
      "host1",  "node-1", "10.0.0.1:4000", kBaseB,  kSizeB, proto::Tier::kHost,
      "rkey-b", "pool-a", "worker-addr",   "boot/7"};
  EXPECT_EQ(m, want);
}

TEST(NodeServiceMount, NothingIsMountedBeforeTheFirstSession) {
  NodeService s(TwoSegments());
  EXPECT_EQ(s.segment_id(0), 0u);
  EXPECT_EQ(s.segment_id(1), 0u);
  EXPECT_TRUE(s.TakeMounted().empty());
}

TEST(NodeServiceMount, AReconnectForgetsTheOldSessionsIds) {
  NodeService s(TwoSegments());
  s.BeginSession();
  s.SetMounted(0, 100);
  s.SetMounted(1, 101);
  EXPECT_EQ(s.segment_id(0), 100u);
  EXPECT_EQ(s.segment_id(1), 101u);
  // The master went away: the next session starts with nothing mounted, and its ids replace
  // the old ones (segment ids are never reused by a master).
  s.BeginSession();
  EXPECT_EQ(s.segment_id(0), 0u);
  EXPECT_EQ(s.segment_id(1), 0u);
  s.SetMounted(0, 200);
  s.SetMounted(1, 201);
  EXPECT_EQ(s.TakeMounted(), (std::vector<uint64_t>{200, 201}));
}

TEST(NodeServiceMount, APartlyMountedSessionUnmountsOnlyWhatWasMounted) {
  NodeService s(TwoSegments());
  s.BeginSession();
  s.SetMounted(0, 300);  // the second mount failed
  EXPECT_EQ(s.TakeMounted(), (std::vector<uint64_t>{300}));
}

TEST(NodeServiceMount, TakeMountedLeavesNothingMounted) {
  NodeService s(TwoSegments());
  s.BeginSession();
  s.SetMounted(0, 400);
  s.SetMounted(1, 401);
  EXPECT_EQ(s.TakeMounted(), (std::vector<uint64_t>{400, 401}));
  EXPECT_EQ(s.segment_id(0), 0u);
  EXPECT_EQ(s.segment_id(1), 0u);
  EXPECT_TRUE(s.TakeMounted().empty());  // a second unmount sends nothing
}

TEST(NodeServiceDeathTest, OverlappingOrWrappingSegmentsAreABrokenInvariant) {
  EXPECT_DEATH(NodeService({{"a", kBaseA, kSizeA, proto::Tier::kHost, "r"},
                            {"b", kBaseA + 1, kSizeA, proto::Tier::kHost, "r"}}),
               "overlaps");
  EXPECT_DEATH(NodeService({{"a", kMax, 2, proto::Tier::kHost, "r"}}), "wraps around");
}

// Read and Write name allocations: header and value must lie whole in one host segment.
TEST(NodeServiceInline, AllocationsInsideHostSegmentsAreAccepted) {
  NodeService s(TwoSegments());
  const std::vector<proto::InlineEntry> entries = {
      {kBaseA, 0x100}, {kBaseB + kSizeB - proto::kAllocHeaderSize - 0x10, 0x10}};  // ends at end
  EXPECT_TRUE(s.CheckInline("read", entries, std::nullopt).ok());
  EXPECT_TRUE(s.CheckInline("write", entries, proto::InlineDataBytes(entries)).ok());
  EXPECT_TRUE(s.CheckInline("read", {}, std::nullopt).ok());
  EXPECT_TRUE(s.CheckInline("write", {{kBaseA, 0}}, proto::kAllocHeaderSize).ok());  // empty value
}

TEST(NodeServiceInline, AllocationsOutsideOrWrappingAreRefusedNamingThem) {
  NodeService s(TwoSegments());
  // The value runs one byte past the segment (its header is inside).
  ExpectInvalid(
      s.CheckInline("read", {{kBaseA + kSizeA - proto::kAllocHeaderSize - 4, 5}}, std::nullopt),
      absl::StrCat("read of 5 bytes at address ", kBaseA + kSizeA - proto::kAllocHeaderSize - 4,
                   " (with its 64-byte header) is outside this node's segments"));
  ExpectInvalid(s.CheckInline("write", {{0x5, 1}}, proto::kAllocHeaderSize + 1),
                "write of 1 bytes at address 5");
  ExpectInvalid(s.CheckInline("read", {{kBaseA, kMax}}, std::nullopt), "exceeds the frame limit");
  ExpectInvalid(s.CheckInline("read", {{kMax - 10, 100}}, std::nullopt), "is outside");
  // More than one frame's worth in total.
  std::vector<proto::InlineEntry> many(17, {kBaseA, 4u << 20});
  ExpectInvalid(s.CheckInline("read", many, std::nullopt), "in one message");
}

TEST(NodeServiceInline, AWriteWhoseDataDoesNotMatchItsEntriesIsRefused) {
  NodeService s(TwoSegments());
  const std::vector<proto::InlineEntry> entries = {{kBaseA, 16}, {kBaseB, 8}};
  const uint64_t need = 2 * proto::kAllocHeaderSize + 24;
  ExpectInvalid(
      s.CheckInline("write", entries, need - 1),
      absl::StrCat("write carries ", need - 1, " bytes of data, but its 2 entries need ", need));
  ExpectInvalid(s.CheckInline("write", entries, need + 1), "bytes of data");
}

TEST(NodeServiceInline, AGpuSegmentIsNeverCopiedByTheCpu) {
  std::vector<SegmentSpan> spans = TwoSegments();
  spans[1].tier = proto::Tier::kGpu;
  spans[1].name = "gpu0";
  NodeService s(std::move(spans));
  absl::Status st = s.CheckInline("read", {{kBaseA, 8}, {kBaseB, 8}}, std::nullopt);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "is in GPU segment 'gpu0'")) << st;
}

}  // namespace
}  // namespace granary::node
