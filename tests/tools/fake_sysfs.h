#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_format.h"

namespace granary::testing {

// A synthetic sysfs tree in a fresh temporary directory, laid out as Linux lays out /sys:
// functions under devices/pciD:B/<root port>/..., linked from bus/pci/devices and, for RDMA
// devices, from class/infiniband/<dev>/device.
class FakeSysfs {
 public:
  FakeSysfs() {
    root_ = std::filesystem::temp_directory_path() /
            absl::StrFormat("granary_topo_%d_%d", getpid(), counter_++);
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~FakeSysfs() { std::filesystem::remove_all(root_); }
  std::string root() const { return root_.string(); }

  void Numa(int id, const std::string& cpus) {
    Write(root_ / absl::StrFormat("devices/system/node/node%d/cpulist", id), cpus);
  }
  // `path`: from the root complex down to the function ("pci0000:10/0000:10:01.0/...").
  void Pci(const std::string& path, const std::string& vendor, const std::string& cls, int numa) {
    const std::filesystem::path dir = root_ / "devices" / path;
    Write(dir / "vendor", vendor);
    Write(dir / "class", cls);
    Write(dir / "numa_node", std::to_string(numa));
    std::filesystem::create_directories(root_ / "bus/pci/devices");
    std::filesystem::create_directory_symlink(dir, root_ / "bus/pci/devices" / dir.filename());
  }
  void Gpu(const std::string& path, int numa) { Pci(path, "0x10de", "0x030200", numa); }
  void Nic(const std::string& dev, const std::string& path, int numa, const std::string& state,
           const std::string& rate) {
    Pci(path, "0x15b3", "0x020700", numa);
    const std::filesystem::path ib = root_ / "class/infiniband" / dev;
    std::filesystem::create_directories(ib);
    std::filesystem::create_directory_symlink(root_ / "devices" / path, ib / "device");
    Port(ib, state, rate, "InfiniBand");
  }
  // An RDMA device without a PCI function (rxe, siw): no device link.
  void SoftNic(const std::string& dev, const std::string& state, const std::string& rate) {
    Port(root_ / "class/infiniband" / dev, state, rate, "Ethernet");
  }
  void NetInterface(const std::string& name) {
    std::filesystem::create_directories(root_ / "class/net" / name);
  }

  // Switch k (0..3; 0 and 1 on socket 0): a root port, the switch's upstream port, and below
  // its downstream ports two GPUs and, with `nic`, an RDMA NIC mlx5_<k>.
  void Switch(int k, bool nic, const std::string& state = "4: ACTIVE") {
    const int bus = 0x20 * k + 0x10;
    const int numa = k / 2;
    const std::string top =
        absl::StrFormat("pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", bus, bus, bus + 1);
    for (int d = 0; d < 2; ++d) {
      Gpu(absl::StrFormat("%s/0000:%02x:%02x.0/0000:%02x:00.0", top, bus + 2, d, bus + 3 + d),
          numa);
    }
    if (nic) {
      Nic(absl::StrFormat("mlx5_%d", k),
          absl::StrFormat("%s/0000:%02x:02.0/0000:%02x:00.0", top, bus + 2, bus + 5), numa, state,
          "200 Gb/sec (4X HDR)");
    }
  }

 private:
  static void Port(const std::filesystem::path& ib, const std::string& state,
                   const std::string& rate, const std::string& link_layer) {
    Write(ib / "ports/1/state", state);
    Write(ib / "ports/1/rate", rate);
    Write(ib / "ports/1/link_layer", link_layer);
  }
  static void Write(const std::filesystem::path& p, const std::string& text) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

}  // namespace granary::testing
