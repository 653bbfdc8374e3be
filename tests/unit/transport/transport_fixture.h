#pragma once

// The transport in one process, for rpc_test and rma_test: an RpcServer and an RpcClient on two
// workers of one UCX context, with frames built by hand.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "transport/context.h"
#include "transport/rpc_client.h"
#include "transport/rpc_server.h"
#include "transport/worker.h"

namespace granary::transport {

inline constexpr uint16_t kEcho = 0x7101;      // replied at once, on the progress thread
inline constexpr uint16_t kDeferred = 0x7102;  // replied later, from another thread
// Replied at once with the request's epoch as its body, the reply stamped with the epoch the
// request's body names (a master's epoch, as the test wants it).
inline constexpr uint16_t kEpochEcho = 0x7103;

inline std::string Frame(uint16_t type, uint64_t request_id, absl::string_view body) {
  std::string out;
  proto::FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  proto::BeginFrame(h, &out);
  out.append(body.data(), body.size());
  proto::FinishFrame(&out);
  return out;
}

inline std::string BodyOf(const std::string& frame) {
  auto f = proto::DecodeFrame(frame);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::string(f->body) : std::string();
}

// Owns a UCX context with a server worker (an RpcServer on an ephemeral port, answering kEcho and
// kEpochEcho on its progress thread and kDeferred from a replier thread) and a client worker that
// counts into client_metrics_. Created in SetUp, torn down in TearDown; one per test.
class TransportFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = Context::Create("transport_test");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    auto sw = Worker::Create(ctx_.get(), "server");
    ASSERT_TRUE(sw.ok()) << sw.status();
    server_worker_ = std::move(*sw);
    auto cw = Worker::Create(ctx_.get(), "client", &client_metrics_, CallerDrive());
    ASSERT_TRUE(cw.ok()) << cw.status();
    client_worker_ = std::move(*cw);

    RpcServer::Callbacks cb;
    cb.on_request = [this](RpcServer::ConnId conn,
                           const proto::FrameView& f) -> std::optional<std::string> {
      uint16_t reply_type = f.header.type | proto::kReplyBit;
      if (f.header.type == kEcho) {
        return Frame(reply_type, f.header.request_id, absl::StrCat("echo:", f.body));
      }
      if (f.header.type == kEpochEcho) {
        std::string rep = Frame(reply_type, f.header.request_id, absl::StrCat(f.header.epoch));
        int64_t stamp = 0;
        EXPECT_TRUE(absl::SimpleAtoi(f.body, &stamp)) << f.body;
        proto::SetFrameEpoch(&rep, stamp);
        return rep;
      }
      // Deferred: a replier thread answers it.
      granary::common::MutexLock lock(&deferred_mu_);
      deferred_.push_back(
          {conn, Frame(reply_type, f.header.request_id, absl::StrCat("later:", f.body))});
      return std::nullopt;
    };
    cb.on_disconnect = [this](RpcServer::ConnId) { disconnects_.fetch_add(1); };
    auto server = RpcServer::Create(server_worker_.get(), 0, std::move(cb));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    replier_ = std::thread([this] { ReplyLoop(); });
  }

  void TearDown() override {
    stop_.store(true);
    if (replier_.joinable()) replier_.join();
    server_.reset();
    client_worker_.reset();
    server_worker_.reset();
    ctx_.reset();
  }

  void ReplyLoop() {
    while (!stop_.load()) {
      std::vector<std::pair<RpcServer::ConnId, std::string>> batch;
      {
        granary::common::MutexLock lock(&deferred_mu_);
        batch.swap(deferred_);
      }
      for (auto& [conn, frame] : batch) server_->Reply(conn, std::move(frame));
      if (batch.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Whether the client worker lets waiting callers drive it (CallerDriven).
  virtual bool CallerDrive() const { return false; }
  uint64_t Drives() {
    return client_metrics_.Counter("granary_transport_caller_drives_total", "")->value();
  }

  std::unique_ptr<RpcClient> Connect() {
    auto c = RpcClient::Create(client_worker_.get(), absl::StrCat("127.0.0.1:", server_->port()));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  common::MetricsRegistry client_metrics_;  // declared before the workers, which count into it
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Worker> server_worker_, client_worker_;
  std::unique_ptr<RpcServer> server_;
  std::thread replier_;
  std::atomic<bool> stop_{false};
  std::atomic<int> disconnects_{0};
  granary::common::Mutex deferred_mu_;
  std::vector<std::pair<RpcServer::ConnId, std::string>> deferred_ ABSL_GUARDED_BY(deferred_mu_);
};

// The same transport with a client worker that its waiting callers drive (as a Client's is):
// a caller sends its request and progresses its reply itself while the progress thread sleeps,
// and hands the worker back when done.
template <class Fixture>
class CallerDriven : public Fixture {
 protected:
  bool CallerDrive() const override { return true; }
};

}  // namespace granary::transport
