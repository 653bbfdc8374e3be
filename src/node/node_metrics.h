#pragma once

#include <vector>

#include "common/metrics.h"
#include "node/node_service.h"

namespace granary::node {

// The node's counters and gauges, registered once in its MetricsRegistry (the constructor).
// Plain pointers into the registry, which owns them and outlives the node; each is an atomic,
// so the node's parts update them from any thread with no lock.
struct NodeMetrics {
  explicit NodeMetrics(common::MetricsRegistry* metrics);
  // The segment-size gauges (per tier) and the device backend gauge, once the segments exist.
  static void RecordSegments(common::MetricsRegistry* metrics,
                             const std::vector<SegmentSpan>& spans);

  // The master link.
  common::MetricCounter* mounts;
  common::MetricGauge* connected;
  common::MetricCounter* connect_failures;
  // The inventory.
  common::MetricCounter* records_applied;
  common::MetricCounter* records_reported;
  common::MetricCounter* mismatches;
  common::MetricGauge* inventory_entries;
  // The segment file's journal (NodeOptions::segment_file).
  common::MetricCounter* journal_errors;
  common::MetricGauge* readopted_entries;
  // The data handlers.
  common::MetricCounter* push_timeouts;
  common::MetricCounter* fetch_timeouts;
  common::MetricCounter* peer_refusals;
  common::MetricCounter* inline_values[2];  // Read, Write
  common::MetricCounter* inline_bytes[2];
  // The disk tiers (every tier of the node together).
  common::MetricCounter* disk_values[2];  // read, written
  common::MetricCounter* disk_bytes[2];   // value bytes read, written
  common::MetricCounter* disk_errors[2];  // reads, writes that failed (I/O errors; not a miss)
  common::MetricCounter* disk_checksum_failures;  // records whose preamble or value failed
};

}  // namespace granary::node
