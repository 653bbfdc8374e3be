// RpcListener on its own (transport/rpc_listener.h): the handshake bound, the deadline, the
// flood bound, and the link that follows an accepted handshake.
#include "transport/rpc_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/metrics.h"
#include "tests/loopback.h"

namespace granary::transport {
namespace {

int Dial(uint16_t port) {
  const int fd = testing::DialLoopback(port);
  EXPECT_GE(fd, 0);
  return fd;
}

// Reads until the peer closes or `ms` pass; true when it closed.
bool ClosedWithin(int fd, int ms, std::string* got = nullptr) {
  timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (got != nullptr) got->append(buf, static_cast<size_t>(n));
      continue;
    }
    return n == 0 || errno == ECONNRESET;
  }
}

class RpcListenerTest : public ::testing::Test {
 protected:
  void Start(size_t max_handshakes = 256, absl::Duration timeout = absl::Seconds(5)) {
    RpcListener::Options o;
    o.host = "127.0.0.1";
    o.max_handshakes = max_handshakes;
    o.handshake_timeout = timeout;
    o.metrics = &metrics_;
    RpcListener::Callbacks cb;
    cb.on_handshake = [this](RpcListener::LinkId id, const proto::HandshakeRequest& req,
                             const std::string& peer) {
      last_link_.store(id);
      proto::HandshakeReply rep;
      if (req.worker_address == "refuse me") {
        rep.code = static_cast<uint16_t>(absl::StatusCode::kPermissionDenied);
        rep.message = "refused";
        return rep;
      }
      rep.nonce = 7;
      rep.worker_address = "server";
      EXPECT_TRUE(absl::StartsWith(peer, "127.0.0.1:")) << peer;
      return rep;
    };
    cb.on_closed = [this](RpcListener::LinkId) { closed_.fetch_add(1); };
    auto l = RpcListener::Create(o, std::move(cb));
    ASSERT_TRUE(l.ok()) << l.status();
    listener_ = std::move(*l);
  }
  uint64_t Count(const char* result) {
    return metrics_.Counter("granary_rpc_handshakes_total", "", {{"result", result}})->value();
  }
  // Runs a good handshake on a new socket; returns it (the link) with the reply read.
  int Handshake(const std::string& address = "client") {
    const int fd = Dial(listener_->port());
    proto::HandshakeRequest req;
    req.worker_address = address;
    const std::string bytes = proto::EncodeHandshakeRequest(req);
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    std::string head(proto::kHandshakeHeaderSize, '\0');
    EXPECT_EQ(recv(fd, head.data(), head.size(), MSG_WAITALL), static_cast<ssize_t>(head.size()));
    auto h = proto::ParseHandshakeHeader(head);
    EXPECT_TRUE(h.ok()) << h.status();
    std::string body(h.ok() ? h->body_len : 0, '\0');
    EXPECT_EQ(recv(fd, body.data(), body.size(), MSG_WAITALL), static_cast<ssize_t>(body.size()));
    reply_ = proto::DecodeHandshakeReply(head + body);
    return fd;
  }
  void WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 500 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  common::MetricsRegistry metrics_;
  std::unique_ptr<RpcListener> listener_;
  std::atomic<uint64_t> last_link_{0};
  std::atomic<int> closed_{0};
  absl::StatusOr<proto::HandshakeReply> reply_ = absl::UnknownError("none");
};

TEST_F(RpcListenerTest, BindsTheChosenInterfaceAndNamesABadOne) {
  Start();
  sockaddr_in a = {};
  socklen_t len = sizeof(a);
  const int fd = Dial(listener_->port());
  ASSERT_EQ(getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
  close(fd);
  RpcListener::Options bad;
  bad.host = "no-such-host.invalid";
  RpcListener::Callbacks cb;
  cb.on_handshake = [](RpcListener::LinkId, const proto::HandshakeRequest&, const std::string&) {
    return proto::HandshakeReply{};
  };
  cb.on_closed = [](RpcListener::LinkId) {};
  auto l = RpcListener::Create(bad, cb);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::StrContains(l.status().message(), "no-such-host.invalid")) << l.status();
}

TEST_F(RpcListenerTest, AcceptedLinkEndsWhenThePeerClosesOrSendsAByte) {
  Start();
  int fd = Handshake();
  ASSERT_TRUE(reply_.ok()) << reply_.status();
  EXPECT_EQ(reply_->nonce, 7u);
  EXPECT_EQ(listener_->open_sockets(), 1u);
  close(fd);
  WaitFor([&] { return closed_.load() == 1; });
  EXPECT_EQ(closed_.load(), 1);
  EXPECT_EQ(listener_->open_sockets(), 0u);

  fd = Handshake();
  ASSERT_EQ(send(fd, "x", 1, 0), 1);
  EXPECT_TRUE(ClosedWithin(fd, 5000));
  close(fd);
  WaitFor([&] { return closed_.load() == 2; });
  EXPECT_EQ(closed_.load(), 2);
  EXPECT_EQ(Count("accepted"), 2u);
}

TEST_F(RpcListenerTest, CloseLinkClosesTheSocketWithoutACallback) {
  Start();
  const int fd = Handshake();
  listener_->CloseLink(last_link_.load());
  EXPECT_TRUE(ClosedWithin(fd, 5000));
  close(fd);
  WaitFor([&] { return listener_->open_sockets() == 0; });
  EXPECT_EQ(listener_->open_sockets(), 0u);
  EXPECT_EQ(closed_.load(), 0);
}

TEST_F(RpcListenerTest, RefusedHandshakeGetsItsReasonAndIsClosed) {
  Start();
  const int fd = Handshake("refuse me");
  ASSERT_TRUE(reply_.ok()) << reply_.status();
  EXPECT_EQ(reply_->code, static_cast<uint16_t>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(reply_->message, "refused");
  EXPECT_TRUE(ClosedWithin(fd, 5000));
  close(fd);
  EXPECT_EQ(Count("refused"), 1u);
}

TEST_F(RpcListenerTest, HandshakeDeadlineCoversTheWholeHandshake) {
  Start(256, absl::Milliseconds(500));
  const int fd = Dial(listener_->port());
  // A byte every 100 ms keeps each read short, but the whole handshake is over its deadline.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    if (send(fd, "G", 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ClosedWithin(fd, 3000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  close(fd);
  EXPECT_EQ(Count("timeout"), 1u);
}

TEST_F(RpcListenerTest, HandshakesBeyondTheBoundAreClosedAtAccept) {
  Start(/*max_handshakes=*/4);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Dial(listener_->port()));
  WaitFor([&] { return listener_->open_sockets() == 4; });
  const int extra = Dial(listener_->port());
  EXPECT_TRUE(ClosedWithin(extra, 3000));
  close(extra);
  EXPECT_EQ(Count("overflow"), 1u);
  // An accepted link does not count against the bound: after the idle ones go, a good
  // handshake works again.
  for (int fd : idle) close(fd);
  WaitFor([&] { return listener_->open_sockets() == 0; });
  const int good = Handshake();
  ASSERT_TRUE(reply_.ok()) << reply_.status();
  EXPECT_EQ(reply_->code, 0);
  close(good);
}

}  // namespace
}  // namespace granary::transport
