#include "node/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/size.h"
#include "common/status_macros.h"

namespace granary::node {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A cgroup file's number: "max" (v2) and v1's "no limit" (a page-rounded 2^63-1) are kUnlimited.
std::optional<uint64_t> ReadNumber(const std::string& path) {
  auto text = ReadText(path);
  if (!text) return std::nullopt;
  absl::string_view v = absl::StripAsciiWhitespace(*text);
  if (v == "max") return kUnlimited;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) return std::nullopt;
  return n >= (1ull << 62) ? kUnlimited : n;
}

// "key value" lines (memory.stat, memory.events, memory.oom_control): the value of `key`.
std::optional<uint64_t> ReadKey(const std::string& path, absl::string_view key) {
  auto text = ReadText(path);
  if (!text) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t n = 0;
    if (kv.size() == 2 && kv[0] == key && absl::SimpleAtoi(kv[1], &n)) return n;
  }
  return std::nullopt;
}

// One write(2) of `value`, as the kernel wants cgroup writes: 0, or the errno.
int WriteRaw(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ssize_t n = write(fd, value.data(), value.size());
  int err = n == static_cast<ssize_t>(value.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return err;
}

absl::Status WriteError(const std::string& path, const std::string& value, int err,
                        absl::string_view why = "") {
  return absl::FailedPreconditionError(
      absl::StrCat("writing '", value, "' to ", path, ": ", std::strerror(err), why));
}

absl::Status WriteFile(const std::string& path, const std::string& value) {
  int err = WriteRaw(path, value);
  return err == 0 ? absl::OkStatus() : WriteError(path, value, err);
}

// Optional settings (swap, OOM grouping) where the kernel has the file: a failure is logged.
void WriteIfPresent(const std::string& path, const std::string& value) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (int err = WriteRaw(path, value); err != 0) {
    GRANARY_LOG_WARN << "writing '" << value << "' to " << path << ": " << std::strerror(err);
  }
}

std::string Limit(uint64_t v) { return v == kUnlimited ? "no limit" : common::FormatSize(v); }

// The parent directory of a cgroup path ("/a/b" -> "/a").
std::string Parent(const std::string& dir) { return dir.substr(0, dir.rfind('/')); }

}  // namespace

absl::Status ValidateCgroupName(const std::string& name) {
  bool ok = !name.empty() && name != "." && name != ".." && name.size() <= 200;
  for (char c : name) {
    ok = ok &&
         (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cgroup '", name,
                     "' is not a cgroup name: one path component of letters, digits, '_', '.' "
                     "and '-' (it is created under the node's own cgroup)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CgroupLayout> DetectCgroupLayout(const CgroupPaths& paths) {
  auto mounts = ReadText(paths.mounts);
  if (!mounts) return absl::FailedPreconditionError("cannot read " + paths.mounts);
  std::string v1_memory, v2;
  for (absl::string_view line : absl::StrSplit(*mounts, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4) continue;
    if (f[2] == "cgroup") {
      for (absl::string_view opt : absl::StrSplit(f[3], ',')) {
        if (opt == "memory") v1_memory = f[1];
      }
    } else if (f[2] == "cgroup2" && v2.empty()) {
      v2 = f[1];
    }
  }
  CgroupLayout layout;
  std::string v2_controllers;
  if (!v1_memory.empty()) {
    layout.version = CgroupVersion::kV1;
    layout.mount = v1_memory;
  } else if (!v2.empty()) {
    v2_controllers =
        std::string(absl::StripAsciiWhitespace(ReadText(v2 + "/cgroup.controllers").value_or("")));
    std::vector<absl::string_view> names = absl::StrSplit(v2_controllers, ' ', absl::SkipEmpty());
    if (std::find(names.begin(), names.end(), "memory") == names.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no memory cgroup controller: no cgroup v1 memory hierarchy is mounted, and the "
          "cgroup2 tree at ",
          v2, " offers only '", v2_controllers, "'"));
    }
    layout.version = CgroupVersion::kV2;
    layout.mount = v2;
  } else {
    return absl::FailedPreconditionError("no cgroup filesystem is mounted (" + paths.mounts + ")");
  }
  auto self = ReadText(paths.self_cgroup);
  if (!self) return absl::FailedPreconditionError("cannot read " + paths.self_cgroup);
  for (absl::string_view line : absl::StrSplit(*self, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    bool match = false;
    if (layout.version == CgroupVersion::kV2) {
      match = f[0] == "0" && f[1].empty();
    } else {
      for (absl::string_view c : absl::StrSplit(f[1], ',')) match = match || c == "memory";
    }
    if (match) {
      layout.own = f[2].empty() ? "/" : f[2];
      return layout;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      paths.self_cgroup, " names no ", layout.version == CgroupVersion::kV1 ? "memory" : "unified",
      " cgroup for this process"));
}

absl::StatusOr<std::unique_ptr<NodeCgroup>> NodeCgroup::Enter(const CgroupPaths& paths,
                                                              const std::string& name,
                                                              uint64_t limit, pid_t pid) {
  if (absl::Status st = ValidateCgroupName(name); !st.ok()) return st;
  auto layout = DetectCgroupLayout(paths);
  if (!layout.ok()) return layout.status();
  const bool v1 = layout->version == CgroupVersion::kV1;
  std::string parent = layout->mount + (layout->own == "/" ? "" : layout->own);
  std::string dir = parent + "/" + name;
  if (mkdir(dir.c_str(), 0755) != 0) {
    const int err = errno;
    if (err != EEXIST) {
      std::string how =
          v1 ? "on cgroup v1 only root may create memory cgroups (systemd delegates only the "
               "name=systemd hierarchy to unprivileged units): run the node as root, or create " +
                   dir + " beforehand and chown it to the node's user"
             : "give the node its subtree (systemd: Delegate=yes); in a container the cgroupfs "
               "is usually read-only, and the pod's memory limit is the fence instead of "
               "--cgroup";
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create cgroup ", dir, ": ", std::strerror(err), "; ", how));
    }
    // Reuse an empty cgroup (a previous run's); refuse one a live process is in.
    std::string procs = ReadText(dir + "/cgroup.procs").value_or("");
    std::vector<std::string> pids = absl::StrSplit(procs, '\n', absl::SkipEmpty());
    pids.erase(std::remove(pids.begin(), pids.end(), std::to_string(pid)), pids.end());
    if (!pids.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroup ", dir, " is in use by process ", pids[0],
          pids.size() > 1 ? absl::StrCat(" and ", pids.size() - 1, " more") : "",
          ": another node runs under --cgroup=", name, "; give each node its own name"));
    }
    GRANARY_LOG_INFO
        << "cgroup " << dir << " exists and is empty: reusing it (in use "
        << common::FormatSize(
               ReadNumber(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current")).value_or(0))
        << " already: shared memory a previous run left mapped stays charged)";
  }
  std::unique_ptr<NodeCgroup> cg(new NodeCgroup(*layout, dir, pid));
  const std::string value = std::to_string(limit);
  const std::string procs = std::to_string(pid);
  if (v1) {
    if (int err = WriteRaw(dir + "/memory.limit_in_bytes", value); err != 0) {
      return WriteError(dir + "/memory.limit_in_bytes", value, err,
                        err == EBUSY ? " (the cgroup already holds more than that)" : "");
    }
    WriteIfPresent(dir + "/memory.memsw.limit_in_bytes", value);  // swap accounted: none
    GRANARY_RETURN_IF_ERROR(WriteFile(dir + "/cgroup.procs", procs));
  } else {
    // v2: in first, so that the parent holds no process when its subtree gets the controller
    // (no internal processes: EBUSY otherwise).
    GRANARY_RETURN_IF_ERROR(WriteFile(dir + "/cgroup.procs", procs));
    std::string subtree = ReadText(parent + "/cgroup.subtree_control").value_or("");
    if (subtree.find("memory") == std::string::npos) {
      if (int err = WriteRaw(parent + "/cgroup.subtree_control", "+memory"); err != 0) {
        return WriteError(parent + "/cgroup.subtree_control", "+memory", err,
                          err == EBUSY
                              ? " (cgroup v2 lets no cgroup with processes of its own hand "
                                "controllers to its children: other processes are still in " +
                                    parent + ")"
                              : "");
      }
    }
    GRANARY_RETURN_IF_ERROR(WriteFile(dir + "/memory.max", value));
    WriteIfPresent(dir + "/memory.swap.max", "0");
    WriteIfPresent(dir + "/memory.oom.group", "1");
  }
  GRANARY_LOG_INFO << "running in memory cgroup " << dir << " (" << cg->version_name()
                   << "), limit " << common::FormatSize(limit);
  return cg;
}

NodeCgroup::~NodeCgroup() { Leave(); }

absl::StatusOr<CgroupFigures> NodeCgroup::Read() const {
  CgroupFigures f;
  const bool v1 = layout_.version == CgroupVersion::kV1;
  auto limit = ReadNumber(File(v1 ? "memory.limit_in_bytes" : "memory.max"));
  auto usage = ReadNumber(File(v1 ? "memory.usage_in_bytes" : "memory.current"));
  if (!limit || !usage) {
    return absl::FailedPreconditionError("cannot read the memory limit and usage of " + dir_);
  }
  f.limit = *limit;
  f.usage = *usage;
  f.peak = ReadNumber(File(v1 ? "memory.max_usage_in_bytes" : "memory.peak")).value_or(0);
  if (v1) {
    f.limit_hits = ReadNumber(File("memory.failcnt")).value_or(0);
    f.oom_kill = ReadKey(File("memory.oom_control"), "oom_kill").value_or(0);
  } else {
    f.limit_hits = ReadKey(File("memory.events"), "max").value_or(0);
    f.oom = ReadKey(File("memory.events"), "oom").value_or(0);
    f.oom_kill = ReadKey(File("memory.events"), "oom_kill").value_or(0);
  }
  // The binding limit: the smallest one from here up to the mount (v1 also reports it as
  // hierarchical_memory_limit; the walk finds whose it is, for the messages).
  f.effective_limit = f.limit;
  f.binding = dir_.substr(layout_.mount.size());
  for (std::string d = Parent(dir_); d.size() > layout_.mount.size(); d = Parent(d)) {
    auto l = ReadNumber(d + (v1 ? "/memory.limit_in_bytes" : "/memory.max"));
    if (l && *l < f.effective_limit) {
      f.effective_limit = *l;
      f.binding = d.substr(layout_.mount.size());
    }
  }
  if (v1) {
    auto h = ReadKey(File("memory.stat"), "hierarchical_memory_limit");
    if (h && *h < f.effective_limit) {
      f.effective_limit = *h;
      f.binding = "an ancestor (hierarchical_memory_limit)";
    }
  }
  return f;
}

absl::Status NodeCgroup::CheckRoom(uint64_t segments, uint64_t reserve) const {
  auto f = Read();
  if (!f.ok()) return f.status();
  const uint64_t need = segments + reserve + f->usage;
  if (need <= f->effective_limit) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "segments %s + reserve %s + in use %s = %s > effective memory limit %s (%d bytes, of "
      "cgroup %s): raise --memory_limit (or the binding limit) to at least %s, or shrink "
      "--host_segment_size",
      common::FormatSize(segments), common::FormatSize(reserve), common::FormatSize(f->usage),
      common::FormatSize(need), Limit(f->effective_limit), f->effective_limit, f->binding,
      common::FormatSize(need)));
}

std::optional<std::string> NodeCgroup::CheckCharged(uint64_t usage_before,
                                                    uint64_t segments) const {
  auto f = Read();
  if (!f.ok()) return std::string(f.status().message());
  const uint64_t grew = f->usage > usage_before ? f->usage - usage_before : 0;
  if (grew * 10 >= segments * 9) return std::nullopt;
  return absl::StrCat("cgroup ", dir_, " was charged ", common::FormatSize(grew), " for ",
                      common::FormatSize(segments),
                      " of segments: the rest is not bounded by its limit (huge pages are charged "
                      "to the hugetlb controller; memory another process touched first stays "
                      "charged to that process)");
}

void NodeCgroup::Leave() {
  if (left_) return;
  left_ = true;
  if (layout_.version == CgroupVersion::kV2) {
    GRANARY_LOG_INFO << "leaving cgroup " << dir_
                     << " in place (cgroup v2: the next start reuses it)";
    return;
  }
  if (!WriteFile(Parent(dir_) + "/cgroup.procs", std::to_string(pid_)).ok() ||
      rmdir(dir_.c_str()) != 0) {
    GRANARY_LOG_WARN << "cgroup " << dir_ << " not removed (" << std::strerror(errno)
                     << "): a process is still in it";
  }
}

void ExportCgroupMetrics(const NodeCgroup* cgroup, common::MetricsRegistry* metrics) {
  metrics->AddCollector([cgroup](common::MetricsWriter& w) {
    auto f = cgroup->Read();
    if (!f.ok()) return;
    const common::MetricLabels labels = {{"cgroup", cgroup->dir()},
                                         {"version", cgroup->version_name()}};
    auto bytes = [](uint64_t v) { return v == kUnlimited ? -1.0 : static_cast<double>(v); };
    w.Gauge("granary_node_cgroup_limit_bytes", "The node cgroup's own memory limit (-1: none)",
            labels, bytes(f->limit));
    w.Gauge("granary_node_cgroup_effective_limit_bytes",
            "The smallest memory limit from the node's cgroup up the tree (-1: none)", labels,
            bytes(f->effective_limit));
    w.Gauge("granary_node_cgroup_usage_bytes", "Memory charged to the node's cgroup", labels,
            static_cast<double>(f->usage));
    w.Gauge("granary_node_cgroup_peak_bytes", "Peak memory charged to the node's cgroup", labels,
            static_cast<double>(f->peak));
    w.Gauge("granary_node_cgroup_headroom_bytes",
            "Effective limit minus usage: an OOM kill loses every object on the node", labels,
            f->effective_limit == kUnlimited
                ? -1.0
                : static_cast<double>(f->effective_limit > f->usage ? f->effective_limit - f->usage
                                                                    : 0));
    w.Counter("granary_node_cgroup_limit_hits_total",
              "Times the cgroup hit its limit (v1 memory.failcnt, v2 memory.events max)", labels,
              static_cast<double>(f->limit_hits));
    w.Counter("granary_node_cgroup_oom_total", "OOM events in the cgroup (v2)", labels,
              static_cast<double>(f->oom));
    w.Counter("granary_node_cgroup_oom_kill_total", "Processes OOM-killed in the cgroup", labels,
              static_cast<double>(f->oom_kill));
  });
}

}  // namespace granary::node
