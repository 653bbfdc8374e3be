#include "node/node_metrics.h"

#include <iterator>
#include <string>

#include "absl/strings/string_view.h"
#include "device/device_backend.h"

namespace granary::node {

NodeMetrics::NodeMetrics(common::MetricsRegistry* m) {
  mounts =
      m->Counter("granary_node_mounts_total", "Times the node mounted its segments at a master");
  connected = m->Gauge("granary_node_master_connected",
                       "1 while the node has a live session with the master");
  connect_failures = m->Counter(
      "granary_node_master_connect_failures_total",
      "Failed attempts to register with the master (retried with jittered exponential back-off)");
  records_applied =
      m->Counter("granary_node_inventory_records_total",
                 "Commit and free records from the master applied to the node's inventory");
  records_reported = m->Counter("granary_node_inventory_reported_total",
                                "Inventory entries reported to a master after a re-mount");
  mismatches =
      m->Counter("granary_node_inventory_mismatches_total",
                 "Inventory entries dropped because the allocation header in memory disagreed");
  inventory_entries =
      m->Gauge("granary_node_inventory_entries", "Committed objects in the inventory");
  journal_errors = m->Counter(
      "granary_node_journal_errors_total",
      "Failed appends or syncs of the inventory journal beside the segment file (--segment_file)");
  readopted_entries =
      m->Gauge("granary_node_readopted_entries",
               "Inventory entries this process re-adopted at start from its segment file's journal "
               "(before the header check of its report)");
  constexpr absl::string_view kTimeoutsHelp =
      "Pushes into a client's buffer and fetches from another node that did not finish within "
      "the request's timeout_ms (the peer is then held off with jittered exponential back-off)";
  push_timeouts =
      m->Counter("granary_node_transfer_timeouts_total", kTimeoutsHelp, {{"kind", "push"}});
  fetch_timeouts =
      m->Counter("granary_node_transfer_timeouts_total", kTimeoutsHelp, {{"kind", "fetch"}});
  peer_refusals = m->Counter(
      "granary_node_peer_refusals_total",
      "Pushes and fetches refused at once because their peer is held off after a timeout");
  for (int op = 0; op < 2; ++op) {
    const std::string name = op == 0 ? "read" : "write";
    inline_values[op] =
        m->Counter("granary_node_inline_values_total",
                   "Values read or written inline in Read and Write messages (clients over tcp)",
                   {{"op", name}});
    inline_bytes[op] =
        m->Counter("granary_node_inline_bytes_total",
                   "Value bytes read or written inline in Read and Write messages", {{"op", name}});
    disk_values[op] = m->Counter("granary_node_disk_values_total",
                                 "Values read from or written to the disk tiers", {{"op", name}});
    disk_bytes[op] =
        m->Counter("granary_node_disk_bytes_total",
                   "Value bytes read from or written to the disk tiers", {{"op", name}});
    disk_errors[op] =
        m->Counter("granary_node_disk_errors_total",
                   "Disk-tier reads or writes that failed with an I/O error", {{"op", name}});
  }
  disk_checksum_failures = m->Counter(
      "granary_node_disk_checksum_failures_total",
      "Disk-tier records whose preamble or value failed its checksum (never served; dropped)");
}

void NodeMetrics::RecordSegments(common::MetricsRegistry* m,
                                 const std::vector<SegmentSpan>& spans) {
  uint64_t bytes[std::size(proto::kTiers)] = {};
  for (const auto& s : spans) bytes[static_cast<size_t>(s.tier)] += s.size;
  for (proto::Tier t : proto::kTiers) {
    const char* name = t == proto::Tier::kHost ? "host" : t == proto::Tier::kGpu ? "gpu" : "disk";
    m->Gauge("granary_node_segment_bytes", "Bytes of memory (or disk) contributed, per tier",
             {{"tier", name}})
        ->Set(static_cast<double>(bytes[static_cast<size_t>(t)]));
  }
  // Which device backend this process runs on (cuda, none, or the CPU-only fake, which is only
  // ever chosen explicitly): a fake in production shows here.
  m->Gauge("granary_device_backend", "1 for the device backend this process uses",
           {{"backend", std::string(device::ActiveBackendName())}})
      ->Set(1);
}

}  // namespace granary::node
