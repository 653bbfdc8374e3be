// master/ha's LeaderElection against a real etcd child process: a graceful stop keeps the view
// for the fencing margin after the last admission (a revoke lets a successor in no sooner than
// an expiry would), and the successor is told the previous leader's view, whose fencing margin
// it credits against its quarantine. Skipped when /usr/bin/etcd is not installed.

#include "master/ha/leader_election.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "tests/integration/etcd/etcd_server.h"

namespace granary::master::ha {
namespace {

using ::granary::testing::EtcdServer;

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) GTEST_SKIP() << EtcdServer::kBinary << " is not installed";
    std::string tmpl = ::testing::TempDir() + "granary_election_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<EtcdServer>(dir_);
    absl::Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
    for (auto* c : {&a_client_, &b_client_, &probe_}) {
      auto made = etcd::EtcdClient::Create(etcd_->Endpoint(), 1000);
      ASSERT_TRUE(made.ok()) << made.status();
      *c = *std::move(made);
    }
    options_.cluster_id = absl::StrCat("election_", getpid());
    options_.lease_ttl_sec = 2;
    options_.margin_ms = 400;
  }
  void TearDown() override {
    etcd_.reset();
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }
  // Polls until `f` holds; false after `ms`.
  template <typename F>
  static bool WaitFor(F f, int64_t ms) {
    const int64_t end = common::MonotonicNs() + ms * 1'000'000;
    while (common::MonotonicNs() < end) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return f();
  }
  // Whether master_view still names `rpc` (an unreadable view counts as still there). The
  // successor may publish its own view within milliseconds of the old one going, so a poll
  // for "no view at all" can miss the gap.
  bool ViewNames(const std::string& rpc) {
    auto r = probe_->Range(absl::StrCat("granary/", options_.cluster_id, "/master_view"));
    if (!r.ok()) return true;
    return !r->kvs.empty() && r->kvs[0].value.find(rpc) != std::string::npos;
  }

  std::string dir_;
  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<etcd::EtcdClient> a_client_, b_client_, probe_;
  ElectionOptions options_;
};

TEST_F(LeaderElectionTest, StopKeepsTheViewForTheMarginAndTheSuccessorLearnsThePreviousView) {
  std::atomic<bool> a_elected{false};
  LeaderElection::Callbacks ca;
  ca.on_elected = [&](int64_t, uint64_t, const std::string& previous) {
    EXPECT_EQ(previous, "") << "the first leader saw no view before it";
    a_elected.store(true);
  };
  auto a = LeaderElection::Create(a_client_.get(), options_, ca);
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->Start(R"({"rpc":"a:1","fence_margin_ms":400})");
  ASSERT_TRUE(WaitFor([&] { return (*a)->Leading(); }, 10'000));
  EXPECT_TRUE(a_elected.load());

  granary::common::Mutex mu;
  std::string b_previous;
  std::atomic<int64_t> b_elected_ns{0};
  LeaderElection::Callbacks cb;
  cb.on_elected = [&](int64_t, uint64_t, const std::string& previous) {
    granary::common::MutexLock lock(&mu);
    b_previous = previous;
    b_elected_ns.store(common::MonotonicNs());
  };
  auto b = LeaderElection::Create(b_client_.get(), options_, cb);
  ASSERT_TRUE(b.ok()) << b.status();
  (*b)->Start(R"({"rpc":"b:1","fence_margin_ms":400})");
  // b stands by and has read a's view.
  ASSERT_TRUE(
      WaitFor([&] { return (*b)->active_view().value.find("a:1") != std::string::npos; }, 5'000));
  EXPECT_FALSE((*b)->Leading());

  // a stops on another thread; Leading() turns false at once, the view stays for the margin.
  std::thread stopper([&] { (*a)->Stop(); });
  struct Joiner {  // joined on every path, a failed ASSERT's early return included
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{stopper};
  ASSERT_TRUE(WaitFor([&] { return !(*a)->Leading(); }, 2'000));
  const int64_t fenced_ns = common::MonotonicNs();
  ASSERT_TRUE(WaitFor([&] { return !ViewNames("a:1"); }, 5'000));
  const int64_t gone_ns = common::MonotonicNs();
  stopper.join();
  std::cerr << "[ measured ] fenced -> view gone: " << (gone_ns - fenced_ns) / 1'000'000
            << " ms (margin " << options_.margin_ms << " ms)\n";
  // A little scheduling slack: the fence is seen by this thread up to one poll after it.
  EXPECT_GE(gone_ns - fenced_ns, (options_.margin_ms - 10) * 1'000'000);
  EXPECT_LT(gone_ns - fenced_ns, (options_.lease_ttl_sec * 1000 - 200) * 1'000'000)
      << "the revoke should beat the expiry";

  ASSERT_TRUE(WaitFor([&] { return (*b)->Leading(); }, 5'000));
  EXPECT_GE(b_elected_ns.load(), fenced_ns + (options_.margin_ms - 10) * 1'000'000)
      << "the successor came in before the margin had passed";
  {
    granary::common::MutexLock lock(&mu);
    EXPECT_EQ(b_previous, R"({"rpc":"a:1","fence_margin_ms":400})");
  }
  EXPECT_EQ(FenceMarginOfView(R"({"rpc":"a:1","fence_margin_ms":400})"), 400);
  (*b)->Stop();
}

TEST(FenceMarginOfViewTest, OnlyADeclaredNonNegativeIntegerCounts) {
  EXPECT_EQ(FenceMarginOfView(""), 0);
  EXPECT_EQ(FenceMarginOfView("not json"), 0);
  EXPECT_EQ(FenceMarginOfView(R"({"rpc":"a:1"})"), 0) << "an older master's view";
  EXPECT_EQ(FenceMarginOfView(R"({"fence_margin_ms":"500"})"), 0);
  EXPECT_EQ(FenceMarginOfView(R"({"fence_margin_ms":-5})"), 0);
  EXPECT_EQ(FenceMarginOfView(R"({"fence_margin_ms":500.5})"), 0);
  EXPECT_EQ(FenceMarginOfView(R"({"fence_margin_ms":500})"), 500);
  EXPECT_EQ(FenceMarginOfView(R"({"fence_margin_ms":99999999})"), 3'600'000);
}

}  // namespace
}  // namespace granary::master::ha
