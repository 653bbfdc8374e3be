#pragma once

#include <vector>

#include "common/metrics.h"
#include "node/node_service.h"

namespace granary::node {

// The node's counters and gauges, registered once in its MetricsRegistry (the constructor).
// Plain pointers into the registry, which owns them and outlives the node; each is an atomic,
// so the node's parts update them from any thread with no lock.
struct NodeMetrics {
  explicit NodeMetrics(MetricsRegistry* metrics);
  // The segment-size gauges (per tier) and the device backend gauge, once the segments exist.
  static void RecordSegments(MetricsRegistry* metrics, const std::vector<SegmentSpan>& spans);

  // The master link.
  MetricCounter* mounts;
  MetricGauge* connected;
  MetricCounter* connect_failures;
  // The inventory.
  MetricCounter* records_applied;
  MetricCounter* records_reported;
  MetricCounter* mismatches;
  MetricGauge* inventory_entries;
  // The segment file's journal (NodeOptions::segment_file).
  MetricCounter* journal_errors;
  MetricGauge* readopted_entries;
  // The data handlers.
  MetricCounter* push_timeouts;
  MetricCounter* fetch_timeouts;
  MetricCounter* peer_refusals;
  MetricCounter* inline_values[2];  // Read, Write
  MetricCounter* inline_bytes[2];
};

}  // namespace granary::node
