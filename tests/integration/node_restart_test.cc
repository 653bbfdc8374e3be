// A node that keeps its host segment in a file (--segment_file) restarts with its cache: real
// master, node and clients as processes; the node is killed with SIGKILL and started again with
// the same flags, re-adopts its inventory from the journal beside the file, checks each entry
// against its header in the file, and reports it; the master restores those objects (it
// dropped them when the node died) with their charges.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"
#include "tests/integration/restore_checks.h"

namespace granary::testing {
namespace {

using nlohmann::json;

constexpr int kPerTenant = 1500;
constexpr size_t kBatch = 250;
constexpr double kPutTimeoutSec = 3;

struct Stored {
  std::string key;
  size_t size = 0;
};

class NodeRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shm_dir_ = SegmentFileDir("granary_node_restart", 32u << 20);
    ASSERT_FALSE(shm_dir_.empty());
    segment_file_ = shm_dir_ + "/segment";
    char tmpl[] = "/tmp/granary_node_restart_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    policy_path_ = std::string(tmpl) + "/tenant_quotas.yaml";
    std::ofstream(policy_path_) << "version: 1\ntenants:\n  - name: tenant-a\n    quota: 24MB\n"
                                   "  - name: tenant-b\n    quota: 24MB\n";
    Cluster::Options o;
    o.nodes = 1;
    o.node_segment_size = "32MB";
    o.client_ttl_sec = 2;
    o.put_start_timeout_sec = kPutTimeoutSec;
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_type=file",
                      "--tenant_quota_connector_uri=" + policy_path_,
                      "--restart_quarantine_margin_ms=500"};
    o.node_flags = {"--segment_file=" + segment_file_};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    std::filesystem::remove_all(shm_dir_);
  }

  std::unique_ptr<Client> NewClient(const std::string& tenant) {
    auto c = cluster_->NewClient(tenant);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  json Get(const std::string& path) {
    auto body = HttpGet(cluster_->master_http_port(), path);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? json::parse(*body)["data"] : json();
  }
  json Tenant(const std::string& id) { return Get("/api/v1/tenant_quotas?tenant_id=" + id); }
  json Objects(const std::string& tenant) {
    return Get("/api/v1/objects?limit=100000&tenant_id=" + tenant);
  }
  template <typename Pred>
  bool WaitForMetric(const std::string& sample, Pred pred, double timeout_sec) {
    return WaitForMasterMetric(cluster_.get(), sample, pred, timeout_sec);
  }
  static std::vector<Stored> Objs(const std::string& prefix, int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> size(1, 6000);
    std::vector<Stored> out;
    for (int i = 0; i < n; ++i) out.push_back({absl::StrCat(prefix, i), size(rng)});
    return out;
  }
  void PutAll(Client* c, const std::vector<Stored>& objs) {
    for (size_t i = 0; i < objs.size(); i += kBatch) {
      std::vector<std::string> keys, values;
      for (size_t j = i; j < std::min(objs.size(), i + kBatch); ++j) {
        keys.push_back(objs[j].key);
        values.push_back(MakeValue(objs[j].key, 1, objs[j].size));
      }
      std::vector<absl::string_view> views(values.begin(), values.end());
      auto st = c->BatchPut(keys, views);
      for (size_t j = 0; j < st.size(); ++j) ASSERT_TRUE(st[j].ok()) << keys[j] << ": " << st[j];
    }
  }
  // Every object reads back byte-exact (except `lost`, which must be NOT_FOUND).
  void ReadAll(Client* c, const std::vector<Stored>& objs, const std::string& lost = "") {
    for (size_t i = 0; i < objs.size(); i += kBatch) {
      std::vector<std::string> keys;
      for (size_t j = i; j < std::min(objs.size(), i + kBatch); ++j) keys.push_back(objs[j].key);
      auto got = c->BatchGet(keys);
      ASSERT_EQ(got.size(), keys.size());
      for (size_t j = 0; j < got.size(); ++j) {
        const Stored& o = objs[i + j];
        if (o.key == lost) {
          EXPECT_TRUE(absl::IsNotFound(got[j].status())) << o.key << ": " << got[j].status();
          continue;
        }
        ASSERT_TRUE(got[j].ok()) << o.key << ": " << got[j].status();
        ASSERT_TRUE(*got[j] == MakeValue(o.key, 1, o.size)) << o.key;
      }
    }
  }
  // The master has sent every commit record (the node journals each batch it applies).
  void WaitForRecords(uint64_t n) {
    ASSERT_TRUE(WaitForMetric(
        "granary_master_inventory_records_sent_total", [&](double v) { return v >= n; }, 10))
        << "commit records did not reach the node";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // applied and journaled
  }
  // kill -9 of the node; returns once the master has dropped its segment.
  void KillNode() {
    cluster_->node(0)->Kill(SIGKILL);
    cluster_->node(0)->Wait();
    ASSERT_TRUE(cluster_->WaitForSegments(0, 20).ok()) << "the master kept the dead node";
  }

  std::string shm_dir_, segment_file_, policy_path_;
  std::unique_ptr<Cluster> cluster_;
};

std::map<std::string, std::tuple<uint64_t, uint64_t>> ByKey(const json& list) {
  std::map<std::string, std::tuple<uint64_t, uint64_t>> out;
  for (const auto& o : list) {
    out[o["key"].get<std::string>()] = {o["size"].get<uint64_t>(), o["generation"].get<uint64_t>()};
  }
  return out;
}

TEST_F(NodeRestartTest, KillNineOfTheNodeKeepsEveryObjectItsBytesAndEveryCharge) {
  auto a = NewClient("tenant-a");
  auto b = NewClient("tenant-b");
  ASSERT_TRUE(a && b);
  const auto objs_a = Objs("k/", kPerTenant, 1), objs_b = Objs("k/", kPerTenant, 2);
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(PutAll(b.get(), objs_b));
  ASSERT_NO_FATAL_FAILURE(WaitForRecords(2 * kPerTenant));
  const json ta = Tenant("tenant-a"), tb = Tenant("tenant-b");
  const auto before_a = ByKey(Objects("tenant-a")), before_b = ByKey(Objects("tenant-b"));
  ASSERT_EQ(before_a.size(), static_cast<size_t>(kPerTenant));

  ASSERT_NO_FATAL_FAILURE(KillNode());
  // The master dropped the objects and refunded their charges: what follows is a restore.
  EXPECT_EQ(Tenant("tenant-a")["charged_bytes"], 0);
  EXPECT_EQ(Tenant("tenant-a")["entries"], 0);
  EXPECT_TRUE(absl::IsNotFound(a->Get(objs_a[0].key).status()));

  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(1, 20).ok()) << "the node did not re-mount";
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_restored_total", [](double v) { return v >= 2 * kPerTenant; }, 20))
      << "the node's inventory was not restored";
  std::cerr << "node start -> " << 2 * kPerTenant << " objects restored: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
            << " s\n";
  EXPECT_EQ(*cluster_->Metric("granary_master_inventory_rejected_total"), 0);
  for (const auto& [id, before] : {std::pair{"tenant-a", ta}, std::pair{"tenant-b", tb}}) {
    const json after = Tenant(id);
    EXPECT_EQ(after["charged_bytes"], before["charged_bytes"]) << id;
    EXPECT_EQ(after["entries"], before["entries"]) << id;
    EXPECT_EQ(after["inflight_bytes"], 0) << id;
  }
  EXPECT_EQ(ByKey(Objects("tenant-a")), before_a);
  EXPECT_EQ(ByKey(Objects("tenant-b")), before_b);
  // The clients that wrote them read every object back, byte-exact, from the new process.
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b));

  // Once the write window has passed, new puts land beside the survivors, never on them.
  ASSERT_TRUE(WaitForMetric(
      "granary_master_quarantined_bytes", [](double v) { return v == 0; }, kPutTimeoutSec + 20));
  const auto fresh = Objs("new/", 500, 3);
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), fresh));
  ASSERT_NO_FATAL_FAILURE(ExpectNoOverlap(Objects("tenant-a"), Objects("tenant-b")));
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), fresh));
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs_a));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b));

  // A second restart re-adopts the fresh objects too (the journal followed them; restored
  // objects send no commit record again).
  ASSERT_NO_FATAL_FAILURE(WaitForRecords(2 * kPerTenant + 500));
  ASSERT_NO_FATAL_FAILURE(KillNode());
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(1, 20).ok());
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_restored_total", [](double v) { return v >= 4 * kPerTenant + 500; },
      20));
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), fresh));
  ASSERT_NO_FATAL_FAILURE(ReadAll(b.get(), objs_b));
}

TEST_F(NodeRestartTest, AMasterRestartWhileTheNodeIsDownStillRestoresItsObjects) {
  auto a = NewClient("tenant-a");
  ASSERT_TRUE(a);
  const auto objs = Objs("m/", 800, 4);
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), objs));
  ASSERT_NO_FATAL_FAILURE(WaitForRecords(objs.size()));
  const json ta = Tenant("tenant-a");
  const auto before = ByKey(Objects("tenant-a"));
  ASSERT_NO_FATAL_FAILURE(KillNode());
  ASSERT_TRUE(cluster_->RestartMaster().ok());  // a new master that never knew the node
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(1, 20).ok());
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_restored_total", [&](double v) { return v >= objs.size(); }, 20));
  EXPECT_EQ(Tenant("tenant-a")["charged_bytes"], ta["charged_bytes"]);
  EXPECT_EQ(Tenant("tenant-a")["entries"], ta["entries"]);
  EXPECT_EQ(ByKey(Objects("tenant-a")), before);
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs));
}

TEST_F(NodeRestartTest, ATornHeaderOrJournalTailIsDroppedAndCountedNeverServed) {
  auto a = NewClient("tenant-a");
  ASSERT_TRUE(a);
  const auto objs = Objs("t/", 600, 5);
  ASSERT_NO_FATAL_FAILURE(PutAll(a.get(), objs));
  ASSERT_NO_FATAL_FAILURE(WaitForRecords(objs.size()));
  // Where the victim's header lies in the segment file.
  const std::string victim = objs[17].key;
  uint64_t offset = UINT64_MAX;
  for (const auto& o : Objects("tenant-a")) {
    if (o["key"] == victim) offset = o["placements"][0]["offset"].get<uint64_t>();
  }
  ASSERT_NE(offset, UINT64_MAX);
  ASSERT_NO_FATAL_FAILURE(KillNode());
  {
    // Zero the victim's 64-byte header, as a write cut short by the crash would leave it.
    const int fd = open(segment_file_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char zeros[64] = {};
    ASSERT_EQ(pwrite(fd, zeros, sizeof(zeros), static_cast<off_t>(offset)), 64);
    close(fd);
    // And a torn record at the journal's end, as an append cut short leaves it.
    std::ofstream(segment_file_ + ".journal", std::ios::app) << std::string(13, '\x7f');
  }
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(1, 20).ok());
  ASSERT_TRUE(WaitForMetric(
      "granary_master_inventory_restored_total", [&](double v) { return v >= objs.size() - 1; },
      20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(*cluster_->Metric("granary_master_inventory_restored_total"), objs.size() - 1);
  const std::string log = cluster_->node(0)->Log();
  EXPECT_NE(log.find("1 dropped here (header mismatch)"), std::string::npos) << log;
  EXPECT_NE(log.find("a torn tail of 13 bytes cut off"), std::string::npos) << log;
  ASSERT_NO_FATAL_FAILURE(ReadAll(a.get(), objs, victim));
  EXPECT_EQ(Tenant("tenant-a")["entries"], objs.size() - 1);
}

TEST_F(NodeRestartTest, ASecondNodeOnTheSameSegmentFileIsRefused) {
  auto a = NewClient("tenant-a");
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Put("mine", MakeValue("mine", 1, 5000)).ok());
  auto p = Process::Start(
      {BinDir() + "/granary_node", "--master=" + cluster_->master_address(),
       "--host_segment_size=32MB", "--metrics_port=0", "--segment_file=" + segment_file_},
      {}, cluster_->dir() + "/node_second.log");
  ASSERT_TRUE(p.ok()) << p.status();
  // It must give up at start; one still running after 10 s took the file (killed by the test).
  for (int i = 0; i < 200 && (*p)->Running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE((*p)->Running()) << "a second node started on the same segment file";
  EXPECT_NE((*p)->Wait(), 0);
  const std::string log = (*p)->Log();
  EXPECT_NE(log.find("is in use by another process"), std::string::npos) << log;
  // The running node and its object are untouched.
  EXPECT_TRUE(cluster_->node(0)->Running());
  auto got = a->Get("mine");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == MakeValue("mine", 1, 5000));
}

TEST_F(NodeRestartTest, ASegmentFileOfAnotherSizeIsRefusedNamingBothSizes) {
  ASSERT_NO_FATAL_FAILURE(KillNode());
  auto p = Process::Start(
      {BinDir() + "/granary_node", "--master=" + cluster_->master_address(),
       "--host_segment_size=16MB", "--metrics_port=0", "--segment_file=" + segment_file_},
      {}, cluster_->dir() + "/node_refused.log");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE((*p)->Wait(), 0);
  const std::string log = (*p)->Log();
  EXPECT_NE(log.find("holds 32 MB"), std::string::npos) << log;
  EXPECT_NE(log.find("the segment size is 16 MB"), std::string::npos) << log;
  // Untouched: the file still holds the first run's segment.
  EXPECT_EQ(std::filesystem::file_size(segment_file_), 32u << 20);
}

}  // namespace
}  // namespace granary::testing
