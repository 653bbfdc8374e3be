// Master election on a real etcd (Debian's etcd-server, 3.4, a child process) with real
// granary_master processes started with --enable_ha and a 2 s lease: exactly one is active,
// the standby refuses admin writes (503 NOT_ACTIVE) and RPCs (NOT_LEADER naming the active
// master), takeover after kill -9 (within TTL + a bound) and after SIGTERM (at once: the lease
// is revoked), a leader paused past its lease (SIGSTOP) admits nothing when it resumes, a
// paused etcd fences the leader in time, and a fenced master's policy write changes nothing.
// Nodes and clients given etcd:// follow the leader: writers and readers keep running through a
// kill -9 of the leader, and no reader ever gets wrong bytes.
// Skipped when /usr/bin/etcd is not installed.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "granary/client.h"
#include "granary/embedded_node.h"
#include "granary/error_reason.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"
#include "tests/integration/etcd/admin_request.h"
#include "tests/integration/etcd/etcd_server.h"
#include "transport/context.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr int kTtlSec = 2;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

struct Master {
  uint16_t rpc_port = 0;
  uint16_t http_port = 0;
  std::unique_ptr<Process> process;
  std::string rpc() const { return absl::StrCat("127.0.0.1:", rpc_port); }
  // "active", "standby", or "" when /role does not answer.
  std::string Role() const {
    Reply r = Request(http_port, "GET", "/role");
    if (r.status != 200 || !r.body.is_object()) return "";
    return r.body.value("role", "");
  }
  json RoleBody() const { return Request(http_port, "GET", "/role").body; }
};

class HaMasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) GTEST_SKIP() << EtcdServer::kBinary << " is not installed";
    char tmpl[] = "/tmp/granary_ha_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<EtcdServer>(dir_);
    absl::Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
    cluster_id_ = absl::StrCat(
        "ha_", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_", getpid());
    setenv("UCX_TLS", "tcp", 1);
  }

  void TearDown() override {
    // A sanitizer build of a master reports into its log (and exits): that fails the test.
    for (auto& m : masters_) {
      if (!m->process) continue;
      m->process->Kill(SIGTERM);
      if (WaitMs([&] { return !m->process->Running(); }, std::chrono::seconds(10)) < 0) {
        ADD_FAILURE() << "a master did not stop on SIGTERM: " << m->process->log_path();
        m->process->Kill(SIGKILL);
      }
      m->process->Wait();
      for (const char* report : {"ThreadSanitizer:", "AddressSanitizer:", ": runtime error:"}) {
        EXPECT_EQ(m->process->Log().find(report), std::string::npos)
            << "sanitizer report in " << m->process->log_path();
      }
    }
    if (HasFailure()) {
      for (auto& m : masters_) {
        if (m->process)
          std::cerr << "===== " << m->process->log_path() << "\n" << m->process->Log();
      }
    }
    masters_.clear();
    etcd_.reset();
    unsetenv("UCX_TLS");
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }

  // Multi-tenant quota with the policy in this test's etcd.
  std::vector<std::string> PolicyFlags() const {
    return {"--enable_multi_tenants", "--tenant_quota_connector_type=etcd",
            "--tenant_quota_connector_uri=" + etcd_->Endpoint()};
  }
  // Starts a master with --enable_ha on this test's etcd; waits for its /health. A master that
  // exits because a port was taken before it bound it is started again on fresh ports.
  Master* StartMaster(std::vector<std::string> extra = {}) {
    for (int attempt = 0;; ++attempt) {
      auto m = std::make_unique<Master>();
      m->rpc_port = FreePort();
      while ((m->http_port = FreePort()) == m->rpc_port) continue;
      std::vector<std::string> argv = absl::StrSplit(
          absl::StrCat(BinDir(), "/granary_master --rpc_port=", m->rpc_port,
                       " --metrics_port=", m->http_port,
                       " --metrics_host=127.0.0.1 --enable_ha --etcd_endpoints=", etcd_->Endpoint(),
                       " --cluster_id=", cluster_id_, " --ha_lease_ttl_sec=", kTtlSec,
                       " --client_ttl=5"),
          ' ');
      for (auto& e : extra) argv.push_back(e);
      auto p = Process::Start(argv, {"UCX_TLS=tcp"},
                              absl::StrCat(dir_, "/master", masters_.size(), "-", attempt, ".log"));
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return nullptr;
      Process& process = *(m->process = std::move(*p));
      const bool up =
          WaitMs([&] { return HttpGet(m->http_port, "/health").ok() || !process.Running(); },
                 std::chrono::seconds(10)) >= 0 &&
          process.Running();
      if (!up && attempt < 2 && ExitedOnABusyPort(process)) continue;
      EXPECT_TRUE(up) << "master did not come up";
      return masters_.emplace_back(std::move(m)).get();
    }
  }

  // Waits until exactly one of `ms` is active; returns it (null after the timeout).
  Master* WaitForOneActive(const std::vector<Master*>& ms,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    Master* active = nullptr;
    WaitMs(
        [&] {
          int n = 0;
          for (Master* m : ms) {
            if (m->Role() == "active") {
              ++n;
              active = m;
            }
          }
          return n == 1;
        },
        timeout);
    int n = 0;
    for (Master* m : ms) n += m->Role() == "active" ? 1 : 0;
    return n == 1 ? active : nullptr;
  }

  // A leader, then a standby, and a client of the leader.
  void StartLeaderAndStandby(Master** leader, Master** standby, std::unique_ptr<Client>* client) {
    *leader = StartMaster();
    ASSERT_NE(*leader, nullptr);
    ASSERT_EQ(WaitForOneActive({*leader}), *leader);
    *standby = StartMaster();
    ASSERT_NE(*standby, nullptr);
    auto c = NewClient(*leader);
    ASSERT_TRUE(c.ok()) << c.status();
    *client = *std::move(c);
  }

  absl::StatusOr<std::unique_ptr<Client>> NewClient(const Master* m) {
    ClientOptions o;
    o.master_server_address = m->rpc();
    o.tenant_id = "default";
    o.rpc_timeout_ms = 2000;
    return Client::Create(o);
  }

  std::string dir_;
  std::unique_ptr<EtcdServer> etcd_;
  std::string cluster_id_;
  std::vector<std::unique_ptr<Master>> masters_;
};

TEST_F(HaMasterTest, OneActiveStandbyRefusesAndKillNineFailsOver) {
  Master* a = StartMaster();
  Master* b = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Master* active = WaitForOneActive({a, b});
  ASSERT_NE(active, nullptr);
  Master* standby = active == a ? b : a;
  EXPECT_EQ(standby->Role(), "standby");
  // Its first campaign has found the view (a few etcd round trips after it started).
  ASSERT_GE(
      WaitMs([&] { return standby->RoleBody()["active"].is_object(); }, std::chrono::seconds(5)),
      0);

  // /role on both names the active master and its epoch.
  json role = standby->RoleBody();
  EXPECT_EQ(role["active"]["rpc"], active->rpc()) << role.dump();
  EXPECT_EQ(role["active"]["admin"], absl::StrCat("127.0.0.1:", active->http_port));
  const int64_t epoch = role["epoch"].get<int64_t>();
  EXPECT_GT(epoch, 0);
  EXPECT_EQ(active->RoleBody()["epoch"], epoch);
  // /health is 200 with the role on both.
  Reply health = Request(standby->http_port, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body["role"], "standby");
  EXPECT_EQ(Request(active->http_port, "GET", "/health").body["role"], "active");

  // The quota admin API answers 503 NOT_ACTIVE on the standby.
  Reply put = Request(standby->http_port, "PUT", "/api/v1/tenant_quotas?tenant_id=t1",
                      R"({"requested_quota_bytes": 1048576})");
  EXPECT_EQ(put.status, 503) << put.body.dump();
  EXPECT_EQ(put.body["error"]["code"], "NOT_ACTIVE") << put.body.dump();

  // RPCs to the standby: NOT_LEADER, naming the active master's RPC address.
  auto refused = NewClient(standby);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(ErrorReasonOf(refused.status()), ErrorReason::kNotLeader) << refused.status();
  EXPECT_NE(refused.status().message().find(active->rpc()), absl::string_view::npos)
      << refused.status();
  // The active one takes a client.
  auto ok = NewClient(active);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ok->reset();

  // kill -9 of the leader: the standby takes over within the TTL plus a bound (etcd checks
  // expiry about every 500 ms).

  active->process->Kill(SIGKILL);
  active->process->Wait();
  const int64_t took =
      WaitMs([&] { return standby->Role() == "active"; }, std::chrono::seconds(kTtlSec + 5));
  ASSERT_GE(took, 0) << "no takeover";
  std::cerr << "[ measured ] kill -9 -> standby active: " << took << " ms (TTL " << kTtlSec
            << " s)\n";
  EXPECT_LT(took, kTtlSec * 1000 + 2000);
  EXPECT_GT(standby->RoleBody()["epoch"].get<int64_t>(), epoch) << "a new epoch";
  auto client = NewClient(standby);
  EXPECT_TRUE(client.ok()) << client.status();
}

// Protocol 9: every reply of the leader carries its epoch in the frame header, and a request of
// a session opened at another epoch is refused with NOT_LEADER naming both, admitting nothing.
TEST_F(HaMasterTest, EveryReplyCarriesTheEpochAndARequestOfAnotherEpochIsRefused) {
  Master* a = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  const int64_t epoch = a->RoleBody()["epoch"].get<int64_t>();
  ASSERT_GT(epoch, 0);
  auto ctx = transport::Context::Create("ha_epoch_test");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto worker = transport::Worker::Create(ctx->get(), "client");
  ASSERT_TRUE(worker.ok()) << worker.status();
  {
    auto rpc = transport::RpcClient::Create(worker->get(), a->rpc());
    ASSERT_TRUE(rpc.ok()) << rpc.status();
    proto::HelloRequest hello;
    hello.role = proto::Role::kClient;
    hello.client_id = "epoch-test";
    hello.tenant_id = "default";
    auto call = [&](uint16_t type, const auto& req, int64_t stamp) {
      std::string frame = proto::EncodeFrame(type, 0, req);
      proto::SetFrameEpoch(&frame, stamp);
      return (*rpc)->Call(std::move(frame), absl::Seconds(5));
    };
    const uint16_t kHello = static_cast<uint16_t>(proto::MsgType::kHello);
    auto hi = call(kHello, hello, 0);
    ASSERT_TRUE(hi.ok()) << hi.status();
    EXPECT_EQ(proto::FrameEpoch(*hi), epoch) << "the hello reply's header";
    auto hello_rep = transport::RpcClient::ParseReply<proto::HelloReply>(*hi);
    ASSERT_TRUE(hello_rep.ok()) << hello_rep.status();
    EXPECT_EQ(static_cast<int64_t>(hello_rep->epoch), epoch) << "and its body agree";

    const uint16_t kPutStart = static_cast<uint16_t>(proto::MsgType::kPutStart);
    proto::PutStartRequest ps;
    ps.replica_num = 1;
    ps.entries.push_back({"epoch-key", 100});
    auto wrong = call(kPutStart, ps, epoch + 1);
    ASSERT_TRUE(wrong.ok()) << wrong.status();
    auto refused = transport::RpcClient::ParseReply<proto::PutStartReply>(*wrong);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(ErrorReasonOf(refused.status()), ErrorReason::kNotLeader) << refused.status();
    EXPECT_NE(refused.status().message().find(absl::StrCat("epoch ", epoch + 1)),
              absl::string_view::npos)
        << refused.status();
    EXPECT_NE(refused.status().message().find(absl::StrCat("serves epoch ", epoch)),
              absl::string_view::npos)
        << refused.status();
    // Nothing was admitted: the same put at the right epoch starts afresh, stamped.
    auto right = call(kPutStart, ps, epoch);
    ASSERT_TRUE(right.ok()) << right.status();
    EXPECT_EQ(proto::FrameEpoch(*right), epoch);
    auto started = transport::RpcClient::ParseReply<proto::PutStartReply>(*right);
    ASSERT_TRUE(started.ok()) << started.status();
    ASSERT_EQ(started->results.size(), 1u);
  }
  worker->reset();
}

TEST_F(HaMasterTest, CliAdminCommandsFollowTheActiveMasterThroughEtcd) {
  Master* a = StartMaster(PolicyFlags());
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  Master* b = StartMaster(PolicyFlags());
  ASSERT_NE(b, nullptr);
  int seq = 0;
  // `granary ARGS... --master=etcd://... --cluster_id=CLUSTER`: its exit status, output in *out.
  auto cli = [&](std::vector<std::string> args, std::string* out,
                 const std::string& cluster) -> int {
    args.insert(args.begin(), BinDir() + "/granary");
    args.push_back("--master=etcd://" + etcd_->Endpoint());
    args.push_back("--cluster_id=" + cluster);
    auto p = Process::Start(args, {}, absl::StrCat(dir_, "/cli", seq++, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return -1;
    const int rc = (*p)->Wait();
    *out = (*p)->Log();
    return rc;
  };
  std::string out;
  ASSERT_EQ(cli({"tenants", "set", "t1", "--quota=1MB"}, &out, cluster_id_), 0) << out;
  ASSERT_EQ(cli({"health"}, &out, cluster_id_), 0) << out;
  EXPECT_NE(out.find("role: active"), std::string::npos) << out;

  // The leader hands over (SIGTERM revokes its lease): the same commands reach the new one,
  // which has re-read the policy.
  a->process->Kill(SIGTERM);
  a->process->Wait();
  ASSERT_GE(WaitMs([&] { return b->Role() == "active"; }, std::chrono::seconds(kTtlSec + 5)), 0);
  ASSERT_EQ(cli({"tenants"}, &out, cluster_id_), 0) << out;
  EXPECT_NE(out.find("t1"), std::string::npos) << out;
  ASSERT_EQ(cli({"health"}, &out, cluster_id_), 0) << out;
  EXPECT_NE(out.find("role: active"), std::string::npos) << out;

  // A cluster no master leads: exit 2, naming its key.
  EXPECT_EQ(cli({"tenants"}, &out, "no-such-cluster"), 2) << out;
  EXPECT_NE(out.find("no active master in granary/no-such-cluster/master_view"), std::string::npos)
      << out;
  EXPECT_EQ(cli({"tenants"}, &out, "bad/cluster"), 2) << out;
  EXPECT_NE(out.find("cluster_id 'bad/cluster'"), std::string::npos) << out;
}

TEST_F(HaMasterTest, SigtermHandsOverWellBeforeTheTtl) {
  Master* a = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  Master* b = StartMaster();
  ASSERT_NE(b, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // b is watching
  ASSERT_EQ(b->Role(), "standby");

  a->process->Kill(SIGTERM);
  const int64_t took =
      WaitMs([&] { return b->Role() == "active"; }, std::chrono::seconds(kTtlSec + 5));
  ASSERT_GE(took, 0);
  std::cerr << "[ measured ] SIGTERM -> standby active: " << took << " ms\n";
  EXPECT_LT(took, kTtlSec * 1000 / 2) << "the lease was not revoked";
  EXPECT_EQ(a->process->Wait(), 0);
  EXPECT_NE(a->process->Log().find("lease revoked"), std::string::npos);
}

TEST_F(HaMasterTest, LeaderPausedPastItsLeaseAdmitsNoWriteWhenResumed) {
  Master *a = nullptr, *b = nullptr;
  std::unique_ptr<Client> client;
  ASSERT_NO_FATAL_FAILURE(StartLeaderAndStandby(&a, &b, &client));

  a->process->Kill(SIGSTOP);
  const int64_t took =
      WaitMs([&] { return b->Role() == "active"; }, std::chrono::seconds(kTtlSec + 5));
  ASSERT_GE(took, 0) << "no takeover from a paused leader";
  std::cerr << "[ measured ] SIGSTOP of the leader -> standby active: " << took << " ms\n";
  a->process->Kill(SIGCONT);
  // The zombie's first request after resuming is refused: its t_valid has passed.
  absl::Status put = client->Put("zombie-key", "value");
  EXPECT_FALSE(put.ok());
  EXPECT_EQ(ErrorReasonOf(put), ErrorReason::kNotLeader) << put;
  EXPECT_EQ(put.message().find(a->rpc()), absl::string_view::npos)
      << "the hint names the fenced master itself: " << put;
  // It becomes a standby that knows the new leader; exactly one is active.
  EXPECT_GE(
      WaitMs([&] { return a->Role() == "standby" && a->RoleBody()["active"]["rpc"] == b->rpc(); },
             std::chrono::seconds(5)),
      0)
      << a->RoleBody().dump();
  EXPECT_EQ(WaitForOneActive({a, b}), b);
  client.reset();
}

TEST_F(HaMasterTest, PausedEtcdFencesTheLeaderInTime) {
  Master *a = nullptr, *b = nullptr;
  std::unique_ptr<Client> client;
  ASSERT_NO_FATAL_FAILURE(StartLeaderAndStandby(&a, &b, &client));

  etcd_->Signal(SIGSTOP);
  const auto t0 = Clock::now();
  // The leader stops admitting writes no later than TTL after its last answered keepalive
  // (which was at most TTL/3 before the pause), minus the margin.
  const int64_t fenced =
      WaitMs([&] { return a->Role() != "active"; }, std::chrono::seconds(kTtlSec + 3));
  std::cerr << "[ measured ] etcd SIGSTOP -> leader fenced: " << fenced << " ms\n";
  ASSERT_GE(fenced, 0);
  EXPECT_LE(fenced, kTtlSec * 1000 + 200);
  absl::Status put = client->Put("during-outage", "value");
  EXPECT_EQ(ErrorReasonOf(put), ErrorReason::kNotLeader) << put;
  std::this_thread::sleep_for(std::chrono::milliseconds(kTtlSec * 1000));  // past the lease
  etcd_->Signal(SIGCONT);
  const auto t_cont = Clock::now();
  Master* active = WaitForOneActive({a, b}, std::chrono::seconds(15));
  ASSERT_NE(active, nullptr) << "not exactly one active master after etcd came back";
  std::cerr << "[ measured ] etcd SIGSTOP -> one active again: " << MsSince(t0) << " ms ("
            << MsSince(t_cont) << " ms after SIGCONT)\n";
  // Stays so.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(WaitForOneActive({a, b}, std::chrono::seconds(1)), active);
  client.reset();
}

TEST_F(HaMasterTest, FencedMastersPolicyWriteChangesNothing) {
  Master* a = StartMaster(PolicyFlags());
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  const std::string key = absl::StrCat("granary/", cluster_id_, "/tenant_quota_policy");
  Reply first = Request(a->http_port, "PUT", "/api/v1/tenant_quotas?tenant_id=t1",
                        R"({"requested_quota_bytes": 1048576})");
  ASSERT_EQ(first.status, 200) << first.body.dump();
  auto before = etcd_->Get(key);
  ASSERT_TRUE(before.ok() && before->has_value());

  // Another master's view replaces a's behind its back (a's lease still runs, so a believes it
  // leads): a new create_revision. a's guarded write must fail its compare, fence a and store
  // nothing.
  const std::string view_key = absl::StrCat("granary/", cluster_id_, "/master_view");
  ASSERT_TRUE(etcd_->Delete(view_key).ok());
  ASSERT_TRUE(etcd_->Put(view_key, R"({"rpc":"10.0.0.9:1","admin":"10.0.0.9:2"})").ok());
  ASSERT_EQ(a->Role(), "active");
  Reply second = Request(a->http_port, "PUT", "/api/v1/tenant_quotas?tenant_id=t2",
                         R"({"requested_quota_bytes": 2097152})");
  EXPECT_EQ(second.status, 503) << second.body.dump();
  EXPECT_EQ(second.body["error"]["code"], "NOT_ACTIVE") << second.body.dump();
  auto after = etcd_->Get(key);
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ(**after, **before) << "the fenced master's write reached etcd";
  EXPECT_NE(a->Role(), "active");
}

// The embedded node (what the Python module's EmbeddedNode runs) on an etcd:// master mounts at
// the active master and, after a handover, re-mounts at the new one with its inventory.
TEST_F(HaMasterTest, EmbeddedNodeFollowsTheLeaderThroughEtcd) {
  Master* a = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  Master* b = StartMaster();
  ASSERT_NE(b, nullptr);
  EmbeddedNodeOptions eo;
  eo.master = "etcd://" + etcd_->Endpoint();
  eo.cluster_id = "bad/cluster";
  eo.segment_size = 16 << 20;
  auto bad = EmbeddedNode::Start(eo);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("'bad/cluster'"), absl::string_view::npos) << bad.status();
  eo.cluster_id = cluster_id_;
  auto node = EmbeddedNode::Start(eo);
  ASSERT_TRUE(node.ok()) << node.status();
  auto segments = [](const Master* m) {
    Reply r = Request(m->http_port, "GET", "/api/v1/segments");
    return r.status == 200 && r.body["data"].is_array() ? r.body["data"].size() : size_t{0};
  };
  EXPECT_EQ(segments(a), 1u);
  ClientOptions o;
  o.master_server_address = eo.master;
  o.cluster_id = cluster_id_;
  o.rpc_timeout_ms = 10'000;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string value = MakeValue("embedded", 1, 10'000);
  ASSERT_TRUE((*client)->Put("embedded", value).ok());
  // Its commit record reaches the node before the handover.
  ASSERT_GE(WaitMs(
                [&] {
                  auto pending =
                      ScrapeMetric(a->http_port, "granary_master_inventory_oldest_pending_ms");
                  return pending.ok() && *pending == 0;
                },
                std::chrono::seconds(5)),
            0);
  a->process->Kill(SIGTERM);
  a->process->Wait();
  ASSERT_GE(WaitMs([&] { return b->Role() == "active" && segments(b) == 1; },
                   std::chrono::seconds(kTtlSec + 10)),
            0)
      << b->process->Log();
  // Mounted is not yet reported: the segment's inventory may still be on its way.
  absl::StatusOr<std::string> got;
  EXPECT_GE(WaitMs(
                [&] {
                  got = (*client)->Get("embedded");
                  return got.ok();
                },
                std::chrono::seconds(10)),
            0)
      << got.status() << "\n"
      << b->process->Log();
  if (got.ok()) {
    EXPECT_EQ(*got, value);
  }
  client->reset();
  (*node)->Stop();
}

// A node given --master=etcd://... mounts at the active master, and after a kill -9 of it
// re-mounts at the new one and reports its inventory: the object written through the old
// leader is read back through the new one.
TEST_F(HaMasterTest, NodeFollowsTheLeaderThroughEtcd) {
  Master* a = StartMaster();
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  Master* b = StartMaster();
  ASSERT_NE(b, nullptr);
  auto node =
      Process::Start({BinDir() + "/granary_node", "--master=etcd://" + etcd_->Endpoint(),
                      "--cluster_id=" + cluster_id_, "--host_segment_size=64MB", "--metrics_port=0",
                      "--metrics_host=127.0.0.1", "--local_hostname=127.0.0.1"},
                     {"UCX_TLS=tcp"}, dir_ + "/node.log");
  ASSERT_TRUE(node.ok()) << node.status();
  auto segments = [](const Master* m) {
    Reply r = Request(m->http_port, "GET", "/api/v1/segments");
    return r.status == 200 && r.body["data"].is_array() ? r.body["data"].size() : size_t{0};
  };
  ASSERT_GE(WaitMs([&] { return segments(a) == 1; }, std::chrono::seconds(20)), 0)
      << (*node)->Log();
  {
    auto client = NewClient(a);
    ASSERT_TRUE(client.ok()) << client.status();
    const std::string value = MakeValue("follow/k", 1, 4096);
    ASSERT_TRUE((*client)->Put("follow/k", value).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the commit record reaches it
  a->process->Kill(SIGKILL);
  a->process->Wait();
  const auto t0 = Clock::now();
  const int64_t remounted =
      WaitMs([&] { return b->Role() == "active" && segments(b) == 1; }, std::chrono::seconds(20));
  ASSERT_GE(remounted, 0) << (*node)->Log();
  std::cerr << "[ measured ] kill -9 -> node re-mounted at the new leader: " << MsSince(t0)
            << " ms\n";
  auto client = NewClient(b);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::string> got;
  EXPECT_GE(WaitMs(
                [&] {
                  got = (*client)->Get("follow/k");
                  return got.ok();
                },
                std::chrono::seconds(10)),
            0)
      << got.status() << "\n"
      << (*node)->Log();
  if (got.ok()) {
    EXPECT_EQ(*got, MakeValue("follow/k", 1, 4096));
  }
  (*node)->Kill(SIGTERM);
  (*node)->Wait();
}

// Clients on etcd:// under load through a kill -9 of the leader: two nodes and three client
// threads (two writers, one reader) on the same Client objects. A call during the failover
// waits for the new leader (its timeout is above TTL + rebuild) instead of failing; the first
// put after the kill succeeds within TTL + a bound; no read ever returns wrong bytes; every
// object acknowledged well before the kill is readable byte-exact afterwards (the last few ms
// may not have reached the nodes' inventories: commit records travel asynchronously, by
// design, and those objects are either intact or gone, never corrupt).
TEST_F(HaMasterTest, ClientsFollowTheLeaderThroughKillNineUnderLoad) {
  // Puts resume at the new leader once the quarantine of unreported space ends: takeover (the
  // TTL) + the write window + the margin. Short ones here keep the test short.
  constexpr int64_t kWindowMs = 1000, kMarginMs = 500;
  const std::vector<std::string> flags = {
      absl::StrCat("--write_window_ms=", kWindowMs),
      absl::StrCat("--restart_quarantine_margin_ms=", kMarginMs)};
  Master* a = StartMaster(flags);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(WaitForOneActive({a}), a);
  Master* b = StartMaster(flags);
  ASSERT_NE(b, nullptr);
  std::vector<std::unique_ptr<Process>> nodes;
  for (int i = 0; i < 2; ++i) {
    auto node = Process::Start(
        {BinDir() + "/granary_node", "--master=etcd://" + etcd_->Endpoint(),
         "--cluster_id=" + cluster_id_, "--host_segment_size=64MB", "--metrics_port=0",
         "--metrics_host=127.0.0.1", "--local_hostname=127.0.0.1"},
        {"UCX_TLS=tcp"}, absl::StrCat(dir_, "/node", i, ".log"));
    ASSERT_TRUE(node.ok()) << node.status();
    nodes.push_back(std::move(*node));
  }
  auto segments = [](const Master* m) {
    Reply r = Request(m->http_port, "GET", "/api/v1/segments");
    return r.status == 200 && r.body["data"].is_array() ? r.body["data"].size() : size_t{0};
  };
  ASSERT_GE(WaitMs([&] { return segments(a) == 2; }, std::chrono::seconds(20)), 0)
      << nodes[0]->Log() << nodes[1]->Log();

  ClientOptions o;
  o.master_server_address = "etcd://" + etcd_->Endpoint();
  o.cluster_id = cluster_id_;
  o.rpc_timeout_ms = 10'000;  // above TTL (2 s) + takeover + re-mount
  auto writer_client = Client::Create(o);
  ASSERT_TRUE(writer_client.ok()) << writer_client.status();
  auto reader_client = Client::Create(o);
  ASSERT_TRUE(reader_client.ok()) << reader_client.status();

  struct Acked {
    std::string key;
    Clock::time_point at;
  };
  std::mutex mu;
  std::vector<Acked> acked;  // guarded by mu
  std::atomic<bool> stop{false};
  std::atomic<int64_t> wrong{0}, reads_ok{0}, put_errors{0};
  std::atomic<bool> killed{false};
  Clock::time_point kill_at;
  std::atomic<int64_t> first_put_after_kill_ms{-1}, first_read_after_kill_ms{-1};
  std::string last_put_error;         // guarded by mu
  std::string put_errors_after_kill;  // guarded by mu: the first few, for a failure's message
  auto value_of = [](const std::string& key) { return MakeValue(key, 1, 4096 + key.size() * 7); };

  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int n = 0; !stop.load(); ++n) {
        const std::string key = absl::StrCat("load/w", w, "/", n);
        const bool after_kill = killed.load();
        absl::Status st = (*writer_client)->Put(key, value_of(key));
        if (!st.ok()) {
          ++put_errors;
          {
            std::lock_guard<std::mutex> lock(mu);
            last_put_error = st.ToString();
            if (after_kill && put_errors_after_kill.size() < 2000) {
              absl::StrAppend(
                  &put_errors_after_kill, "\n  ",
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - kill_at)
                      .count(),
                  " ms: ", st.ToString());
            }
          }
          // The key is uncertain (its commit may or may not have landed): not acked. Back off a
          // little, as an engine would.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        if (after_kill && first_put_after_kill_ms.load() < 0) {
          first_put_after_kill_ms.store(
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - kill_at)
                  .count());
        }
        std::lock_guard<std::mutex> lock(mu);
        acked.push_back({key, Clock::now()});
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(7);
    while (!stop.load()) {
      std::string key;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (acked.empty()) continue;
        key = acked[rng() % acked.size()].key;
      }
      const bool after_kill = killed.load();
      absl::StatusOr<std::string> got = (*reader_client)->Get(key);
      if (got.ok()) {
        ++reads_ok;
        if (*got != value_of(key)) ++wrong;
        if (after_kill && first_read_after_kill_ms.load() < 0) {
          first_read_after_kill_ms.store(
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - kill_at)
                  .count());
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  });

  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // Settle, under load: every put acknowledged before t0 had its commit record queued at the
  // leader before its PutEnd replied; wait until the nodes have taken every record queued
  // before t0 (the oldest one still pending is younger than t0), so those objects must survive.
  // The records of later puts may still be in the leader's queues when it dies: those objects
  // are intact or gone, never wrong.
  size_t settled;
  Clock::time_point t0;
  {
    std::lock_guard<std::mutex> lock(mu);
    settled = acked.size();
    t0 = Clock::now();
  }
  int64_t settle_ms = -1;
  for (const Clock::time_point give_up = t0 + std::chrono::seconds(10); Clock::now() < give_up;) {
    const Clock::time_point asked = Clock::now();
    absl::StatusOr<double> pending =
        ScrapeMetric(a->http_port, "granary_master_inventory_oldest_pending_ms");
    ASSERT_TRUE(pending.ok()) << pending.status();
    const int64_t since_t0 =
        std::chrono::duration_cast<std::chrono::milliseconds>(asked - t0).count();
    if (*pending < static_cast<double>(since_t0)) {
      settle_ms = since_t0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(settle_ms, 0) << "the leader's commit records did not reach the nodes in 10 s";
  // A record taken is on its way to the socket: let it get there.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  size_t before;
  {
    std::lock_guard<std::mutex> lock(mu);
    before = acked.size();
  }
  kill_at = Clock::now();
  killed.store(true);
  a->process->Kill(SIGKILL);
  a->process->Wait();
  const int64_t served = WaitMs([&] { return first_put_after_kill_ms.load() >= 0; },
                                std::chrono::seconds(kTtlSec + 15));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // load at the new leader
  stop.store(true);
  for (auto& t : threads) t.join();
  ASSERT_GE(served, 0) << "no put succeeded after the kill; last error: " << last_put_error;
  std::cerr << "[ measured ] kill -9 -> first successful read through etcd://: "
            << first_read_after_kill_ms.load()
            << " ms, first successful put: " << first_put_after_kill_ms.load() << " ms (TTL "
            << kTtlSec << " s, write window " << kWindowMs << " ms, margin " << kMarginMs
            << " ms); " << before << " puts acknowledged before the kill, " << acked.size() - before
            << " after, " << put_errors.load() << " failed; " << reads_ok.load() << " reads ok\n";
  EXPECT_LT(first_put_after_kill_ms.load(), kTtlSec * 1000 + kWindowMs + kMarginMs + 4000)
      << "put errors after the kill:" << put_errors_after_kill;
  EXPECT_GE(first_read_after_kill_ms.load(), 0) << "no read succeeded after the kill";
  EXPECT_LT(first_read_after_kill_ms.load(), kTtlSec * 1000 + 5000);
  EXPECT_GT(acked.size(), before) << "no put at the new leader";
  EXPECT_EQ(wrong.load(), 0) << "a read returned wrong bytes";
  EXPECT_EQ(b->Role(), "active");

  // Every object acknowledged before t0 (its commit record taken by its node) and every one
  // acknowledged at the new leader (a TTL or more after the kill: no master but the dead one
  // held the lease before) is readable byte-exact; the rest are intact or gone.
  int64_t missing = 0, late_lost = 0, oldest_lost_ms = 0;
  for (size_t i = 0; i < acked.size(); ++i) {
    const Acked& k = acked[i];
    absl::StatusOr<std::string> got = (*reader_client)->Get(k.key);
    const bool must = i < settled || k.at >= kill_at + std::chrono::seconds(kTtlSec);
    if (got.ok()) {
      EXPECT_EQ(*got, value_of(k.key)) << k.key;
    } else if (must) {
      ++missing;
      ADD_FAILURE() << k.key << " (acknowledged "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - k.at).count()
                    << " ms before the kill): " << got.status();
      if (missing > 5) break;
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << k.key << ": " << got.status();
      ++late_lost;
      oldest_lost_ms = std::max<int64_t>(
          oldest_lost_ms,
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - k.at).count());
    }
  }
  std::cerr << "[ measured ] the nodes had every commit record of t0 " << settle_ms
            << " ms after it; " << before - settled
            << " objects were acknowledged between t0 and the kill, and of those acknowledged "
               "after t0 by the old leader "
            << late_lost << " were not in the nodes' inventories"
            << ", the oldest acknowledged " << oldest_lost_ms << " ms before the kill\n";
  EXPECT_EQ(missing, 0);
  if (missing > 0) {
    for (auto& n : nodes) std::cerr << "===== " << n->log_path() << "\n" << n->Log();
    std::cerr << "===== " << b->process->log_path() << "\n" << b->process->Log();
  }
  for (auto& n : nodes) {
    n->Kill(SIGTERM);
    n->Wait();
  }
}

}  // namespace
}  // namespace granary::testing
