// Copy and Move (master/copy_coordinator.h) through the MasterService facade: a copy's lease
// against forced removes and reads, and pools as copy targets. In-process with a FakeClock
// (master_fixture.h).

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "master/master_service.h"
#include "proto/messages.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using test_calls::Code;

class CopyCoordinatorTest : public MasterFixture {
 protected:
  proto::CopyStartResult CopyStart(SessionId sid, const std::string& key, const std::string& target,
                                   bool move) {
    proto::CopyStartRequest r;
    r.entries.push_back({key, target});
    return test_calls::OnlyResult(svc().CopyStart(sid, r, move));
  }
};

// A copy leases its object; a forced Remove takes the object anyway, and a new put of the key
// makes another object: the copy's end must neither add its replica to that one nor release a
// lease it does not hold.
TEST_F(CopyCoordinatorTest, CopyOfAForceRemovedKeyDoesNotJoinItsReplacement) {
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

// A read of an object being copied must not shorten the copy's lease (which runs to the copy's
// deadline, past the read lease's end).
TEST_F(CopyCoordinatorTest, ReadDoesNotShortenACopysLease) {
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

// Pools: a `--pool=T` segment is tenant T's alone.

TEST_F(CopyCoordinatorTest, CopyAndMoveNeverLandOnAnotherTenantsPool) {
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

TEST_F(CopyCoordinatorTest, CopyLandsOnTheTenantsOwnPool) {
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

}  // namespace
}  // namespace granary::master
