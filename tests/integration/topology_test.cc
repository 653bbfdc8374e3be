// Topology in real processes on this host (no RDMA devices, no GPUs): a node bound to a NUMA
// node has its segment's pages there, the fallback is said once, device names reach UCX, and
// bad values are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/integration/cluster.h"
#include "tests/tools/fake_sysfs.h"

namespace granary::testing {
namespace {

constexpr char kFallback[] =
    "topology: no RDMA devices under /sys/class/infiniband: UCX chooses the network devices "
    "itself\n";

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The pages per NUMA node ("N0=16384") of the mappings whose policy is bind:<node>.
std::vector<std::string> BoundMappings(pid_t pid, int node) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/numa_maps"));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (absl::StrContains(line, absl::StrCat(" bind:", node, " "))) out.push_back(line);
  }
  return out;
}

// The host's NUMA nodes as the node's message lists them ("0" or "0, 1").
std::string HostNumaNodes() {
  std::vector<int> ids;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node")) {
    const std::string name = e.path().filename().string();
    int id = 0;
    if (absl::StartsWith(name, "node") && absl::SimpleAtoi(name.substr(4), &id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return absl::StrJoin(ids, ", ");
}

nlohmann::json NodesJson(Cluster* c) {
  auto body = HttpGet(c->master_http_port(), "/api/v1/nodes");
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? nlohmann::json::parse(*body) : nlohmann::json();
}

TEST(TopologyTest, ANodeBoundToNumaNodeZeroHasItsSegmentPagesThere) {
  Cluster::Options o;
  const uint16_t metrics_port = FreePort();
  o.node_flags = {"--numa_node=0", "--segment_memory=mmap",
                  absl::StrCat("--metrics_port=", metrics_port)};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const pid_t pid = (*c)->node(0)->pid();
  std::vector<std::string> bound = BoundMappings(pid, 0);
  ASSERT_EQ(bound.size(), 1u) << absl::StrJoin(bound, "\n");
  // 64 MB of 4 KiB pages, every one of them on node 0.
  EXPECT_TRUE(absl::StrContains(bound[0], " N0=16384 ")) << bound[0];
  EXPECT_FALSE(absl::StrContains(bound[0], " N1=")) << bound[0];
  const std::string log = (*c)->node(0)->Log();
  EXPECT_TRUE(absl::StrContains(log,
                                "host segment host0: 64 MB, 4 KiB pages, locked, on NUMA "
                                "node 0\n"))
      << log;
  EXPECT_EQ(Count(log, kFallback), 1) << log;
  nlohmann::json nodes = NodesJson(c->get());
  ASSERT_EQ(nodes["data"].size(), 1u) << nodes.dump();
  const nlohmann::json& seg = nodes["data"][0]["topology"][0];
  EXPECT_EQ(seg["name"], "host0");
  EXPECT_EQ(seg["numa_node"], 0);
  EXPECT_EQ(seg["nic"], "");
  EXPECT_EQ(seg["gpu"], -1);
  auto numa = ScrapeMetric(metrics_port,
                           "granary_node_segment_numa_node{segment=\"host0\",nic=\"\",gpu=\"-1\"}");
  ASSERT_TRUE(numa.ok()) << numa.status();
  EXPECT_EQ(*numa, 0);
}

TEST(TopologyTest, UcxAllocatedSegmentsAreBoundToo) {
  Cluster::Options o;
  o.node_flags = {"--numa_node=0", "--segment_memory=ucx"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> bound = BoundMappings((*c)->node(0)->pid(), 0);
  ASSERT_EQ(bound.size(), 1u) << absl::StrJoin(bound, "\n");
  EXPECT_TRUE(absl::StrContains(bound[0], " N0=16384 ")) << bound[0];
}

// The node's --device_name reaches its UCX context (read back into the log) and the master.
TEST(TopologyTest, ANodeGivenADeviceNameUsesAndAdvertisesIt) {
  Cluster::Options o;
  o.node_flags = {"--device_name=lo"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string log = (*c)->node(0)->Log();
  EXPECT_TRUE(absl::StrContains(log, "network device lo (device_name); UCX opened: tcp/lo\n"))
      << log;
  EXPECT_EQ(Count(log, kFallback), 0) << log;
  nlohmann::json nodes = NodesJson(c->get());
  EXPECT_EQ(nodes["data"][0]["topology"][0]["nic"], "lo") << nodes.dump();
  // A client given the device name too moves data through it.
  ClientOptions co = (*c)->ClientOpts();
  co.device_name = "lo";
  auto client = Client::Create(co);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("k", MakeValue("k", 1, 1 << 20)).ok());
  auto v = (*client)->Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v == MakeValue("k", 1, 1 << 20));
  EXPECT_TRUE(absl::StrContains((*client)->MetricsText(),
                                "granary_client_net_device{device=\"lo\",numa_node=\"-1\","
                                "gpu=\"-1\"} 1\n"))
      << (*client)->MetricsText();
}

// Refused at start, naming the value; `flag` is the bad flag.
std::string Refusal(const std::string& flag, int* status) {
  const std::string log = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                       "/granary_topology_refusal_", getpid(), ".log");
  auto p = Process::Start({BinDir() + "/granary_node", "--master=127.0.0.1:1", "--metrics_port=0",
                           "--host_segment_size=16MB", flag},
                          {}, log);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  *status = (*p)->Wait();
  std::string out = (*p)->Log();
  std::filesystem::remove(log);
  return out;
}

TEST(TopologyTest, AnAbsentNumaNodeOrDeviceIsRefusedByName) {
  int status = 0;
  std::string out = Refusal("--numa_node=1000", &status);
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat("granary_node: INVALID_ARGUMENT: --numa_node=1000 is not a NUMA node of "
                        "this host (/sys/devices/system/node has: ",
                        HostNumaNodes(), ")\n")))
      << out;
  out = Refusal("--device_name=mlx9_9:1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(absl::StrContains(out,
                                "granary_node: INVALID_ARGUMENT: --device_name 'mlx9_9:1' is not "
                                "an RDMA port, RDMA device or network interface of this host "
                                "(/sys has: "))
      << out;
}

// `granary topology ARGS...`: exit status, output in *out.
int Topology(const std::vector<std::string>& args, std::string* out) {
  const std::string log = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                       "/granary_topology_cli_", getpid(), ".log");
  std::vector<std::string> argv = {BinDir() + "/granary", "topology"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Process::Start(argv, {}, log);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return -1;
  const int status = (*p)->Wait();
  *out = (*p)->Log();
  std::filesystem::remove(log);
  return status;
}

TEST(TopologyTest, TheCliPrintsTheMatrixAndThePairing) {
  FakeSysfs fs;
  fs.Numa(0, "0-31");
  fs.Numa(1, "32-63");
  for (int k = 0; k < 4; ++k) fs.Switch(k, k != 3, k == 1 ? "1: DOWN" : "4: ACTIVE");
  fs.NetInterface("eth0");
  std::string out;
  ASSERT_EQ(Topology({"--sysfs_root=" + fs.root()}, &out), 0) << out;
  const std::string sw0 = "pci0000:10/0000:10:01.0/0000:11:00.0";
  const std::string sw1 = "pci0000:30/0000:30:01.0/0000:31:00.0";
  const std::string sw2 = "pci0000:50/0000:50:01.0/0000:51:00.0";
  const std::string sw3 = "pci0000:70/0000:70:01.0/0000:71:00.0";
  EXPECT_EQ(out,
            "NUMA nodes (2):\n"
            "  node0  cpus 0-31\n"
            "  node1  cpus 32-63\n"
            "GPUs (8):\n"
            "  gpu0  0000:13:00.0  numa 0  switch " +
                sw0 +
                "\n"
                "  gpu1  0000:14:00.0  numa 0  switch " +
                sw0 +
                "\n"
                "  gpu2  0000:33:00.0  numa 0  switch " +
                sw1 +
                "\n"
                "  gpu3  0000:34:00.0  numa 0  switch " +
                sw1 +
                "\n"
                "  gpu4  0000:53:00.0  numa 1  switch " +
                sw2 +
                "\n"
                "  gpu5  0000:54:00.0  numa 1  switch " +
                sw2 +
                "\n"
                "  gpu6  0000:73:00.0  numa 1  switch " +
                sw3 +
                "\n"
                "  gpu7  0000:74:00.0  numa 1  switch " +
                sw3 +
                "\n"
                "RDMA NIC ports (3):\n"
                "  mlx5_0:1  0000:15:00.0  InfiniBand  ACTIVE  200 Gb/s  numa 0  switch " +
                sw0 +
                "\n"
                "  mlx5_1:1  0000:35:00.0  InfiniBand  DOWN  200 Gb/s  numa 0  switch " +
                sw1 +
                "\n"
                "  mlx5_2:1  0000:55:00.0  InfiniBand  ACTIVE  200 Gb/s  numa 1  switch " +
                sw2 +
                "\n"
                "Network interfaces: eth0\n"
                "Pairing:\n"
                "  gpu0 -> mlx5_0:1  (same PCIe switch)\n"
                "  gpu1 -> mlx5_0:1  (same PCIe switch)\n"
                "  gpu2 -> mlx5_0:1  (same NUMA node 0)\n"
                "  gpu3 -> mlx5_0:1  (same NUMA node 0)\n"
                "  gpu4 -> mlx5_2:1  (same PCIe switch)\n"
                "  gpu5 -> mlx5_2:1  (same PCIe switch)\n"
                "  gpu6 -> mlx5_2:1  (same NUMA node 1)\n"
                "  gpu7 -> mlx5_2:1  (same NUMA node 1)\n");
}

TEST(TopologyTest, TheCliOnThisHostSaysUcxChooses) {
  std::string out;
  ASSERT_EQ(Topology({}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "Pairing:\n  none: no RDMA devices under "
                                "/sys/class/infiniband: UCX chooses the network devices "
                                "itself\n"))
      << out;
  EXPECT_EQ(Topology({"--sysfs_root=/nonexistent"}, &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "granary: sysfs root '/nonexistent' is not a directory\n"))
      << out;
}

}  // namespace
}  // namespace granary::testing
