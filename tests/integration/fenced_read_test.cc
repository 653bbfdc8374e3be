// Fenced reads and node loss on real processes.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class FencedReadTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  std::unique_ptr<client::ClientImpl> NewClient() {
    auto c = client::ClientImpl::Create(cluster_->ClientOpts());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::unique_ptr<Cluster> cluster_;
};

// A reader holds a descriptor past its lease; meanwhile the object is removed and the same
// space is written by another object. The stale read gets a retryable error, never the other
// object's bytes.
TEST_F(FencedReadTest, StaleReaderGetsRetryableErrorNotAnotherObjectsBytes) {
  Cluster::Options o;
  o.lease_ttl_ms = 200;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  auto reader = NewClient(), writer = NewClient();
  constexpr size_t kSize = 256 << 10;
  const std::string x = MakeValue("x", 1, kSize), y = MakeValue("y", 1, kSize);
  ASSERT_TRUE(writer->Put("x", x).ok());
  auto got = reader->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                              proto::GetRequest{{"x"}});
  ASSERT_TRUE(got.ok() && got->results[0].status.ToStatus().ok());
  const proto::GetResult stale = got->results[0];
  // The fresh descriptor reads fine.
  auto fresh = reader->ReadReplica("x", stale.generation, stale.size, stale.replicas[0]);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(*fresh == x);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the lease runs out
  ASSERT_TRUE(writer->Remove("x").ok());
  ASSERT_TRUE(writer->Put("y", y).ok());
  auto gy = writer->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                             proto::GetRequest{{"y"}});
  ASSERT_TRUE(gy.ok() && gy->results[0].status.ToStatus().ok());
  ASSERT_EQ(gy->results[0].replicas[0].address, stale.replicas[0].address)
      << "the test needs y to reuse x's space";
  auto late = reader->ReadReplica("x", stale.generation, stale.size, stale.replicas[0]);
  ASSERT_FALSE(late.ok()) << "a stale read returned bytes; equal to y's: " << (*late == y);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  EXPECT_NE(late.status().message().find("retry"), absl::string_view::npos) << late.status();
  // The normal path sees the current object.
  EXPECT_EQ(reader->Get("x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(*reader->Get("y") == y);
}

// replica_num=2 during a read-heavy run: objects with a surviving replica never fail; objects
// whose only replica died read as NOT_FOUND (never garbage) and are counted as lost.
TEST_F(FencedReadTest, NodeLossKeepsReplicatedObjectsAndCountsTheLostOnes) {
  Cluster::Options o;
  o.nodes = 2;
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);
  ClientOptions two = cluster_->ClientOpts();
  two.replica_num = 2;
  auto rc2 = Client::Create(two);
  ASSERT_TRUE(rc2.ok());
  auto c1 = NewClient();
  constexpr int kN = 30;
  for (int i = 0; i < kN; ++i) {
    std::string k = absl::StrCat("r2-", i), s = absl::StrCat("r1-", i);
    ASSERT_TRUE((*rc2)->Put(k, MakeValue(k, 1, 32768)).ok());
    ASSERT_TRUE(c1->Put(s, MakeValue(s, 1, 32768)).ok());
  }
  // Single-replica objects on node 0, found by asking which segment holds them.
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, reads{0};
  std::thread readers([&] {
    while (!stop.load()) {
      for (int i = 0; i < kN; ++i) {
        std::string k = absl::StrCat("r2-", i);
        auto v = (*rc2)->Get(k);
        if (!v.ok() || *v != MakeValue(k, 1, 32768)) ++failed;
        ++reads;
      }
    }
  });
  // Kill the node that holds r1-0's only replica.
  auto where = c1->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                            proto::GetRequest{{"r1-0"}});
  ASSERT_TRUE(where.ok() && where->results[0].status.ToStatus().ok());
  std::string address;
  auto segments = c1->Segments();
  ASSERT_TRUE(segments.ok()) << segments.status();
  for (const auto& seg : *segments) {
    if (seg.segment_id == where->results[0].replicas[0].segment_id) address = seg.node_address;
  }
  int victim = -1;
  const std::string port = address.substr(address.rfind(':') + 1);
  for (int i = 0; i < cluster_->node_count(); ++i) {
    if (cluster_->node(i)->Log().find("listening on port " + port + ",") != std::string::npos) {
      victim = i;
    }
  }
  ASSERT_GE(victim, 0) << address;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  cluster_->node(victim)->Kill(SIGKILL);
  cluster_->node(victim)->Wait();
  ASSERT_TRUE(cluster_->WaitForSegments(1).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  readers.join();
  EXPECT_EQ(failed.load(), 0) << "of " << reads.load() << " reads";
  int lost = 0;
  for (int i = 0; i < kN; ++i) {
    std::string s = absl::StrCat("r1-", i);
    auto v = c1->Get(s);
    if (v.ok()) {
      EXPECT_TRUE(*v == MakeValue(s, 1, 32768)) << s;
    } else {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
      ++lost;
    }
  }
  EXPECT_GT(lost, 0) << "no single-replica object was on the killed node";
  auto m = cluster_->Metric("granary_master_lost_objects_total");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, lost);
  std::cerr << "[ measured ] " << reads.load() << " reads during node loss, 0 failed; " << lost
            << " single-replica objects lost and counted\n";
}

}  // namespace
}  // namespace granary::testing
