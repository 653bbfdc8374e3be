// common/etcd's EtcdClient against a real etcd (Debian's etcd-server, 3.4) started as a child
// process: leases, range, put, txn compares, a streaming watch and its cancel, a dead endpoint
// and the switch to the next one. Skipped when /usr/bin/etcd is not installed.

#include "common/etcd/etcd_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/etcd/etcd_server.h"

namespace granary::etcd {
namespace {

using ::granary::testing::EtcdServer;
using Clock = std::chrono::steady_clock;

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) GTEST_SKIP() << EtcdServer::kBinary << " is not installed";
    std::string tmpl = ::testing::TempDir() + "granary_etcd_client_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<EtcdServer>(dir_);
    absl::Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
    auto c = EtcdClient::Create(etcd_->Endpoint(), 1000);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  void TearDown() override {
    etcd_.reset();
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }

  std::string dir_;
  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST_F(EtcdClientTest, PutRangeAndBinaryValues) {
  auto absent = client_->Range("k/absent");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_TRUE(absent->kvs.empty());
  const std::string value("a\0b\xff", 4);
  auto rev = client_->Put("k/one", value);
  ASSERT_TRUE(rev.ok()) << rev.status();
  auto got = client_->Range("k/one");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, value);
  EXPECT_EQ(got->kvs[0].create_revision, *rev);
  EXPECT_EQ(got->kvs[0].mod_revision, *rev);
  EXPECT_GE(got->revision, *rev);
}

TEST_F(EtcdClientTest, LeaseGrantKeepAliveRevoke) {
  auto lease = client_->LeaseGrantTtl(2);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->ttl_sec, 2);
  ASSERT_TRUE(client_->Put("k/leased", "v", lease->id).ok());
  auto ttl = client_->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(*ttl, 2);
  auto kv = client_->Range("k/leased");
  ASSERT_TRUE(kv.ok());
  ASSERT_EQ(kv->kvs.size(), 1u);
  EXPECT_EQ(kv->kvs[0].lease, lease->id);
  ASSERT_TRUE(client_->LeaseRevoke(lease->id).ok());
  kv = client_->Range("k/leased");
  ASSERT_TRUE(kv.ok());
  EXPECT_TRUE(kv->kvs.empty()) << "revoking the lease deletes its keys";
  ttl = client_->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_LE(*ttl, 0) << "a revoked lease has no TTL";
}

TEST_F(EtcdClientTest, LeaseExpiresWithoutKeepAlive) {
  auto lease = client_->LeaseGrantTtl(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put("k/expiring", "v", lease->id).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto ttl = client_->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_LE(*ttl, 0);
  auto kv = client_->Range("k/expiring");
  ASSERT_TRUE(kv.ok());
  EXPECT_TRUE(kv->kvs.empty());
}

TEST_F(EtcdClientTest, TxnCompareSuccessAndFailure) {
  // Create-if-absent: the first succeeds, the second fails and runs the failure branch.
  auto first = client_->Txn({Compare::CreateRevision("k/view", 0)}, {Op::Put("k/view", "a")},
                            {Op::Get("k/view")});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  auto kv = client_->Range("k/view");
  ASSERT_TRUE(kv.ok());
  ASSERT_EQ(kv->kvs.size(), 1u);
  EXPECT_EQ(kv->kvs[0].create_revision, first->revision) << "the txn's revision creates the key";

  auto second = client_->Txn({Compare::CreateRevision("k/view", 0)}, {Op::Put("k/view", "b")},
                             {Op::Get("k/view")});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 1u);
  ASSERT_EQ(second->ranges[0].kvs.size(), 1u);
  EXPECT_EQ(second->ranges[0].kvs[0].value, "a");

  // Compare on the exact create revision, and on a value.
  auto guarded = client_->Txn(
      {Compare::CreateRevision("k/view", first->revision), Compare::Value("k/view", "a")},
      {Op::Put("k/other", "x")});
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  EXPECT_TRUE(guarded->succeeded);
  auto wrong = client_->Txn({Compare::Value("k/view", "zzz")}, {Op::Put("k/other", "y")});
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_FALSE(wrong->succeeded);
  kv = client_->Range("k/other");
  ASSERT_TRUE(kv.ok());
  ASSERT_EQ(kv->kvs.size(), 1u);
  EXPECT_EQ(kv->kvs[0].value, "x") << "a failed compare wrote nothing";
  Compare mod{"k/other", Compare::Target::kMod, Compare::Result::kGreater, 0, {}};
  auto del = client_->Txn({mod}, {Op::Delete("k/other")});
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_TRUE(del->succeeded);
  kv = client_->Range("k/other");
  ASSERT_TRUE(kv.ok());
  EXPECT_TRUE(kv->kvs.empty());
}

TEST_F(EtcdClientTest, WatchSeesPutAndDeleteThenCancels) {
  auto start = client_->Range("k/w");
  ASSERT_TRUE(start.ok());
  std::vector<WatchEvent> seen;
  WatchCancel cancel;
  int64_t next = 0;
  absl::Status result;
  std::thread watcher([&] {
    result = client_->Watch(
        "k/w", start->revision + 1, 30000,
        [&](int64_t, const std::vector<WatchEvent>& events) {
          for (const auto& e : events) seen.push_back(e);
          return seen.size() < 2;
        },
        &cancel, &next);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto put_rev = client_->Put("k/w", "v1");
  ASSERT_TRUE(put_rev.ok());
  auto del = client_->Txn({}, {Op::Delete("k/w")});
  ASSERT_TRUE(del.ok());
  watcher.join();
  EXPECT_TRUE(result.ok()) << result;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(seen[0].kv.value, "v1");
  EXPECT_EQ(seen[0].kv.mod_revision, *put_rev);
  EXPECT_EQ(seen[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(seen[1].kv.key, "k/w");
  EXPECT_EQ(next, del->revision + 1);

  // A watch with nothing happening ends promptly on Cancel from another thread.
  WatchCancel idle_cancel;
  std::thread idle([&] {
    result = client_->Watch(
        "k/idle", 0, 30000, [](int64_t, const std::vector<WatchEvent>&) { return true; },
        &idle_cancel, &next);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  idle_cancel.Cancel();
  idle.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(EtcdClientTest, DeadEndpointIsUnavailableWithinTimeoutAndNamed) {
  const std::string dead = absl::StrCat("127.0.0.1:", ::granary::testing::FreeLoopbackPort());
  auto c = EtcdClient::Create(dead, 500);
  ASSERT_TRUE(c.ok());
  const auto t0 = Clock::now();
  auto r = (*c)->Range("k");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(dead), absl::string_view::npos) << r.status();
  auto ka = (*c)->LeaseKeepAlive(1);
  EXPECT_EQ(ka.status().code(), absl::StatusCode::kUnavailable);
  int64_t next = 0;
  absl::Status w = (*c)->Watch(
      "k", 0, 1000, [](int64_t, const std::vector<WatchEvent>&) { return true; }, nullptr, &next);
  EXPECT_EQ(w.code(), absl::StatusCode::kUnavailable) << w;
  EXPECT_NE(w.message().find(dead), absl::string_view::npos) << w;

  // A stopped etcd (SIGSTOP: it accepts, never answers) times out too.
  auto live = EtcdClient::Create(etcd_->Endpoint(), 500);
  ASSERT_TRUE(live.ok());
  etcd_->Signal(SIGSTOP);
  const auto t1 = Clock::now();
  auto stalled = (*live)->LeaseGrantTtl(5);
  const auto took = Clock::now() - t1;
  etcd_->Signal(SIGCONT);
  EXPECT_EQ(stalled.status().code(), absl::StatusCode::kUnavailable) << stalled.status();
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_NE(stalled.status().message().find(etcd_->Endpoint()), absl::string_view::npos);
}

TEST_F(EtcdClientTest, FailsOverToTheNextEndpoint) {
  const std::string dead = absl::StrCat("127.0.0.1:", ::granary::testing::FreeLoopbackPort());
  auto c = EtcdClient::Create(absl::StrCat(dead, ",", etcd_->Endpoint()), 500);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Describe(), absl::StrCat("etcd:", dead, ",", etcd_->Endpoint()));
  auto lease = (*c)->LeaseGrantTtl(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE((*c)->Put("k/f", "v").ok());
  auto r = (*c)->Range("k/f");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs.size(), 1u);
  // The endpoint that answered is tried first from then on: no more time spent on the dead one.
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*c)->LeaseKeepAlive(lease->id).ok());
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
}

TEST(EtcdEndpointsTest, BadEntriesAreNamed) {
  auto r = ParseEndpoints("127.0.0.1:2379,nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'nope'"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(ParseEndpoints("h:0").ok());
  EXPECT_FALSE(ParseEndpoints("h:1,,h:2").ok());
  EXPECT_FALSE(EtcdClient::Create("h:1", 0).ok());
  auto ok = ParseEndpoints("http://a:1, [::1]:2");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].host, "::1");
}

}  // namespace
}  // namespace granary::etcd
