// RPC in one process (transport/rpc_server.h, rpc_client.h, on transport_fixture.h): an RpcServer
// and an RpcClient on two workers of one UCX context, talking over loopback. Several caller
// threads at once, so the ThreadSanitizer build of this test checks the hand-offs between callers
// and the progress threads; callers that drive the client worker themselves; epoch fencing; a
// server that goes away; control connections over shared memory or tcp; the handshake's Attach;
// and Posts that wake a sleeping worker.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/error_reason.h"
#include "common/metrics.h"
#include "proto/frame.h"
#include "proto/handshake.h"
#include "proto/messages.h"
#include "tests/unit/transport/transport_fixture.h"
#include "transport/context.h"
#include "transport/rpc_client.h"
#include "transport/rpc_server.h"
#include "transport/worker.h"

namespace granary::transport {
namespace {

class TransportTest : public TransportFixture {
 protected:
  void ConcurrentCalls();
  void PostsWake();
  void CheckAttach();
};

// The tests below run on both TransportTest and this (transport_fixture.h's CallerDriven).
using TransportDriveTest = CallerDriven<TransportTest>;

// Threads calling at once (each reply to its own caller, whichever thread progressed it), with
// replies from the server's progress thread and from another thread, and asynchronous calls
// whose callbacks run on whichever thread drives.
void TransportTest::ConcurrentCalls() {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kThreads = 4, kCalls = 200;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        std::string body = absl::StrCat("t", t, "-", i);
        bool deferred = i % 3 == 0;
        auto rep = client->Call(Frame(deferred ? kDeferred : kEcho, 0, body), absl::Seconds(10));
        if (!rep.ok()) {
          failed.fetch_add(1);
          continue;
        }
        if (BodyOf(*rep) != absl::StrCat(deferred ? "later:" : "echo:", body)) wrong.fetch_add(1);
      }
    });
  }
  // Asynchronous calls from this thread at the same time; their callbacks run on the progress
  // thread and hand results back through a mutex.
  granary::common::Mutex mu;
  std::vector<std::string> async_replies;
  std::atomic<int> async_done{0};
  for (int i = 0; i < kCalls; ++i) {
    client->CallAsync(Frame(kEcho, 0, absl::StrCat("a", i)), [&](absl::StatusOr<std::string> rep) {
      {
        granary::common::MutexLock lock(&mu);
        async_replies.push_back(rep.ok() ? BodyOf(*rep) : "error");
      }
      async_done.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 1000 && async_done.load() < kCalls; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_EQ(async_done.load(), kCalls);
  granary::common::MutexLock lock(&mu);
  std::sort(async_replies.begin(), async_replies.end());
  std::vector<std::string> want;
  for (int i = 0; i < kCalls; ++i) want.push_back(absl::StrCat("echo:a", i));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(async_replies, want);
}

TEST_F(TransportTest, ConcurrentCallsGetTheirOwnReplies) {
  ConcurrentCalls();
  EXPECT_EQ(Drives(), 0u) << "a worker created without caller_drive was driven by a caller";
}

TEST_F(TransportDriveTest, ConcurrentCallsGetTheirOwnReplies) { ConcurrentCalls(); }

// One caller at a time: its calls are sent and answered on its own thread (the progress thread
// sleeps between them), and callbacks that run there may use the worker as its progress thread.
TEST_F(TransportDriveTest, ASingleCallerDrivesItsOwnCalls) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kCalls = 200;
  const uint64_t before = Drives();  // Connect's own calls (the shared-memory attach) drove too
  for (int i = 0; i < kCalls; ++i) {
    std::string body = absl::StrCat("c", i);
    auto rep = client->Call(Frame(i % 4 == 0 ? kDeferred : kEcho, 0, body), absl::Seconds(10));
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(BodyOf(*rep), absl::StrCat(i % 4 == 0 ? "later:" : "echo:", body));
  }
  // Each call waits once; most find the progress thread asleep and drive. The count shows that
  // the driving path ran at all (it is 0 on a worker without caller_drive, above).
  EXPECT_GT(Drives() - before, 0u);
  EXPECT_LE(Drives() - before, static_cast<uint64_t>(kCalls));
  // A closure that a caller runs while driving sees OnProgressThread() (Worker::Run runs it in
  // place), and one that another thread posts meanwhile runs too.
  std::atomic<int> inner{0};
  std::atomic<bool> done{false};
  {
    Worker::DriveIntent intent(client_worker_.get());
    client_worker_->Post([&] {
      EXPECT_TRUE(client_worker_->OnProgressThread());
      client_worker_->Run([&] { inner.fetch_add(1); });  // in place, or it would deadlock
      done.store(true);
    });
  }
  std::thread other([&] { client_worker_->Post([&] { inner.fetch_add(1); }); });
  other.join();
  client_worker_->SpinUntil([&] { return done.load(); });
  for (int i = 0; i < 500 && !done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(done.load());
  client_worker_->Run([] {});  // everything posted before it has run
  EXPECT_EQ(inner.load(), 2);
  EXPECT_FALSE(client_worker_->OnProgressThread());
}

// A caller that promised to drive (DriveIntent) but finds the worker driven by others the whole
// time still gets its work run: by the holder, or by the progress thread that SpinUntil wakes.
TEST_F(TransportDriveTest, PostsOfACallerThatCannotDriveStillRun) {
  constexpr int kRounds = 200;
  std::atomic<bool> stop{false};
  // Another thread keeps the progress thread busy (the drive role taken) most of the time.
  std::thread busy([&] {
    while (!stop.load()) {
      client_worker_->Run([] { std::this_thread::sleep_for(std::chrono::microseconds(300)); });
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    auto ran = std::make_shared<std::atomic<bool>>(false);  // outlives a failed wait
    {
      Worker::DriveIntent intent(client_worker_.get());
      client_worker_->Post([ran] { ran->store(true); });
    }
    client_worker_->SpinUntil([&] { return ran->load(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ran->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    ASSERT_TRUE(ran->load()) << "round " << i << ": a post under DriveIntent never ran";
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop.store(true);
  busy.join();
}

// HA fencing at the connection: once fenced at epoch 5, requests carry 5, and a reply is handed
// on only with epoch 5 (or 0, a refusal) and not below the highest epoch seen anywhere.
TEST_F(TransportTest, EpochFenceStampsRequestsAndRefusesRepliesOfAnotherEpoch) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto call = [&](int64_t stamp) {
    return client->Call(Frame(kEpochEcho, 0, absl::StrCat(stamp)), absl::Seconds(10));
  };
  auto unfenced = call(7);
  ASSERT_TRUE(unfenced.ok()) << unfenced.status() << ": no fence, any epoch passes";
  EXPECT_EQ(BodyOf(*unfenced), "0") << "requests carry no epoch before the fence";

  auto highest = std::make_shared<std::atomic<int64_t>>(5);
  client->SetEpochFence(5, highest);
  EXPECT_EQ(client->epoch(), 5);
  auto same = call(5);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(BodyOf(*same), "5") << "the request carries the connection's epoch";
  auto refusal = call(0);
  EXPECT_TRUE(refusal.ok()) << refusal.status() << ": epoch 0 (a master's refusal) passes";
  for (int64_t stale : {4, 6}) {
    auto other = call(stale);
    ASSERT_FALSE(other.ok()) << "a reply of epoch " << stale << " was handed on";
    EXPECT_TRUE(absl::IsUnavailable(other.status())) << other.status();
    EXPECT_EQ(ErrorReasonOf(other.status()), ErrorReason::kNotLeader) << other.status();
    EXPECT_TRUE(absl::StrContains(other.status().message(), absl::StrCat("epoch ", stale)))
        << other.status();
  }
  // A newer epoch seen on another connection: this one's replies are a deposed master's now.
  highest->store(6);
  auto deposed = call(5);
  ASSERT_FALSE(deposed.ok());
  EXPECT_EQ(ErrorReasonOf(deposed.status()), ErrorReason::kNotLeader) << deposed.status();
  EXPECT_TRUE(absl::StrContains(deposed.status().message(), "highest epoch seen is 6"))
      << deposed.status();
  EXPECT_FALSE(client->broken()) << "a refused reply does not break the connection";
}

TEST_F(TransportTest, ServerDisconnectFailsPendingCallsAndLaterOnes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto first = client->Call(Frame(kEcho, 0, "hello"), absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  std::atomic<int> broken_calls{0};
  client->SetOnBroken([&](absl::Status) { broken_calls.fetch_add(1); });

  // With the replier stopped, a deferred request stays pending; once the server holds it, the
  // server drops every connection it has.
  stop_.store(true);
  replier_.join();
  std::atomic<bool> pending_done{false};
  absl::Status pending_status;
  granary::common::Mutex mu;
  client->CallAsync(Frame(kDeferred, 0, "never"), [&](absl::StatusOr<std::string> rep) {
    granary::common::MutexLock lock(&mu);
    pending_status = rep.status();
    pending_done.store(true);
  });
  bool held = false;
  for (int i = 0; i < 1000 && !held; ++i) {
    {
      granary::common::MutexLock lock(&deferred_mu_);
      held = !deferred_.empty();
    }
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(held) << "the server never received the deferred request";
  server_worker_->Run([&] {
    for (RpcServer::ConnId id = 1; id < 16; ++id) server_->Disconnect(id);
  });
  for (int i = 0; i < 1000 && !pending_done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(pending_done.load()) << "a pending call never completed after the disconnect";
  {
    granary::common::MutexLock lock(&mu);
    EXPECT_TRUE(absl::IsUnavailable(pending_status)) << pending_status;
  }
  EXPECT_TRUE(client->broken());
  EXPECT_EQ(broken_calls.load(), 1);
  auto later = client->Call(Frame(kEcho, 0, "after"), absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(later.status())) << later.status();
}

// On one host a control connection's endpoint goes over shared memory (UCX's choice between
// two workers of one host); the handshake's socket only watches the peer.
TEST_F(TransportTest, ControlConnectionUsesSharedMemoryOnOneHost) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->on_shm());
  auto rep = client->Call(Frame(kEcho, 0, "over shm"), absl::Seconds(10));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(BodyOf(*rep), "echo:over shm");
  // Attaching again on an attached connection is refused, and the connection keeps working.
  auto again = client->Invoke<proto::AttachRequest, proto::StatusReply>(
      proto::MsgType::kAttach, proto::AttachRequest{1, "x"}, absl::Seconds(10));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  EXPECT_TRUE(client->Call(Frame(kEcho, 0, "still"), absl::Seconds(10)).ok());
}

// GRANARY_CONTROL_SHM=0 keeps a connection on tcp: on the client, it asks for tcp only; on the
// server, it answers every handshake so. Calls work either way.
TEST_F(TransportTest, ControlShmOffKeepsTcp) {
  setenv("GRANARY_CONTROL_SHM", "0", 1);
  auto tcp_client = Connect();
  auto other_worker = Worker::Create(ctx_.get(), "tcp-only-server");
  ASSERT_TRUE(other_worker.ok()) << other_worker.status();
  RpcServer::Callbacks cb;
  cb.on_request = [](RpcServer::ConnId, const proto::FrameView& f) -> std::optional<std::string> {
    return Frame(f.header.type | proto::kReplyBit, f.header.request_id, "tcp-only");
  };
  auto tcp_server = RpcServer::Create(other_worker->get(), 0, std::move(cb));
  unsetenv("GRANARY_CONTROL_SHM");
  ASSERT_TRUE(tcp_server.ok()) << tcp_server.status();
  ASSERT_NE(tcp_client, nullptr);
  EXPECT_FALSE(tcp_client->on_shm());
  auto rep = tcp_client->Call(Frame(kEcho, 0, "x"), absl::Seconds(10));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(BodyOf(*rep), "echo:x");

  auto refused =
      RpcClient::Create(client_worker_.get(), absl::StrCat("127.0.0.1:", (*tcp_server)->port()));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE((*refused)->on_shm());
  rep = (*refused)->Call(Frame(kEcho, 0, "y"), absl::Seconds(10));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(BodyOf(*rep), "tcp-only");
  refused->reset();
  tcp_server->reset();
}

namespace {

// A handshake by hand: the socket (left open: it is the link) and the server's reply.
struct RawLink {
  int fd = -1;
  proto::HandshakeReply reply;
};
absl::StatusOr<RawLink> RawHandshake(uint16_t port, const std::string& worker_address) {
  RawLink link;
  link.fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(link.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(strerror(errno));
  }
  const std::string hello =
      proto::EncodeHandshakeRequest({proto::kProtocolVersion, 0, worker_address});
  if (send(link.fd, hello.data(), hello.size(), 0) != static_cast<ssize_t>(hello.size())) {
    return absl::UnavailableError("short send");
  }
  std::string buf(proto::kHandshakeHeaderSize, '\0');
  if (recv(link.fd, buf.data(), buf.size(), MSG_WAITALL) != static_cast<ssize_t>(buf.size())) {
    return absl::UnavailableError("no reply header");
  }
  auto h = proto::ParseHandshakeHeader(buf);
  if (!h.ok()) return h.status();
  buf.resize(proto::kHandshakeHeaderSize + h->body_len);
  if (recv(link.fd, buf.data() + proto::kHandshakeHeaderSize, h->body_len, MSG_WAITALL) !=
      static_cast<ssize_t>(h->body_len)) {
    return absl::UnavailableError("short reply body");
  }
  auto rep = proto::DecodeHandshakeReply(buf);
  if (!rep.ok()) return rep.status();
  link.reply = *rep;
  return link;
}

}  // namespace

// kAttach joins a connection only with the nonce its handshake gave, once, and only as the
// first frame on an endpoint not known yet. The attach's own endpoint is closed by the test
// right after; the server keeps answering the connection on its own endpoint to the client's
// worker. Under UCX_TLS=tcp UCX sees that close as a peer failure and frees the endpoint it
// made for the client (CI crashed in ucp_am_send_nbx on it, under ASan, when replies went out
// on that handle). Closing the handshake's socket ends the connection.
void TransportTest::CheckAttach() {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto own = client_worker_->Address();
  ASSERT_TRUE(own.ok()) << own.status();
  std::string own_address = *own;
  auto link = RawHandshake(server_->port(), own_address);
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_EQ(link->reply.code, 0) << link->reply.message;
  EXPECT_NE(link->reply.nonce, 0u);
  EXPECT_FALSE(link->reply.worker_address.empty());
  const uint64_t nonce = link->reply.nonce;

  // Sends a frame of `type` on a fresh worker-address endpoint and returns the server's answer.
  auto raw_call = [&](proto::MsgType type, uint64_t nonce, absl::Duration wait) -> absl::Status {
    auto ep = client_worker_->Run([&] {
      return client_worker_->ConnectWorker(link->reply.worker_address, "raw attach", false);
    });
    if (!ep.ok()) return ep.status();
    auto done = std::make_shared<std::promise<absl::Status>>();
    auto fut = done->get_future();
    const uint64_t id = Worker::NextRequestId();
    client_worker_->Run([&] {
      client_worker_->ExpectReply(id, [done](absl::StatusOr<absl::string_view> r) {
        done->set_value(r.ok() ? RpcClient::ParseReply<proto::StatusReply>(*r).status()
                               : r.status());
      });
      absl::Status st =
          client_worker_->SendFrame(ep->get(),
                                    proto::EncodeFrame(static_cast<uint16_t>(type), id,
                                                       proto::AttachRequest{nonce, own_address}),
                                    true);
      if (!st.ok()) client_worker_->FailReply(id, st);
    });
    absl::Status st = fut.wait_for(absl::ToChronoNanoseconds(wait)) == std::future_status::ready
                          ? fut.get()
                          : absl::DeadlineExceededError("no answer");
    client_worker_->Run([&] {
      client_worker_->FailReply(id, st);  // a late answer finds nobody waiting
      client_worker_->Close(*ep);
    });
    return st;
  };
  auto attach = [&](uint64_t nonce) {
    return raw_call(proto::MsgType::kAttach, nonce, absl::Seconds(10));
  };
  absl::Status wrong = attach(nonce ^ 1);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied) << wrong;
  EXPECT_TRUE(absl::StrContains(wrong.message(), absl::StrCat(nonce ^ 1))) << wrong;
  // Without the address to answer on it is refused, naming what is missing; the nonce holds.
  own_address.clear();
  absl::Status no_address = attach(nonce);
  EXPECT_EQ(no_address.code(), absl::StatusCode::kInvalidArgument) << no_address;
  EXPECT_TRUE(absl::StrContains(no_address.message(), "worker address")) << no_address;
  own_address = *own;
  const int before = disconnects_.load();
  EXPECT_TRUE(attach(nonce).ok());
  absl::Status reused = attach(nonce);
  EXPECT_EQ(reused.code(), absl::StatusCode::kPermissionDenied) << reused;
  // Any other frame on an endpoint that belongs to no connection is dropped, not answered.
  absl::Status stray = raw_call(proto::MsgType::kHello, 0, absl::Milliseconds(500));
  EXPECT_EQ(stray.code(), absl::StatusCode::kDeadlineExceeded) << stray;
  // The other connection still gets its answers, at once and from another thread.
  EXPECT_TRUE(client->Call(Frame(kEcho, 0, "tcp"), absl::Seconds(10)).ok());
  for (int i = 0; i < 20; ++i) {
    auto later = client->Call(Frame(kDeferred, 0, absl::StrCat("after ", i)), absl::Seconds(10));
    ASSERT_TRUE(later.ok()) << later.status();
    EXPECT_EQ(BodyOf(*later), absl::StrCat("later:after ", i));
  }
  // The raw connection ends when its link closes.
  EXPECT_EQ(disconnects_.load(), before);
  close(link->fd);
  for (int i = 0; i < 500 && disconnects_.load() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(disconnects_.load(), before + 1);
}

TEST_F(TransportTest, AttachNeedsTheOfferedNonceOnce) { CheckAttach(); }

// The same over tcp only, where UCX notices the attach endpoint's close.
class TransportTcpTest : public TransportTest {
 protected:
  void SetUp() override {
    const char* old = getenv("UCX_TLS");
    saved_tls_ = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    setenv("UCX_TLS", "tcp", 1);
    TransportTest::SetUp();
  }
  void TearDown() override {
    TransportTest::TearDown();
    if (saved_tls_) {
      setenv("UCX_TLS", saved_tls_->c_str(), 1);
    } else {
      unsetenv("UCX_TLS");
    }
  }
  std::optional<std::string> saved_tls_;
};

TEST_F(TransportTcpTest, AttachNeedsTheOfferedNonceOnce) { CheckAttach(); }

// Driving over tcp: the caller progresses the sockets (UCX's tcp transport polls them) while the
// progress thread sleeps in the worker's event fd, which the same sockets wake.
class TransportTcpDriveTest : public TransportTcpTest {
 protected:
  bool CallerDrive() const override { return true; }
};
TEST_F(TransportTcpDriveTest, ConcurrentCallsGetTheirOwnReplies) {
  ConcurrentCalls();
  EXPECT_GT(Drives(), 0u);
}

// Post wakes the progress thread only when it sleeps. Posts from several threads, each after a
// pause long enough for the thread to go to sleep (or timed to race with it going to sleep), must
// all run: a lost wakeup shows as a Post that never runs.
TEST_F(TransportTest, PostsWakeASleepingWorker) { PostsWake(); }
// Posts from threads that do not drive wake the progress thread of a drivable worker too.
TEST_F(TransportDriveTest, PostsWakeASleepingWorker) { PostsWake(); }

void TransportTest::PostsWake() {
  constexpr int kThreads = 3, kPosts = 300;
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPosts; ++i) {
        // 0-300 us: around the time the idle thread takes to spin down and arm its wait.
        std::this_thread::sleep_for(std::chrono::microseconds((i * 37 + t * 101) % 300));
        auto done = std::make_shared<std::atomic<bool>>(false);  // outlives a failed wait
        client_worker_->Post([&ran, done] {
          ran.fetch_add(1);
          done->store(true);
        });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!done->load() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
        ASSERT_TRUE(done->load()) << "post " << i << " of thread " << t << " never ran";
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ran.load(), kThreads * kPosts);
}

}  // namespace
}  // namespace granary::transport
