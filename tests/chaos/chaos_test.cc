// Chaos with invariants: a real master, three nodes and several clients on loopback run random
// operations while faults are injected (kill -9 of nodes and writers, node restarts on their
// segment files, which re-adopt their objects, kill -9 of the master and its restart, which
// rebuilds from the nodes' inventories, puts whose deadline runs out, read leases never
// released). Checked during and after the run:
//   - no read ever returns wrong bytes (values derive from key and version; every read is checked),
//   - after quiescence the quota ledger is exact: charged == committed bytes, in flight == 0,
//   - no two live allocations overlap,
//   - after everything is removed, all segment space is free.
// A master or node that dies without being killed (a crash) is restarted in place, so that the
// run and its checks go on, and fails the test with the line its log died on.
// GRANARY_CHAOS_SECONDS sets the length of the random run (default 150: about 3 minutes with
// start-up and the checks at the end). GRANARY_CHAOS_NETNS=1 runs master, nodes and clients as
// separate hosts (network namespaces, tests/integration/netns.h; root), where half the node
// kills become node link cuts; GRANARY_CHAOS_KILLS=0 replaces every kill of master or node with
// a link cut (separate hosts) or a writer kill (one host). GRANARY_CHAOS_HA=1 runs two masters
// with --enable_ha on an etcd of the test's own (a 2 s lease): the master fault is then a
// kill -9 of the leader, the standby takes over (rebuilding from the nodes' inventories; nodes
// and clients follow it through etcd://) and the killed one comes back as the next standby.
// GRANARY_CHAOS_REPORT=F
// writes the figures as JSON to F, with the RSS of master and nodes once the run has warmed up
// and at its end (bench/soak.sh runs it that way).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/client_impl.h"
#include "common/status_macros.h"
#include "proto/alloc_header.h"
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
// Why a process the test did not kill exited: its status and the first line of its log that
// says (an assertion, a fatal check), else the log's last line.
std::string WhyItDied(Process* p) {
  const int status = p->Wait();
  std::istringstream log(p->Log());
  std::string line, last, said;
  while (std::getline(log, line)) {
    if (line.empty()) continue;
    if (said.empty() && (line.find("Assertion") != std::string::npos ||
                         line.find("Check failed") != std::string::npos ||
                         line.find("FATAL") != std::string::npos ||
                         line.find("Segmentation") != std::string::npos)) {
      said = line;
    }
    last = line;
  }
  return absl::StrCat("exit status ", status, ": ", said.empty() ? last : said);
}

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

// Why a read of `key` returned bytes that match none of its versions: the read's placement
// (from a fresh Get), the version whose value it matches longest and where it departs, and
// whose value (any worker's key and version, from `all_puts`) the departing bytes begin.
std::string ExplainWrongRead(
    const std::string& key, const std::string& got, const std::set<uint64_t>& versions,
    double last_good, double now, client::ClientImpl* client,
    const std::function<std::vector<std::tuple<std::string, uint64_t, double, bool>>()>& all_puts) {
  std::string out = absl::StrCat("at ", now, " s, ", got.size(), " bytes");
  auto g = client->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                            proto::GetRequest{{key}});
  if (g.ok() && g->results.size() == 1) {
    const auto& r = g->results[0];
    absl::StrAppend(&out, "; now generation ", r.generation, " size ", r.size, " on");
    for (const auto& p : r.replicas) {
      absl::StrAppend(&out, " segment ", p.segment_id, " @", p.address, "+", p.length);
    }
  }
  size_t best = 0;
  uint64_t best_v = 0;
  for (uint64_t v : versions) {
    const std::string want = MakeValue(key, v, got.size());
    size_t m = 0;
    while (m < got.size() && got[m] == want[m]) ++m;
    if (m >= best) best = m, best_v = v;
  }
  const std::string want = MakeValue(key, best_v, got.size());
  size_t last = got.size();
  while (last > best && got[last - 1] == want[last - 1]) --last;
  absl::StrAppend(&out, "; version ", best_v, " matches bytes [0, ", best, ") and [", last, ", ",
                  got.size(), "), differs in between; last good read at ", last_good, " s");
  auto puts = all_puts();
  for (const auto& [k, v, at, ok] : puts) {
    if (k == key && v == best_v) absl::StrAppend(&out, "; its put ran at ", at, " s ok=", ok);
  }
  std::map<uint64_t, std::string> first8;  // a value's first 8 bytes -> whose value it is
  for (const auto& [k, v, at, ok] : puts) {
    std::string head = MakeValue(k, v, 8);
    uint64_t h;
    std::memcpy(&h, head.data(), 8);
    first8[h] = absl::StrCat(k, " v", v, " (put at ", at, " s ok=", ok, ")");
  }
  int shown = 0;
  for (size_t s = best / 64 * 64; s + 8 <= last && shown < 4; s += 64) {
    uint64_t h, magic;
    std::memcpy(&h, got.data() + s, 8);
    std::memcpy(&magic, got.data() + s, 8);
    if (auto it = first8.find(h); it != first8.end()) {
      absl::StrAppend(&out, "; at offset ", s, " begins the value of ", it->second);
      ++shown;
    } else if (magic == proto::AllocHeader::kMagic && s + 64 <= got.size()) {
      proto::AllocHeader hd;
      std::memcpy(&hd, got.data() + s, sizeof hd);
      absl::StrAppend(&out, "; at offset ", s, " an allocation header (generation ", hd.generation,
                      ", length ", hd.value_length, ")");
      ++shown;
    }
  }
  absl::StrAppend(
      &out, "; bytes at ", best, ": ",
      absl::BytesToHexString(got.substr(best, std::min<size_t>(32, got.size() - best))));
  return out;
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
  const bool ha = std::getenv("GRANARY_CHAOS_HA") != nullptr &&
                  std::string(std::getenv("GRANARY_CHAOS_HA")) == "1";
  if (ha && netns) GTEST_SKIP() << "GRANARY_CHAOS_HA=1 runs on loopback only";
  if (ha && !EtcdServer::Available()) {
    GTEST_SKIP() << "GRANARY_CHAOS_HA=1 needs " << EtcdServer::kBinary;
  }
  Cluster::Options o;
  o.netns = netns;
  o.ha = ha;
  o.nodes = 3;
  o.node_segment_size = "64MB";
  o.client_ttl_sec = 1;
  o.put_start_timeout_sec = 2;
  o.lease_ttl_ms = 500;
  o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + policy};
  // Nodes keep their host segments in files on tmpfs: a node killed and started again
  // re-adopts its objects (--segment_file), and the master restores them.
  const std::string shm = SegmentFileDir("granary_chaos", 3 * (64u << 20));
  ASSERT_FALSE(shm.empty());
  o.segment_file_dir = shm;
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() { std::filesystem::remove_all(dir); }
  } remove_shm{shm};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = std::move(*c);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, wrong_bytes{0}, errors{0};
  std::mutex report_mu;
  constexpr int kWorkers = 4, kKeys = 40;
  const auto t_begin = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count();
  };
  // Every put attempted by any worker (key, version, time, outcome), so that a wrong read can
  // be explained: whose value landed in it, and when that value's put ran.
  struct PutRecord {
    std::string key;
    uint64_t version;
    double at;
    bool ok;
  };
  std::mutex puts_mu;
  std::vector<PutRecord> puts;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      ClientOptions co = cluster_->ClientOpts(absl::StrCat("t", w % 2));
      co.replica_num = 1 + w % 2;
      co.transfer_timeout_ms = 3000;
      co.rpc_timeout_ms = 3000;
      auto client = client::ClientImpl::Create(co);
      if (!client.ok()) {
        ++errors;
        return;
      }
      std::mt19937 rng(77 + w);
      std::map<std::string, std::set<uint64_t>> written;  // every version ever attempted
      std::map<std::string, double> last_good;            // the last read that matched
      uint64_t next_version = 1;
      while (!stop.load()) {
        std::string key = absl::StrCat("w", w, "-k", rng() % kKeys);
        switch (rng() % 4) {
          case 0: {
            uint64_t v = next_version++;
            written[key].insert(v);
            const double at = since();
            const bool ok = (*client)->Put(key, MakeValue(key, v, 4096 + rng() % 60000)).ok();
            std::lock_guard<std::mutex> l(puts_mu);
            puts.push_back({key, v, at, ok});
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
              if (match) {
                last_good[key] = since();
              } else {
                ++wrong_bytes;
                std::string why = ExplainWrongRead(
                    key, *got, written[key], last_good[key], since(), client->get(), [&] {
                      std::lock_guard<std::mutex> l(puts_mu);
                      std::vector<std::tuple<std::string, uint64_t, double, bool>> all;
                      for (const auto& p : puts) all.emplace_back(p.key, p.version, p.at, p.ok);
                      return all;
                    });
                std::lock_guard<std::mutex> l(report_mu);
                ADD_FAILURE() << "WRONG BYTES for " << key << ": " << why;
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
  // Processes that died without being killed (a crash: a bug here or in a library), each
  // restarted in place so that the run and its checks go on, and reported as a failure.
  std::vector<std::string> crashes;
  auto restart_crashed = [&]() -> absl::Status {
    const double at =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (!cluster_->master()->Running()) {
      crashes.push_back(
          absl::StrCat("master at ", static_cast<int>(at), " s: ", WhyItDied(cluster_->master())));
      std::cerr << "[ chaos ] CRASH " << crashes.back() << "\n";
      GRANARY_RETURN_IF_ERROR(cluster_->RestartMaster());
    }
    if (cluster_->standby() != nullptr && !cluster_->standby()->Running()) {
      crashes.push_back(absl::StrCat("standby master at ", static_cast<int>(at),
                                     " s: ", WhyItDied(cluster_->standby())));
      std::cerr << "[ chaos ] CRASH " << crashes.back() << "\n";
      GRANARY_RETURN_IF_ERROR(cluster_->RestartStandby());
    }
    for (int i = 0; i < cluster_->node_count(); ++i) {
      if (cluster_->node(i)->Running()) continue;
      crashes.push_back(absl::StrCat("node", i, " at ", static_cast<int>(at),
                                     " s: ", WhyItDied(cluster_->node(i))));
      std::cerr << "[ chaos ] CRASH " << crashes.back() << "\n";
      GRANARY_RETURN_IF_ERROR(cluster_->StartNode(i));
    }
    return absl::OkStatus();
  };
  // GRANARY_CHAOS_LOG_FAULTS=1 (bench/soak.sh sets it): each fault on stderr with its time, so
  // that a crash or a pile-up can be matched with the fault before it.
  const bool log_faults = std::getenv("GRANARY_CHAOS_LOG_FAULTS") != nullptr &&
                          std::string(std::getenv("GRANARY_CHAOS_LOG_FAULTS")) == "1";
  auto count = [&](const std::string& what, const std::string& detail) {
    ++faults[what];
    if (log_faults) {
      std::cerr << absl::StrFormat("[ chaos ] %.1f s: %s%s\n", since(), what, detail);
    }
  };
  while (std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(restart_crashed().ok());
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
      // yet) may be gone: a read of those is NOT_FOUND, never wrong bytes. With HA the standby
      // takes over and rebuilds the same way.
      absl::Status restarted = cluster_->RestartMaster();
      ASSERT_TRUE(restarted.ok()) << restarted;
      ASSERT_TRUE(cluster_->WaitForSegments(3, 30).ok()) << "nodes did not re-mount";
      count(ha ? "leader kill -9 + failover" : "master kill -9 + restart", "");
      continue;
    }
    if (fault == 5) {  // a node's link cut for 0.3-2.5 s (past client_ttl: the master drops it)
      const std::string host = NetnsFabric::NodeHost(rng() % cluster_->node_count());
      const int cut_ms = 300 + rng() % 2200;
      ASSERT_TRUE(cluster_->fabric()->SetLink(host, false).ok());
      std::this_thread::sleep_for(milliseconds(cut_ms));
      ASSERT_TRUE(cluster_->fabric()->SetLink(host, true).ok());
      count("node link cut", absl::StrCat(" (", host, ", ", cut_ms, " ms, ended now)"));
      continue;
    }
    switch (fault) {
      case 0: {  // kill -9 a node, start it again on its segment file (it re-adopts)
        int i = rng() % cluster_->node_count();
        cluster_->node(i)->Kill(SIGKILL);
        cluster_->node(i)->Wait();
        // Mostly once the master has dropped it (a restart, as a supervisor's takes), else at
        // once (the master may still hold its old session: then it restores nothing).
        if (rng() % 4 != 0) (void)cluster_->WaitForSegments(2, 3);
        ASSERT_TRUE(cluster_->StartNode(i).ok());
        count("node kill -9 + restart", absl::StrCat(" (node", i, ")"));
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
        count("writer kill -9 mid-put", "");
        break;
      }
      case 2: {  // a put whose deadline runs out (the session stays alive)
        (void)(*raw)->PutStart({absl::StrCat("abandoned-", seq++)}, {50000});
        count("put deadline expiry", "");
        break;
      }
      default: {  // a read lease never released
        auto g = (*raw)->Call<proto::GetRequest, proto::GetReply>(
            proto::MsgType::kGet, proto::GetRequest{{absl::StrCat("w0-k", rng() % kKeys)}});
        (void)g;
        count("GetEnd never sent", "");
      }
    }
  }
  if (start_sample.is_null()) start_sample = Sample(cluster_.get());
  const json end_sample = Sample(cluster_.get());
  stop = true;
  for (auto& t : workers) t.join();
  raw->reset();

  // Quiescence: every deadline, lease and dead session has run out.
  ASSERT_TRUE(restart_crashed().ok());
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
  const double restored = cluster_->Metric("granary_master_inventory_restored_total").value_or(-1);
  std::cerr << "[ chaos ] " << seconds << " s, " << ops.load() << " operations, " << total_faults
            << " faults (" << fault_text << " ), " << restored
            << " objects restored from node inventories, " << violations << " violations"
            << (netns ? " (separate hosts)" : "") << (ha ? " (HA)" : "") << ", " << crashes.size()
            << " crashes\n";
  if (report_path != nullptr) {
    json r;
    r["seconds"] = seconds;
    r["netns"] = netns;
    r["kills"] = kills;
    r["ha"] = ha;
    r["operations"] = ops.load();
    r["client_errors"] = errors.load();
    r["faults"] = faults;
    r["restored"] = restored;
    r["violations"] = violations;
    r["crashes"] = crashes;
    r["start"] = start_sample;
    r["end"] = end_sample;
    std::ofstream(report_path) << r.dump(2) << "\n";
  }
  EXPECT_EQ(violations, 0u);
  EXPECT_GT(total_faults, 0u);
  EXPECT_TRUE(crashes.empty()) << absl::StrJoin(crashes, "\n");
}

}  // namespace
}  // namespace granary::testing
