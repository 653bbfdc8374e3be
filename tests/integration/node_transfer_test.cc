// What a node moves for whom, end to end on a real master and real nodes (separate processes)
// on loopback, over UCX's default transports and over UCX_TLS=tcp (store_fixture.h): Push only
// from its own segments into the buffer the client named, Read and Write only of whole
// allocations inside its segments, and the deadlines on a stalled node or a stalled client.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/util.h"
#include "proto/alloc_header.h"
#include "tests/integration/cluster.h"
#include "tests/integration/store_fixture.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::testing {
namespace {

using std::chrono::milliseconds;

using NodeTransferTest = StoreFixture;

// One value stored through a client, and where the master placed it.
struct Located {
  std::string key, value;
  uint64_t at = 0;  // its allocation header in the node's segment; the value follows
  uint64_t generation = 0;
  proto::SegmentInfo seg;  // the node's segment
};
void StoreAndLocate(client::ClientImpl& c, const std::string& key, Located* out) {
  out->key = key;
  out->value = MakeValue(key, 3, 4096);
  ASSERT_TRUE(c.Put(key, out->value).ok());
  auto got =
      c.Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, proto::GetRequest{{key}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->results.size(), 1u);
  ASSERT_EQ(got->results[0].replicas.size(), 1u);
  out->at = got->results[0].replicas[0].address;
  out->generation = got->results[0].generation;
  auto segs = c.Call<proto::SegmentsRequest, proto::SegmentsReply>(proto::MsgType::kSegments, {});
  ASSERT_TRUE(segs.ok() && segs->segments.size() == 1) << segs.status();
  out->seg = segs->segments[0];
}

// A client of its own that sends raw Push requests: one worker for its connection to the node,
// another (`dest`) whose address the node writes through into `buf`, registered on their
// context, so a test can stall the destination while the connection still answers.
class RawPusher {
 public:
  void Connect(const std::string& node_address) {
    auto ctx = transport::Context::Create("push_test");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    for (auto* w : {&worker_, &dest_}) {
      auto created = transport::Worker::Create(ctx_.get(), "push_test");
      ASSERT_TRUE(created.ok()) << created.status();
      *w = std::move(*created);
    }
    auto region = transport::MemoryRegion::Create(ctx_.get(), buf.data(), buf.size());
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
    auto rkey = region_->PackRkey();
    auto waddr = dest_->Address();
    ASSERT_TRUE(rkey.ok() && waddr.ok());
    auto rpc = transport::RpcClient::Create(worker_.get(), node_address);
    ASSERT_TRUE(rpc.ok()) << rpc.status();
    rpc_ = std::move(*rpc);
    req_.dest.segment_id = 1;
    req_.dest.node_address = "client/push-test";
    req_.dest.base = base();
    req_.dest.size = buf.size();
    req_.dest.rkey = *rkey;
    req_.dest.worker_address = *waddr;
    req_.dest.host_id = transport::LocalHostId();
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(buf.data()); }
  // The buffer, once every write the node made into it is visible to this thread: the writes
  // land on the destination worker's thread (UCX's put handler), so a closure run there after
  // them orders them before the caller's reads. Not while the destination is stalled.
  std::string& Buffer() {
    dest_->Run([] {});
    return buf;
  }
  void Clear() { Buffer().assign(buf.size(), '\0'); }
  absl::StatusOr<proto::PushReply> Push(uint64_t src, uint64_t dst, uint64_t len,
                                        std::vector<uint64_t> headers,
                                        uint32_t timeout_ms = 10'000) {
    // This thread's earlier reads and writes of buf before the node's writes (which land on the
    // destination's thread), for TSan; a stalled destination cannot run the closure.
    if (!resume_) dest_->Run([] {});
    req_.entries = {{src, dst, len}};
    req_.headers = std::move(headers);
    req_.timeout_ms = timeout_ms;
    return rpc_->Invoke<proto::PushRequest, proto::PushReply>(proto::MsgType::kPush, req_,
                                                              absl::Seconds(20));
  }
  // Blocks the destination worker's progress thread (a client process that stopped, or whose
  // link lost every packet) until Resume(); returns once it is blocked.
  void Stall() {
    resume_ = std::make_shared<std::promise<void>>();
    auto stalled = std::make_shared<std::promise<void>>();
    auto is_stalled = stalled->get_future();
    dest_->Post([stalled, done = resume_->get_future().share()] {
      stalled->set_value();
      done.wait();
    });
    is_stalled.wait();
  }
  void Resume() {
    resume_->set_value();
    resume_.reset();
  }

  std::string buf = std::string(8192, '\0');

 private:
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::Worker> dest_;
  std::unique_ptr<transport::MemoryRegion> region_;
  std::unique_ptr<transport::RpcClient> rpc_;
  proto::PushRequest req_;
  std::shared_ptr<std::promise<void>> resume_;  // set while the destination is stalled
};

// A node pushes only from its own segments into the buffer the client named (proto::Push):
// anything else is refused with the address in the message, and what is stored stays intact.
TEST_P(NodeTransferTest, NodeRefusesPushOutsideItsSegmentsOrTheClientsBuffer) {
  StartCluster(Cluster::Options{});
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  client::ClientImpl& c = **created;
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(c, "kept", &v));
  RawPusher p;
  ASSERT_NO_FATAL_FAILURE(p.Connect(v.seg.node_address));
  const uint64_t base = p.base();
  auto refused = [](const absl::StatusOr<proto::PushReply>& r, const std::string& what) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  const uint64_t seg_end = v.seg.base + v.seg.size;
  refused(p.Push(seg_end - 100, base, 4096, {}), absl::StrCat("from address ", seg_end - 100));
  refused(p.Push(v.at, base + p.buf.size() - 10, 4096, {}),
          absl::StrCat("to address ", base + p.buf.size() - 10));
  refused(p.Push(v.at, base, 64, {seg_end}), absl::StrCat("header at address ", seg_end));
  refused(p.Push(v.at, base, 64, {}, 0), "push timeout_ms 0 is not in 1..3600000");
  EXPECT_TRUE(p.Buffer() == std::string(8192, '\0'));  // nothing written by a refused push

  // A good one writes the value in place and returns the header that vouches for it.
  auto ok = p.Push(v.at + proto::kAllocHeaderSize, base + 100, v.value.size(), {v.at});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(p.Buffer().substr(100, v.value.size()) == v.value);
  ASSERT_EQ(ok->headers.size(), proto::kAllocHeaderSize);
  proto::AllocHeader h;
  std::memcpy(&h, ok->headers.data(), sizeof(h));
  EXPECT_TRUE(
      proto::CheckAllocHeader(h, v.generation, common::HashBytes("kept"), v.value.size()).ok());
  auto again = c.Get("kept");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, v.value);
}

// Read and Write (small values over tcp): a node copies only whole allocations inside its own
// host segments, refuses anything else naming the address and leaves what is stored intact;
// a good Write is what PutEnd then commits.
TEST_P(NodeTransferTest, NodeReadsAndWritesInlineOnlyInsideItsSegments) {
  StartCluster(Cluster::Options{});
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  client::ClientImpl& c = **created;
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(c, "kept", &v));
  auto ctx = transport::Context::Create("inline_test");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto worker = transport::Worker::Create(ctx->get(), "inline_test");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto rpc = transport::RpcClient::Create(worker->get(), v.seg.node_address);
  ASSERT_TRUE(rpc.ok()) << rpc.status();
  auto read = [&](std::vector<proto::InlineEntry> entries) {
    return (*rpc)->Invoke<proto::ReadRequest, proto::ReadReply>(
        proto::MsgType::kRead, proto::ReadRequest{std::move(entries)}, absl::Seconds(10));
  };
  auto write = [&](std::vector<proto::InlineEntry> entries, std::string data) {
    return (*rpc)->Invoke<proto::WriteRequest, proto::StatusReply>(
        proto::MsgType::kWrite, proto::WriteRequest{std::move(entries), std::move(data)},
        absl::Seconds(10));
  };
  auto refused = [](const absl::Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  const uint64_t seg_end = v.seg.base + v.seg.size;
  refused(read({{seg_end - 100, 4096}}).status(), absl::StrCat("at address ", seg_end - 100));
  const std::string junk(proto::kAllocHeaderSize + 4096, 'J');
  refused(write({{seg_end - 100, 4096}}, junk).status(),
          absl::StrCat("at address ", seg_end - 100));
  refused(write({{v.at, 4096}}, junk.substr(1)).status(), "bytes of data, but its 1 entries need");
  auto kept = c.Get("kept");  // no refused write changed a byte
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, v.value);

  // A good read: the value, then the header that vouches for it.
  auto got = read({{v.at, v.value.size()}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->data.size(), v.value.size() + proto::kAllocHeaderSize);
  EXPECT_TRUE(got->data.substr(0, v.value.size()) == v.value);
  proto::AllocHeader h;
  std::memcpy(&h, got->data.data() + v.value.size(), sizeof(h));
  EXPECT_TRUE(
      proto::CheckAllocHeader(h, v.generation, common::HashBytes("kept"), v.value.size()).ok());

  // A good write into a place PutStart gave, committed by PutEnd, reads back byte-exact.
  const std::string value = MakeValue("written", 5, 1000);
  auto started = c.PutStart({"written"}, {value.size()});
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(started->results[0].status.ToStatus().ok());
  proto::AllocHeader wh;
  wh.generation = started->results[0].generation;
  wh.key_hash = common::HashBytes("written");
  wh.value_length = value.size();
  std::string data(reinterpret_cast<const char*>(&wh), sizeof(wh));
  data += value;
  ASSERT_TRUE(write({{started->results[0].replicas[0].address, value.size()}}, data).ok());
  auto ended = c.Call<proto::KeyGenRequest, proto::BatchStatusReply>(
      proto::MsgType::kPutEnd,
      proto::KeyGenRequest{{{"written", started->results[0].generation, 0}}});
  ASSERT_TRUE(ended.ok()) << ended.status();
  auto back = c.Get("written");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, value);
  (*rpc).reset();
}

// A node that stops answering in the middle of a Read: the read fails at transfer_timeout_ms
// naming the node, and the reply that comes once the node runs again lands nowhere (the
// caller's buffer keeps what it held).
TEST_P(NodeTransferTest, AReadFromAStalledNodeTimesOutAndItsLateReplyLandsNowhere) {
  if (GetParam() != "tcp") GTEST_SKIP() << "Read is the path to nodes reached over tcp alone";
  StartCluster(Cluster::Options{});
  ClientOptions o = cluster_->ClientOpts("default");
  o.transfer_timeout_ms = 500;
  o.get_retries = 0;
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string v = MakeValue("stalled", 1, 4096);
  ASSERT_TRUE((*c)->Put("warm", v).ok());  // connects to the node: it is known as tcp-only
  ASSERT_TRUE((*c)->Put("stalled", v).ok());
  std::string buf(4096, 'x');
  cluster_->node(0)->Kill(SIGSTOP);
  ASSERT_TRUE(cluster_->node(0)->WaitStopped());
  auto n = (*c)->GetInto("stalled", buf.data(), buf.size());
  cluster_->node(0)->Kill(SIGCONT);
  EXPECT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("did not answer within"), std::string::npos) << n.status();
  std::this_thread::sleep_for(milliseconds(500));  // the node answers the old Read meanwhile
  EXPECT_EQ(buf, std::string(4096, 'x'));
  auto again = (*c)->GetInto("stalled", buf.data(), buf.size());  // and serves the next one
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(buf, v);
  EXPECT_NE((*c)->MetricsText().find("granary_client_inline_values_total{op=\"read\"} 1\n"),
            std::string::npos);
}

// A node that cannot reach a client for a Push (its process stopped, its link cut) gives up at
// the request's timeout_ms: it closes its endpoint to the client, answers DEADLINE_EXCEEDED,
// and holds the client off, so the next push fails at once instead of waiting out another
// timeout; both are counted. Once the back-off has passed it serves the client again. Over tcp
// only: on shared memory the node's write is a cma copy that needs nothing of the client.
TEST_P(NodeTransferTest, NodeGivesUpOnAStalledClientsPushHoldsItOffAndServesItAgain) {
  if (GetParam() != "tcp") {
    GTEST_SKIP() << "over shared memory a push is a cma copy, which a stalled client's worker "
                    "cannot hold up";
  }
  const uint16_t node_http = FreePort();
  Cluster::Options o;
  o.node_flags = {absl::StrCat("--metrics_port=", node_http), "--metrics_host=127.0.0.1"};
  StartCluster(o);
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(**created, "held", &v));
  RawPusher p;
  ASSERT_NO_FATAL_FAILURE(p.Connect(v.seg.node_address));
  const uint64_t src = v.at + proto::kAllocHeaderSize;

  p.Stall();
  const auto start = std::chrono::steady_clock::now();
  auto timed_out = p.Push(src, p.base(), v.value.size(), {v.at}, 500);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded) << timed_out.status();
  EXPECT_NE(timed_out.status().message().find(
                "push to client/push-test did not finish within 500 ms: the node closed its "
                "endpoint to it and holds it off"),
            std::string::npos)
      << timed_out.status();
  EXPECT_GE(waited, milliseconds(500));
  EXPECT_LT(waited, milliseconds(10'000));  // answered, not left to the caller's deadline
  // Held off: refused at once, counted.
  auto refused = p.Push(src, p.base(), v.value.size(), {v.at}, 500);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("client/push-test is unreachable"), std::string::npos)
      << refused.status();
  auto timeouts = ScrapeMetric(node_http, "granary_node_transfer_timeouts_total{kind=\"push\"}");
  ASSERT_TRUE(timeouts.ok()) << timeouts.status();
  EXPECT_EQ(*timeouts, 1);
  auto refusals = ScrapeMetric(node_http, "granary_node_peer_refusals_total");
  ASSERT_TRUE(refusals.ok()) << refusals.status();
  EXPECT_EQ(*refusals, 1);

  // The client comes back. Closing the endpoint stopped what the node had not sent yet, but
  // over tcp the bytes already in the sockets' buffers still land once the client's worker
  // runs again (seen here: the whole value): a close cannot recall them. What lands is the
  // requested value in the requested range and nothing else. Once the back-off (at most
  // kUnreachableInitialMs after a first timeout) has passed, the client is served again.
  p.Resume();
  std::this_thread::sleep_for(milliseconds(transport::RmaEngine::kUnreachableInitialMs + 100));
  const std::string landed = p.Buffer();
  const std::string zeros(landed.size() - v.value.size(), '\0');
  EXPECT_TRUE(landed.substr(v.value.size()) == zeros) << "bytes outside the pushed range";
  const std::string head = landed.substr(0, v.value.size());
  EXPECT_TRUE(head == v.value || head == std::string(v.value.size(), '\0'))
      << "the abandoned push left bytes that are neither the value nor untouched";
  p.Clear();
  auto ok = p.Push(src, p.base(), v.value.size(), {v.at});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(p.Buffer().substr(0, v.value.size()) == v.value);
}

INSTANTIATE_TEST_SUITE_P(Transports, NodeTransferTest, ::testing::Values("default", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace granary::testing
