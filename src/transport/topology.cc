#include "transport/topology.h"

#ifdef GRANARY_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/metrics.h"
#include "transport/context.h"

namespace granary::transport {

namespace fs = std::filesystem;

namespace {

// The first line of a sysfs file, trimmed; empty when it cannot be read.
std::string ReadLine(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return std::string(absl::StripAsciiWhitespace(line));
}

int ReadNuma(const fs::path& dir) {
  int n = -1;
  if (!absl::SimpleAtoi(ReadLine(dir / "numa_node"), &n) || n < 0) return -1;
  return n;
}

// The names in `dir`, sorted; none when it does not exist.
std::vector<std::string> ListDir(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The PCIe switch of the PCI function whose resolved sysfs directory is `dir`: the path from
// the root complex to the switch's upstream port, when a switch sits between the root port
// and the function (devices/pciD:B/<root port>/<upstream>/<downstream>/.../<function>).
std::string PcieSwitch(const fs::path& devices, const fs::path& dir) {
  std::vector<std::string> comps;
  for (const auto& c : dir.lexically_relative(devices)) comps.push_back(c.string());
  if (comps.size() < 5 || !absl::StartsWith(comps[0], "pci")) return "";
  return absl::StrCat(comps[0], "/", comps[1], "/", comps[2]);
}

// "200 Gb/sec (4X HDR)" -> 200.
double ParseRate(const std::string& rate) {
  std::vector<std::string> words = absl::StrSplit(rate, ' ', absl::SkipEmpty());
  double v = 0;
  if (words.empty() || !absl::SimpleAtod(words[0], &v)) return 0;
  return v;
}

// "4: ACTIVE" -> "ACTIVE".
std::string ParseState(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return s;
  return std::string(absl::StripAsciiWhitespace(s.substr(colon + 1)));
}

// The RDMA devices libibverbs knows, when it is built in and reads the real /sys.
std::optional<std::set<std::string>> VerbsDevices(const std::string& root) {
#ifdef GRANARY_HAVE_IBVERBS
  if (fs::path(root).lexically_normal() != fs::path("/sys")) return std::nullopt;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return std::set<std::string>{};
  std::set<std::string> names;
  for (int i = 0; i < n; ++i) names.insert(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
#else
  (void)root;
  return std::nullopt;
#endif
}

std::string NumaName(int n) { return n < 0 ? "?" : absl::StrCat(n); }

}  // namespace

absl::StatusOr<Topology> Topology::Read(const std::string& sysfs_root) {
  std::error_code ec;
  if (!fs::is_directory(sysfs_root, ec)) {
    return absl::NotFoundError(absl::StrCat("sysfs root '", sysfs_root, "' is not a directory"));
  }
  Topology t;
  t.root_ = sysfs_root;
  const fs::path root(sysfs_root);
  const fs::path devices = fs::weakly_canonical(root / "devices", ec);

  for (const std::string& name : ListDir(root / "devices/system/node")) {
    int id = 0;
    if (!absl::StartsWith(name, "node") || !absl::SimpleAtoi(name.substr(4), &id)) continue;
    t.numa_.push_back({id, ReadLine(root / "devices/system/node" / name / "cpulist")});
  }
  std::sort(t.numa_.begin(), t.numa_.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });

  for (const std::string& bdf : ListDir(root / "bus/pci/devices")) {
    const fs::path dir = fs::weakly_canonical(root / "bus/pci/devices" / bdf, ec);
    const std::string cls = ReadLine(dir / "class");
    if (ReadLine(dir / "vendor") != "0x10de") continue;
    if (!absl::StartsWith(cls, "0x0300") && !absl::StartsWith(cls, "0x0302")) continue;
    Gpu g;
    g.index = static_cast<int>(t.gpus_.size());
    g.pci = bdf;
    g.numa_node = ReadNuma(dir);
    g.pcie_switch = PcieSwitch(devices, dir);
    t.gpus_.push_back(std::move(g));
  }

  const std::optional<std::set<std::string>> verbs = VerbsDevices(sysfs_root);
  for (const std::string& dev : ListDir(root / "class/infiniband")) {
    if (verbs.has_value() && verbs->count(dev) == 0) continue;
    const fs::path ib = root / "class/infiniband" / dev;
    // Soft devices (rxe, siw) have no PCI function: no device link, no NUMA node or switch.
    const bool has_pci = fs::exists(ib / "device", ec);
    const fs::path pci = has_pci ? fs::weakly_canonical(ib / "device", ec) : fs::path();
    for (const std::string& port : ListDir(ib / "ports")) {
      const fs::path p = ib / "ports" / port;
      NicPort n;
      n.name = absl::StrCat(dev, ":", port);
      n.device = dev;
      n.pci = has_pci ? pci.filename().string() : "";
      n.link_layer = ReadLine(p / "link_layer");
      n.state = ParseState(ReadLine(p / "state"));
      n.gbps = ParseRate(ReadLine(p / "rate"));
      n.numa_node = has_pci ? ReadNuma(pci) : -1;
      n.pcie_switch = has_pci ? PcieSwitch(devices, pci) : "";
      t.nics_.push_back(std::move(n));
    }
  }
  t.netdevs_ = ListDir(root / "class/net");
  return t;
}

std::vector<Pairing> Topology::Pair() const {
  std::vector<Pairing> out;
  std::vector<int> load(nics_.size(), 0);
  for (const Gpu& g : gpus_) {
    // (affinity, -speed, load, index): the smallest wins.
    std::optional<std::tuple<int, double, int, size_t>> best;
    for (size_t i = 0; i < nics_.size(); ++i) {
      const NicPort& n = nics_[i];
      if (!n.active()) continue;
      int affinity = 2;
      if (!g.pcie_switch.empty() && g.pcie_switch == n.pcie_switch) {
        affinity = 0;
      } else if (g.numa_node >= 0 && g.numa_node == n.numa_node) {
        affinity = 1;
      }
      auto key = std::make_tuple(affinity, -n.gbps, load[i], i);
      if (!best.has_value() || key < *best) best = key;
    }
    if (!best.has_value()) return {};
    const auto [affinity, speed, l, i] = *best;
    ++load[i];
    Pairing p;
    p.gpu = g.index;
    p.nic = nics_[i].name;
    p.reason = affinity == 0   ? "same PCIe switch"
               : affinity == 1 ? absl::StrCat("same NUMA node ", g.numa_node)
                               : absl::StrCat("other NUMA node (", NumaName(nics_[i].numa_node),
                                              "; none active on ", NumaName(g.numa_node), ")");
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<Pairing> Topology::NicForGpu(int gpu) const {
  for (Pairing& p : Pair()) {
    if (p.gpu == gpu) return p;
  }
  return std::nullopt;
}

const NicPort* Topology::DefaultNic() const {
  const NicPort* best = nullptr;
  for (const NicPort& n : nics_) {
    if (n.active() && (best == nullptr || n.gbps > best->gbps)) best = &n;
  }
  return best;
}

const NicPort* Topology::FindNic(const std::string& name) const {
  for (const NicPort& n : nics_) {
    if (n.name == name || n.device == name) return &n;
  }
  return nullptr;
}

bool Topology::KnowsNetDevice(const std::string& name) const {
  return FindNic(name) != nullptr ||
         std::find(netdevs_.begin(), netdevs_.end(), name) != netdevs_.end();
}

bool Topology::HasNumaNode(int id) const {
  return std::any_of(numa_.begin(), numa_.end(), [id](const NumaNode& n) { return n.id == id; });
}

std::optional<std::string> Topology::FallbackReason() const {
  const std::string ib = (fs::path(root_) / "class/infiniband").string();
  if (nics_.empty()) {
    return absl::StrCat("no RDMA devices under ", ib, ": UCX chooses the network devices itself");
  }
  if (DefaultNic() == nullptr) {
    return absl::StrCat("no RDMA port under ", ib,
                        " is ACTIVE: UCX chooses the network devices itself");
  }
  if (gpus_.empty()) {
    return absl::StrCat("no NVIDIA GPUs under ", (fs::path(root_) / "bus/pci/devices").string(),
                        ": nothing to pair; a process without a GPU uses ", DefaultNic()->name);
  }
  return std::nullopt;
}

std::string Topology::Report() const {
  std::ostringstream o;
  o << "NUMA nodes (" << numa_.size() << "):\n";
  for (const NumaNode& n : numa_) o << "  node" << n.id << "  cpus " << n.cpus << "\n";
  o << "GPUs (" << gpus_.size() << "):\n";
  for (const Gpu& g : gpus_) {
    o << "  gpu" << g.index << "  " << g.pci << "  numa " << NumaName(g.numa_node) << "  switch "
      << (g.pcie_switch.empty() ? "-" : g.pcie_switch) << "\n";
  }
  o << "RDMA NIC ports (" << nics_.size() << "):\n";
  for (const NicPort& n : nics_) {
    o << "  " << n.name << "  " << n.pci << "  " << n.link_layer << "  " << n.state << "  "
      << n.gbps << " Gb/s  numa " << NumaName(n.numa_node) << "  switch "
      << (n.pcie_switch.empty() ? "-" : n.pcie_switch) << "\n";
  }
  o << "Network interfaces:";
  for (const std::string& n : netdevs_) o << " " << n;
  o << "\nPairing:\n";
  if (std::optional<std::string> why = FallbackReason()) {
    o << "  none: " << *why << "\n";
  } else {
    for (const Pairing& p : Pair())
      o << "  gpu" << p.gpu << " -> " << p.nic << "  (" << p.reason << ")\n";
  }
  return o.str();
}

absl::StatusOr<NetDeviceChoice> ChooseNetDevice(const Topology& t, const std::string& device_name,
                                                int gpu) {
  NetDeviceChoice c;
  if (!device_name.empty()) {
    for (absl::string_view d : absl::StrSplit(device_name, ',')) {
      if (t.KnowsNetDevice(std::string(d))) continue;
      std::vector<std::string> known;
      for (const NicPort& n : t.nics()) known.push_back(n.name);
      known.insert(known.end(), t.net_interfaces().begin(), t.net_interfaces().end());
      return absl::InvalidArgumentError(absl::StrCat(
          "device_name '", d, "' is not an RDMA port, RDMA device or network interface of this ",
          "host (", t.root(), " has: ", known.empty() ? "none" : absl::StrJoin(known, ", "), ")"));
    }
    c.device = device_name;
    if (const NicPort* n = t.FindNic(device_name)) c.numa_node = n->numa_node;
    c.why = "device_name";
    return c;
  }
  if (const char* env = std::getenv("UCX_NET_DEVICES"); env != nullptr && *env != '\0') {
    c.why = absl::StrCat("UCX_NET_DEVICES=", env, " from the environment");
    return c;
  }
  if (t.DefaultNic() == nullptr) {  // no active RDMA port: nothing to choose from
    c.why = *t.FallbackReason();
    c.fallback = true;
    return c;
  }
  if (gpu < 0) {
    c.why = "no GPU given: UCX chooses among all network devices";
    return c;
  }
  if (!t.gpus().empty() && static_cast<size_t>(gpu) >= t.gpus().size()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU ", gpu, " is not on this host (",
                                                   t.gpus().size(), " NVIDIA GPUs under ", t.root(),
                                                   ")"));
  }
  std::optional<Pairing> p = t.NicForGpu(gpu);
  if (!p.has_value()) {
    c.why = t.FallbackReason().value_or("nothing to pair: UCX chooses the network devices");
    c.fallback = true;
    return c;
  }
  c.device = p->nic;
  c.gpu = gpu;
  c.numa_node = t.FindNic(p->nic)->numa_node;
  c.why = absl::StrCat("gpu", gpu, ": ", p->reason);
  return c;
}

void LogTopologyFallbackOnce(const std::string& reason) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  GRANARY_LOG_INFO << "topology: " << reason;
}

void LogNetDeviceChoice(const NetDeviceChoice& choice, const Context& ctx,
                        common::MetricsRegistry* metrics, const std::string& metric) {
  const std::string opened = absl::StrJoin(ctx.NetResources(), ", ");
  if (choice.fallback) {
    LogTopologyFallbackOnce(choice.why);
    GRANARY_LOG_DEBUG << "UCX network resources: " << opened;
  } else {
    GRANARY_LOG_INFO << "network device "
                     << (choice.device.empty() ? std::string("chosen by UCX") : choice.device)
                     << " (" << choice.why << "); UCX opened: " << opened;
  }
  metrics
      ->Gauge(metric,
              "1 for the network device this process's UCX context was given (empty: UCX's "
              "choice), with its NUMA node and the GPU it was chosen for (-1: none)",
              {{"device", choice.device},
               {"numa_node", absl::StrCat(choice.numa_node)},
               {"gpu", absl::StrCat(choice.gpu)}})
      ->Set(1);
}

}  // namespace granary::transport
