// The master's sessions (master/session_table.h) through the MasterService facade: Hello and what
// it refuses, requests of a session without one or of the wrong role, and a session's end (closed
// or silent) freeing its puts in flight. In-process with a FakeClock (master_fixture.h).

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "master/master_service.h"
#include "proto/messages.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using test_calls::Code;

using SessionTableTest = MasterFixture;

// ---------------------------------------------------------------------------------------------
// Hello

// A peer older than the master's version window is refused, naming both versions; a newer one
// is served (its connection's handshake agreed on the master's version: docs/protocol.md).
TEST_F(SessionTableTest, HelloRejectsAProtocolVersionBelowTheWindow) {
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

TEST_F(SessionTableTest, HelloServesEveryVersionOfTheWindowAndNewerPeers) {
  EXPECT_EQ(Code(Hello(1, proto::Role::kClient, "acme", proto::kMinProtocolVersion).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, "acme", proto::kProtocolVersion + 1).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().sessions, 2u);
}

TEST_F(SessionTableTest, HelloRejectsEmptyTenant) {
  auto rep = Hello(1, proto::Role::kClient, "");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "tenant")) << rep.status.message;
  EXPECT_EQ(Code(Get(1, "k").status), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SessionTableTest, HelloRejectsTenantStartingWithUnderscore) {
  auto rep = Hello(1, proto::Role::kClient, "_system");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "_system")) << rep.status.message;
  // An underscore elsewhere is fine.
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, "a_b").status), absl::StatusCode::kOk);
}

TEST_F(SessionTableTest, HelloRejectsTenantWithControlCharacter) {
  SessionId sid = 1;
  for (const std::string& t : {std::string("a\tb"), std::string("a\nb"), std::string("ab\x7f"),
                               std::string("a\0b", 3), std::string("\x01x")}) {
    auto rep = Hello(sid, proto::Role::kClient, t);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument) << "tenant of " << t.size();
    EXPECT_EQ(Code(Get(sid, "k").status), absl::StatusCode::kFailedPrecondition);
    ++sid;
  }
}

TEST_F(SessionTableTest, HelloRejectsTenantLongerThan128Bytes) {
  auto rep = Hello(1, proto::Role::kClient, std::string(129, 't'));
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(rep.status.message, "129")) << rep.status.message;
  EXPECT_EQ(Code(Hello(2, proto::Role::kClient, std::string(128, 't')).status),
            absl::StatusCode::kOk);
}

TEST_F(SessionTableTest, HelloTwiceOnOneSessionFails) {
  SessionId c = Client("acme");
  auto rep = Hello(c, proto::Role::kClient, "other");
  EXPECT_EQ(Code(rep.status), absl::StatusCode::kFailedPrecondition);
  // The session keeps its first tenant.
  NodeWith("n1", kMiB);
  Put(c, "k", 10);
  SessionId same = Client("acme");
  EXPECT_EQ(Code(Get(same, "k").status), absl::StatusCode::kOk);
}

TEST_F(SessionTableTest, RequestsWithoutHelloFailWithFailedPrecondition) {
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
TEST_F(SessionTableTest, NodeSessionsCannotMakeObjectRequests) {
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

// ---------------------------------------------------------------------------------------------
// Session death

TEST_F(SessionTableTest, SessionClosedFreesInFlightPutsAndKeepsCompleteObjects) {
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

TEST_F(SessionTableTest, SessionClosedDoesNotFreeAnotherSessionsPutOfTheSameKey) {
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

TEST_F(SessionTableTest, SilentSessionExpiresAndItsPutsAreFreed) {
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

TEST_F(SessionTableTest, SilentNodeExpiresAndItsSegmentsGo) {
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

}  // namespace
}  // namespace granary::master
