#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/metrics.h"
#include "master/segment_registry.h"
#include "master/tenant/quota_ledger.h"

namespace granary::master {

// A snapshot of the master's size, for the admin API and the gauges.
struct MasterStats {
  uint64_t objects = 0;
  uint64_t processing = 0;
  uint64_t capacity = 0;  // every mounted segment
  uint64_t used = 0;
  size_t segments = 0;
  size_t sessions = 0;
  size_t pending_deadlines = 0;
};

// The master's counters, registered once in the MetricsRegistry. Plain pointers into the
// registry, which owns them and outlives the master; each counter is an atomic, so the parts
// bump them from any thread with no lock.
struct MasterCounters {
  explicit MasterCounters(common::MetricsRegistry* metrics);

  common::MetricCounter* put_start;
  common::MetricCounter* put_end;
  common::MetricCounter* put_revoke;
  common::MetricCounter* put_expired;
  common::MetricCounter* get;
  common::MetricCounter* get_miss;
  common::MetricCounter* remove;
  common::MetricCounter* evicted;
  common::MetricCounter* evicted_bytes;
  common::MetricCounter* lost;
  common::MetricCounter* sessions_expired;
  common::MetricCounter* alloc_failures;
  common::MetricCounter* hello_rejects_token;
};

// Registers the collector that exports the master's gauges (objects, capacity, sessions,
// per-tenant quota state, fragmentation) at each scrape. `stats`, `ledger` and `segments` must
// outlive the registry's use of the collector (the master's parts live as long as the process's
// registry). The collector takes the locks those calls take, one at a time, and no lock of its
// own.
void ExportMasterGauges(common::MetricsRegistry* metrics, std::function<MasterStats()> stats,
                        const tenant::QuotaLedger* ledger, const SegmentRegistry* segments);

}  // namespace granary::master
