#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace granary::common {
class MetricsRegistry;
}  // namespace granary::common

namespace granary::transport {

class Context;

// One port of an RDMA device, as UCX_NET_DEVICES names it ("mlx5_0:1").
struct NicPort {
  std::string name;         // "<device>:<port>"
  std::string device;       // the RDMA device ("mlx5_0")
  std::string pci;          // its PCI function ("0000:18:00.0")
  std::string link_layer;   // "InfiniBand" or "Ethernet"
  std::string state;        // "ACTIVE", "DOWN", ... (sysfs ports/N/state without the number)
  double gbps = 0;          // ports/N/rate ("200 Gb/sec (4X HDR)" -> 200)
  int numa_node = -1;       // of its PCI function; -1: unknown
  std::string pcie_switch;  // PCIe switch it sits under (see Gpu::pcie_switch); empty: none
  bool active() const { return state == "ACTIVE"; }
};

// An NVIDIA GPU. Its index is its place in PCI bus id order (CUDA_DEVICE_ORDER=PCI_BUS_ID).
struct Gpu {
  int index = 0;
  std::string pci;     // PCI bus id ("0000:19:00.0")
  int numa_node = -1;  // -1: unknown
  // The PCIe switch above it: its root complex, root port and the switch's upstream port
  // ("pci0000:16/0000:16:01.0/0000:17:00.0"); empty when it hangs off a root port directly.
  std::string pcie_switch;
};

struct NumaNode {
  int id = 0;
  std::string cpus;  // cpulist ("0-31,64-95")
};

// The NIC chosen for one GPU, and why.
struct Pairing {
  int gpu = 0;
  std::string nic;     // NicPort::name
  std::string reason;  // "same PCIe switch", "same NUMA node 0", "other NUMA node (1)"
};

// What a host offers Granary's data path: GPUs, RDMA NIC ports, NUMA nodes and plain network
// interfaces, read from a sysfs tree. A value; immutable after Read, thread-safe to share.
class Topology {
 public:
  // Reads `sysfs_root` ("/sys" on a real host; tests write synthetic trees). With the real root,
  // libibverbs' device list (ibv_get_device_list) names the RDMA devices when it is built in;
  // sysfs gives their ports. A missing subtree is an empty list, not an error; an unreadable
  // root is NOT_FOUND.
  [[nodiscard]] static absl::StatusOr<Topology> Read(const std::string& sysfs_root = "/sys");

  const std::vector<Gpu>& gpus() const { return gpus_; }
  const std::vector<NicPort>& nics() const { return nics_; }
  const std::vector<NumaNode>& numa_nodes() const { return numa_; }
  const std::vector<std::string>& net_interfaces() const { return netdevs_; }
  const std::string& root() const { return root_; }

  // One NIC port per GPU, in GPU order: same PCIe switch first, then same NUMA node, then any;
  // ties go to the faster port, then to the port serving the fewest GPUs so far (so two GPUs
  // do not share a NIC while another idles). Ports that are not ACTIVE are never chosen. Empty
  // when there are no GPUs or no active ports.
  std::vector<Pairing> Pair() const;
  // The port for GPU `gpu` (Pair()'s choice), or nullopt (no such GPU, or nothing to pair).
  std::optional<Pairing> NicForGpu(int gpu) const;
  // The port a process with no GPU uses: the fastest active port (first by name on a tie).
  const NicPort* DefaultNic() const;
  const NicPort* FindNic(const std::string& name) const;
  // Whether UCX_NET_DEVICES could name `name`: an RDMA port ("mlx5_0:1"), an RDMA device
  // ("mlx5_0"), or a network interface ("eth0", "lo").
  bool KnowsNetDevice(const std::string& name) const;
  bool HasNumaNode(int id) const;
  // Why there is nothing to pair ("no RDMA devices under /sys/class/infiniband: UCX chooses the
  // network devices itself"), or nullopt when Pair() is not empty.
  std::optional<std::string> FallbackReason() const;

  // The matrix an operator reads (`granary topology`): NUMA nodes, GPUs, NICs, pairing.
  std::string Report() const;

 private:
  std::string root_;
  std::vector<Gpu> gpus_;
  std::vector<NicPort> nics_;
  std::vector<NumaNode> numa_;
  std::vector<std::string> netdevs_;
};

// Which network device a UCX context of a process uses, and why.
struct NetDeviceChoice {
  std::string device;     // for UCX NET_DEVICES; empty: leave it to UCX (or UCX_NET_DEVICES)
  int numa_node = -1;     // the chosen NIC's NUMA node; -1: unknown or none chosen
  int gpu = -1;           // the GPU it was chosen for; -1: none
  std::string why;        // "device_name", "gpu3: same PCIe switch", or why UCX chooses
  bool fallback = false;  // nothing to choose from on this host (say it once: see below)
};
// An explicit `device_name` (a comma list of RDMA ports, RDMA devices or interfaces, as
// UCX_NET_DEVICES takes them) wins, then UCX_NET_DEVICES in the environment, then the NIC
// paired with `gpu` (>= 0). INVALID_ARGUMENT names an unknown device or a GPU the host lacks.
[[nodiscard]] absl::StatusOr<NetDeviceChoice> ChooseNetDevice(const Topology& t,
                                                              const std::string& device_name,
                                                              int gpu);

// Logs `reason` at info the first time it is called in this process, and never again: the
// fallback is said once, however many clients and contexts a process makes.
void LogTopologyFallbackOnce(const std::string& reason);

// Says at start which network device `ctx` was configured with and why, with the transport
// resources UCX opened read back from it (a fallback once per process, through
// LogTopologyFallbackOnce), and sets the gauge `metric`{device, numa_node, gpu, why} to 1.
void LogNetDeviceChoice(const NetDeviceChoice& choice, const Context& ctx,
                        common::MetricsRegistry* metrics, const std::string& metric);

}  // namespace granary::transport
