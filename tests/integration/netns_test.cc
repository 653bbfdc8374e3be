// The cluster on separate hosts (tests/integration/netns.h): master, nodes and clients each in
// a network and IPC namespace of their own, over tcp on veth links, with links cut, hosts
// partitioned from each other and delay added (netem, or where the kernel has none, TAP links
// the test process carries with the delay). Skips where namespaces cannot be made (not root).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kUsed[] = "granary_master_used_bytes{tier=\"host\"}";

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status st = NetnsFabric::Supported();
    if (!st.ok()) GTEST_SKIP() << "no network namespaces here: " << st;
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
  }

  void StartCluster(Cluster::Options o) {
    o.netns = true;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  std::unique_ptr<Client> NewClient(int replica_num, int64_t transfer_timeout_ms = 10'000,
                                    int64_t rpc_timeout_ms = 10'000) {
    ClientOptions o = cluster_->ClientOpts();
    o.replica_num = replica_num;
    o.transfer_timeout_ms = transfer_timeout_ms;
    o.rpc_timeout_ms = rpc_timeout_ms;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  double Metric(const std::string& sample) {
    auto v = cluster_->Metric(sample);
    return v.ok() ? *v : -1;
  }
  // Polls until pred() or timeout; returns the milliseconds it took, or -1.
  template <typename Pred>
  int64_t WaitFor(Pred pred, int64_t timeout_ms) {
    auto t0 = Clock::now();
    while (MsSince(t0) < timeout_ms) {
      if (pred()) return MsSince(t0);
      std::this_thread::sleep_for(milliseconds(20));
    }
    return -1;
  }

  std::unique_ptr<Cluster> cluster_;
};

// The value of a client's counter sample ("name" or "name{labels}"), or -1.
int64_t Counter(const std::string& metrics, const std::string& sample) {
  size_t at = metrics.find("\n" + sample + " ");
  return at == std::string::npos ? -1 : std::stol(metrics.substr(at + sample.size() + 2));
}

TEST_F(NetnsTest, PutGetIsByteExactAcrossHostsOverTcpWithTwoReplicas) {
  Cluster::Options o;
  o.nodes = 2;
  o.node_segment_size = "64MB";
  StartCluster(o);
  const std::vector<size_t> sizes = {size_t{1} << 10, size_t{1} << 20, size_t{8} << 20};
  // Both data paths between hosts over tcp: Read and Write messages for every value (the
  // default), and one-sided transfers.
  for (const std::string path : {"messages", "one_sided"}) {
    SCOPED_TRACE(path);
    ClientOptions co = cluster_->ClientOpts();
    co.replica_num = 2;
    co.tcp_data_between_hosts = path;
    auto created = Client::Create(co);
    ASSERT_TRUE(created.ok()) << created.status();
    std::unique_ptr<Client> c = std::move(*created);
    std::vector<std::string> keys, values;
    std::vector<absl::string_view> views;
    for (size_t size : sizes) {
      keys.push_back(absl::StrCat(path, "-value-", size));
      values.push_back(MakeValue(keys.back(), 1, size));
    }
    for (const auto& v : values) views.push_back(v);
    for (const auto& st : c->BatchPut(keys, views)) ASSERT_TRUE(st.ok()) << st;
    auto got = c->BatchGet(keys);
    ASSERT_EQ(got.size(), keys.size());
    std::string buf(sizes.back(), '\0');
    ASSERT_TRUE(c->RegisterBuffer(buf.data(), buf.size()).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status();
      EXPECT_TRUE(*got[i] == values[i]) << "bytes differ for " << keys[i];
      // Into a registered buffer too.
      auto n = c->GetInto(keys[i], buf.data(), buf.size());
      ASSERT_TRUE(n.ok()) << n.status();
      EXPECT_TRUE(buf.compare(0, *n, values[i]) == 0 && *n == values[i].size())
          << "bytes differ for " << keys[i] << " (GetInto)";
    }
    ASSERT_TRUE(c->UnregisterBuffer(buf.data()).ok());
    // Nothing went over shared memory: every data endpoint is tcp.
    std::string metrics = c->MetricsText();
    EXPECT_NE(metrics.find("rma=\"tcp\""), std::string::npos) << metrics;
    EXPECT_EQ(metrics.find("rma=\"cma\""), std::string::npos) << metrics;
    EXPECT_EQ(metrics.find("rma=\"sysv\""), std::string::npos) << metrics;
    EXPECT_EQ(metrics.find("rma=\"posix\""), std::string::npos) << metrics;
    const int64_t inline_reads =
        Counter(metrics, "granary_client_inline_values_total{op=\"read\"}");
    const int64_t inline_writes =
        Counter(metrics, "granary_client_inline_values_total{op=\"write\"}");
    const int64_t pushed = Counter(metrics, "granary_client_pushed_reads_total");
    if (path == "messages") {
      // Every value: 3 keys x 2 replicas written, 3 keys read twice.
      EXPECT_EQ(inline_writes, 6) << metrics;
      EXPECT_EQ(inline_reads, 6) << metrics;
      EXPECT_EQ(pushed, 0) << metrics;
    } else {
      // One-sided through the endpoints to the nodes' worker addresses, all of it: across hosts
      // UCX 1.13 reports no rma lane on such an endpoint when it is made, so the client never
      // learns that the node is tcp-only and neither reads inline nor asks for a Push.
      EXPECT_EQ(inline_writes, 0) << metrics;
      EXPECT_EQ(inline_reads, 0) << metrics;
      EXPECT_EQ(pushed, 0) << metrics;
    }
  }
  // Two replicas of each, for both clients: the master accounts for all of them.
  EXPECT_GE(Metric(kUsed), 4.0 * ((1 << 10) + (1 << 20) + (8 << 20)));
}

TEST_F(NetnsTest, ReadFailsOverWhenANodesLinkIsCutMidRead) {
  constexpr int64_t kTransferTimeoutMs = 2000;
  constexpr size_t kSize = 4 << 20;
  constexpr int kKeys = 8;
  Cluster::Options o;
  o.nodes = 2;
  o.node_segment_size = "96MB";
  // The master still hands out the cut node's replicas for all of the test (client_ttl): the
  // client must not connect to it again in that window (UCX 1.13 connects over tcp with a
  // blocking connect(), about 3 s until ARP gives up, on the client's only worker thread).
  o.client_ttl_sec = 10;
  StartCluster(o);
  auto c = NewClient(/*replica_num=*/2, kTransferTimeoutMs, /*rpc_timeout_ms=*/kTransferTimeoutMs);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> values;
  for (int i = 0; i < kKeys; ++i) {
    values.push_back(MakeValue(absl::StrCat("k", i), 1, kSize));
    ASSERT_TRUE(c->Put(absl::StrCat("k", i), values.back()).ok());
  }
  std::atomic<bool> cut{false}, stop{false};
  std::atomic<int> reads_after_cut{0}, ok_after_cut{0}, wrong{0};
  std::atomic<int64_t> slowest_ms{0};
  std::vector<std::string> failures;
  auto t_cut = Clock::now();
  std::thread reader([&] {
    for (int i = 0; !stop.load(); ++i) {
      auto t0 = Clock::now();
      auto got = c->Get(absl::StrCat("k", i % kKeys));
      // Every read still running when the link went down counts, the one in flight above all.
      if (cut.load()) {
        int64_t ms = MsSince(t0);
        slowest_ms = std::max<int64_t>(slowest_ms.load(), ms);
        ++reads_after_cut;
        if (got.ok()) ++ok_after_cut;
        if (!got.ok() && failures.size() < 5) failures.push_back(got.status().ToString());
      }
      if (got.ok() && *got != values[i % kKeys]) ++wrong;
    }
  });
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_TRUE(cluster_->fabric()->SetLink(NetnsFabric::NodeHost(0), false).ok());
  t_cut = Clock::now();
  cut = true;
  // Long enough for every key to be read after the cut, for a read that was waiting on the cut
  // node to time out and go to the other replica, and for the node's back-off to expire.
  while (MsSince(t_cut) < 3 * kTransferTimeoutMs) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(reads_after_cut.load(), kKeys);
  EXPECT_EQ(ok_after_cut.load(), reads_after_cut.load())
      << "reads after the cut failed instead of using the other replica; first: "
      << (failures.empty() ? "" : failures[0]);
  std::cerr << reads_after_cut.load() << " reads after the cut, slowest " << slowest_ms.load()
            << " ms\n";
  // One transfer timeout for the read stuck on the cut node, then the other replica.
  EXPECT_LE(slowest_ms.load(), kTransferTimeoutMs + 1000);
  // The cut node was backed off, not tried again in a loop: a handful of timed-out attempts in
  // 6 s (back-off from 0.5 s doubling, each attempt a transfer timeout), the other reads
  // refused at once and served by the other replica.
  std::string metrics = c->MetricsText();
  auto counter = [&](const std::string& name) { return Counter(metrics, name); };
  EXPECT_GE(counter("granary_client_node_transfer_timeouts_total"), 1) << metrics;
  EXPECT_LE(counter("granary_client_node_transfer_timeouts_total"), 4) << metrics;
  EXPECT_GT(counter("granary_client_node_backoff_refusals_total"), 0) << metrics;
  ASSERT_TRUE(cluster_->fabric()->SetLink(NetnsFabric::NodeHost(0), true).ok());
}

TEST_F(NetnsTest, ClientCutFromMasterMidPutIsRefundedAndReconnects) {
  constexpr double kTtlSec = 2;
  Cluster::Options o;
  o.nodes = 1;
  o.netns_clients = 2;
  o.client_ttl_sec = kTtlSec;
  StartCluster(o);
  auto c = NewClient(/*replica_num=*/1, /*transfer_timeout_ms=*/2000, /*rpc_timeout_ms=*/1000);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Put("before", MakeValue("before", 1, 1 << 20)).ok());
  const double committed = Metric(kUsed);
  ASSERT_GT(committed, 0);
  const double expired_before = Metric("granary_master_sessions_expired_total");
  // A writer on the other client host holds 8 MiB between PutStart and PutEnd.
  NetnsFabric* f = cluster_->fabric();
  const std::string writer_host = NetnsFabric::ClientHost(1);
  auto writer =
      Process::Start(f->Wrap(writer_host, {BinDir() + "/put_start_hang", cluster_->master_address(),
                                           "default", "doomed", std::to_string(8 << 20)}),
                     f->Env(writer_host), cluster_->dir() + "/writer.log");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_GE(WaitFor([&] { return (*writer)->Log().find("STARTED") != std::string::npos; }, 10'000),
            0)
      << (*writer)->Log();
  ASSERT_GE(Metric(kUsed), committed + (8 << 20));
  // Both client hosts lose their links; the writer keeps running, silent.
  ASSERT_TRUE(f->SetLink(writer_host, false).ok());
  ASSERT_TRUE(f->SetLink(NetnsFabric::ClientHost(0), false).ok());
  auto t_cut = Clock::now();
  // While cut, a put fails within its timeouts instead of hanging.
  auto t0 = Clock::now();
  absl::Status during = c->Put("during", "x");
  EXPECT_FALSE(during.ok());
  EXPECT_LE(MsSince(t0), 5000) << during;
  ASSERT_GE(
      WaitFor([&] { return Metric(kUsed) == committed; }, static_cast<int64_t>(3000 * kTtlSec)), 0)
      << "the writer's 8 MiB were not refunded; used " << Metric(kUsed) << ", committed "
      << committed;
  // Refunded within 2 x client_ttl of the cut (plus the scrape's own time).
  const int64_t refunded_ms = MsSince(t_cut);
  EXPECT_LE(refunded_ms, static_cast<int64_t>(2000 * kTtlSec) + 300);
  EXPECT_EQ(Metric("granary_master_objects_processing"), 0);
  EXPECT_GE(Metric("granary_master_sessions_expired_total"), expired_before + 2);
  // The link returns: the client reconnects and works.
  ASSERT_TRUE(f->SetLink(NetnsFabric::ClientHost(0), true).ok());
  std::string v = MakeValue("after", 1, 1 << 20);
  absl::Status put;
  int64_t back_ms = WaitFor([&] { return (put = c->Put("after", v)).ok(); }, 15'000);
  ASSERT_GE(back_ms, 0) << put;
  auto got = c->Get("after");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == v);
  auto old = c->Get("before");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(*old == MakeValue("before", 1, 1 << 20));
  (*writer)->Kill(SIGKILL);
  (*writer)->Wait();
  std::cerr << "refunded " << refunded_ms << " ms after the cut; client back after " << back_ms
            << " ms\n";
}

TEST_F(NetnsTest, NodeCutFromMasterIsDroppedAndComesBackWithItsObjects) {
  constexpr double kTtlSec = 2;
  constexpr int kKeys = 24;
  Cluster::Options o;
  o.nodes = 2;
  o.client_ttl_sec = kTtlSec;
  StartCluster(o);
  auto c = NewClient(/*replica_num=*/1, /*transfer_timeout_ms=*/2000, /*rpc_timeout_ms=*/2000);
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(c->Put(absl::StrCat("k", i), MakeValue(absl::StrCat("k", i), 1, 64 << 10)).ok());
  }
  // A node learns its objects from the master's inventory records, sent after each commit: an
  // object committed just before the partition and not yet recorded there is lost with the
  // segment (the master's copy goes at the TTL). Wait for the records first.
  ASSERT_GE(
      WaitFor([&] { return Metric("granary_master_inventory_records_sent_total") >= kKeys; }, 5000),
      0);
  std::this_thread::sleep_for(milliseconds(200));
  NetnsFabric* f = cluster_->fabric();
  const std::string node0 = NetnsFabric::NodeHost(0);
  ASSERT_TRUE(f->SetPartition(node0, "master", true).ok());
  auto t_cut = Clock::now();
  int64_t dropped_ms =
      WaitFor([&] { return Metric("granary_master_segments") == 1; }, 4000 * kTtlSec);
  ASSERT_GE(dropped_ms, 0) << "the master kept the partitioned node's segment";
  EXPECT_GE(dropped_ms, 1000 * kTtlSec * 0.5);
  // Its replicas are no longer handed out: those keys are gone, the others read byte-exact.
  int missing = 0;
  for (int i = 0; i < kKeys; ++i) {
    std::string key = absl::StrCat("k", i);
    auto got = c->Get(key);
    if (got.ok()) {
      EXPECT_TRUE(*got == MakeValue(key, 1, 64 << 10)) << key;
    } else {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
      ++missing;
    }
  }
  EXPECT_GT(missing, 0) << "no key was on node0";
  EXPECT_LT(missing, kKeys) << "every key was on node0";
  // New puts go to the reachable node.
  ASSERT_TRUE(c->Put("during", MakeValue("during", 1, 64 << 10)).ok());
  // The path returns: the node re-mounts and its objects come back.
  ASSERT_TRUE(f->SetPartition(node0, "master", false).ok());
  int64_t back_ms = WaitFor([&] { return Metric("granary_master_segments") == 2; }, 15'000);
  ASSERT_GE(back_ms, 0) << "the node did not re-mount";
  int present = 0;
  int64_t all_ms = WaitFor(
      [&] {
        present = 0;
        for (int i = 0; i < kKeys; ++i) {
          auto got = c->Get(absl::StrCat("k", i));
          if (got.ok() && *got == MakeValue(absl::StrCat("k", i), 1, 64 << 10)) ++present;
        }
        return present == kKeys;
      },
      10'000);
  if (all_ms < 0) {
    for (int i = 0; i < kKeys; ++i) {
      auto got = c->Get(absl::StrCat("k", i));
      if (!got.ok()) {
        ADD_FAILURE() << "k" << i << ": " << got.status();
      } else if (*got != MakeValue(absl::StrCat("k", i), 1, 64 << 10)) {
        ADD_FAILURE() << "k" << i << ": WRONG BYTES";
      }
    }
  }
  EXPECT_GE(all_ms, 0) << present << " of " << kKeys << " keys read back after the re-mount";
  auto during = c->Get("during");
  ASSERT_TRUE(during.ok()) << during.status();
  std::cerr << "dropped " << dropped_ms << " ms after the cut (" << MsSince(t_cut) << " ms ago), "
            << missing << " keys were on it; re-mounted " << back_ms
            << " ms after the path returned\n";
}

// Where the kernel has no netem (this project's machines), the links are TAP pairs whose frames
// the test process carries with the delay (NetnsFabric's DelayLink).
TEST_F(NetnsTest, ABatchOf32GetsCostsAboutOneRoundTripUnder50MsDelay) {
  Cluster::Options o;
  o.tap_links = !NetnsFabric::NetemSupported().ok();
  absl::Status delay = NetnsFabric::DelaySupported(o.tap_links);
  if (!delay.ok()) GTEST_SKIP() << delay;
  o.nodes = 2;
  StartCluster(o);
  auto c = NewClient(/*replica_num=*/1);
  ASSERT_NE(c, nullptr);
  std::vector<std::string> keys;
  for (int i = 0; i < 32; ++i) {
    keys.push_back(absl::StrCat("k", i));
    ASSERT_TRUE(c->Put(keys.back(), MakeValue(keys.back(), 1, 4096)).ok());
  }
  // Warm every endpoint before the delay, so no connection set-up is timed.
  for (const auto& r : c->BatchGet(keys)) ASSERT_TRUE(r.ok()) << r.status();
  NetnsFabric* f = cluster_->fabric();
  for (const std::string& h : {std::string("master"), NetnsFabric::NodeHost(0),
                               NetnsFabric::NodeHost(1), NetnsFabric::ClientHost(0)}) {
    ASSERT_TRUE(f->SetNetem(h, 50, 0).ok());
  }
  int64_t single = INT64_MAX, batch = INT64_MAX;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    ASSERT_TRUE(c->Get(keys[round]).ok());
    single = std::min(single, MsSince(t0));
    t0 = Clock::now();
    for (const auto& r : c->BatchGet(keys)) ASSERT_TRUE(r.ok()) << r.status();
    batch = std::min(batch, MsSince(t0));
  }
  std::cerr << "single get " << single << " ms, batch of 32 " << batch << " ms"
            << (o.tap_links ? " (TAP links)" : " (netem)") << "\n";
  // The delay is really there: a get crosses the client's and a node's link at least once.
  EXPECT_GE(single, 50);
  EXPECT_LT(batch, 3 * single) << "single " << single << " ms, batch " << batch << " ms";
}

}  // namespace
}  // namespace granary::testing
