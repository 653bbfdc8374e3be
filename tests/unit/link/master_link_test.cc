#include "link/master_link.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "transport/context.h"
#include "transport/rpc_server.h"
#include "transport/worker.h"

namespace granary::link {
namespace {

// A master that answers Hello alone: with `epoch`, a 20 ms heartbeat interval (raised to 50 by
// the link) and a master id; every hello's client id is kept.
class MasterLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = transport::Context::Create("link_test");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    auto sw = transport::Worker::Create(ctx_.get(), "master");
    ASSERT_TRUE(sw.ok()) << sw.status();
    server_worker_ = std::move(*sw);
    auto cw = transport::Worker::Create(ctx_.get(), "peer");
    ASSERT_TRUE(cw.ok()) << cw.status();
    worker_ = std::move(*cw);
    transport::RpcServer::Callbacks cb;
    cb.on_request = [this](transport::RpcServer::ConnId,
                           const proto::FrameView& f) -> std::optional<std::string> {
      auto hello = proto::DecodeBody<proto::HelloRequest>(f.body);
      EXPECT_TRUE(hello.ok()) << hello.status();
      hellos_.fetch_add(1);
      proto::HelloReply rep;
      rep.heartbeat_interval_ms = 20;
      rep.master_id = "m1";
      rep.epoch = static_cast<uint64_t>(epoch_.load());
      std::string frame = proto::EncodeFrame(
          static_cast<uint16_t>(f.header.type | proto::kReplyBit), f.header.request_id, rep);
      proto::SetFrameEpoch(&frame, epoch_.load());
      return frame;
    };
    auto server = transport::RpcServer::Create(server_worker_.get(), 0, std::move(cb));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  void TearDown() override {
    server_.reset();
    worker_.reset();
    server_worker_.reset();
    ctx_.reset();
  }

  MasterLink::Options OptionsFor(const std::string& master) {
    MasterLink::Options o;
    o.master = master;
    o.rpc_timeout = absl::Seconds(2);
    o.backoff_initial_ms = 40;
    o.backoff_max_ms = 80;
    o.connect_failures = failures_;
    return o;
  }
  std::string Address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

  std::unique_ptr<MasterLink> Link(MasterLink::Options o, MasterLink::OnHello on_hello = {}) {
    auto hello = [this] {
      proto::HelloRequest h;
      h.role = proto::Role::kNode;
      h.client_id = absl::StrCat("peer-", made_.fetch_add(1));
      return h;
    };
    auto l = MasterLink::Create(std::move(o), worker_.get(), hello, std::move(on_hello));
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? std::move(*l) : nullptr;
  }

  common::MetricsRegistry metrics_;
  common::MetricCounter* failures_ = metrics_.Counter("link_test_connect_failures_total", "");
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> server_worker_, worker_;
  std::unique_ptr<transport::RpcServer> server_;
  std::atomic<int> hellos_{0}, made_{0};
  std::atomic<int64_t> epoch_{0};
};

TEST_F(MasterLinkTest, ConnectsSaysHelloAndKeepsTheConnection) {
  epoch_.store(7);
  proto::HelloReply seen;
  std::unique_ptr<MasterLink> link =
      Link(OptionsFor(Address()),
           [&](const std::shared_ptr<transport::RpcClient>& m, const proto::HelloReply& rep) {
             EXPECT_NE(m, nullptr);
             seen = rep;
             return absl::OkStatus();
           });
  ASSERT_NE(link, nullptr);
  EXPECT_EQ(link->Current(), nullptr);  // nothing until the first Connection
  auto m = link->Connection();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(seen.master_id, "m1");
  EXPECT_EQ(link->heartbeat_ms(), 50u);  // 20 asked, 50 at least
  EXPECT_EQ(link->highest_epoch(), 7);
  EXPECT_EQ((*m)->epoch(), 7);  // fenced at the hello's epoch
  EXPECT_EQ(link->Current(), *m);
  auto again = link->Connection();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *m);  // no second hello while the connection lives
  EXPECT_EQ(hellos_.load(), 1);
  EXPECT_EQ(link->failures(), 0);
  // Dropped: the next Connection dials again, with a new hello.
  link->Drop(*m);
  EXPECT_EQ(link->Current(), nullptr);
  ASSERT_TRUE(link->Connection().ok());
  EXPECT_EQ(hellos_.load(), 2);
  EXPECT_EQ(made_.load(), 2);
}

TEST_F(MasterLinkTest, AFailedAttemptIsCountedAndBackedOff) {
  // Nothing listens on the port of a server that is gone.
  const std::string address = Address();
  server_.reset();
  std::unique_ptr<MasterLink> link = Link(OptionsFor(address));
  ASSERT_NE(link, nullptr);
  auto m = link->Connection();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(failures_->value(), 1u);
  EXPECT_EQ(link->failures(), 1);
  // Within the back-off: the same answer at once, not another attempt.
  auto fast = link->Connection();
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().code(), m.status().code());
  EXPECT_NE(fast.status().message().find("1 attempt(s) in a row failed; the next in"),
            std::string::npos)
      << fast.status();
  EXPECT_EQ(failures_->value(), 1u);
  // After the back-off, the next attempt.
  link->WaitToReconnect();
  EXPECT_FALSE(link->Connection().ok());
  EXPECT_EQ(failures_->value(), 2u);
  EXPECT_EQ(link->failures(), 2);
}

TEST_F(MasterLinkTest, AHookErrorFailsTheAttempt) {
  bool refuse = true;
  std::unique_ptr<MasterLink> link =
      Link(OptionsFor(Address()),
           [&](const std::shared_ptr<transport::RpcClient>&, const proto::HelloReply&) {
             return refuse ? absl::FailedPreconditionError("mount refused") : absl::OkStatus();
           });
  ASSERT_NE(link, nullptr);
  auto m = link->Connection();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "mount refused");
  EXPECT_EQ(link->Current(), nullptr);
  EXPECT_EQ(failures_->value(), 1u);
  refuse = false;
  link->WaitToReconnect();
  ASSERT_TRUE(link->Connection().ok());
  EXPECT_EQ(link->failures(), 0);  // reset by the connection
}

TEST_F(MasterLinkTest, AHelloBelowTheHighestEpochIsRefused) {
  epoch_.store(5);
  std::unique_ptr<MasterLink> link = Link(OptionsFor(Address()));
  ASSERT_NE(link, nullptr);
  auto m = link->Connection();
  ASSERT_TRUE(m.ok()) << m.status();
  link->Drop(*m);
  epoch_.store(3);  // a deposed master answers the reconnect
  auto stale = link->Connection();
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(absl::IsUnavailable(stale.status())) << stale.status();
  EXPECT_EQ(link->highest_epoch(), 5);
  EXPECT_EQ(link->Current(), nullptr);
}

TEST_F(MasterLinkTest, WakeAndShutdownEndTheWaits) {
  std::unique_ptr<MasterLink> link = Link(OptionsFor(Address()));
  ASSERT_NE(link, nullptr);
  auto m = link->Connection();
  ASSERT_TRUE(m.ok()) << m.status();
  link->Wake(nullptr);  // not the connection: no effect
  int64_t t0 = common::MonotonicUs();
  EXPECT_TRUE(link->WaitForHeartbeat());
  EXPECT_GE(common::MonotonicUs() - t0, 40'000);  // the 50 ms interval, give or take the clock
  link->Wake(*m);
  t0 = common::MonotonicUs();
  EXPECT_TRUE(link->WaitForHeartbeat());
  EXPECT_LT(common::MonotonicUs() - t0, 40'000);
  EXPECT_TRUE(link->SleepFor(1));
  link->Shutdown();
  EXPECT_TRUE(link->stopping());
  EXPECT_FALSE(link->SleepFor(10'000));
  EXPECT_FALSE(link->WaitForHeartbeat());
  EXPECT_FALSE(link->WaitForNextAttempt(common::MonotonicUs() + 10'000'000));
  // Still usable after Shutdown: a node unmounts over it.
  EXPECT_EQ(link->Current(), *m);
}

}  // namespace
}  // namespace granary::link
