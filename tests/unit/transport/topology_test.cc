#include "transport/topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "tests/tools/fake_sysfs.h"
#include "transport/context.h"

namespace granary::transport {
namespace {

using ::granary::testing::FakeSysfs;

// "gpuN -> nic (reason)" per pairing.
std::vector<std::string> Lines(const Topology& t) {
  std::vector<std::string> out;
  for (const Pairing& p : t.Pair()) {
    out.push_back(absl::StrFormat("gpu%d -> %s (%s)", p.gpu, p.nic, p.reason));
  }
  return out;
}

void TwoSockets(FakeSysfs* fs) {
  fs->Numa(0, "0-31");
  fs->Numa(1, "32-63");
}

TEST(TopologyTest, EightGpusFourNicsTwoSocketsPairBySwitch) {
  FakeSysfs fs;
  TwoSockets(&fs);
  for (int k = 0; k < 4; ++k) fs.Switch(k, true);
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->gpus().size(), 8u);
  ASSERT_EQ(t->nics().size(), 4u);
  EXPECT_EQ(t->gpus()[2].pci, "0000:33:00.0");
  EXPECT_EQ(t->gpus()[2].numa_node, 0);
  EXPECT_EQ(t->gpus()[2].pcie_switch, "pci0000:30/0000:30:01.0/0000:31:00.0");
  EXPECT_EQ(t->nics()[3].name, "mlx5_3:1");
  EXPECT_EQ(t->nics()[3].pci, "0000:75:00.0");
  EXPECT_EQ(t->nics()[3].numa_node, 1);
  EXPECT_EQ(t->nics()[3].state, "ACTIVE");
  EXPECT_EQ(t->nics()[3].gbps, 200);
  EXPECT_EQ(Lines(*t), (std::vector<std::string>{
                           "gpu0 -> mlx5_0:1 (same PCIe switch)",
                           "gpu1 -> mlx5_0:1 (same PCIe switch)",
                           "gpu2 -> mlx5_1:1 (same PCIe switch)",
                           "gpu3 -> mlx5_1:1 (same PCIe switch)",
                           "gpu4 -> mlx5_2:1 (same PCIe switch)",
                           "gpu5 -> mlx5_2:1 (same PCIe switch)",
                           "gpu6 -> mlx5_3:1 (same PCIe switch)",
                           "gpu7 -> mlx5_3:1 (same PCIe switch)",
                       }));
  EXPECT_EQ(t->FallbackReason(), std::nullopt);
  EXPECT_EQ(t->NicForGpu(5)->nic, "mlx5_2:1");
  EXPECT_EQ(t->NicForGpu(8), std::nullopt);
  EXPECT_TRUE(t->HasNumaNode(1));
  EXPECT_FALSE(t->HasNumaNode(2));
}

TEST(TopologyTest, ADownNicIsSkippedForTheNextOnItsNumaNode) {
  FakeSysfs fs;
  TwoSockets(&fs);
  for (int k = 0; k < 4; ++k) fs.Switch(k, true, k == 1 ? "1: DOWN" : "4: ACTIVE");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nics()[1].state, "DOWN");
  EXPECT_EQ(Lines(*t), (std::vector<std::string>{
                           "gpu0 -> mlx5_0:1 (same PCIe switch)",
                           "gpu1 -> mlx5_0:1 (same PCIe switch)",
                           "gpu2 -> mlx5_0:1 (same NUMA node 0)",
                           "gpu3 -> mlx5_0:1 (same NUMA node 0)",
                           "gpu4 -> mlx5_2:1 (same PCIe switch)",
                           "gpu5 -> mlx5_2:1 (same PCIe switch)",
                           "gpu6 -> mlx5_3:1 (same PCIe switch)",
                           "gpu7 -> mlx5_3:1 (same PCIe switch)",
                       }));
}

TEST(TopologyTest, NicsOnOneSocketServeTheOtherSpreadEvenly) {
  FakeSysfs fs;
  TwoSockets(&fs);
  for (int k = 0; k < 4; ++k) fs.Switch(k, k < 2);
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Lines(*t), (std::vector<std::string>{
                           "gpu0 -> mlx5_0:1 (same PCIe switch)",
                           "gpu1 -> mlx5_0:1 (same PCIe switch)",
                           "gpu2 -> mlx5_1:1 (same PCIe switch)",
                           "gpu3 -> mlx5_1:1 (same PCIe switch)",
                           "gpu4 -> mlx5_0:1 (other NUMA node (0; none active on 1))",
                           "gpu5 -> mlx5_1:1 (other NUMA node (0; none active on 1))",
                           "gpu6 -> mlx5_0:1 (other NUMA node (0; none active on 1))",
                           "gpu7 -> mlx5_1:1 (other NUMA node (0; none active on 1))",
                       }));
}

TEST(TopologyTest, TiesGoToTheFasterPortThenToTheIdleOne) {
  FakeSysfs fs;
  fs.Numa(0, "0-7");
  // Three GPUs and three NICs on one root complex, no switch: all "same NUMA node".
  for (int i = 0; i < 3; ++i) fs.Gpu(absl::StrFormat("pci0000:00/0000:00:0%d.0", i + 1), 0);
  fs.Nic("mlx5_0", "pci0000:00/0000:00:04.0", 0, "4: ACTIVE", "100 Gb/sec (4X EDR)");
  fs.Nic("mlx5_1", "pci0000:00/0000:00:05.0", 0, "4: ACTIVE", "400 Gb/sec (4X NDR)");
  fs.Nic("mlx5_2", "pci0000:00/0000:00:06.0", 0, "4: ACTIVE", "400 Gb/sec (4X NDR)");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Lines(*t), (std::vector<std::string>{
                           "gpu0 -> mlx5_1:1 (same NUMA node 0)",
                           "gpu1 -> mlx5_2:1 (same NUMA node 0)",
                           "gpu2 -> mlx5_1:1 (same NUMA node 0)",
                       }));
  EXPECT_EQ(t->DefaultNic()->name, "mlx5_1:1");
}

TEST(TopologyTest, NoRdmaFallsBackToUcxAndSaysWhy) {
  FakeSysfs fs;
  TwoSockets(&fs);
  fs.Switch(0, false);
  fs.NetInterface("eth0");
  fs.NetInterface("lo");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->Pair().empty());
  EXPECT_EQ(t->DefaultNic(), nullptr);
  EXPECT_EQ(t->FallbackReason(), "no RDMA devices under " + fs.root() +
                                     "/class/infiniband: UCX chooses the network devices itself");
  EXPECT_TRUE(t->KnowsNetDevice("eth0"));
  EXPECT_FALSE(t->KnowsNetDevice("mlx5_0:1"));
  EXPECT_EQ(t->Report(),
            "NUMA nodes (2):\n"
            "  node0  cpus 0-31\n"
            "  node1  cpus 32-63\n"
            "GPUs (2):\n"
            "  gpu0  0000:13:00.0  numa 0  switch pci0000:10/0000:10:01.0/0000:11:00.0\n"
            "  gpu1  0000:14:00.0  numa 0  switch pci0000:10/0000:10:01.0/0000:11:00.0\n"
            "RDMA NIC ports (0):\n"
            "Network interfaces: eth0 lo\n"
            "Pairing:\n"
            "  none: no RDMA devices under " +
                fs.root() + "/class/infiniband: UCX chooses the network devices itself\n");
}

TEST(TopologyTest, NoGpusPairNothingButKeepTheDefaultNic) {
  FakeSysfs fs;
  fs.Numa(0, "0-7");
  fs.Nic("mlx5_0", "pci0000:00/0000:00:04.0", 0, "4: ACTIVE", "100 Gb/sec (4X EDR)");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->Pair().empty());
  EXPECT_EQ(t->FallbackReason(), "no NVIDIA GPUs under " + fs.root() +
                                     "/bus/pci/devices: nothing to pair; a process without a GPU "
                                     "uses mlx5_0:1");
  EXPECT_TRUE(t->KnowsNetDevice("mlx5_0"));
  EXPECT_TRUE(t->KnowsNetDevice("mlx5_0:1"));
}

// A soft RDMA device (rxe over eth0) has no PCI function: listed, never paired by affinity.
TEST(TopologyTest, ASoftRdmaDeviceHasNoPciFunction) {
  FakeSysfs fs;
  fs.Numa(0, "0-7");
  fs.Gpu("pci0000:00/0000:00:01.0", 0);
  fs.SoftNic("rxe0", "4: ACTIVE", "10 Gb/sec (1X QDR)");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->nics().size(), 1u);
  EXPECT_EQ(t->nics()[0].pci, "");
  EXPECT_EQ(t->nics()[0].numa_node, -1);
  EXPECT_EQ(Lines(*t), std::vector<std::string>{"gpu0 -> rxe0:1 (other NUMA node (?; none "
                                                "active on 0))"});
}

TEST(TopologyTest, AMissingRootIsNotFound) {
  auto t = Topology::Read("/nonexistent/sysfs");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "sysfs root '/nonexistent/sysfs' is not a directory");
}

class VectorSink : public LogSink {
 public:
  void Write(LogLevel, absl::string_view line) override { lines.emplace_back(line); }
  std::vector<std::string> lines;
};

TEST(TopologyTest, TheFallbackIsLoggedOnce) {
  VectorSink sink;
  common::LogRoute route{static_cast<int>(LogLevel::kInfo), &sink};
  common::ScopedLogRoute scope(&route);
  LogTopologyFallbackOnce("no RDMA devices");
  LogTopologyFallbackOnce("no RDMA devices");
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_NE(sink.lines[0].find("] topology: no RDMA devices\n"), std::string::npos)
      << sink.lines[0];
}

TEST(TopologyTest, TheRealSysfsReads) {
  auto t = Topology::Read();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->numa_nodes().empty());
  EXPECT_TRUE(t->KnowsNetDevice("lo"));
}

TEST(TopologyTest, ChooseNetDeviceOrder) {
  FakeSysfs fs;
  TwoSockets(&fs);
  for (int k = 0; k < 4; ++k) fs.Switch(k, true);
  fs.NetInterface("eth0");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  unsetenv("UCX_NET_DEVICES");
  auto c = ChooseNetDevice(*t, "", 6);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device, "mlx5_3:1");
  EXPECT_EQ(c->numa_node, 1);
  EXPECT_EQ(c->why, "gpu6: same PCIe switch");
  c = ChooseNetDevice(*t, "mlx5_0:1", 6);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device, "mlx5_0:1");
  EXPECT_EQ(c->numa_node, 0);
  EXPECT_EQ(c->why, "device_name");
  c = ChooseNetDevice(*t, "mlx5_7", 6);
  EXPECT_EQ(c.status().message(),
            "device_name 'mlx5_7' is not an RDMA port, RDMA device or network interface of this "
            "host (" +
                fs.root() + " has: mlx5_0:1, mlx5_1:1, mlx5_2:1, mlx5_3:1, eth0)");
  c = ChooseNetDevice(*t, "", 8);
  EXPECT_EQ(c.status().message(),
            "GPU 8 is not on this host (8 NVIDIA GPUs under " + fs.root() + ")");
  setenv("UCX_NET_DEVICES", "mlx5_1:1", 1);
  c = ChooseNetDevice(*t, "", 6);
  unsetenv("UCX_NET_DEVICES");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device, "");
  EXPECT_EQ(c->why, "UCX_NET_DEVICES=mlx5_1:1 from the environment");
}

TEST(TopologyTest, ChooseNetDeviceFallsBackWithoutRdma) {
  FakeSysfs fs;
  fs.Numa(0, "0-1");
  auto t = Topology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  auto c = ChooseNetDevice(*t, "", 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->fallback);
  EXPECT_EQ(c->device, "");
  EXPECT_EQ(c->why, "no RDMA devices under " + fs.root() +
                        "/class/infiniband: UCX chooses the network devices itself");
}

// The device set through the context's configuration is what UCX opened, read back.
TEST(TopologyTest, AContextGivenADeviceOpensOnlyIt) {
  auto ctx = Context::Create("topology_test", {{"NET_DEVICES", "lo"}});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->NetResources(), std::vector<std::string>{"tcp/lo"});
}

}  // namespace
}  // namespace granary::transport
