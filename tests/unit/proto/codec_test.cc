#include "proto/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/error_reason.h"
#include "proto/alloc_header.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "tests/unit/proto/message_samples.h"

// Records the largest single allocation while a decode runs, so a test can show that a frame
// claiming a huge count is rejected before anything is sized by that count. Not under TSan,
// whose runtime defines the global operator new itself (the link would fail): there the
// claims are still rejected, and only the allocation bound goes unchecked.
#if defined(__SANITIZE_THREAD__)
#define GRANARY_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GRANARY_COUNT_ALLOCS 0
#endif
#endif
#ifndef GRANARY_COUNT_ALLOCS
#define GRANARY_COUNT_ALLOCS 1
#endif
namespace {
thread_local bool g_track_allocs = false;
thread_local size_t g_max_alloc = 0;
#if GRANARY_COUNT_ALLOCS
void* TrackedAlloc(size_t n) noexcept {
  if (g_track_allocs && n > g_max_alloc) g_max_alloc = n;
  return std::malloc(n == 0 ? 1 : n);
}
// Out of line, so that GCC does not see free() inlined next to operator new and warn.
[[gnu::noinline]] void TrackedFree(void* p) noexcept { std::free(p); }
#endif
}  // namespace
#if GRANARY_COUNT_ALLOCS
void* operator new(size_t n) {
  if (void* p = TrackedAlloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return TrackedAlloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return TrackedAlloc(n); }
void operator delete(void* p) noexcept { TrackedFree(p); }
void operator delete[](void* p) noexcept { TrackedFree(p); }
void operator delete(void* p, size_t) noexcept { TrackedFree(p); }
void operator delete[](void* p, size_t) noexcept { TrackedFree(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { TrackedFree(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { TrackedFree(p); }
#endif

namespace granary::proto {

namespace {

using namespace samples;  // NOLINT: the sample values and their helpers
using std::string_literals::operator""s;

constexpr uint64_t kRequestId = 0xFEDCBA9876543210ull;

uint16_t Type(MsgType t, bool reply = false) {
  return static_cast<uint16_t>(static_cast<uint16_t>(t) | (reply ? kReplyBit : 0));
}
// Decodes a body as T. On success also checks that the decoded message re-encodes to exactly
// the same bytes (the encoding is canonical), so the mutation loop catches silent misparses.
template <typename T>
absl::Status DecodeAs(absl::string_view body) {
  absl::StatusOr<T> d = DecodeBody<T>(body);
  if (!d.ok()) return d.status();
  std::string again;
  Writer w(&again);
  Encode(*d, w);
  EXPECT_EQ(again, std::string(body)) << "a decoded body did not re-encode to itself";
  return absl::OkStatus();
}

template <typename T>
T RoundTrip(uint16_t type, const T& m) {
  std::string frame = EncodeFrame(type, kRequestId, m);
  absl::StatusOr<FrameView> f = DecodeFrame(frame);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return T{};
  EXPECT_EQ(f->header.version, kProtocolVersion);
  EXPECT_EQ(f->header.type, type);
  EXPECT_EQ(f->header.flags, 0u);
  EXPECT_EQ(f->header.request_id, kRequestId);
  EXPECT_EQ(f->body.data(), frame.data() + kFrameHeaderSize);
  EXPECT_EQ(f->body.size(), frame.size() - kFrameHeaderSize);
  absl::StatusOr<T> d = DecodeBody<T>(f->body);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : T{};
}

template <typename T>
void ExpectRoundTrip(const std::string& name, uint16_t type, const T& m) {
  SCOPED_TRACE(name);
  EXPECT_EQ(RoundTrip(type, m), m);
}

// One message type: its sample's frame, how to decode a body as that type, and a check that the
// sample survives encode + decode with every field equal.
struct Case {
  std::string name;
  std::string frame;
  absl::Status (*decode)(absl::string_view body);
  std::function<void()> expect_round_trip;
};
template <typename T>
Case MakeCase(std::string name, uint16_t type, const T& m) {
  return Case{name, EncodeFrame(type, kRequestId, m), &DecodeAs<T>,
              [name, type, m] { ExpectRoundTrip(name, type, m); }};
}
// Every row of message_table.h, request and reply, with its sample (message_samples.h).
std::vector<Case> AllCases() {
  std::vector<Case> cases;
  ForEachMessage([&](auto tag) {
    using M = Message<decltype(tag)::value>;
    const MsgType t = decltype(tag)::value;
    using Req = typename M::Request;
    using Rep = typename M::Reply;
    cases.push_back(MakeCase(absl::StrCat(M::kName, "Request"), Type(t), Sample<Req>()));
    cases.push_back(MakeCase(absl::StrCat(M::kName, "Reply"), Type(t, true), Sample<Rep>()));
  });
  return cases;
}

// An exact-size heap copy, so that AddressSanitizer reports any read past the end.
struct ExactBuffer {
  explicit ExactBuffer(absl::string_view s) : size(s.size()), data(new char[s.size()]) {
    if (size > 0) std::memcpy(data.get(), s.data(), size);
  }
  absl::string_view view() const { return absl::string_view(data.get(), size); }
  size_t size;
  std::unique_ptr<char[]> data;
};

std::string Bytes(const std::function<void(Writer&)>& fill) {
  std::string s;
  Writer w(&s);
  fill(w);
  return s;
}
template <typename T>
std::string Body(const T& m) {
  return Bytes([&m](Writer& w) { Encode(m, w); });
}

// EXPECTs INVALID_ARGUMENT whose message contains `what`.
void ExpectInvalid(const absl::Status& st, absl::string_view what) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), what)) << "want '" << what << "' in: " << st;
}

TEST(MessageCodec, EveryMessageTypeRoundTripsEveryField) {
  for (const Case& c : AllCases()) c.expect_round_trip();
}

// The table names every message once: distinct numbers and names, the names MsgTypeName gives,
// and (the case list being built from it) a round-trip case for each request and reply.
TEST(MessageTable, NumbersAndNamesAreDistinctAndNamed) {
  std::vector<uint16_t> numbers;
  std::vector<std::string> names;
  ForEachMessage([&](auto tag) {
    using M = Message<decltype(tag)::value>;
    const auto number = static_cast<uint16_t>(decltype(tag)::value);
    EXPECT_EQ(number & kReplyBit, 0) << M::kName;
    EXPECT_EQ(std::string(MsgTypeName(number)), M::kName);
    EXPECT_EQ(std::string(MsgTypeName(number | kReplyBit)), M::kName);
    EXPECT_LE(M::kSince, kProtocolVersion) << M::kName;
    numbers.push_back(number);
    names.push_back(M::kName);
  });
  EXPECT_EQ(std::set<uint16_t>(numbers.begin(), numbers.end()).size(), numbers.size());
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(AllCases().size(), 2 * numbers.size());
  EXPECT_EQ(std::string(MsgTypeName(static_cast<uint16_t>(MsgType::kStat))), "Stat");
  EXPECT_EQ(std::string(MsgTypeName(999)), "Unknown");
  bool visited = VisitMessage(static_cast<uint16_t>(MsgType::kStat), [](auto) {});
  EXPECT_FALSE(visited) << "a reserved number is no message";
  visited = VisitMessage(static_cast<uint16_t>(MsgType::kGet) | kReplyBit,
                         [](auto tag) { EXPECT_EQ(decltype(tag)::value, MsgType::kGet); });
  EXPECT_TRUE(visited);
}

// The least encoded size that bounds a list's claimed count is the sum of the fields' sizes.
TEST(MessageTable, MinEncodedBytesAddsUpTheFields) {
  EXPECT_EQ(kMinEncodedBytes<WireStatus>, 1u + 4 + 1);
  EXPECT_EQ(kMinEncodedBytes<ReplicaDesc>, 24u);
  EXPECT_EQ(kMinEncodedBytes<GetResult>, 6u + 8 + 8 + 4 + 8 + 4);
  EXPECT_EQ(kMinEncodedBytes<InventoryRecord>, 61u);
  EXPECT_EQ(kMinEncodedBytes<HeartbeatRequest>, 1u);  // the flag alone
  EXPECT_EQ(kMinEncodedBytes<SegmentsRequest>, 0u);
  // No encoding is shorter.
  ForEachMessage([](auto tag) {
    using M = Message<decltype(tag)::value>;
    using Req = typename M::Request;
    using Rep = typename M::Reply;
    EXPECT_GE(Body(Sample<Req>()).size(), kMinEncodedBytes<Req>) << M::kName;
    EXPECT_GE(Body(Sample<Rep>()).size(), kMinEncodedBytes<Rep>) << M::kName;
    // The bound counts the fields every version of the window has: an empty message in the
    // window's oldest version is exactly that long.
    std::string oldest;
    Writer w(&oldest, kMinProtocolVersion);
    Encode(Req{}, w);
    EXPECT_EQ(oldest.size(), kMinEncodedBytes<Req>) << M::kName;
  });
}

// Equality is field by field as Fields lists them; an absent optional value is not compared.
TEST(MessageTable, EqualityFollowsTheFields) {
  EXPECT_EQ(Sample<GetReply>(), Sample<GetReply>());
  GetReply other = Sample<GetReply>();
  other.results[0].replicas[0].length += 1;
  EXPECT_NE(other, Sample<GetReply>());
  HeartbeatRequest a, b;
  b.cgroup.limit = 7;  // not on the wire while has_cgroup is false
  EXPECT_EQ(a, b);
  a.has_cgroup = b.has_cgroup = true;
  EXPECT_NE(a, b);
}

// The in-place encoders write the same bytes as the codec, and the view decoders read them
// without copying the data.
TEST(MessageCodec, InlineFramesBuiltInPlaceMatchTheCodecAndDecodeAsViews) {
  const std::vector<InlineEntry> entries = {{0x10000, 3}, {0x20000, 2}};
  ASSERT_EQ(InlineDataBytes(entries), 2 * 64u + 5);
  const std::string data = std::string(64, 'h') + "abc" + std::string(64, 'i') + "de";
  auto fill = [&](char* out) { std::memcpy(out, data.data(), data.size()); };
  const std::string write = EncodeWriteRequestFrame(entries, data.size(), fill);
  EXPECT_EQ(write, EncodeFrame(Type(MsgType::kWrite), 0, WriteRequest{entries, data}));
  absl::StatusOr<FrameView> f = DecodeFrame(write);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<WriteRequestView> w = DecodeBody<WriteRequestView>(f->body);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->entries, entries);
  EXPECT_EQ(w->data, data);
  EXPECT_GE(w->data.data(), write.data());  // a view into the frame
  EXPECT_LE(w->data.data() + w->data.size(), write.data() + write.size());

  const std::string read = EncodeReadReplyFrame(Type(MsgType::kRead, true), 77, data.size(), fill);
  EXPECT_EQ(read, EncodeFrame(Type(MsgType::kRead, true), 77, ReadReply{{0, ""}, data}));
  f = DecodeFrame(read);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<ReadReplyView> r = DecodeBody<ReadReplyView>(f->body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 0);
  EXPECT_EQ(r->data, data);
  EXPECT_GE(r->data.data(), read.data());
  // A data length past the frame is refused, never read.
  std::string cut = read.substr(0, read.size() - 1);
  EXPECT_FALSE(DecodeBody<ReadReplyView>(absl::string_view(cut).substr(kFrameHeaderSize)).ok());
}

// A client's heartbeat (and a node's outside --cgroup) is one byte: no cgroup figures.
TEST(MessageCodec, AHeartbeatWithoutCgroupIsOneByte) {
  EXPECT_EQ(Body(HeartbeatRequest{}), std::string(1, '\0'));
  EXPECT_EQ(RoundTrip(Type(MsgType::kHeartbeat), HeartbeatRequest{}), HeartbeatRequest{});
  ExpectInvalid(DecodeAs<HeartbeatRequest>(std::string(1, '\2')), "has_cgroup");
}

TEST(Frame, HeaderIsLittleEndianWithBodyLenFilledIn) {
  std::string f = EncodeFrame(Type(MsgType::kUnmountSegment), 0x0102030405060708ull,
                              UnmountSegmentRequest{0x1122334455667788ull});
  std::string want =
      "GRNY\x0d\x00\x04\x00\x00\x00\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01"
      "\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x88\x77\x66\x55\x44\x33\x22\x11"s;
  want[4] = static_cast<char>(kProtocolVersion);  // the version's low byte (0x0d above: 13)
  EXPECT_EQ(f, want);
}

// The epoch (HA) sits after body_len; SetFrameEpoch patches an encoded frame, FrameEpoch and
// DecodeFrame read it back, and neither touches anything else.
TEST(Frame, EpochIsPatchedAndReadBackWithoutTouchingTheRest) {
  std::string f = EncodeFrame(Type(MsgType::kGet), 7, SampleKeys());
  EXPECT_EQ(FrameEpoch(f), 0);
  std::string g = f;
  SetFrameEpoch(&g, 0x0102030405060708ll);
  EXPECT_EQ(g.substr(kFrameEpochOffset, 8), "\x08\x07\x06\x05\x04\x03\x02\x01"s);
  EXPECT_EQ(g.substr(0, kFrameEpochOffset), f.substr(0, kFrameEpochOffset));
  EXPECT_EQ(g.substr(kFrameHeaderSize), f.substr(kFrameHeaderSize));
  EXPECT_EQ(FrameEpoch(g), 0x0102030405060708ll);
  absl::StatusOr<FrameView> d = DecodeFrame(g);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->header.epoch, 0x0102030405060708ll);
  EXPECT_EQ(d->header.request_id, 7u);
  // Too short to hold a header: left alone, read as 0.
  std::string tiny = "GRNY";
  SetFrameEpoch(&tiny, 5);
  EXPECT_EQ(tiny, "GRNY");
  EXPECT_EQ(FrameEpoch(tiny), 0);
}

TEST(Frame, EveryTruncatedPrefixOfEveryMessageIsRejected) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(c.name);
    for (size_t n = 0; n < c.frame.size(); ++n) {
      ExactBuffer prefix(absl::string_view(c.frame).substr(0, n));
      EXPECT_FALSE(DecodeFrame(prefix.view()).ok()) << "frame prefix " << n;
    }
    absl::string_view body = absl::string_view(c.frame).substr(kFrameHeaderSize);
    for (size_t n = 0; n < body.size(); ++n) {
      ExactBuffer prefix(body.substr(0, n));
      ExpectInvalid(c.decode(prefix.view()), "truncated");
    }
    ExactBuffer whole(body);
    EXPECT_TRUE(c.decode(whole.view()).ok());
  }
}

TEST(Frame, BadMagicIsRejected) {
  std::string f = AllCases()[0].frame;
  f[0] ^= 0x20;
  ExpectInvalid(DecodeFrame(f).status(), "magic");
}

TEST(Frame, WrongVersionIsFailedPreconditionNamingBothVersions) {
  std::string f;
  FrameHeader h;
  h.version = 4660;  // no digit 1 in it, so the check below sees kProtocolVersion separately
  BeginFrame(h, &f);
  FinishFrame(&f);
  absl::Status st = DecodeFrame(f).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "4660")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat(kProtocolVersion))) << st;
}

TEST(Frame, BodyLenDifferentFromBytesPresentIsRejected) {
  std::string f = EncodeFrame(Type(MsgType::kGet), 1, SampleKeys());
  uint32_t len = static_cast<uint32_t>(f.size() - kFrameHeaderSize);
  for (uint32_t bad : {len - 1, len + 1, 0u}) {
    std::string g = f;
    std::memcpy(g.data() + 20, &bad, 4);
    ExpectInvalid(DecodeFrame(g).status(), "body_len");
  }
  ExpectInvalid(DecodeFrame(f + "x").status(), "body_len");
}

TEST(Frame, BodyLenOverTheLimitIsRejectedBeforeLookingForTheBody) {
  std::string f = EncodeFrame(Type(MsgType::kHeartbeat), 1, HeartbeatRequest{});
  uint32_t bad = kMaxFrameBody + 1;
  std::memcpy(f.data() + 20, &bad, 4);
  ExpectInvalid(DecodeFrame(f).status(), "exceeds");
}

TEST(MessageCodec, TrailingBytesInABodyAreRejected) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(c.name);
    std::string body = c.frame.substr(kFrameHeaderSize) + '\0';
    ExpectInvalid(c.decode(body), "trailing");
  }
}

TEST(MessageCodec, CountClaimingMoreEntriesThanBytesFailsWithoutSizingByIt) {
  const std::string ok_status = Bytes([](Writer& w) {
    w.U8(0);
    w.Str("");
    w.U8(0);
  });
  auto count_then_4 = [](uint32_t n) {
    return Bytes([n](Writer& w) {
      w.U32(n);
      w.U32(0);
    });
  };
  struct Claim {
    const char* name;
    std::string body;
    absl::Status (*decode)(absl::string_view);
  };
  const std::string big = count_then_4(kMaxBatch);
  const std::vector<Claim> claims = {
      {"PutStartRequest", big, &DecodeAs<PutStartRequest>},
      {"KeyGenRequest", big, &DecodeAs<KeyGenRequest>},
      {"KeysRequest", big, &DecodeAs<KeysRequest>},
      {"PutStartReply", ok_status + big, &DecodeAs<PutStartReply>},
      {"BatchStatusReply", ok_status + big, &DecodeAs<BatchStatusReply>},
      {"GetReply", ok_status + big, &DecodeAs<GetReply>},
      {"ListReply", ok_status + count_then_4(kMaxListLimit), &DecodeAs<ListReply>},
      {"SegmentsReply", ok_status + big, &DecodeAs<SegmentsReply>},
      {"InventorySyncReply", ok_status + count_then_4(kMaxInventoryBatch),
       &DecodeAs<InventorySyncReply>},
      {"InventoryReportRequest", count_then_4(kMaxInventoryBatch),
       &DecodeAs<InventoryReportRequest>},
      {"GetReply.replicas", ok_status + Bytes([&](Writer& w) {
                              w.U32(1);
                              w.Raw(ok_status.data(), ok_status.size());
                              w.U64(1);
                              w.U64(2);
                              w.U32(3);
                              w.U64(4);
                            }) + count_then_4(kMaxReplicaNum),
       &DecodeAs<GetReply>},
  };
  for (const Claim& c : claims) {
    SCOPED_TRACE(c.name);
    ExactBuffer body(c.body);
    g_max_alloc = 0;
    g_track_allocs = true;
    absl::Status st = c.decode(body.view());
    g_track_allocs = false;
    ExpectInvalid(st, "claims");
    if (GRANARY_COUNT_ALLOCS) {
      EXPECT_LT(g_max_alloc, 4096u) << "decoder allocated by the claimed count";
    }
  }
}

TEST(MessageCodec, CountOverTheLimitIsRejectedAndTheLimitItselfIsAccepted) {
  auto empty_keys = [](uint32_t n) {
    return Bytes([n](Writer& w) {
      w.U32(n);
      for (uint32_t i = 0; i < n; ++i) w.Str("");
    });
  };
  ExpectInvalid(DecodeAs<KeysRequest>(empty_keys(kMaxBatch + 1)), "limit");
  absl::StatusOr<KeysRequest> at_limit = DecodeBody<KeysRequest>(empty_keys(kMaxBatch));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->keys.size(), kMaxBatch);

  auto replicas = [](uint32_t n) {
    GetReply m;
    m.results.resize(1);
    m.results[0].replicas.resize(n, ReplicaDesc{1, 2, 3});
    return Body(m);
  };
  ExpectInvalid(DecodeAs<GetReply>(replicas(kMaxReplicaNum + 1)), "limit");
  EXPECT_TRUE(DecodeAs<GetReply>(replicas(kMaxReplicaNum)).ok());
}

TEST(MessageCodec, StringOverItsLimitIsRejectedAndTheLimitItselfIsAccepted) {
  KeysRequest over{{std::string(kMaxKeyBytes + 1, 'k')}};
  ExpectInvalid(DecodeAs<KeysRequest>(Body(over)), absl::StrCat("limit ", kMaxKeyBytes));
  KeysRequest at{{std::string(kMaxKeyBytes, 'k')}};
  EXPECT_TRUE(DecodeAs<KeysRequest>(Body(at)).ok());

  HelloRequest tenant{Role::kClient, "c", std::string(kMaxTenantIdBytes + 1, 't')};
  ExpectInvalid(DecodeAs<HelloRequest>(Body(tenant)), "tenant_id");
  // A length near 4 GiB with nothing behind it fails on the limit, without allocating.
  ExactBuffer huge(Bytes([](Writer& w) {
    w.U32(1);
    w.U32(0xFFFFFFFFu);
  }));
  ExpectInvalid(DecodeAs<KeysRequest>(huge.view()), "limit");
}

TEST(MessageCodec, HelloTokenOverItsLimitIsRejectedAndTheLimitItselfIsAccepted) {
  HelloRequest at{Role::kClient, "c", "tenant-a", kProtocolVersion,
                  std::string(kMaxTokenBytes, 'x')};
  EXPECT_TRUE(DecodeAs<HelloRequest>(Body(at)).ok());
  absl::StatusOr<HelloRequest> ok = DecodeBody<HelloRequest>(Body(at));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->token, at.token);
  HelloRequest over = at;
  over.token += 'x';
  // Names the field and the limit; the token itself is not echoed.
  ExpectInvalid(
      DecodeAs<HelloRequest>(Body(over)),
      absl::StrCat("field 'token' is ", kMaxTokenBytes + 1, " bytes, limit ", kMaxTokenBytes));
  EXPECT_FALSE(absl::StrContains(DecodeAs<HelloRequest>(Body(over)).message(), "xxxx"));
  // No token is an empty string, not an absent field.
  HelloRequest none{Role::kClient, "c", "tenant-a"};
  absl::StatusOr<HelloRequest> empty = DecodeBody<HelloRequest>(Body(none));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->token.empty());
  std::string body = Body(none);
  body.resize(body.size() - 4);  // a hello without the token field
  ExpectInvalid(DecodeAs<HelloRequest>(body), "truncated frame: field 'token'");
}

TEST(MessageCodec, BoolByteOtherThanZeroOrOneIsRejected) {
  std::string body = Body(SampleListReply());
  body.back() = 2;
  ExpectInvalid(DecodeAs<ListReply>(body), "not a bool");
  body.back() = 0;
  EXPECT_TRUE(DecodeAs<ListReply>(body).ok());
}

TEST(MessageCodec, UnknownRoleIsRejected) {
  for (uint8_t role : {0, 3, 255}) {
    HelloRequest m = SampleHelloRequest();
    m.role = static_cast<Role>(role);
    ExpectInvalid(DecodeAs<HelloRequest>(Body(m)), "unknown role");
  }
}

TEST(MessageCodec, UnknownTierIsRejected) {
  MountSegmentRequest mount = SampleMount();
  mount.tier = static_cast<Tier>(3);
  ExpectInvalid(DecodeAs<MountSegmentRequest>(Body(mount)), "unknown tier");
  SegmentsReply segs = SampleSegmentsReply();
  segs.segments[1].tier = static_cast<Tier>(255);
  ExpectInvalid(DecodeAs<SegmentsReply>(Body(segs)), "unknown tier");
}

TEST(MessageCodec, UnknownStatusCodeIsRejectedAtTopLevelAndPerResult) {
  HeartbeatReply top{WireStatus{17, "?"}};
  ExpectInvalid(DecodeAs<HeartbeatReply>(Body(top)), "unknown status code 17");
  BatchStatusReply nested = SampleBatchStatus();
  nested.results[1].code = 255;
  ExpectInvalid(DecodeAs<BatchStatusReply>(Body(nested)), "unknown status code 255");
  HeartbeatReply last{WireStatus{16, "unauthenticated"}};  // the highest known code
  EXPECT_TRUE(DecodeAs<HeartbeatReply>(Body(last)).ok());
}

TEST(MessageCodec, UnknownObjectStateIsRejected) {
  ListReply m = SampleListReply();
  m.objects[0].state = static_cast<ObjectState>(2);
  ExpectInvalid(DecodeAs<ListReply>(Body(m)), "unknown object state 2");
}

TEST(MessageCodec, UnknownInventoryOpIsRejected) {
  InventoryReportRequest m = SampleInventoryReport();
  std::string body = Body(m);
  body[4] = 2;  // the first record's op, after the u32 count
  ExpectInvalid(DecodeAs<InventoryReportRequest>(body), "unknown inventory op 2");
}

TEST(MessageCodec, InventoryWaitOverTheLimitIsRejectedAndTheLimitItselfIsAccepted) {
  EXPECT_TRUE(DecodeAs<InventorySyncRequest>(Body(InventorySyncRequest{kMaxInventoryWaitMs})).ok());
  ExpectInvalid(DecodeAs<InventorySyncRequest>(Body(InventorySyncRequest{kMaxInventoryWaitMs + 1})),
                "wait_ms");
}

TEST(MessageCodec, ListLimitOutsideOneToMaxIsRejected) {
  for (uint32_t limit : {0u, kMaxListLimit + 1, 0xFFFFFFFFu}) {
    ListRequest m{"p", "", limit};
    ExpectInvalid(DecodeAs<ListRequest>(Body(m)), "list limit");
  }
  for (uint32_t limit : {1u, kMaxListLimit}) {
    ListRequest m{"p", "", limit};
    EXPECT_TRUE(DecodeAs<ListRequest>(Body(m)).ok());
  }
}

TEST(MessageCodec, RandomlyMutatedFramesNeverCrashAndDecodeOnlyCanonically) {
  const std::vector<Case> cases = AllCases();
  std::mt19937_64 rng(20240611);
  size_t body_ok = 0, body_bad = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    const Case& c = cases[iter % cases.size()];
    std::string f = c.frame;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = f.empty() ? 0 : rng() % f.size();
      switch (rng() % 4) {
        case 0:
          if (!f.empty()) f[pos] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          if (!f.empty()) f[pos] = static_cast<char>(rng());
          break;
        case 2:
          f.insert(f.begin() + static_cast<ptrdiff_t>(pos), static_cast<char>(rng()));
          break;
        default:
          if (!f.empty()) f.erase(pos, 1);
          break;
      }
    }
    // Half the time repair body_len, so the body decoder sees the mutation behind a valid header.
    if (iter % 2 == 0 && f.size() >= kFrameHeaderSize) FinishFrame(&f);
    ExactBuffer frame(f);
    absl::StatusOr<FrameView> fv = DecodeFrame(frame.view());
    if (fv.ok()) (void)c.decode(fv->body);
    if (f.size() >= kFrameHeaderSize) {
      ExactBuffer body(absl::string_view(f).substr(kFrameHeaderSize));
      (c.decode(body.view()).ok() ? body_ok : body_bad)++;
    }
  }
  // Both outcomes happen, so the loop really reaches the decoders' accept and reject paths.
  EXPECT_GT(body_ok, 1000u);
  EXPECT_GT(body_bad, 1000u);
}

TEST(WireStatus, CodesAndMessagesRoundTrip) {
  for (int code = 0; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), absl::StrCat("message ", code));
    WireStatus w = WireStatus::From(s);
    EXPECT_EQ(w.code, code);
    EXPECT_EQ(w.ToStatus(), s);
    StatusReply decoded = RoundTrip(Type(MsgType::kRemove, true), StatusReply{w});
    EXPECT_EQ(decoded.status.ToStatus(), s);
  }
  EXPECT_EQ(WireStatus::From(absl::OkStatus()).ToStatus(), absl::OkStatus());
  EXPECT_EQ((WireStatus{200, "odd"}).ToStatus().code(), absl::StatusCode::kUnknown);
}

TEST(WireStatus, ReasonTravelsFromStatusToWireAndBack) {
  const absl::Status s = common::WithReason(
      absl::ResourceExhaustedError("QUOTA_EXCEEDED: tenant 'a'"), ErrorReason::kQuotaExceeded);
  WireStatus w = WireStatus::From(s);
  EXPECT_EQ(w.reason, ErrorReason::kQuotaExceeded);
  StatusReply decoded = RoundTrip(Type(MsgType::kPutStart, true), StatusReply{w});
  EXPECT_EQ(decoded.status, w);
  absl::Status back = decoded.status.ToStatus();
  EXPECT_EQ(back, s);
  EXPECT_EQ(ErrorReasonOf(back), ErrorReason::kQuotaExceeded);
  EXPECT_EQ(back.message(), s.message());
  // No reason is kNone on the wire and no payload after it.
  WireStatus plain = WireStatus::From(absl::NotFoundError("gone"));
  EXPECT_EQ(plain.reason, ErrorReason::kNone);
  EXPECT_FALSE(plain.ToStatus().GetPayload(common::kErrorReasonUrl).has_value());
  // An OK status never carries one.
  EXPECT_EQ((WireStatus{0, "", ErrorReason::kQuotaExceeded}).ToStatus(), absl::OkStatus());
}

TEST(WireStatus, UnknownReasonIsRejected) {
  HeartbeatReply top{WireStatus{8, "x", common::kLastErrorReason}};
  EXPECT_TRUE(DecodeAs<HeartbeatReply>(Body(top)).ok());
  const auto unknown = static_cast<ErrorReason>(static_cast<uint8_t>(common::kLastErrorReason) + 1);
  top.status.reason = unknown;
  ExpectInvalid(DecodeAs<HeartbeatReply>(Body(top)),
                absl::StrCat("unknown error reason ", static_cast<int>(unknown)));
  BatchStatusReply nested = SampleBatchStatus();
  nested.results[1].reason = static_cast<ErrorReason>(255);
  ExpectInvalid(DecodeAs<BatchStatusReply>(Body(nested)), "unknown error reason 255");
}

TEST(WireStatus, MessageOverTheLimitIsTruncatedAndStillDecodes) {
  std::string long_msg(kMaxMessageBytes + 100, 'm');
  long_msg[kMaxMessageBytes - 1] = 'L';
  WireStatus w = WireStatus::From(absl::InternalError(long_msg));
  ASSERT_EQ(w.message.size(), kMaxMessageBytes);
  EXPECT_EQ(w.message, long_msg.substr(0, kMaxMessageBytes));
  EXPECT_EQ(RoundTrip(Type(MsgType::kRemove, true), StatusReply{w}).status, w);
}

AllocHeader Header(uint64_t generation, uint64_t key_hash, uint64_t value_length) {
  AllocHeader h;
  h.generation = generation;
  h.key_hash = key_hash;
  h.value_length = value_length;
  return h;
}

TEST(AllocHeader, MatchingHeaderIsOk) {
  EXPECT_TRUE(CheckAllocHeader(Header(7, 0xABCDEF, 4096), 7, 0xABCDEF, 4096).ok());
}

TEST(AllocHeader, GenerationKeyHashLengthOrMagicMismatchIsUnavailable) {
  AllocHeader bad_magic = Header(7, 0xABCDEF, 4096);
  bad_magic.magic ^= 1;
  for (const AllocHeader& h : {Header(8, 0xABCDEF, 4096), Header(7, 0xABCDEE, 4096),
                               Header(7, 0xABCDEF, 4095), bad_magic}) {
    absl::Status st = CheckAllocHeader(h, 7, 0xABCDEF, 4096);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  }
}

// PutStartRequest.flags bits 2-3 (protocol 11): no bits is the tenant's default; gpu keeps
// protocol 10's kPutFlagTierGpu; the pins and the tier do not overlap.
TEST(PutTierFlagsTest, RoundTripsEveryPreferenceBesideThePins) {
  EXPECT_EQ(PutTierFlags(std::nullopt), 0u);
  EXPECT_EQ(PutTierOf(0), std::nullopt);
  EXPECT_EQ(PutTierFlags(common::TierPreference::kGpu), kPutFlagTierGpu);
  for (common::TierPreference t : {common::TierPreference::kHost, common::TierPreference::kGpu,
                                   common::TierPreference::kAny}) {
    const uint32_t flags = PutTierFlags(t) | kPutFlagSoftPin | kPutFlagHardPin;
    EXPECT_EQ(flags & ~kPutFlagTierMask, kPutFlagSoftPin | kPutFlagHardPin);
    EXPECT_EQ(PutTierOf(flags), t) << common::TierPreferenceName(t);
  }
}

}  // namespace
}  // namespace granary::proto
