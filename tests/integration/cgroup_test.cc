// granary_node --cgroup --memory_limit against the host's real memory cgroups, as root (v1 on
// the development and CI machines, v2 where the host has it): a limit below the segment refuses
// the start naming both numbers; a limit with room runs, the cgroup is charged for the segment,
// the node's /metrics shows the figures, puts and gets work, and SIGTERM leaves no cgroup
// behind (v1; on v2 the empty cgroup stays for the next start, which reuses it). A pooled node
// under a cgroup reports the cgroup's figures in its heartbeats: the master's /api/v1/nodes shows
// them.
#include "node/cgroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

// Why this host cannot run the test, or "" when it can: root, and a memory hierarchy whose own
// cgroup this process may create children in.
std::string CannotRun() {
  if (geteuid() != 0) return "needs root to create memory cgroups";
  auto layout = node::DetectCgroupLayout(node::CgroupPaths{});
  if (!layout.ok()) return std::string(layout.status().message());
  std::string probe = absl::StrCat(layout->mount, layout->own == "/" ? "" : layout->own,
                                   "/granary-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0) return "cannot create " + probe + ": " + strerror(errno);
  rmdir(probe.c_str());
  return "";
}

std::string CgroupDir(const std::string& name) {
  auto layout = node::DetectCgroupLayout(node::CgroupPaths{});
  return absl::StrCat(layout->mount, layout->own == "/" ? "" : layout->own, "/", name);
}

uint64_t ReadUsage(const std::string& dir) {
  for (const char* f : {"/memory.usage_in_bytes", "/memory.current"}) {
    std::ifstream in(dir + f);
    uint64_t v = 0;
    if (in >> v) return v;
  }
  return 0;
}

class CgroupNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = CannotRun(); !why.empty()) GTEST_SKIP() << why;
    Cluster::Options o;
    o.nodes = 0;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    name_ = absl::StrCat("granary-test-", getpid());
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    if (!name_.empty()) rmdir(CgroupDir(name_).c_str());  // v2 leaves it; so may a failure
  }
  std::unique_ptr<Process> StartNode(const std::string& limit, uint16_t metrics_port,
                                     const std::string& pool = "") {
    std::vector<std::string> argv = {
        BinDir() + "/granary_node",  "--master=" + cluster_->master_address(),
        "--host_segment_size=128MB", "--cgroup=" + name_,
        "--memory_limit=" + limit,   absl::StrCat("--metrics_port=", metrics_port),
        "--log_level=info"};
    if (!pool.empty()) argv.push_back("--pool=" + pool);
    auto p = Process::Start(argv, {}, absl::StrCat(cluster_->dir(), "/node-", limit, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  std::unique_ptr<Cluster> cluster_;
  std::string name_;
};

TEST_F(CgroupNodeTest, ALimitBelowTheSegmentRefusesTheStartNamingBothNumbers) {
  auto node = StartNode("64MB", 0);
  ASSERT_NE(node, nullptr);
  EXPECT_NE(node->Wait(), 0);
  const std::string log = node->Log();
  EXPECT_NE(log.find("segments 128 MB"), std::string::npos) << log;
  EXPECT_NE(log.find("effective memory limit 64 MB"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(CgroupDir(name_)) &&
               ReadUsage(CgroupDir(name_)) > (64u << 20))
      << "the refused node allocated its segment";
}

TEST_F(CgroupNodeTest, ALimitWithRoomRunsChargedAndCleansUp) {
  const uint16_t port = FreePort();
  auto node = StartNode("256MB", port);
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(cluster_->WaitForSegments(1, 30).ok()) << node->Log();
  const std::string dir = CgroupDir(name_);
  // The node's pages are charged to its cgroup: at least the segment.
  EXPECT_GE(ReadUsage(dir), 128u << 20);
  {
    std::ifstream procs(dir + "/cgroup.procs");
    pid_t pid = 0;
    ASSERT_TRUE(procs >> pid);
    EXPECT_EQ(pid, node->pid());
  }
  auto metrics = HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string labels = absl::StrCat("{cgroup=\"", dir, "\",version=\"");
  EXPECT_NE(metrics->find("granary_node_cgroup_limit_bytes" + labels), std::string::npos)
      << *metrics;
  EXPECT_NE(metrics->find("268435456"), std::string::npos) << *metrics;
  EXPECT_NE(metrics->find("granary_node_cgroup_usage_bytes"), std::string::npos);
  EXPECT_NE(metrics->find("granary_node_cgroup_oom_kill_total"), std::string::npos);
  // The store works through it.
  auto client = cluster_->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  std::string value(1 << 20, 'c');
  ASSERT_TRUE((*client)->Put("in-cgroup", value).ok());
  auto got = (*client)->Get("in-cgroup");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value);
  client->reset();
  node->Kill(SIGTERM);
  EXPECT_EQ(node->Wait(), 0) << node->Log();
  auto layout = node::DetectCgroupLayout(node::CgroupPaths{});
  if (layout->version == node::CgroupVersion::kV1) {
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " is left behind";
  }
}

TEST_F(CgroupNodeTest, APooledNodeReportsItsCgroupFiguresToTheMaster) {
  auto node = StartNode("256MB", 0, "tenant-p");
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(cluster_->WaitForSegments(1, 30).ok()) << node->Log();
  const std::string dir = CgroupDir(name_);
  // The first heartbeat follows the mount within a heartbeat interval (client_ttl / 4).
  nlohmann::json found;
  std::string last;
  for (int i = 0; i < 100 && found.is_null(); ++i) {
    auto body = HttpGet(cluster_->master_http_port(), "/api/v1/nodes");
    ASSERT_TRUE(body.ok()) << body.status();
    last = *body;
    const nlohmann::json nodes = nlohmann::json::parse(*body);
    for (const auto& n : nodes["data"]) {
      if (n["pool"] == "tenant-p" && n["cgroup"].is_object()) found = n;
    }
    if (found.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(found.is_object()) << "no cgroup figures in /api/v1/nodes: " << last;
  const nlohmann::json& cg = found["cgroup"];
  EXPECT_EQ(cg["path"], dir) << found;
  auto layout = node::DetectCgroupLayout(node::CgroupPaths{});
  EXPECT_EQ(cg["version"], layout->version == node::CgroupVersion::kV1 ? "v1" : "v2");
  EXPECT_EQ(cg["memory_limit_bytes"], 256u << 20) << found;
  EXPECT_LE(cg["memory_effective_limit_bytes"].get<uint64_t>(), 256u << 20) << found;
  EXPECT_GE(cg["memory_usage_bytes"].get<uint64_t>(), 128u << 20) << found;
  EXPECT_GE(cg["memory_peak_bytes"].get<uint64_t>(), cg["memory_usage_bytes"].get<uint64_t>() / 2)
      << found;
  EXPECT_EQ(cg["oom_kills"], 0u) << found;
  EXPECT_TRUE(cg.contains("limit_hits")) << found;
  EXPECT_TRUE(cg.contains("oom")) << found;
  EXPECT_EQ(found["capacity_bytes"], 128u << 20) << found;
  // The node's segments carry the same figures (the dashboard's cgroup column).
  auto segs = HttpGet(cluster_->master_http_port(), "/api/v1/segments");
  ASSERT_TRUE(segs.ok()) << segs.status();
  const nlohmann::json seg_list = nlohmann::json::parse(*segs);
  ASSERT_EQ(seg_list["data"].size(), 1u) << *segs;
  EXPECT_EQ(seg_list["data"][0]["cgroup"]["path"], dir) << *segs;
  EXPECT_EQ(seg_list["data"][0]["pool"], "tenant-p") << *segs;
  node->Kill(SIGTERM);
  EXPECT_EQ(node->Wait(), 0) << node->Log();
  if (layout->version == node::CgroupVersion::kV1) {
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " is left behind";
  }
}

}  // namespace
}  // namespace granary::testing
