// The master's side of node inventories, driven in-process with a FakeClock: the commit and
// free records a master queues for its nodes, and a restarted master rebuilding its table,
// allocators, charges and generation counter from what the nodes report (InventoryRestore),
// with conflict resolution and the quarantine of unreported space.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::InventoryOp;
using proto::InventoryRecord;
using test_calls::Code;

constexpr uint64_t kSegBytes = 4 << 20;
using Charged = std::pair<uint64_t, uint64_t>;  // charged bytes, entries

// One master "process": its service, clock and metrics, and its sessions.
struct Master {
  explicit Master(const MasterOptions& o) : svc(o, &clock, &metrics) {}
  common::FakeClock clock;
  common::MetricsRegistry metrics;
  MasterService svc;
  SessionId next = 1;

  SessionId Hello(proto::Role role, const std::string& tenant = "") {
    proto::HelloRequest h;
    h.role = role;
    h.client_id = absl::StrCat("id-", next);
    h.tenant_id = tenant;
    EXPECT_EQ(Code(svc.Hello(next, h).status), absl::StatusCode::kOk);
    return next++;
  }
  // Node `n`'s one segment; the same name and base in every master session.
  uint64_t Mount(SessionId sid, int n, bool resumed) {
    proto::MountSegmentRequest m;
    m.name = "seg0";
    m.node_id = absl::StrCat("node-", n);
    m.node_address = absl::StrCat("10.0.0.", n, ":7000");
    m.base = 0x7f0000000000ull + n * 0x100000000ull;
    m.size = kSegBytes;
    m.rkey = "rkey";
    m.worker_address = "worker";
    m.resumed = resumed;
    auto rep = svc.MountSegment(sid, m);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return rep.segment_id;
  }
  uint64_t Put(SessionId c, const std::string& key, uint64_t size, int replicas = 1) {
    auto r = test_calls::PutStart(svc, c, key, size, replicas);
    EXPECT_EQ(Code(r.status), absl::StatusCode::kOk) << key << ": " << r.status.message;
    EXPECT_EQ(Code(test_calls::KeyGenOp(svc, &MasterService::PutEnd, c, key, r.generation)),
              absl::StatusCode::kOk);
    return r.generation;
  }
  // Lets the master's own restart quarantine run out.
  void PastRestartQuarantine(const MasterOptions& o) {
    clock.AdvanceMs(o.WriteWindowMs() + o.restart_quarantine_margin_ms + 1);
    svc.Tick();
  }
  // A node's poll: acknowledges the batch its last poll got, as a node that applied it does.
  std::vector<InventoryRecord> Take(SessionId node) {
    uint64_t token = 0;
    auto r = svc.TakeInventory(node, tokens[node], &token);
    EXPECT_TRUE(r.ok()) << r.status();
    if (token != 0) tokens[node] = token;
    return r.ok() ? *r : std::vector<InventoryRecord>{};
  }
  std::map<SessionId, uint64_t> tokens;
  std::map<std::string, std::tuple<uint64_t, uint64_t, uint32_t>> Objects(const std::string& t) {
    std::map<std::string, std::tuple<uint64_t, uint64_t, uint32_t>> out;
    for (const auto& o : svc.ListObjects(t, proto::ListRequest{"", "", 100000}).objects) {
      out[o.key] = {o.size, o.generation, o.replica_count};
    }
    return out;
  }
  Charged Charge(const std::string& t) {
    auto s = svc.ledger()->Snapshot(t);
    EXPECT_TRUE(s.has_value()) << t;
    return s.has_value() ? Charged{s->charged_bytes, s->entries} : Charged{0, 0};
  }
  double Counter(const std::string& name) {
    const std::string text = metrics.Render();
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }
};

// A node's inventory as a plain list: what a NodeInventory would hold after these records.
void Apply(std::vector<InventoryRecord>* inv, const std::vector<InventoryRecord>& records) {
  for (const InventoryRecord& r : records) {
    if (r.op == InventoryOp::kCommit) {
      inv->push_back(r);
    } else {
      std::erase_if(*inv, [&](const InventoryRecord& e) {
        return e.offset == r.offset && e.generation == r.generation;
      });
    }
  }
}
proto::InventoryReportRequest ReportOf(std::vector<InventoryRecord> inv, uint64_t segment_id,
                                       bool last = true) {
  for (auto& r : inv) r.segment_id = segment_id;
  std::sort(inv.begin(), inv.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  return proto::InventoryReportRequest{std::move(inv), last};
}
InventoryRecord Record(const std::string& tenant, const std::string& key, uint64_t offset,
                       uint64_t gen, uint64_t len = 1000, uint64_t commit_ms = 1000) {
  InventoryRecord r;
  r.tenant = tenant;
  r.key = key;
  r.offset = offset;
  r.alloc_size = AllocBytes(len);
  r.value_length = len;
  r.generation = gen;
  r.commit_ms = commit_ms;
  return r;
}

class InventoryRestoreTest : public ::testing::Test {
 protected:
  InventoryRestoreTest() {
    opts_.put_start_timeout_ms = 3000;
    opts_.restart_quarantine_margin_ms = 500;
  }
  MasterOptions opts_;
};

TEST_F(InventoryRestoreTest, CommitsAndFreesAreQueuedForEachReplicasNodeOnly) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, false), s2 = m.Mount(n2, 2, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  auto started = test_calls::PutStart(m.svc, c, "in-flight", 100);
  ASSERT_EQ(Code(started.status), absl::StatusCode::kOk);
  EXPECT_TRUE(m.Take(n1).empty() && m.Take(n2).empty()) << "a put in progress is not recorded";
  uint64_t g = m.Put(c, "both", 1000, 2);
  auto r1 = m.Take(n1), r2 = m.Take(n2);
  ASSERT_EQ(r1.size(), 1u);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r1[0].op, InventoryOp::kCommit);
  EXPECT_EQ(r1[0].tenant, "t");
  EXPECT_EQ(r1[0].key, "both");
  EXPECT_EQ(r1[0].segment_id, s1);
  EXPECT_EQ(r2[0].segment_id, s2);
  EXPECT_EQ(r1[0].generation, g);
  EXPECT_EQ(r1[0].value_length, 1000u);
  EXPECT_EQ(r1[0].alloc_size, AllocBytes(1000));
  EXPECT_GT(r1[0].commit_ms, 0u);
  EXPECT_TRUE(m.Take(n1).empty()) << "taken records are not sent twice";
  EXPECT_EQ(Code(test_calls::Remove(m.svc, c, "both")), absl::StatusCode::kOk);
  r1 = m.Take(n1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0].op, InventoryOp::kFree);
  EXPECT_EQ(r1[0].generation, g);
  EXPECT_EQ(m.Take(n2).size(), 1u);
  EXPECT_EQ(m.Counter("granary_master_inventory_records_sent_total"), 4);
  // A client session is not a node's.
  uint64_t token = 0;
  EXPECT_EQ(m.svc.TakeInventory(c, 0, &token).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A batch whose reply was lost (the node's next poll does not acknowledge it) is sent again, in
// order, until a poll acknowledges it; a token this outbox never gave acknowledges nothing.
TEST_F(InventoryRestoreTest, UnacknowledgedRecordsAreSentAgainInOrder) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode);
  m.Mount(n1, 1, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  m.Put(c, "a", 1000);
  m.Put(c, "b", 1000);
  uint64_t token = 0;
  // A poll with a token from another master (a node that just failed over): nothing here was
  // handed out, so nothing is dropped.
  auto first = m.svc.TakeInventory(n1, uint64_t{1} << 60, &token);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].key, "a");
  EXPECT_EQ((*first)[1].key, "b");
  EXPECT_NE(token, 0u);
  const uint64_t t1 = token;
  // Lost: the next poll still acknowledges nothing new. The same records, in the same order.
  m.Put(c, "c", 1000);
  auto again = m.svc.TakeInventory(n1, 0, &token);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 3u);
  EXPECT_EQ((*again)[0].key, "a");
  EXPECT_EQ((*again)[1].key, "b");
  EXPECT_EQ((*again)[2].key, "c");
  EXPECT_EQ(m.Counter("granary_master_inventory_records_resent_total"), 2);
  m.clock.AdvanceMs(10);
  EXPECT_EQ(m.Counter("granary_master_inventory_oldest_pending_ms"), 10) << "handed is not acked";
  // Acknowledging the first batch only: "c" comes again.
  auto rest = m.svc.TakeInventory(n1, t1, &token);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].key, "c");
  // Acknowledging everything: nothing left, nothing pending.
  auto none = m.svc.TakeInventory(n1, token, &token);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(m.Counter("granary_master_inventory_oldest_pending_ms"), 0);
  EXPECT_FALSE(m.svc.InventoryPending(n1));
}

TEST_F(InventoryRestoreTest, TheOldestPendingRecordsAgeIsTheLagAMasterDeathWouldLose) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  m.Mount(n1, 1, false);
  m.Mount(n2, 2, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  const std::string gauge = "granary_master_inventory_oldest_pending_ms";
  EXPECT_EQ(m.Counter(gauge), 0) << "nothing queued";
  m.Put(c, "first", 1000, 2);  // a record for each node
  m.clock.AdvanceMs(300);
  m.Put(c, "second", 1000, 2);
  m.clock.AdvanceMs(200);
  EXPECT_EQ(m.Counter(gauge), 500);
  EXPECT_EQ(m.Take(n1).size(), 2u);
  EXPECT_EQ(m.Counter(gauge), 500) << "taken is not applied: nobody acknowledged them yet";
  ASSERT_FALSE(m.Take(n2).empty());
  EXPECT_EQ(m.Counter(gauge), 500);
  // The next polls acknowledge them.
  EXPECT_TRUE(m.Take(n1).empty());
  EXPECT_EQ(m.Counter(gauge), 500) << "node 2 has not acknowledged its records yet";
  EXPECT_TRUE(m.Take(n2).empty());
  EXPECT_EQ(m.Counter(gauge), 0);
  m.Put(c, "third", 1000, 1);
  EXPECT_EQ(m.Counter(gauge), 1) << "queued this millisecond is pending, not none";
  m.clock.AdvanceMs(40);
  EXPECT_EQ(m.Counter(gauge), 40);
}

TEST_F(InventoryRestoreTest, ARestartedMasterRebuildsObjectsAllocatorsChargesAndGenerations) {
  std::vector<InventoryRecord> inv1, inv2;
  std::map<std::string, std::tuple<uint64_t, uint64_t, uint32_t>> before_a, before_b;
  Charged charge_a, charge_b;
  uint64_t used = 0, in_flight_gen = 0, max_gen = 0;
  {
    Master old(opts_);
    SessionId n1 = old.Hello(proto::Role::kNode), n2 = old.Hello(proto::Role::kNode);
    old.Mount(n1, 1, false);
    old.Mount(n2, 2, false);
    SessionId a = old.Hello(proto::Role::kClient, "a"), b = old.Hello(proto::Role::kClient, "b");
    for (int i = 0; i < 200; ++i) {
      max_gen = std::max(max_gen, old.Put(a, absl::StrCat("k", i), 100 + i * 7));
      max_gen = std::max(max_gen, old.Put(b, absl::StrCat("k", i), 300 + i, i % 4 == 0 ? 2 : 1));
    }
    for (int i = 0; i < 200; i += 10) {
      ASSERT_EQ(Code(test_calls::Remove(old.svc, a, absl::StrCat("k", i))), absl::StatusCode::kOk);
    }
    before_a = old.Objects("a");
    before_b = old.Objects("b");
    charge_a = old.Charge("a");
    charge_b = old.Charge("b");
    used = old.svc.GetStats().used;
    // A put in flight at the crash: not committed, so not recorded, so not restored.
    auto started = test_calls::PutStart(old.svc, a, "in-flight", 5000);
    in_flight_gen = started.generation;
    Apply(&inv1, old.Take(n1));
    Apply(&inv2, old.Take(n2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a later start, in wall ms

  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true), s2 = m.Mount(n2, 2, true);
  SessionId a = m.Hello(proto::Role::kClient, "a");
  // Nothing is allocated in a segment whose report is not in: the put is told to retry.
  auto early = test_calls::PutStart(m.svc, a, "early", 100);
  EXPECT_EQ(Code(early.status), absl::StatusCode::kUnavailable) << early.status.message;
  auto r1 = m.svc.InventoryReport(n1, ReportOf(inv1, s1));
  auto r2 = m.svc.InventoryReport(n2, ReportOf(inv2, s2));
  EXPECT_EQ(r1.restored, inv1.size());
  EXPECT_EQ(r2.restored, inv2.size());
  EXPECT_EQ(r1.rejected + r2.rejected, 0u);

  EXPECT_EQ(m.Objects("a"), before_a);
  EXPECT_EQ(m.Objects("b"), before_b);
  EXPECT_EQ(m.Charge("a"), charge_a);
  EXPECT_EQ(m.Charge("b"), charge_b);
  EXPECT_EQ(m.svc.GetStats().used, used);
  auto snap = m.svc.ledger()->Snapshot("a");
  EXPECT_EQ(snap->inflight_bytes, 0u);
  // Restored objects read as before.
  auto got = test_calls::Get(m.svc, a, "k1");
  EXPECT_EQ(Code(got.status), absl::StatusCode::kOk);
  EXPECT_EQ(got.size, 107u);

  // The old master's put in flight: its PutEnd is retryable, not NOT_FOUND.
  auto end = test_calls::KeyGenOp(m.svc, &MasterService::PutEnd, a, "in-flight", in_flight_gen);
  EXPECT_EQ(Code(end), absl::StatusCode::kUnavailable) << end.message;

  // Unreported space is quarantined for the write window: puts wait (UNAVAILABLE), no restored
  // object is evicted for them, and afterwards they land without overlapping any survivor.
  EXPECT_GT(m.Counter("granary_master_quarantined_bytes_total"), 0);
  auto q = test_calls::PutStart(m.svc, a, "new", 100);
  EXPECT_EQ(Code(q.status), absl::StatusCode::kUnavailable) << q.status.message;
  m.clock.AdvanceMs(opts_.put_start_timeout_ms + opts_.restart_quarantine_margin_ms);
  m.svc.Tick();
  EXPECT_EQ(m.Objects("a"), before_a);
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> ranges;
  for (int i = 0; i < 100; ++i) {
    auto r = test_calls::PutStart(m.svc, a, absl::StrCat("new", i), 2000);
    ASSERT_EQ(Code(r.status), absl::StatusCode::kOk) << r.status.message;
    EXPECT_GT(r.generation, max_gen) << "the generation counter is above every restored one";
  }
  for (const std::string t : {"a", "b"}) {
    for (const auto& o : m.svc.ListObjects(t, proto::ListRequest{"", "", 100000}).objects) {
      for (const auto& p : o.replicas) ranges.emplace_back(p.segment_id, p.address, p.length);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (std::get<0>(ranges[i]) == std::get<0>(ranges[i - 1])) {
      EXPECT_LE(std::get<1>(ranges[i - 1]) + std::get<2>(ranges[i - 1]), std::get<1>(ranges[i]));
    }
  }
}

TEST_F(InventoryRestoreTest, TheHighestGenerationWinsAndTheLosersNodeIsToldToDropIt) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true), s2 = m.Mount(n2, 2, true);
  // "x": older on node 1, reported first; "y": newer on node 1, reported first.
  m.svc.InventoryReport(n1, ReportOf({Record("t", "x", 0, 100), Record("t", "y", 4096, 300)}, s1));
  auto rep = m.svc.InventoryReport(
      n2, ReportOf({Record("t", "x", 0, 200, 2000), Record("t", "y", 4096, 250)}, s2));
  EXPECT_EQ(rep.restored, 1u);
  EXPECT_EQ(rep.rejected, 1u);
  auto objs = m.Objects("t");
  EXPECT_EQ(objs["x"], std::make_tuple(2000ull, 200ull, 1u));
  EXPECT_EQ(objs["y"], std::make_tuple(1000ull, 300ull, 1u));
  EXPECT_EQ(m.Charge("t"), Charged(AllocBytes(2000) + AllocBytes(1000), 2));
  auto drop1 = m.Take(n1), drop2 = m.Take(n2);
  ASSERT_EQ(drop1.size(), 1u);
  EXPECT_EQ(drop1[0].op, InventoryOp::kFree);
  EXPECT_EQ(drop1[0].generation, 100u);
  ASSERT_EQ(drop2.size(), 1u);
  EXPECT_EQ(drop2[0].op, InventoryOp::kFree);
  EXPECT_EQ(drop2[0].generation, 250u);
  EXPECT_EQ(drop2[0].offset, 4096u);
  EXPECT_EQ(m.Counter("granary_master_inventory_conflicts_total"), 2);
  // The loser's range on node 1 is free again; the winner's is not.
  EXPECT_EQ(m.svc.GetStats().used, AllocBytes(2000) + AllocBytes(1000));
}

TEST_F(InventoryRestoreTest, BothReplicasOfAnObjectRestoreIntoOneObject) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true), s2 = m.Mount(n2, 2, true);
  m.svc.InventoryReport(n1, ReportOf({Record("t", "r", 8192, 77)}, s1));
  m.svc.InventoryReport(n2, ReportOf({Record("t", "r", 0, 77)}, s2));
  EXPECT_EQ(m.Objects("t")["r"], std::make_tuple(1000ull, 77ull, 2u));
  EXPECT_EQ(m.Charge("t"), Charged(2 * AllocBytes(1000), 1));
  SessionId c = m.Hello(proto::Role::kClient, "t");
  EXPECT_EQ(test_calls::Get(m.svc, c, "r").replicas.size(), 2u);
}

TEST_F(InventoryRestoreTest, BadRecordsAreRefusedAndNothingStoredIsDisturbed) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true), s2 = m.Mount(n2, 2, true);
  InventoryRecord bad_size = Record("t", "b", 8192, 5);
  bad_size.alloc_size = 64;
  InventoryRecord reserved = Record("_probe", "p", 12288, 5);
  InventoryRecord past_end = Record("t", "e", kSegBytes - 64, 5);
  InventoryRecord unaligned = Record("t", "u", 100, 5);
  InventoryRecord overlap = Record("t", "o", 64, 6);  // inside "a"'s range
  auto rep = m.svc.InventoryReport(
      n1, ReportOf({Record("t", "a", 0, 5), overlap, bad_size, reserved, past_end, unaligned}, s1,
                   /*last=*/false));
  EXPECT_EQ(rep.restored, 1u);
  EXPECT_EQ(rep.rejected, 5u);
  // Another node's segment.
  auto other = m.svc.InventoryReport(n2, ReportOf({Record("t", "z", 0, 9)}, s1));
  EXPECT_EQ(other.rejected, 1u);
  EXPECT_EQ(m.Objects("t").size(), 1u);
  EXPECT_EQ(m.Charge("t"), Charged(AllocBytes(1000), 1));
  EXPECT_EQ(m.Counter("granary_master_inventory_rejected_total"), 6);
  // A client cannot report.
  SessionId c = m.Hello(proto::Role::kClient, "t");
  EXPECT_EQ(Code(m.svc.InventoryReport(c, ReportOf({}, s2)).status),
            absl::StatusCode::kFailedPrecondition);
}

// One batch of 6,000 records gives what the same records give in batches of 1,000: every
// object, replica, charge, refusal and conflict (a restore does not depend on how a node cuts
// its report).
TEST_F(InventoryRestoreTest, ALargeBatchEqualsSmallBatches) {
  constexpr int kRecords = 6000;
  constexpr uint64_t kLen = 100;
  std::vector<InventoryRecord> n1_inv, n2_inv;
  for (int i = 0; i < kRecords; ++i) {
    const std::string tenant = i % 3 ? "a" : "b";
    const uint64_t at = uint64_t(i) * AllocBytes(kLen);
    if (i % 97 == 5) {  // refused: generation 0
      n1_inv.push_back(Record(tenant, absl::StrCat("k", i), at, 0, kLen));
    } else if (i % 89 == 7) {  // overlaps the previous record's range: refused
      n1_inv.push_back(Record(tenant, absl::StrCat("k", i), at - 64, 10 + i, kLen));
    } else {
      n1_inv.push_back(Record(tenant, absl::StrCat("k", i), at, 10 + i, kLen, 1000 + i));
    }
    // Node 2 holds every 10th key too, at a higher generation for half of them (their node-1
    // record loses) and as a second replica for the other half.
    if (i % 10 == 0) {
      n2_inv.push_back(Record(tenant, absl::StrCat("k", i), uint64_t(i / 10) * AllocBytes(kLen),
                              i % 20 == 0 ? 100'000 + i : 10 + i, kLen, 1000 + i));
    }
  }
  struct Result {
    uint64_t restored = 0, rejected = 0;
    std::map<std::string, std::tuple<uint64_t, uint64_t, uint32_t>> a, b;
    Charged charge_a, charge_b;
    uint64_t used = 0;
    double conflicts = 0;
  };
  auto run = [&](size_t batch) {
    Master m(opts_);
    SessionId n1 = m.Hello(proto::Role::kNode), n2 = m.Hello(proto::Role::kNode);
    uint64_t s1 = m.Mount(n1, 1, true), s2 = m.Mount(n2, 2, true);
    Result res;
    for (auto [sid, seg, inv] : {std::tuple{n2, s2, &n2_inv}, std::tuple{n1, s1, &n1_inv}}) {
      for (size_t i = 0; i < inv->size(); i += batch) {
        std::vector<InventoryRecord> part(inv->begin() + i,
                                          inv->begin() + std::min(inv->size(), i + batch));
        auto rep =
            m.svc.InventoryReport(sid, ReportOf(std::move(part), seg, i + batch >= inv->size()));
        res.restored += rep.restored;
        res.rejected += rep.rejected;
      }
    }
    res.a = m.Objects("a");
    res.b = m.Objects("b");
    res.charge_a = m.Charge("a");
    res.charge_b = m.Charge("b");
    res.used = m.svc.GetStats().used;
    res.conflicts = m.Counter("granary_master_inventory_conflicts_total");
    return res;
  };
  const Result one = run(kRecords), small = run(1000);
  // What the records must give: each refusal counted, each conflict lost by node 1's record.
  uint64_t bad = 0, lost = 0, both = 0;
  for (int i = 0; i < kRecords; ++i) {
    if (i % 97 == 5 || i % 89 == 7) {
      ++bad;
    } else if (i % 20 == 0) {
      ++lost;
    } else if (i % 10 == 0) {
      ++both;
    }
  }
  EXPECT_EQ(one.rejected, bad + lost);
  EXPECT_EQ(one.restored, n1_inv.size() + n2_inv.size() - bad - lost);
  // A conflict is a node-1 record that passes the record checks and meets node 2's newer one
  // (an overlapping one meets it before its range is looked at).
  uint64_t conflicts = 0;
  for (int i = 0; i < kRecords; i += 20) conflicts += i % 97 == 5 ? 0 : 1;
  EXPECT_EQ(one.conflicts, static_cast<double>(conflicts));
  EXPECT_GE(conflicts, lost);
  // Every key with a valid record somewhere: node 1's, or node 2's where node 1's was bad.
  uint64_t bad_on_node1_only_there = 0;
  for (int i = 0; i < kRecords; i += 10)
    bad_on_node1_only_there += (i % 97 == 5 || i % 89 == 7) ? 1 : 0;
  EXPECT_EQ(one.a.size() + one.b.size(), kRecords - bad + bad_on_node1_only_there);
  uint64_t two_replicas = 0;
  for (const auto* objs : {&one.a, &one.b}) {
    for (const auto& [key, o] : *objs) two_replicas += std::get<2>(o) == 2 ? 1 : 0;
  }
  EXPECT_EQ(two_replicas, both);
  EXPECT_EQ(one.restored, small.restored);
  EXPECT_EQ(one.rejected, small.rejected);
  EXPECT_EQ(one.a, small.a);
  EXPECT_EQ(one.b, small.b);
  EXPECT_EQ(one.charge_a, small.charge_a);
  EXPECT_EQ(one.charge_b, small.charge_b);
  EXPECT_EQ(one.used, small.used);
  EXPECT_EQ(one.conflicts, small.conflicts);
  EXPECT_EQ(one.used, (one.restored) * AllocBytes(kLen));
}

TEST_F(InventoryRestoreTest, EvictionOrderIsSeededFromCommitTime) {
  opts_.eviction_ratio = 0.0001;
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true);
  m.svc.InventoryReport(n1, ReportOf({Record("t", "newest", 0, 5, 1000, 3000),
                                      Record("t", "oldest", 4096, 6, 1000, 1000),
                                      Record("t", "middle", 8192, 7, 1000, 2000)},
                                     s1));
  m.clock.AdvanceMs(opts_.kv_lease_ttl_ms + 1);  // the restored read leases have run out
  EXPECT_EQ(m.svc.Evict(1, "test"), AllocBytes(1000));
  auto objs = m.Objects("t");
  EXPECT_EQ(objs.count("oldest"), 0u);
  EXPECT_EQ(objs.size(), 2u);
  m.svc.Evict(1, "test");
  EXPECT_EQ(m.Objects("t").count("middle"), 0u);
}

TEST_F(InventoryRestoreTest, ASegmentWhoseReportNeverEndsIsAllocatableAfterItsDeadline) {
  Master m(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode);
  m.Mount(n1, 1, true);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "k", 100).status), absl::StatusCode::kUnavailable);
  m.clock.AdvanceMs(opts_.put_start_timeout_ms + opts_.restart_quarantine_margin_ms);
  m.svc.Tick();
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "k", 100).status), absl::StatusCode::kOk);
}

// A node this master dropped (a partition past client_ttl) and that re-mounts later: writes
// granted before the drop may still land (cancelled tcp writes retransmitted when the link is
// back), so its unreported space is quarantined for window + margin + client_ttl after the
// re-mount, not reused at once. (The 30-minute soak read wrong bytes before this.)
TEST_F(InventoryRestoreTest, ANodeBackFromAPartitionIsQuarantinedAgainstLateWriters) {
  Master m(opts_);
  m.PastRestartQuarantine(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode);
  m.Mount(n1, 1, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  auto granted = test_calls::PutStart(m.svc, c, "late-writer", 5000);
  ASSERT_EQ(Code(granted.status), absl::StatusCode::kOk) << granted.status.message;
  m.svc.SessionClosed(n1);  // dropped: its allocations and the grant are gone here
  m.clock.AdvanceMs(1500);
  SessionId n2 = m.Hello(proto::Role::kNode);
  const uint64_t s2 = m.Mount(n2, 1, true);
  EXPECT_EQ(m.svc.InventoryReport(n2, ReportOf({}, s2)).restored, 0u);
  const int64_t quarantine =
      opts_.WriteWindowMs() + opts_.restart_quarantine_margin_ms + opts_.client_ttl_ms;
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "new", 5000).status),
            absl::StatusCode::kUnavailable);
  for (int64_t left = quarantine - 1; left > 0; left -= 1000) {
    m.clock.AdvanceMs(std::min<int64_t>(left, 1000));
    (void)m.svc.Heartbeat(n2, proto::HeartbeatRequest{});  // the node stays alive
    m.svc.Tick();
  }
  c = m.Hello(proto::Role::kClient, "t");  // the first one's session ran out meanwhile
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "new", 5000).status),
            absl::StatusCode::kUnavailable)
      << "1 ms before the quarantine of the re-mounted segment ends";
  m.clock.AdvanceMs(1);
  m.svc.Tick();
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "new", 5000).status), absl::StatusCode::kOk);
}

// A node back from a partition reports what its inventory holds, which can be stale: records
// queued for it while it was cut off are forgotten when the master drops it. Here an object
// was removed and its space reused, inside it, by a put: neither the free record nor the new
// commit record reached the node, whose inventory still lists the old object under a valid
// header (the new one's header lies inside the old body). Restoring it would serve the new
// put's bytes as the old key's (the 30-minute soak read such wrong bytes). Only what the node
// held when it was dropped comes back; the stale record is refused, and the node is told to
// drop it.
TEST_F(InventoryRestoreTest, ANodeBackFromAPartitionRestoresOnlyWhatItHeldWhenDropped) {
  Master m(opts_);
  m.PastRestartQuarantine(opts_);
  SessionId n1 = m.Hello(proto::Role::kNode);
  m.Mount(n1, 1, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  const uint64_t kept = m.Put(c, "kept", 1000);
  const uint64_t removed = m.Put(c, "removed", 20000);
  std::vector<InventoryRecord> inv;
  Apply(&inv, m.Take(n1));  // the node has both commit records
  ASSERT_EQ(inv.size(), 2u);
  ASSERT_EQ(Code(test_calls::Remove(m.svc, c, "removed")), absl::StatusCode::kOk);
  m.Put(c, "inside", 1000);  // may land inside the removed object's space
  m.svc.SessionClosed(n1);   // dropped before its next poll: both records are forgotten
  EXPECT_TRUE(m.Objects("t").empty());
  m.clock.AdvanceMs(1500);
  SessionId n2 = m.Hello(proto::Role::kNode);
  const uint64_t s2 = m.Mount(n2, 1, true);
  auto rep = m.svc.InventoryReport(n2, ReportOf(inv, s2));
  EXPECT_EQ(rep.restored, 1u);
  EXPECT_EQ(rep.rejected, 1u);
  auto objects = m.Objects("t");
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(std::get<1>(objects["kept"]), kept);
  EXPECT_EQ(m.Counter("granary_master_inventory_unheld_total"), 1);
  // The node is told to drop the stale entry (and so to invalidate its header).
  std::vector<InventoryRecord> told = m.Take(n2);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].op, InventoryOp::kFree);
  EXPECT_EQ(told[0].generation, removed);
  EXPECT_EQ(m.Charge("t"), (Charged{AllocBytes(1000), 1}));
}

// A node with two segments (a host and a GPU one, say) mounts both in one session of a restarted
// master: its second mount is not the node coming back from a partition, so the report of both
// restores (the second mount used to mark the node "known" and refuse its whole report).
TEST_F(InventoryRestoreTest, ANodeWithTwoSegmentsRestoresBothAtARestartedMaster) {
  Master m(opts_);  // just restarted: it has never seen the node
  SessionId n = m.Hello(proto::Role::kNode);
  const uint64_t s0 = m.Mount(n, 1, true);
  proto::MountSegmentRequest second;
  second.name = "seg1";
  second.node_id = "node-1";
  second.node_address = "10.0.0.1:7000";
  second.base = 0x7f8000000000ull;
  second.size = kSegBytes;
  second.rkey = "rkey";
  second.worker_address = "worker";
  second.resumed = true;
  auto mounted = m.svc.MountSegment(n, second);
  ASSERT_EQ(Code(mounted.status), absl::StatusCode::kOk) << mounted.status.message;
  auto first = m.svc.InventoryReport(n, ReportOf({Record("t", "a", 0, 11)}, s0, false));
  auto last = m.svc.InventoryReport(
      n, ReportOf({Record("t", "b", 0, 12), Record("t", "c", 4096, 13)}, mounted.segment_id));
  EXPECT_EQ(first.restored + last.restored, 3u);
  EXPECT_EQ(first.rejected + last.rejected, 0u);
  EXPECT_EQ(m.Objects("t").size(), 3u);
  EXPECT_EQ(m.Charge("t"), (Charged{3 * AllocBytes(1000), 3}));
}

// A put aborted before its commit (revoked, run past its deadline, its writer gone) keeps its
// space out of allocation for aborted_put_hold_ms: writes its writer cancelled may still be in
// a tcp socket and land when a stalled link comes back. Its tenant is refunded at once.
TEST_F(InventoryRestoreTest, TheSpaceOfAnAbortedPutIsHeldAgainstItsLateWrites) {
  opts_.aborted_put_hold_ms = 4000;
  Master m(opts_);
  m.PastRestartQuarantine(opts_);
  SessionId n = m.Hello(proto::Role::kNode);
  m.Mount(n, 1, false);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  auto held = [&] {
    m.svc.Tick();
    return m.Counter("granary_master_quarantined_bytes");
  };
  const uint64_t big = kSegBytes * 3 / 4;  // two of these do not fit
  auto doomed = test_calls::PutStart(m.svc, c, "doomed", big);
  ASSERT_EQ(Code(doomed.status), absl::StatusCode::kOk) << doomed.status.message;
  ASSERT_EQ(
      Code(test_calls::KeyGenOp(m.svc, &MasterService::PutRevoke, c, "doomed", doomed.generation)),
      absl::StatusCode::kOk);
  EXPECT_EQ(m.Charge("t"), (Charged{0, 0})) << "refunded at once";
  EXPECT_EQ(held(), static_cast<double>(AllocBytes(big)));
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "next", big).status),
            absl::StatusCode::kResourceExhausted)
      << "the aborted put's space was handed out again at once";
  m.clock.AdvanceMs(3999);
  (void)m.svc.Heartbeat(n, proto::HeartbeatRequest{});
  (void)m.svc.Heartbeat(c, proto::HeartbeatRequest{});
  EXPECT_EQ(held(), static_cast<double>(AllocBytes(big))) << "1 ms before the hold ends";
  m.clock.AdvanceMs(1);
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "next", big).status), absl::StatusCode::kOk);
  // The same for a put whose writer's session ends (-1: 2 x client_ttl + margin by default).
  EXPECT_EQ(MasterOptions{}.AbortedPutHoldMs(),
            2 * MasterOptions{}.client_ttl_ms + MasterOptions{}.restart_quarantine_margin_ms);
  m.svc.SessionClosed(c);
  EXPECT_EQ(held(), static_cast<double>(AllocBytes(big)));
}

// HA: a successor takes the previous leader's fencing margin off its quarantine (that leader
// admitted nothing within the margin before its view disappeared), never below zero.
TEST_F(InventoryRestoreTest, ATakeoverCreditsThePreviousLeadersFencingMargin) {
  opts_.enable_ha = true;
  opts_.etcd_endpoints = "127.0.0.1:2379";
  Master m(opts_);
  const int64_t full = opts_.WriteWindowMs() + opts_.restart_quarantine_margin_ms;
  const int64_t t0 = m.clock.NowMs();
  EXPECT_EQ(m.svc.BecomeActive(2, 500), t0 + full - 500);
  SessionId n1 = m.Hello(proto::Role::kNode);
  uint64_t s1 = m.Mount(n1, 1, true);
  EXPECT_EQ(m.svc.InventoryReport(n1, ReportOf({}, s1)).restored, 0u);
  SessionId c = m.Hello(proto::Role::kClient, "t");
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "k", 100).status), absl::StatusCode::kUnavailable);
  m.clock.AdvanceMs(full - 500 - 1);
  m.svc.Tick();
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "k", 100).status), absl::StatusCode::kUnavailable)
      << "1 ms before the credited quarantine ends";
  m.clock.AdvanceMs(1);
  m.svc.Tick();
  EXPECT_EQ(Code(test_calls::PutStart(m.svc, c, "k", 100).status), absl::StatusCode::kOk);
  // No credit (an older master's view, or none seen): the full window and margin. A credit
  // larger than both ends the quarantine now, not before it.
  const int64_t t1 = m.clock.NowMs();
  EXPECT_EQ(m.svc.BecomeActive(3, 0), t1 + full);
  EXPECT_EQ(m.svc.BecomeActive(4, 10 * full), t1);
  EXPECT_EQ(m.svc.BecomeActive(5, -100), t1 + full);
}

}  // namespace
}  // namespace granary::master
