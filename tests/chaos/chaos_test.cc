// Chaos with invariants: a real master, three nodes and several clients on loopback run random
// operations while faults are injected (kill -9 of nodes and writers, node restarts, kill -9 of
// the master and its restart, which rebuilds from the nodes' inventories, puts whose deadline
// runs out, read leases never released). Checked during and after the run:
//   - no read ever returns wrong bytes (values derive from key and version; every read is checked),
//   - after quiescence the quota ledger is exact: charged == committed bytes, in flight == 0,
//   - no two live allocations overlap,
//   - after everything is removed, all segment space is free.
// GRANARY_CHAOS_SECONDS sets the length of the random run (default 150: about 3 minutes with
// start-up and the checks at the end). GRANARY_CHAOS_NETNS=1 runs master, nodes and clients as
// separate hosts (network namespaces, tests/integration/netns.h; root), where half the node
// kills become node link cuts; GRANARY_CHAOS_KILLS=0 replaces every kill of master or node with
// a link cut (separate hosts) or a writer kill (one host). GRANARY_CHAOS_REPORT=F
// writes the figures as JSON to F, with the RSS of master and nodes once the run has warmed up
// and at its end (bench/soak.sh runs it that way).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "tests/integration/cluster.h"
#include "tests/integration/netns.h"

namespace granary::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

class ChaosTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  json Get(const std::string& path) {
    auto body = cluster_->MasterHttpGet(path);
    EXPECT_TRUE(body.ok()) << path << ": " << body.status();
    return body.ok() ? json::parse(*body) : json();
  }
  std::unique_ptr<Cluster> cluster_;
};

// A process's resident set in KiB (VmRSS), 0 if it cannot be read.
uint64_t RssKib(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// RSS of the master and of each node, and the master's object count, at one moment.
json Sample(Cluster* c) {
  json s;
  s["master_rss_kib"] = RssKib(c->master()->pid());
  s["master_pid"] = c->master()->pid();
  json nodes = json::array(), pids = json::array();
  for (int i = 0; i < c->node_count(); ++i) {
    nodes.push_back(RssKib(c->node(i)->pid()));
    pids.push_back(c->node(i)->pid());
  }
  s["node_rss_kib"] = nodes;
  s["node_pids"] = pids;
  auto objects = c->Metric("granary_master_objects");
  s["objects"] = objects.ok() ? *objects : -1;
  return s;
}

TEST_F(ChaosTest, InvariantsHoldUnderFaults) {
  const char* env = std::getenv("GRANARY_CHAOS_SECONDS");
  const int seconds = env != nullptr ? std::max(5, std::atoi(env)) : 150;
  char tmpl[] = "/tmp/granary_chaos_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string policy = std::string(tmpl) + "/q.yaml";
  std::ofstream(policy) << "version: 1\ntenants:\n  - name: t0\n    quota: 1GB\n"
                           "  - name: t1\n    quota: 1GB\n";
  const bool netns = std::getenv("GRANARY_CHAOS_NETNS") != nullptr &&
                     std::string(std::getenv("GRANARY_CHAOS_NETNS")) == "1";
  if (netns) {
    if (absl::Status st = NetnsFabric::Supported(); !st.ok()) {
      GTEST_SKIP() << "GRANARY_CHAOS_NETNS=1 needs network namespaces: " << st;
    }
  }
  const char* report_path = std::getenv("GRANARY_CHAOS_REPORT");
  // GRANARY_CHAOS_KILLS=0: no kill -9 of master or nodes, so they live through the whole run
  // (the soak's RSS figures then describe one process each).
  const bool kills = std::getenv("GRANARY_CHAOS_KILLS") == nullptr ||
                     std::string(std::getenv("GRANARY_CHAOS_KILLS")) != "0";
  Cluster::Options o;
  o.netns = netns;
  o.nodes = 3;
  o.node_segment_size = "64MB";
  o.client_ttl_sec = 1;
  o.put_start_timeout_sec = 2;
  o.lease_ttl_ms = 500;
  o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + policy};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, wrong_bytes{0}, errors{0};
  std::mutex report_mu;
  constexpr int kWorkers = 4, kKeys = 40;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      ClientOptions co = cluster_->ClientOpts(absl::StrCat("t", w % 2));
      co.replica_num = 1 + w % 2;
      co.transfer_timeout_ms = 3000;
      co.rpc_timeout_ms = 3000;
      auto client = Client::Create(co);
      if (!client.ok()) {
        ++errors;
        return;
      }
      std::mt19937 rng(77 + w);
      std::map<std::string, std::set<uint64_t>> written;  // every version ever attempted
      uint64_t next_version = 1;
      while (!stop.load()) {
        std::string key = absl::StrCat("w", w, "-k", rng() % kKeys);
        switch (rng() % 4) {
          case 0: {
            uint64_t v = next_version++;
            written[key].insert(v);
            (void)(*client)->Put(key, MakeValue(key, v, 4096 + rng() % 60000));
            break;
          }
          case 1:
          case 2: {
            auto got = (*client)->Get(key);
            if (got.ok()) {
              bool match = false;
              for (uint64_t v : written[key]) {
                match |= *got == MakeValue(key, v, got->size());
              }
              if (!match) {
                ++wrong_bytes;
                std::lock_guard<std::mutex> l(report_mu);
                ADD_FAILURE() << "WRONG BYTES for " << key;
              }
            }
            break;
          }
          default:
            (void)(*client)->Remove(key);
        }
        ++ops;
      }
    });
  }

  // Faults.
  std::map<std::string, int> faults;
  std::mt19937 rng(4242);
  auto raw = client::ClientImpl::Create(cluster_->ClientOpts("t0"));
  ASSERT_TRUE(raw.ok()) << raw.status();
  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::seconds(seconds);
  // The first RSS sample once the run has warmed up (a tenth of it, at most a minute).
  const auto warm = begin + std::chrono::seconds(std::min(60, seconds / 10));
  json start_sample;
  int seq = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (start_sample.is_null() && std::chrono::steady_clock::now() >= warm) {
      start_sample = Sample(cluster_.get());
    }
    std::this_thread::sleep_for(milliseconds(400 + rng() % 600));
    // Faults 0-3 three times as often as a master kill. Without process kills a node or master
    // kill becomes a link cut on separate hosts (a writer kill on one); on separate hosts half
    // the node kills are link cuts anyway.
    const uint32_t r = rng() % 13;
    uint32_t fault = r == 12 ? 4 : r % 4;
    if (fault == 0 && netns && rng() % 2 == 0) fault = 5;
    if (!kills && (fault == 0 || fault == 4)) fault = netns ? 5 : 1;
    if (fault == 4) {  // kill -9 the master, restart it at the same address (no HA)
      // It rebuilds objects, allocators and charges from the nodes' inventories; puts in
      // flight fail, and objects committed in the last instant (their records not at a node
      // yet) may be gone: a read of those is NOT_FOUND, never wrong bytes.
      ASSERT_TRUE(cluster_->RestartMaster().ok());
      ASSERT_TRUE(cluster_->WaitForSegments(3, 30).ok()) << "nodes did not re-mount";
      ++faults["master kill -9 + restart"];
      continue;
    }
    if (fault == 5) {  // a node's link cut for 0.3-2.5 s (past client_ttl: the master drops it)
      const std::string host = NetnsFabric::NodeHost(rng() % cluster_->node_count());
      ASSERT_TRUE(cluster_->fabric()->SetLink(host, false).ok());
      std::this_thread::sleep_for(milliseconds(300 + rng() % 2200));
      ASSERT_TRUE(cluster_->fabric()->SetLink(host, true).ok());
      ++faults["node link cut"];
      continue;
    }
    switch (fault) {
      case 0: {  // kill -9 a node, start a new one in its place
        int i = rng() % cluster_->node_count();
        cluster_->node(i)->Kill(SIGKILL);
        cluster_->node(i)->Wait();
        ASSERT_TRUE(cluster_->StartNode(i).ok());
        ++faults["node kill -9 + restart"];
        break;
      }
      case 1: {  // a writer killed between PutStart and PutEnd
        auto p = Process::Start({BinDir() + "/put_start_hang", cluster_->master_address(), "t1",
                                 absl::StrCat("doomed-", seq++), "100000"},
                                {}, cluster_->dir() + "/writer.log");
        ASSERT_TRUE(p.ok());
        std::this_thread::sleep_for(milliseconds(150 + rng() % 200));
        (*p)->Kill(SIGKILL);
        (*p)->Wait();
        ++faults["writer kill -9 mid-put"];
        break;
      }
      case 2: {  // a put whose deadline runs out (the session stays alive)
        (void)(*raw)->PutStart({absl::StrCat("abandoned-", seq++)}, {50000});
        ++faults["put deadline expiry"];
        break;
      }
      default: {  // a read lease never released
        auto g = (*raw)->Call<proto::KeysRequest, proto::GetReply>(
            proto::MsgType::kGet, proto::KeysRequest{{absl::StrCat("w0-k", rng() % kKeys)}});
        (void)g;
        ++faults["GetEnd never sent"];
      }
    }
  }
  if (start_sample.is_null()) start_sample = Sample(cluster_.get());
  const json end_sample = Sample(cluster_.get());
  stop = true;
  for (auto& t : workers) t.join();
  raw->reset();

  // Quiescence: every deadline, lease and dead session has run out.
  ASSERT_TRUE(cluster_->WaitForSegments(3).ok());
  std::this_thread::sleep_for(milliseconds(2000 + 2 * 1000 + 500));

  uint64_t violations = wrong_bytes.load();
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> by_segment;
  for (const char* t : {"t0", "t1"}) {
    json q = Get(absl::StrCat("/api/v1/tenant_quotas?tenant_id=", t))["data"];
    json objs = Get(absl::StrCat("/api/v1/objects?tenant_id=", t, "&limit=100000"))["data"];
    uint64_t committed = 0, complete = 0;
    for (const auto& obj : objs) {
      EXPECT_TRUE(obj["complete"].get<bool>()) << obj.dump();
      ++complete;
      for (const auto& p : obj["placements"]) {
        committed += p["bytes"].get<uint64_t>();
        by_segment[p["segment_id"].get<uint64_t>()].emplace_back(p["offset"].get<uint64_t>(),
                                                                 p["bytes"].get<uint64_t>());
      }
    }
    if (q["inflight_bytes"].get<uint64_t>() != 0) ++violations;
    if (q["charged_bytes"].get<uint64_t>() != committed) ++violations;
    if (q["entries"].get<uint64_t>() != complete) ++violations;
    EXPECT_EQ(q["inflight_bytes"].get<uint64_t>(), 0u) << t;
    EXPECT_EQ(q["charged_bytes"].get<uint64_t>(), committed) << t;
    EXPECT_EQ(q["entries"].get<uint64_t>(), complete) << t;
  }
  for (auto& [seg, ranges] : by_segment) {
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) {
        ++violations;
        ADD_FAILURE() << "overlapping allocations in segment " << seg;
      }
    }
  }
  // Remove everything: all space must come back.
  for (const char* t : {"t0", "t1"}) {
    auto cl = cluster_->NewClient(t);
    ASSERT_TRUE(cl.ok());
    json objs = Get(absl::StrCat("/api/v1/objects?tenant_id=", t, "&limit=100000"))["data"];
    for (const auto& obj : objs) {
      absl::Status st = (*cl)->Remove(obj["key"].get<std::string>());
      EXPECT_TRUE(st.ok()) << st;
    }
    json q = Get(absl::StrCat("/api/v1/tenant_quotas?tenant_id=", t))["data"];
    EXPECT_EQ(q["charged_bytes"].get<uint64_t>(), 0u) << t;
  }
  auto used = cluster_->Metric("granary_master_used_bytes{tier=\"host\"}");
  ASSERT_TRUE(used.ok());
  if (*used != 0) ++violations;
  EXPECT_EQ(*used, 0) << "segment space still allocated after removing everything";
  uint64_t total_faults = 0;
  std::string fault_text;
  for (const auto& [name, n] : faults) {
    total_faults += n;
    absl::StrAppend(&fault_text, " ", name, "=", n);
  }
  std::cerr << "[ chaos ] " << seconds << " s, " << ops.load() << " operations, " << total_faults
            << " faults (" << fault_text << " ), " << violations << " violations"
            << (netns ? " (separate hosts)" : "") << "\n";
  if (report_path != nullptr) {
    json r;
    r["seconds"] = seconds;
    r["netns"] = netns;
    r["kills"] = kills;
    r["operations"] = ops.load();
    r["client_errors"] = errors.load();
    r["faults"] = faults;
    r["violations"] = violations;
    r["start"] = start_sample;
    r["end"] = end_sample;
    std::ofstream(report_path) << r.dump(2) << "\n";
  }
  EXPECT_EQ(violations, 0u);
  EXPECT_GT(total_faults, 0u);
}

}  // namespace
}  // namespace granary::testing
