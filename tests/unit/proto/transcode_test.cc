// Versioned fields (fields.h's Since) and TranscodeFrame. While this build speaks one version,
// the window's other side is modelled by a struct whose newest fields come in the next version.
#include "proto/transcode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "proto/fields.h"
#include "proto/messages.h"
#include "tests/unit/proto/message_samples.h"

namespace granary::proto {

inline constexpr uint16_t kNext = kProtocolVersion + 1;

// In granary::proto (not in an unnamed namespace), where lookup finds the Fields equality.

struct Item {
  uint64_t id = 0;
  uint32_t added = 0;  // protocol kNext
  template <class V>
  static constexpr void Fields(V& v) {
    using S = Item;
    v(&S::id, "id");
    if (!v.Since(kNext)) return;
    v(&S::added, "added");
  }
};
struct Evolving {
  uint64_t a = 0;
  std::string b;
  std::vector<Item> items;
  std::string added;  // protocol kNext
  template <class V>
  static constexpr void Fields(V& v) {
    using S = Evolving;
    v(&S::a, "a");
    v(&S::b, "b", 64);
    v(&S::items, "items", 8);
    if (!v.Since(kNext)) return;
    v(&S::added, "added", 64);
  }
};

namespace {

std::string Encoded(const Evolving& m, uint16_t version) {
  std::string out;
  Writer w(&out, version);
  Encode(m, w);
  return out;
}
Evolving Decoded(const std::string& body, uint16_t version) {
  Reader r(body, version);
  Evolving m;
  EXPECT_TRUE(Decode(r, &m).ok());
  EXPECT_TRUE(r.Finish().ok()) << r.Finish();
  return m;
}

Evolving Sample() { return Evolving{7, "bee", {{1, 11}, {2, 22}}, "new"}; }

TEST(VersionedFields, AnOlderWriterLeavesTheNewFieldsOutAtEveryLevel) {
  const std::string older = Encoded(Sample(), kProtocolVersion);
  const std::string newer = Encoded(Sample(), kNext);
  EXPECT_EQ(older.size(), 8 + 4 + 3 + 4 + 2 * 8);
  EXPECT_EQ(newer.size(), older.size() + 2 * 4 + 4 + 3);
  // An older reader sees the older fields; the newer ones keep their defaults.
  Evolving seen = Decoded(older, kProtocolVersion);
  EXPECT_EQ(seen.a, 7u);
  EXPECT_EQ(seen.b, "bee");
  ASSERT_EQ(seen.items.size(), 2u);
  EXPECT_EQ(seen.items[1].id, 2u);
  EXPECT_EQ(seen.items[1].added, 0u);
  EXPECT_EQ(seen.added, "");
  // A newer reader of a newer body sees everything.
  EXPECT_EQ(Decoded(newer, kNext), Sample());
  // Going up: the older body read as what it is, then written in the newer version.
  EXPECT_EQ(Encoded(Decoded(older, kProtocolVersion), kNext),
            Encoded(Evolving{7, "bee", {{1, 0}, {2, 0}}, ""}, kNext));
  // A body is read in its own version only: the newer one in the older version has more bytes.
  Reader r(newer, kProtocolVersion);
  Evolving m;
  EXPECT_TRUE(Decode(r, &m).ok());
  EXPECT_TRUE(absl::StrContains(r.Finish().message(), "trailing")) << r.Finish();
}

TEST(VersionedFields, BoundsAndSizesCountOnlyWhatEveryVersionHas) {
  EXPECT_EQ(kMinEncodedBytes<Evolving>, 8u + 4 + 4);
  EXPECT_EQ(kMinEncodedBytes<Item>, 8u);
  EXPECT_FALSE(IsFixedSize<Item>()) << "its size depends on the version";
  EXPECT_EQ(EncodedSize(Sample(), kProtocolVersion), Encoded(Sample(), kProtocolVersion).size());
  EXPECT_EQ(EncodedSize(Sample(), kNext), Encoded(Sample(), kNext).size());
}

TEST(VersionedFields, EqualityComparesEveryField) {
  Evolving other = Sample();
  other.items[0].added = 12;
  EXPECT_NE(other, Sample());
}

TEST(Transcode, AFrameOfTheSameVersionIsUnchanged) {
  const std::string frame =
      EncodeFrame(static_cast<uint16_t>(MsgType::kGet) | kReplyBit, 9, samples::Sample<GetReply>());
  absl::StatusOr<std::string> same = TranscodeFrame(frame, kProtocolVersion);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, frame);
}

TEST(Transcode, OnlyVersionsThisBuildSpeaks) {
  const std::string frame =
      EncodeFrame(static_cast<uint16_t>(MsgType::kGet), 9, samples::Sample<GetRequest>());
  for (uint16_t v : {static_cast<uint16_t>(kMinProtocolVersion - 1), kNext}) {
    absl::StatusOr<std::string> out = TranscodeFrame(frame, v);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << v;
  }
  std::string foreign = frame;
  const uint16_t v = kNext;
  std::memcpy(foreign.data() + 4, &v, 2);
  EXPECT_EQ(TranscodeFrame(foreign, kProtocolVersion).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Protocol 15 appended WriteRequest::tenant and ::keys (a disk record keeps them): a
// protocol-14 node never sees them, and a protocol-14 client's Write reaches a protocol-15 node
// without them (which a disk tier refuses; memory takes it as before).
TEST(Transcode, WriteRequestsNamesCrossTheWindow) {
  static_assert(kMinProtocolVersion <= 14 && kProtocolVersion >= 15);
  WriteRequest asked;
  asked.entries = {{4096, 3}};
  asked.data = std::string(kAllocHeaderSize + 3, 'x');
  asked.tenant = "t1";
  asked.keys = {"k"};
  const std::string v15 = EncodeFrame(static_cast<uint16_t>(MsgType::kWrite), 3, asked, 15);
  absl::StatusOr<std::string> down = TranscodeFrame(v15, 14);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->size(), v15.size() - (4 + 2) - (4 + 4 + 1)) << "tenant and keys dropped";
  absl::StatusOr<FrameView> f = DecodeFrame(*down);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.version, 14);
  absl::StatusOr<WriteRequest> old = DecodeBody<WriteRequest>(f->body, 14);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->entries.size(), 1u);
  EXPECT_EQ(old->data, asked.data);
  EXPECT_TRUE(old->tenant.empty());
  EXPECT_TRUE(old->keys.empty());
  // Up again: the entries and data survive, the names are the defaults (none).
  absl::StatusOr<std::string> up = TranscodeFrame(*down, 15);
  ASSERT_TRUE(up.ok()) << up.status();
  WriteRequest plain = asked;
  plain.tenant.clear();
  plain.keys.clear();
  EXPECT_EQ(*up, EncodeFrame(static_cast<uint16_t>(MsgType::kWrite), 3, plain, 15));
  // Keys must be one per entry (or none).
  WriteRequest bad = asked;
  bad.keys = {"k", "l"};
  const std::string frame = EncodeFrame(static_cast<uint16_t>(MsgType::kWrite), 4, bad, 15);
  absl::StatusOr<FrameView> bf = DecodeFrame(frame);
  ASSERT_TRUE(bf.ok());
  absl::StatusOr<WriteRequest> decoded = DecodeBody<WriteRequest>(bf->body, 15);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("names 2 keys"), std::string::npos) << decoded.status();
}

TEST(Transcode, MessageSinceIsTheTablesColumn) {
  EXPECT_EQ(MessageSince(static_cast<uint16_t>(MsgType::kHello)), 1);
  EXPECT_EQ(MessageSince(static_cast<uint16_t>(MsgType::kRead) | kReplyBit), 12);
  EXPECT_EQ(MessageSince(static_cast<uint16_t>(MsgType::kAttach)), 13);
  EXPECT_EQ(MessageSince(static_cast<uint16_t>(MsgType::kStat)), 0);
  EXPECT_EQ(MessageSince(999), 0);
}

}  // namespace
}  // namespace granary::proto
