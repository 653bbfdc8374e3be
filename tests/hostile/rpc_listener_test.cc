// Hostile bytes on the RPC ports of a real master and node (docs/security.md, "Ports"): garbage,
// truncated, oversized and slow handshakes, and a churn of connections, each against the
// running process. After every probe the process is still up, answers a real client, holds what
// it stored, and has as many descriptors open as before.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util.h"
#include "proto/frame.h"
#include "proto/handshake.h"
#include "tests/integration/cluster.h"
#include "tests/loopback.h"

namespace granary::testing {
namespace {

// Open descriptors of a process, from /proc.
int FdCount(pid_t pid) {
  DIR* d = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

int Dial(uint16_t port) { return DialLoopback(port); }

// Sends `bytes` on a new connection, then waits (up to `wait`) for the server to close it.
// Returns true when the server closed it (what it sent first, if anything, lands in *reply).
bool SendAndExpectClose(uint16_t port, const std::string& bytes, std::string* reply = nullptr,
                        int wait_ms = 8000) {
  const int fd = Dial(port);
  if (fd < 0) return false;
  timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!bytes.empty()) (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  bool closed = false;
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    closed = n == 0 || errno == ECONNRESET;
    break;
  }
  close(fd);
  if (reply != nullptr) *reply = got;
  return closed;
}

std::string Header(uint32_t magic, uint16_t version, uint16_t flags, uint32_t body_len) {
  std::string h(proto::kHandshakeHeaderSize, '\0');
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 2);
  std::memcpy(h.data() + 6, &flags, 2);
  std::memcpy(h.data() + 8, &body_len, 4);
  return h;
}

class RpcListenerHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Cluster::Start({});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto client = cluster_->NewClient("tenant-a");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    ASSERT_TRUE(client_->Put("keep", MakeValue("keep", 1, 65536)).ok());
    auto segs = client_->Segments();
    ASSERT_TRUE(segs.ok()) << segs.status();
    ASSERT_EQ(segs->size(), 1u);
    auto hp = common::ParseHostPort((*segs)[0].node_address);
    ASSERT_TRUE(hp.ok()) << hp.status();
    node_port_ = hp->port;
    auto mp = common::ParseHostPort(cluster_->master_address());
    ASSERT_TRUE(mp.ok());
    master_port_ = mp->port;
  }
  void TearDown() override {
    if (cluster_ && HasFailure()) cluster_->DumpLogs();
    client_.reset();
    cluster_.reset();
  }

  // Both processes are up, a new client works, and the stored value reads back.
  void ExpectAlive() {
    ASSERT_TRUE(cluster_->master()->Running());
    ASSERT_TRUE(cluster_->node(0)->Running());
    auto fresh = cluster_->NewClient("tenant-a");
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    auto v = (*fresh)->Get("keep");
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(*v == MakeValue("keep", 1, 65536));
  }

  // Waits until the process's descriptor count is back to at most `baseline`.
  void ExpectFdsBackTo(Process* p, int baseline) {
    int now = FdCount(p->pid());
    for (int i = 0; i < 200 && now > baseline; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      now = FdCount(p->pid());
    }
    EXPECT_LE(now, baseline) << "descriptors of pid " << p->pid();
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  uint16_t master_port_ = 0, node_port_ = 0;
};

// The probe that aborted UCX 1.13's listener: zero bytes of several lengths, and random bytes.
TEST_F(RpcListenerHostileTest, GarbageIsDroppedAndNothingDies) {
  std::mt19937 rng(42);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  for (uint16_t port : {master_port_, node_port_}) {
    for (size_t n : {1u, 16u, 17u, 200u, 2000u, 4096u}) {
      EXPECT_TRUE(SendAndExpectClose(port, std::string(n, '\0'))) << n << " zero bytes";
    }
    EXPECT_TRUE(SendAndExpectClose(port, random)) << "random bytes";
    // An HTTP request on the RPC port.
    EXPECT_TRUE(SendAndExpectClose(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  ExpectAlive();
  auto malformed = ScrapeMetric(cluster_->master_http_port(),
                                "granary_rpc_handshakes_total{result=\"malformed\"}");
  ASSERT_TRUE(malformed.ok()) << malformed.status();
  EXPECT_GE(*malformed, 7);
  // Logged once for the peer, not once per connection.
  const std::string log = cluster_->master()->Log();
  size_t lines = 0;
  for (size_t at = log.find("dropped a connection from 127.0.0.1"); at != std::string::npos;
       at = log.find("dropped a connection from 127.0.0.1", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
}

// A header that claims too much, a wrong version (answered, naming both), a truncated body and
// flags no version defines.
TEST_F(RpcListenerHostileTest, BadHeadersAreRefusedBeforeTheBodyIsRead) {
  for (uint16_t port : {master_port_, node_port_}) {
    // Oversized: refused on the header alone, though no body follows.
    std::string reply;
    EXPECT_TRUE(SendAndExpectClose(
        port, Header(proto::kHandshakeMagic, proto::kProtocolVersion, 0, 0xFFFFFFFFu), &reply));
    auto rep = proto::DecodeHandshakeReply(reply);
    EXPECT_FALSE(rep.ok());  // a malformed header gets no reply at all
    // Another protocol version: a reply naming both.
    EXPECT_TRUE(SendAndExpectClose(port, Header(proto::kHandshakeMagic, 9, 0, 4) + "abcd", &reply));
    rep = proto::DecodeHandshakeReply(reply);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->code, static_cast<uint16_t>(absl::StatusCode::kFailedPrecondition));
    EXPECT_NE(rep->message.find("protocol version 9"), std::string::npos) << rep->message;
    EXPECT_NE(rep->message.find(absl::StrCat(proto::kProtocolVersion)), std::string::npos);
    // Unknown flags: refused with the reason.
    proto::HandshakeRequest req;
    req.worker_address = "x";
    std::string bytes = proto::EncodeHandshakeRequest(req);
    bytes[6] = '\x80';
    EXPECT_TRUE(SendAndExpectClose(port, bytes, &reply));
    rep = proto::DecodeHandshakeReply(reply);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->code, static_cast<uint16_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_NE(rep->message.find("unknown bits"), std::string::npos) << rep->message;
    // Truncated: the header promises 100 bytes and 10 come; the server waits out the
    // handshake deadline, then closes.
    EXPECT_TRUE(SendAndExpectClose(
        port, Header(proto::kHandshakeMagic, proto::kProtocolVersion, 0, 100) + "0123456789"));
  }
  ExpectAlive();
}

// A slow handshake (a byte at a time, never finished) is cut at the whole-handshake deadline,
// however often bytes come; meanwhile real clients connect at once.
TEST_F(RpcListenerHostileTest, SlowHandshakesAreCutAtTheirDeadline) {
  const int baseline = FdCount(cluster_->master()->pid());
  std::vector<int> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(Dial(master_port_));
  const std::string header = Header(proto::kHandshakeMagic, proto::kProtocolVersion, 0, 64);
  const auto start = std::chrono::steady_clock::now();
  bool cut = false;
  for (size_t i = 0; i < header.size() + 64 && !cut; ++i) {
    for (int fd : slow) {
      const char byte = i < header.size() ? header[i] : 'a';
      if (send(fd, &byte, 1, MSG_NOSIGNAL) < 0) cut = true;
    }
    if (i == 3) {
      // Real clients are not held up by the slow ones.
      const auto t0 = std::chrono::steady_clock::now();
      auto fresh = cluster_->NewClient("tenant-a");
      ASSERT_TRUE(fresh.ok()) << fresh.status();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // The listener's handshake deadline is 5 s: every slow socket is closed by then (a send on a
  // socket the peer reset fails, or a read sees the end).
  for (int fd : slow) {
    timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    const ssize_t n = recv(fd, &c, 1, 0);
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << n << " " << strerror(errno);
    close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  auto timeouts = ScrapeMetric(cluster_->master_http_port(),
                               "granary_rpc_handshakes_total{result=\"timeout\"}");
  ASSERT_TRUE(timeouts.ok()) << timeouts.status();
  EXPECT_GE(*timeouts, 8);
  ExpectFdsBackTo(cluster_->master(), baseline);
  ExpectAlive();
}

// 1,000 connections that send a few bytes (or none) and close: no descriptor is left behind
// (UCX's listener kept each in CLOSE-WAIT for good), on the master and on the node.
TEST_F(RpcListenerHostileTest, ConnectionChurnLeavesNoDescriptors) {
  for (Process* p : {cluster_->master(), cluster_->node(0)}) {
    const uint16_t port = p == cluster_->master() ? master_port_ : node_port_;
    const int baseline = FdCount(p->pid());
    ASSERT_GT(baseline, 0);
    for (int i = 0; i < 1000; ++i) {
      const int fd = Dial(port);
      ASSERT_GE(fd, 0) << "connection " << i;
      if (i % 3 == 1) (void)!send(fd, std::string(16, '\0').data(), 16, MSG_NOSIGNAL);
      if (i % 3 == 2) {
        const std::string h = Header(proto::kHandshakeMagic, proto::kProtocolVersion, 0, 8);
        (void)!send(fd, h.data(), h.size(), MSG_NOSIGNAL);
      }
      close(fd);
    }
    ExpectFdsBackTo(p, baseline);
  }
  ExpectAlive();
}

// A real handshake whose client never attaches, or closes its link: the offer and the socket go.
TEST_F(RpcListenerHostileTest, AcceptedLinksThatNeverAttachAreReleased) {
  const int baseline = FdCount(cluster_->master()->pid());
  for (int i = 0; i < 50; ++i) {
    const int fd = Dial(master_port_);
    proto::HandshakeRequest req;
    req.worker_address = std::string(300, 'w');  // not a usable address: it is never used
    const std::string bytes = proto::EncodeHandshakeRequest(req);
    ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    std::string reply(proto::kHandshakeHeaderSize, '\0');
    ASSERT_EQ(recv(fd, reply.data(), reply.size(), MSG_WAITALL),
              static_cast<ssize_t>(reply.size()));
    close(fd);
  }
  ExpectFdsBackTo(cluster_->master(), baseline);
  ExpectAlive();
}

}  // namespace
}  // namespace granary::testing
