// Bad input over RPC and HTTP against a real master (docs/bad_input.md lists each case and its
// answer): every case gets a clear error, the server stays up, and nothing stored changes.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"
#include "transport/context.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::testing {
namespace {

using proto::MsgType;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Cluster::Start({});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto client = cluster_->NewClient("tenant-a");
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
    ASSERT_TRUE(client_->Put("keep", MakeValue("keep", 1, 65536)).ok());
    auto ctx = transport::Context::Create("bad_input_test");
    ASSERT_TRUE(ctx.ok());
    ctx_ = std::move(*ctx);
    auto w = transport::Worker::Create(ctx_.get(), "raw");
    ASSERT_TRUE(w.ok());
    worker_ = std::move(*w);
    Reconnect(/*hello=*/true);
  }
  void TearDown() override {
    // Nothing stored changed, and the master still answers.
    if (client_) {
      auto v = client_->Get("keep");
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok()) {
        EXPECT_TRUE(*v == MakeValue("keep", 1, 65536));
      }
    }
    if (cluster_) {
      EXPECT_TRUE(cluster_->master()->Running());
    }
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    raw_.reset();
    worker_.reset();
    ctx_.reset();
    client_.reset();
  }
  void Reconnect(bool hello) {
    raw_.reset();
    auto r = transport::RpcClient::Create(worker_.get(), cluster_->master_address());
    ASSERT_TRUE(r.ok());
    raw_ = std::move(*r);
    if (hello) {
      proto::HelloRequest h;
      h.tenant_id = "tenant-a";
      auto rep = raw_->Invoke<proto::HelloRequest, proto::HelloReply>(MsgType::kHello, h,
                                                                      absl::Seconds(5));
      ASSERT_TRUE(rep.ok()) << rep.status();
    }
  }
  // Sends raw bytes as a frame and returns the reply's leading status.
  absl::Status Send(std::string frame) {
    auto rep = raw_->Call(std::move(frame), absl::Seconds(5));
    if (!rep.ok()) return rep.status();
    auto st = transport::RpcClient::ParseReply<proto::StatusReply>(*rep);
    return st.ok() ? absl::OkStatus() : st.status();
  }
  template <typename T>
  std::string Frame(MsgType type, const T& m) {
    return proto::EncodeFrame(static_cast<uint16_t>(type), 0, m);
  }
  static void ExpectError(const absl::Status& st, absl::StatusCode code,
                          const std::string& needle) {
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(needle), absl::string_view::npos) << st;
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::RpcClient> raw_;
};

TEST_F(BadInputTest, UnknownMessageTypeIsRefusedNamingIt) {
  std::string f = Frame(MsgType::kHeartbeat, proto::HeartbeatRequest{});
  uint16_t type = 999;
  std::memcpy(f.data() + 6, &type, 2);
  ExpectError(Send(f), absl::StatusCode::kInvalidArgument, "unknown message type 999");
}

TEST_F(BadInputTest, WrongProtocolVersionIsRefusedNamingBoth) {
  std::string f = Frame(MsgType::kHeartbeat, proto::HeartbeatRequest{});
  const uint16_t version = proto::kProtocolVersion + 1;  // the next, not yet spoken version
  std::memcpy(f.data() + 4, &version, 2);
  ExpectError(Send(f), absl::StatusCode::kFailedPrecondition, absl::StrCat("version ", version));
}

TEST_F(BadInputTest, TruncatedAndGarbledFramesAreRefused) {
  std::string f = Frame(MsgType::kPutStart, proto::PutStartRequest{{{"k", 10}}, 1, 0});
  std::string cut = f.substr(0, f.size() - 5);
  uint32_t len = static_cast<uint32_t>(cut.size() - proto::kFrameHeaderSize);
  std::memcpy(cut.data() + 20, &len, 4);  // consistent header, short body
  ExpectError(Send(cut), absl::StatusCode::kInvalidArgument, "truncated");
  std::string garbled = f;
  garbled[0] = 'X';  // bad magic
  ExpectError(Send(garbled), absl::StatusCode::kInvalidArgument, "magic");
}

TEST_F(BadInputTest, OversizedKeysBatchesAndValuesAreRefusedWithTheLimit) {
  proto::PutStartRequest big_key{{{std::string(proto::kMaxKeyBytes + 1, 'k'), 10}}, 1, 0};
  ExpectError(Send(Frame(MsgType::kPutStart, big_key)), absl::StatusCode::kInvalidArgument,
              "limit 4096");
  proto::GetRequest big_batch;
  big_batch.keys.assign(proto::kMaxBatch + 1, "k");
  ExpectError(Send(Frame(MsgType::kGet, big_batch)), absl::StatusCode::kInvalidArgument,
              "limit 16384");
  // Per-key errors come back in the per-key results.
  proto::PutStartRequest sizes{{{"zero", 0}, {"huge", 1ull << 62}}, 1, 0};
  auto rep = raw_->Invoke<proto::PutStartRequest, proto::PutStartReply>(MsgType::kPutStart, sizes,
                                                                        absl::Seconds(5));
  ASSERT_TRUE(rep.ok()) << rep.status();
  ExpectError(rep->results[0].status.ToStatus(), absl::StatusCode::kInvalidArgument, "size 0");
  ExpectError(rep->results[1].status.ToStatus(), absl::StatusCode::kInvalidArgument,
              absl::StrCat("size ", 1ull << 62));
  proto::PutStartRequest replicas{{{"r", 10}}, 9, 0};
  ExpectError(Send(Frame(MsgType::kPutStart, replicas)), absl::StatusCode::kInvalidArgument,
              "replica_num 9");
}

TEST_F(BadInputTest, RequestsBeforeHelloAreRefused) {
  Reconnect(/*hello=*/false);
  ExpectError(Send(Frame(MsgType::kGet, proto::GetRequest{{"keep"}})),
              absl::StatusCode::kFailedPrecondition, "Hello");
}

TEST_F(BadInputTest, AdminHttpRefusesBadQueriesAndBodies) {
  httplib::Client http("127.0.0.1", cluster_->master_http_port());
  auto r = http.Get("/api/v1/objects?tenant_id=tenant-a&limit=abc");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("'abc'"), std::string::npos) << r->body;
  r = http.Get("/api/v1/objects?tenant_id=_probe");
  EXPECT_EQ(r->status, 400);
  // Quota mode is off here: the tenant API says so rather than guessing.
  r = http.Put("/api/v1/tenant_quotas?tenant_id=t", "{not json", "application/json");
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(r->body.find("UNAVAILABLE_IN_CURRENT_MODE"), std::string::npos);
}

}  // namespace
}  // namespace granary::testing
