#include "client/planner.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace granary::client {
namespace {

using proto::kAllocHeaderSize;

// A world of segments on nodes, some reached over tcp alone, and one registered buffer.
class FakeInputs : public PlanInputs {
 public:
  void AddSegment(uint64_t id, const std::string& node) {
    auto s = std::make_shared<transport::RemoteSegment>();
    s->segment_id = id;
    s->node_address = node;
    segments_[id] = s;
  }
  void MakeGpu(uint64_t id) { segments_[id]->gpu = true; }
  absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> Segment(uint64_t id) override {
    auto it = segments_.find(id);
    if (it == segments_.end()) return absl::UnavailableError(absl::StrCat("segment ", id, " gone"));
    return std::shared_ptr<const transport::RemoteSegment>(it->second);
  }
  bool TcpOnly(const std::string& node) override { return tcp_only.contains(node); }
  bool MessagesOnly(const transport::RemoteSegment& segment) override {
    return messages_only.contains(segment.node_address);
  }
  RegisteredRange Registered(const void* p, size_t n) override {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(buffer);
    if (buffer == nullptr || a < b || a + n > b + buffer_size) return {};
    ++lookups;
    return {memh, 7, nullptr};
  }
  proto::SegmentInfo PushTarget(const RegisteredRange& range) override {
    ++push_targets;
    proto::SegmentInfo s;
    s.segment_id = range.id;
    s.node_address = "client/me";
    return s;
  }

  std::set<std::string> tcp_only;
  std::set<std::string> messages_only;  // nodes on other hosts over tcp
  const char* buffer = nullptr;
  size_t buffer_size = 0;
  ucp_mem_h memh = reinterpret_cast<ucp_mem_h>(0x1234);
  int lookups = 0;
  int push_targets = 0;

 private:
  std::map<uint64_t, std::shared_ptr<transport::RemoteSegment>> segments_;
};

proto::ReplicaDesc Replica(uint64_t segment, uint64_t address) { return {segment, address, 0}; }

proto::PutStartResult Placed(uint64_t generation, std::vector<proto::ReplicaDesc> replicas) {
  proto::PutStartResult r;
  r.generation = generation;
  r.replicas = std::move(replicas);
  return r;
}

// ----- Put -----

class PlanPutTest : public ::testing::Test {
 protected:
  void Plan(const std::vector<std::string>& keys, const std::vector<const void*>& data,
            const std::vector<size_t>& sizes) {
    headers_.assign(keys.size(), {});
    out_.assign(keys.size(), absl::OkStatus());
    PlanPut(keys, data, sizes, started_, &inputs_, &headers_, &out_, &plan_);
  }
  FakeInputs inputs_;
  proto::PutStartReply started_;
  std::vector<proto::AllocHeader> headers_;
  std::vector<absl::Status> out_;
  PutPlan plan_;
};

TEST_F(PlanPutTest, EveryReplicaGetsTheValueThenItsHeader) {
  char value[100] = {};
  inputs_.buffer = value;
  inputs_.buffer_size = sizeof(value);
  inputs_.AddSegment(1, "n1:1");
  inputs_.AddSegment(2, "n2:1");
  started_.results = {Placed(9, {Replica(1, 1000), Replica(2, 2000)})};
  Plan({"k"}, {value}, {sizeof(value)});
  ASSERT_TRUE(out_[0].ok()) << out_[0];
  ASSERT_EQ(plan_.ops.size(), 4u);
  for (int rep = 0; rep < 2; ++rep) {
    const transport::RmaOp& v = plan_.ops[rep * 2];
    const transport::RmaOp& h = plan_.ops[rep * 2 + 1];
    const uint64_t base = rep == 0 ? 1000 : 2000;
    EXPECT_TRUE(v.is_put);
    EXPECT_EQ(v.local, value);
    EXPECT_EQ(v.length, sizeof(value));
    EXPECT_EQ(v.memh, inputs_.memh);  // the registered buffer's registration
    EXPECT_EQ(v.remote_addr, base + kAllocHeaderSize);
    EXPECT_EQ(v.segment->segment_id, rep == 0 ? 1u : 2u);
    EXPECT_TRUE(h.is_put);
    EXPECT_EQ(h.local, &headers_[0]);
    EXPECT_EQ(h.length, kAllocHeaderSize);
    EXPECT_EQ(h.memh, nullptr);
    EXPECT_EQ(h.remote_addr, base);
  }
  EXPECT_EQ(headers_[0].generation, 9u);
  EXPECT_EQ(headers_[0].value_length, sizeof(value));
  EXPECT_EQ(inputs_.lookups, 1);
  ASSERT_EQ(plan_.commit.entries.size(), 1u);
  EXPECT_EQ(plan_.commit.entries[0].key, "k");
  EXPECT_EQ(plan_.commit.entries[0].generation, 9u);
  EXPECT_TRUE(plan_.revoke.entries.empty());
}

TEST_F(PlanPutTest, RefusedKeysAreNeitherWrittenNorCommitted) {
  char value[8] = {};
  inputs_.AddSegment(1, "n1:1");
  proto::PutStartResult refused;
  refused.status = proto::WireStatus::From(absl::ResourceExhaustedError("quota"));
  started_.results = {refused, Placed(3, {Replica(1, 64)})};
  Plan({"a", "b"}, {value, value}, {8, 8});
  EXPECT_EQ(out_[0].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(out_[1].ok());
  EXPECT_EQ(plan_.ops.size(), 2u);
  EXPECT_EQ(plan_.ops[0].memh, nullptr);  // unregistered memory: UCX registers it
  ASSERT_EQ(plan_.commit.entries.size(), 1u);
  EXPECT_EQ(plan_.commit.entries[0].key, "b");
}

// Before the planner, a key with one replica on an unmounted segment kept the writes of its
// other replicas and was sent in PutEnd although its status was an error, so the PutEnd results
// of the keys after it were matched to the wrong keys.
TEST_F(PlanPutTest, AKeyWithAnUnmountedReplicaIsRevokedNotCommitted) {
  char value[8] = {};
  inputs_.AddSegment(1, "n1:1");
  started_.results = {Placed(4, {Replica(1, 64), Replica(99, 64)}), Placed(5, {Replica(1, 512)})};
  Plan({"half", "whole"}, {value, value}, {8, 8});
  EXPECT_EQ(out_[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(out_[1].ok());
  ASSERT_EQ(plan_.ops.size(), 2u);  // only "whole"'s value and header
  EXPECT_EQ(plan_.ops[1].remote_addr, 512u);
  ASSERT_EQ(plan_.commit.entries.size(), 1u);
  EXPECT_EQ(plan_.commit.entries[0].key, "whole");
  ASSERT_EQ(plan_.revoke.entries.size(), 1u);
  EXPECT_EQ(plan_.revoke.entries[0].key, "half");
  EXPECT_EQ(plan_.revoke.entries[0].generation, 4u);
}

TEST_F(PlanPutTest, SmallValuesToATcpOnlyNodeGoInlineAndTheRestOneSided) {
  char small[100] = {}, other[10] = {};
  std::vector<char> big(proto::kMaxInlineValue + 1);
  inputs_.AddSegment(1, "tcp:1");
  inputs_.AddSegment(2, "rdma:1");
  inputs_.AddSegment(3, "tcp:1");
  inputs_.MakeGpu(3);
  inputs_.tcp_only = {"tcp:1"};
  started_.results = {Placed(1, {Replica(1, 1000), Replica(2, 2000)}),  // inline + one-sided
                      Placed(2, {Replica(1, 5000)}),                    // inline
                      Placed(3, {Replica(1, 9000)}),                    // too big: one-sided
                      Placed(4, {Replica(3, 64)}),                      // GPU segment
                      Placed(5, {Replica(1, 7000), Replica(42, 64)})};  // one replica gone
  Plan({"a", "b", "big", "gpu", "half"}, {small, other, big.data(), small, small},
       {sizeof(small), sizeof(other), big.size(), sizeof(small), sizeof(small)});
  ASSERT_EQ(plan_.writes.size(), 1u);
  const InlineGroup& g = plan_.writes[0];
  EXPECT_EQ(g.node, "tcp:1");
  EXPECT_EQ(g.keys, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(g.entries, (std::vector<proto::InlineEntry>{{1000, 100}, {5000, 10}}));
  EXPECT_EQ(g.headers, (std::vector<void*>{&headers_[0], &headers_[1]}));
  EXPECT_EQ(g.values, (std::vector<void*>{small, other}));
  EXPECT_EQ(g.value_bytes, 110u);
  // One-sided: "a" to the rdma node, "big", "gpu" (value and header each).
  ASSERT_EQ(plan_.ops.size(), 6u);
  EXPECT_EQ(plan_.ops[0].remote_addr, 2000u + kAllocHeaderSize);
  EXPECT_EQ(plan_.ops[2].remote_addr, 9000u + kAllocHeaderSize);
  EXPECT_EQ(plan_.ops[4].remote_addr, 64u + kAllocHeaderSize);
  EXPECT_EQ(out_[4].code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(plan_.commit.entries.size(), 4u);
  ASSERT_EQ(plan_.revoke.entries.size(), 1u);
  EXPECT_EQ(plan_.revoke.entries[0].key, "half");
}

TEST_F(PlanPutTest, EveryHostValueToANodeOnAnotherHostOverTcpGoesInWriteMessages) {
  // 1 MiB and 8 MiB, far above kMaxInlineValue: still in Write messages, one group each (each
  // passes kMaxInlineMessage alone), so no endpoint to the node's worker address is needed.
  std::vector<char> mib(1 << 20), eight(8 << 20);
  char small[100] = {};
  inputs_.AddSegment(1, "far:1");
  inputs_.AddSegment(2, "rdma:1");
  inputs_.AddSegment(3, "far:1");
  inputs_.MakeGpu(3);
  inputs_.messages_only = {"far:1"};
  started_.results = {Placed(1, {Replica(1, 1000), Replica(2, 2000)}),  // message + one-sided
                      Placed(2, {Replica(1, 5 << 20)}),                 // message of its own
                      Placed(3, {Replica(1, 20 << 20)}),                // after "eight": new
                      Placed(4, {Replica(3, 64)})};                     // GPU segment: one-sided
  Plan({"mib", "eight", "small", "gpu"}, {mib.data(), eight.data(), small, small},
       {mib.size(), eight.size(), sizeof(small), sizeof(small)});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(out_[i].ok()) << i << ": " << out_[i];
  ASSERT_EQ(plan_.writes.size(), 3u);
  EXPECT_EQ(plan_.writes[0].keys, std::vector<size_t>{0});
  EXPECT_EQ(plan_.writes[0].value_bytes, mib.size());
  EXPECT_EQ(plan_.writes[1].keys, std::vector<size_t>{1});
  EXPECT_EQ(plan_.writes[1].entries, (std::vector<proto::InlineEntry>{{5 << 20, 8 << 20}}));
  EXPECT_EQ(plan_.writes[2].keys, std::vector<size_t>{2});
  for (const InlineGroup& g : plan_.writes) {
    EXPECT_EQ(g.node, "far:1");
    EXPECT_TRUE(g.other_host);  // the fake's segments are not same_host
  }
  // One-sided: "mib" to the rdma node and "gpu" (value and header each).
  ASSERT_EQ(plan_.ops.size(), 4u);
  EXPECT_EQ(plan_.ops[0].segment->node_address, "rdma:1");
  EXPECT_EQ(plan_.ops[2].remote_addr, 64u + kAllocHeaderSize);
  EXPECT_EQ(plan_.commit.entries.size(), 4u);
}

TEST_F(PlanPutTest, AValueAboveTheMessageLimitToANodeOnAnotherHostIsWrittenOneSided) {
  // Not allocated: the planner only looks at the size.
  inputs_.AddSegment(1, "far:1");
  inputs_.messages_only = {"far:1"};
  char byte = 0;
  started_.results = {Placed(1, {Replica(1, 1000)})};
  Plan({"huge"}, {&byte}, {proto::kMaxMessageValue + 1});
  EXPECT_TRUE(plan_.writes.empty());
  EXPECT_EQ(plan_.ops.size(), 2u);
}

// ----- Get -----

class PlanGetTest : public ::testing::Test {
 protected:
  void Plan(int attempt, const std::vector<std::string>& keys,
            std::optional<bool> prefer_gpu = std::nullopt) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < keys.size(); ++i) pending.push_back(i);
    headers_.assign(keys.size(), {});
    out_.assign(keys.size(), absl::UnknownError("not attempted"));
    plan_ = GetPlan();
    PlanGet(attempt, keys, pending, reply_, dest_, &inputs_, &headers_, &out_, &plan_, nullptr,
            prefer_gpu);
  }
  static proto::GetResult Result(uint64_t size, uint64_t gen,
                                 std::vector<proto::ReplicaDesc> replicas) {
    proto::GetResult r;
    r.size = size;
    r.generation = gen;
    r.replicas = std::move(replicas);
    return r;
  }
  FakeInputs inputs_;
  proto::GetReply reply_;
  char buffer_[4 * 4096] = {};
  // Key i goes to buffer_ + i * 4096.
  DestFn dest_ = [this](size_t i, uint64_t) -> absl::StatusOr<void*> { return buffer_ + i * 4096; };
  std::vector<proto::AllocHeader> headers_;
  std::vector<absl::StatusOr<size_t>> out_;
  GetPlan plan_;
};

TEST_F(PlanGetTest, OneSidedReadsTheHeaderThenTheValue) {
  inputs_.AddSegment(1, "n1:1");
  reply_.results = {Result(4096, 2, {Replica(1, 800)})};
  Plan(0, {"k"});
  ASSERT_EQ(plan_.ops.size(), 2u);
  EXPECT_FALSE(plan_.ops[0].is_put);
  EXPECT_EQ(plan_.ops[0].local, &headers_[0]);
  EXPECT_EQ(plan_.ops[0].remote_addr, 800u);
  EXPECT_EQ(plan_.ops[1].local, buffer_);
  EXPECT_EQ(plan_.ops[1].length, 4096u);
  EXPECT_EQ(plan_.ops[1].remote_addr, 800u + kAllocHeaderSize);
  EXPECT_EQ(plan_.ops[1].memh, nullptr);
  EXPECT_EQ(plan_.fetched, std::vector<size_t>{0});
  EXPECT_EQ(plan_.gens[0], 2u);
  EXPECT_EQ(plan_.lens[0], 4096u);
  ASSERT_EQ(plan_.release.entries.size(), 1u);
  EXPECT_TRUE(plan_.pushes.empty());
}

TEST_F(PlanGetTest, RetriesRotateThroughTheReplicas) {
  inputs_.AddSegment(1, "n1:1");
  inputs_.AddSegment(2, "n2:1");
  reply_.results = {Result(16, 1, {Replica(1, 100), Replica(2, 200)}),
                    Result(16, 1, {Replica(1, 300), Replica(2, 400)})};
  Plan(0, {"a", "b"});
  ASSERT_EQ(plan_.ops.size(), 4u);
  EXPECT_EQ(plan_.ops[0].remote_addr, 100u);  // key 0, attempt 0: replica 0
  EXPECT_EQ(plan_.ops[2].remote_addr, 400u);  // key 1, attempt 0: replica 1
  Plan(1, {"a", "b"});
  EXPECT_EQ(plan_.ops[0].remote_addr, 200u);
  EXPECT_EQ(plan_.ops[2].remote_addr, 300u);
}

// GetOptions::tier: the first round reads a replica on the preferred tier for every key (spread
// among them), a retry goes on to the others; without a replica on that tier, the usual order.
TEST_F(PlanGetTest, ATierHintReadsThatTiersReplicasFirst) {
  inputs_.AddSegment(1, "host:1");
  inputs_.AddSegment(2, "gpu:1");
  inputs_.AddSegment(3, "gpu:2");
  inputs_.MakeGpu(2);
  inputs_.MakeGpu(3);
  reply_.results = {Result(16, 1, {Replica(1, 100), Replica(2, 200), Replica(3, 300)}),
                    Result(16, 1, {Replica(1, 400), Replica(2, 500), Replica(3, 600)}),
                    Result(16, 1, {Replica(1, 700), Replica(2, 800), Replica(3, 900)})};
  Plan(0, {"a", "b", "c"}, /*prefer_gpu=*/true);
  ASSERT_EQ(plan_.ops.size(), 6u);
  EXPECT_EQ(plan_.ops[0].remote_addr, 200u);  // key 0: the first GPU replica
  EXPECT_EQ(plan_.ops[2].remote_addr, 600u);  // key 1: the second
  EXPECT_EQ(plan_.ops[4].remote_addr, 800u);  // key 2: the first again, never the host one
  Plan(0, {"a", "b", "c"}, /*prefer_gpu=*/false);
  EXPECT_EQ(plan_.ops[0].remote_addr, 100u);
  EXPECT_EQ(plan_.ops[2].remote_addr, 400u);
  EXPECT_EQ(plan_.ops[4].remote_addr, 700u);
  // Retries rotate on from there, through every replica.
  std::set<uint64_t> seen;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Plan(attempt, {"a"}, /*prefer_gpu=*/false);
    seen.insert(plan_.ops[0].remote_addr);
  }
  EXPECT_EQ(seen, (std::set<uint64_t>{100, 200, 300}));
  // No replica on the preferred tier: the master's order, as without a hint.
  reply_.results = {Result(16, 1, {Replica(2, 200), Replica(3, 300)}),
                    Result(16, 1, {Replica(2, 500), Replica(3, 600)})};
  Plan(0, {"a", "b"}, /*prefer_gpu=*/false);
  EXPECT_EQ(plan_.ops[0].remote_addr, 200u);
  EXPECT_EQ(plan_.ops[2].remote_addr, 600u);
}

TEST_F(PlanGetTest, ATcpOnlyNodePushesLargeValuesIntoARegisteredBufferOnTheFirstRoundOnly) {
  // Values above kMaxInlineValue: the node puts them straight into the registered buffer.
  constexpr uint64_t kBig = proto::kMaxInlineValue + 1;
  std::vector<char> big(3 * kBig);
  dest_ = [&](size_t i, uint64_t) -> absl::StatusOr<void*> { return big.data() + i * kBig; };
  inputs_.AddSegment(1, "tcp:1");
  inputs_.AddSegment(2, "rdma:1");
  inputs_.tcp_only = {"tcp:1"};
  inputs_.buffer = big.data();
  inputs_.buffer_size = big.size();
  reply_.results = {Result(kBig, 1, {Replica(1, 100)}), Result(kBig, 1, {Replica(1, 9000)}),
                    Result(kBig, 1, {Replica(2, 100)})};
  Plan(0, {"a", "b", "c"});
  ASSERT_EQ(plan_.pushes.size(), 1u);  // one group per (node, buffer)
  EXPECT_TRUE(plan_.reads.empty());
  const PushGroup& g = plan_.pushes[0];
  EXPECT_EQ(g.node, "tcp:1");
  EXPECT_EQ(g.keys, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(g.req.dest.segment_id, 7u);
  ASSERT_EQ(g.req.entries.size(), 2u);
  EXPECT_EQ(g.req.headers, (std::vector<uint64_t>{100, 9000}));
  EXPECT_EQ(g.req.entries[1].length, kBig);
  EXPECT_EQ(inputs_.push_targets, 1);
  ASSERT_EQ(plan_.ops.size(), 2u);  // "c" from the rdma node, one-sided, registered
  EXPECT_EQ(plan_.ops[1].memh, inputs_.memh);
  EXPECT_EQ(plan_.fetched, (std::vector<size_t>{0, 1, 2}));

  Plan(1, {"a", "b", "c"});  // a retry reads one-sided from every node
  EXPECT_TRUE(plan_.pushes.empty());
  EXPECT_EQ(plan_.ops.size(), 6u);
}

TEST_F(PlanGetTest, ATcpOnlyNodeSendsSmallValuesInOneReadOnTheFirstRoundOnly) {
  inputs_.AddSegment(1, "tcp:1");
  inputs_.AddSegment(2, "rdma:1");
  inputs_.tcp_only = {"tcp:1"};
  // Registered or not: a small value comes back in the Read reply and is copied out of it.
  inputs_.buffer = buffer_;
  inputs_.buffer_size = sizeof(buffer_);
  reply_.results = {Result(4096, 1, {Replica(1, 100)}), Result(10, 1, {Replica(1, 9000)}),
                    Result(4096, 1, {Replica(2, 100)})};
  Plan(0, {"a", "b", "c"});
  EXPECT_TRUE(plan_.pushes.empty());
  ASSERT_EQ(plan_.reads.size(), 1u);
  const InlineGroup& g = plan_.reads[0];
  EXPECT_EQ(g.node, "tcp:1");
  EXPECT_EQ(g.keys, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(g.entries, (std::vector<proto::InlineEntry>{{100, 4096}, {9000, 10}}));
  EXPECT_EQ(g.headers, (std::vector<void*>{&headers_[0], &headers_[1]}));
  EXPECT_EQ(g.values, (std::vector<void*>{buffer_, buffer_ + 4096}));
  EXPECT_EQ(g.value_bytes, 4106u);
  EXPECT_EQ(inputs_.lookups, 1);    // only "c", read one-sided into the registered buffer
  ASSERT_EQ(plan_.ops.size(), 2u);  // "c" from the rdma node
  EXPECT_EQ(plan_.ops[0].remote_addr, 100u);
  EXPECT_EQ(plan_.ops[1].memh, inputs_.memh);
  EXPECT_EQ(plan_.fetched, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(plan_.gens[1], 1u);
  EXPECT_EQ(plan_.lens[1], 10u);

  Plan(1, {"a", "b", "c"});  // a retry reads one-sided from every node
  EXPECT_TRUE(plan_.reads.empty());
  EXPECT_EQ(plan_.ops.size(), 6u);
}

TEST_F(PlanGetTest, ANodeOnAnotherHostOverTcpSendsEveryHostValueInReadsOnEveryRound) {
  constexpr uint64_t kBig = 1 << 20;
  std::vector<char> big(4 * kBig);
  dest_ = [&](size_t i, uint64_t) -> absl::StatusOr<void*> { return big.data() + i * kBig; };
  inputs_.AddSegment(1, "far:1");
  inputs_.AddSegment(2, "far:2");
  inputs_.AddSegment(3, "far:1");
  inputs_.MakeGpu(3);
  inputs_.messages_only = {"far:1", "far:2"};
  // Registered (a Push would be possible) and tcp-only: still a Read.
  inputs_.tcp_only = {"far:1", "far:2"};
  inputs_.buffer = big.data();
  inputs_.buffer_size = big.size();
  reply_.results = {Result(kBig, 1, {Replica(1, 100), Replica(2, 100)}),
                    Result(4096, 1, {Replica(1, 9000), Replica(2, 9000)}),
                    Result(4096, 1, {Replica(3, 64)})};  // GPU segment
  for (int attempt = 0; attempt < 3; ++attempt) {
    Plan(attempt, {"big", "small", "gpu"});
    EXPECT_TRUE(plan_.pushes.empty()) << attempt;
    // Attempt 0: "big" from replica 0 (far:1), "small" from replica 1 (far:2); then rotated.
    ASSERT_EQ(plan_.reads.size(), 2u) << attempt;
    size_t entries = 0;
    for (const InlineGroup& g : plan_.reads) entries += g.entries.size();
    EXPECT_EQ(entries, 2u);
    EXPECT_EQ(plan_.reads[0].node, attempt % 2 == 0 ? "far:1" : "far:2") << attempt;
    EXPECT_EQ(plan_.reads[0].entries[0].length, kBig);
    ASSERT_EQ(plan_.ops.size(), 2u) << attempt;  // only the GPU segment's header and value
    EXPECT_EQ(plan_.ops[0].segment->node_address, "far:1");
    EXPECT_TRUE(plan_.ops[0].segment->gpu);
    EXPECT_EQ(plan_.fetched, (std::vector<size_t>{0, 1, 2}));
  }
}

TEST_F(PlanGetTest, InlineReadsSplitAtTheMessageLimit) {
  inputs_.AddSegment(1, "tcp:1");
  inputs_.AddSegment(2, "tcp:2");
  inputs_.tcp_only = {"tcp:1", "tcp:2"};
  constexpr uint64_t kSize = proto::kMaxInlineValue;
  constexpr size_t kPerMessage = proto::kMaxInlineMessage / kSize;
  std::vector<char> big((2 * kPerMessage + 2) * kSize);
  dest_ = [&](size_t i, uint64_t) -> absl::StatusOr<void*> { return big.data() + i * kSize; };
  std::vector<std::string> keys;
  for (size_t i = 0; i < 2 * kPerMessage + 1; ++i) {
    keys.push_back(absl::StrCat("k", i));
    reply_.results.push_back(Result(kSize, 1, {Replica(1, 1000 + i * 100000)}));
  }
  keys.push_back("other");
  reply_.results.push_back(Result(kSize, 1, {Replica(2, 64)}));
  Plan(0, keys);
  ASSERT_EQ(plan_.reads.size(), 4u);
  EXPECT_EQ(plan_.reads[0].node, "tcp:1");
  EXPECT_EQ(plan_.reads[0].entries.size(), kPerMessage);
  EXPECT_EQ(plan_.reads[0].value_bytes, proto::kMaxInlineMessage);
  EXPECT_EQ(plan_.reads[1].entries.size(), kPerMessage);
  EXPECT_EQ(plan_.reads[2].node, "tcp:1");
  EXPECT_EQ(plan_.reads[2].keys, std::vector<size_t>{2 * kPerMessage});
  EXPECT_EQ(plan_.reads[3].node, "tcp:2");
  EXPECT_EQ(plan_.reads[3].keys, std::vector<size_t>{2 * kPerMessage + 1});
  EXPECT_TRUE(plan_.ops.empty());
}

TEST_F(PlanGetTest, GpuSegmentsAndDeviceDestinationsAreNeverReadInline) {
  inputs_.AddSegment(1, "tcp:1");
  inputs_.AddSegment(2, "tcp:1");
  inputs_.MakeGpu(2);
  inputs_.tcp_only = {"tcp:1"};
  reply_.results = {Result(16, 1, {Replica(1, 100)}), Result(16, 1, {Replica(2, 100)}),
                    Result(16, 1, {Replica(1, 300)})};
  std::vector<int> devices = {-1, -1, 0};
  std::vector<size_t> pending = {0, 1, 2};
  headers_.assign(3, {});
  out_.assign(3, absl::UnknownError("not attempted"));
  PlanGet(0, {"host", "gpu-segment", "device-buffer"}, pending, reply_, dest_, &inputs_, &headers_,
          &out_, &plan_, &devices);
  ASSERT_EQ(plan_.reads.size(), 1u);
  EXPECT_EQ(plan_.reads[0].keys, std::vector<size_t>{0});
  ASSERT_EQ(plan_.ops.size(), 4u);
  EXPECT_EQ(plan_.ops[3].device, 0);
}

TEST_F(PlanGetTest, KeysThatCannotBeReadGetTheirStatus) {
  inputs_.AddSegment(1, "n1:1");
  proto::GetResult missing;
  missing.status = proto::WireStatus::From(absl::NotFoundError("no key"));
  proto::GetResult no_replica = Result(8, 1, {});
  proto::GetResult unmounted = Result(8, 1, {Replica(42, 0)});
  proto::GetResult too_big = Result(1 << 20, 1, {Replica(1, 0)});
  reply_.results = {missing, no_replica, unmounted, too_big};
  dest_ = [this](size_t i, uint64_t size) -> absl::StatusOr<void*> {
    if (size > 4096) return absl::FailedPreconditionError("small buffer");
    return buffer_ + i * 4096;
  };
  Plan(0, {"a", "b", "c", "d"});
  EXPECT_EQ(out_[0].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(out_[1].status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(out_[1].status().message().find("no live replica"), absl::string_view::npos);
  EXPECT_EQ(out_[2].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(out_[3].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(plan_.ops.empty());
  EXPECT_TRUE(plan_.fetched.empty());
  // The keys the master leased ("c" and "d") are released whether or not they were read.
  ASSERT_EQ(plan_.release.entries.size(), 2u);
  EXPECT_EQ(plan_.release.entries[0].key, "c");
  EXPECT_EQ(plan_.release.entries[1].key, "d");
}

}  // namespace
}  // namespace granary::client
