#include "node/node_options.h"

#include "absl/strings/str_cat.h"
#include "common/etcd/master_view.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "granary/log_sink.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {

absl::Status NodeOptions::Validate() const {
  if (etcd::EndpointsOfMasterAddress(master).has_value()) {
    GRANARY_RETURN_IF_ERROR(etcd::ValidateMasterAddress("--master", master, cluster_id));
  } else if (auto hp = common::ParseHostPort(master); !hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--master: ", hp.status().message()));
  }
  if (host_segment_size == 0 && gpu_segment_size == 0 && disk_paths.empty()) {
    return absl::InvalidArgumentError(
        "nothing to contribute: --host_segment_size and --gpu_segment_size are both 0 and "
        "there is no --disk_path");
  }
  if (disk_sizes.size() != disk_paths.size()) {
    return absl::InvalidArgumentError(
        disk_paths.empty()
            ? "--disk_size without --disk_path: no disk tier to size"
            : absl::StrCat(disk_paths.size(), " --disk_path values but ", disk_sizes.size(),
                           " --disk_size values (give one size for all, or one per path)"));
  }
  for (size_t i = 0; i < disk_paths.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (disk_paths[j] == disk_paths[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--disk_path='", disk_paths[i], "' is given twice (one disk tier per directory)"));
      }
    }
  }
  if (!disk_paths.empty() && (disk_queue_depth < 1 || disk_queue_depth > 4096)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--disk_queue_depth=", disk_queue_depth, " is not in 1..4096"));
  }
  if (host_segment_size != 0 && host_segment_size < 1024 * 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_segment_size ", host_segment_size, " is below the 1 MB minimum"));
  }
  if (segment_memory != "ucx" && segment_memory != "mmap") {
    return absl::InvalidArgumentError(
        absl::StrCat("--segment_memory '", segment_memory, "' is not one of: ucx, mmap"));
  }
  if (!segment_file.empty() && virtual_segments) {
    return absl::InvalidArgumentError(
        absl::StrCat("--segment_file '", segment_file,
                     "' with --virtual_segments: a virtual segment has no bytes to keep"));
  }
  if (!segment_file.empty() && host_segment_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--segment_file '", segment_file,
                     "' with --host_segment_size=0: no host segment to keep in it"));
  }
  if (host_segment_name.empty() || host_segment_name.size() > proto::kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("host segment name '", host_segment_name,
                                                   "' is empty or over ", proto::kMaxNameBytes,
                                                   " bytes"));
  }
  if (log_level < -1 || log_level > static_cast<int>(LogLevel::kFatal)) {
    return absl::InvalidArgumentError(absl::StrCat("log level ", log_level, " is not a LogLevel"));
  }
  for (size_t i = 0; i < gpu_devices.size(); ++i) {
    if (gpu_devices[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpu_device=", gpu_devices[i], " is negative"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (gpu_devices[j] == gpu_devices[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--gpu_device=", gpu_devices[i], " is given twice (one GPU segment per device)"));
      }
    }
  }
  if (gpu_segment_size != 0 && gpu_segment_size < 1024 * 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu_segment_size ", gpu_segment_size, " is below the 1 MB minimum"));
  }
  if (numa_node < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--numa_node=", numa_node, " is not a NUMA node (or -1 for the NIC's)"));
  }
  return absl::OkStatus();
}

}  // namespace granary::node
