#include "master/master_metrics.h"

#include <utility>

#include "master/placement.h"

namespace granary::master {

MasterCounters::MasterCounters(common::MetricsRegistry* metrics) {
  auto counter = [&](const char* name, const char* help, common::MetricLabels labels = {}) {
    return metrics->Counter(name, help, labels);
  };
  const char* ops = "Object operations handled by the master, by type";
  put_start = counter("granary_master_ops_total", ops, {{"op", "put_start"}});
  put_end = counter("granary_master_ops_total", ops, {{"op", "put_end"}});
  put_revoke = counter("granary_master_ops_total", ops, {{"op", "put_revoke"}});
  get = counter("granary_master_ops_total", ops, {{"op", "get"}});
  remove = counter("granary_master_ops_total", ops, {{"op", "remove"}});
  get_miss =
      counter("granary_master_get_misses_total", "Get of a key that has no complete replica");
  put_expired = counter("granary_master_put_expired_total",
                        "Allocations freed because their put deadline passed");
  evicted = counter("granary_master_evicted_objects_total", "Objects evicted");
  evicted_bytes = counter("granary_master_evicted_bytes_total", "Bytes freed by eviction");
  lost = counter("granary_master_lost_objects_total",
                 "Objects dropped because every replica was on a lost node");
  sessions_expired = counter("granary_master_sessions_expired_total",
                             "Sessions declared dead after client_ttl without a heartbeat");
  alloc_failures = counter("granary_master_allocation_failures_total",
                           "PutStart entries refused for lack of space");
  hello_rejects_token = counter("granary_master_hello_rejects_total",
                                "Client hellos refused, by reason (token: missing or wrong "
                                "tenant token)",
                                {{"reason", "token"}});
}

namespace {

void WriteTenantGauges(common::MetricsWriter& w, const tenant::QuotaLedger& ledger) {
  w.Gauge("granary_tenant_capacity_bytes", "Allocatable capacity quotas are scaled against", {},
          static_cast<double>(ledger.capacity()));
  w.Gauge("granary_tenant_quota_requested_sum_bytes", "Sum of requested tenant quotas", {},
          static_cast<double>(ledger.requested_sum()));
  for (const auto& t : ledger.SnapshotAll()) {
    common::MetricLabels l = {{"tenant_id", t.tenant_id}};
    w.Gauge("granary_tenant_quota_requested_bytes", "Requested byte quota", l,
            t.requested_quota_bytes);
    w.Gauge("granary_tenant_quota_effective_bytes", "Effective byte quota (scaled to capacity)", l,
            t.effective_quota_bytes);
    w.Gauge("granary_tenant_quota_charged_bytes", "Committed plus in-flight bytes", l,
            t.charged_bytes);
    w.Gauge("granary_tenant_quota_inflight_bytes", "Bytes charged for puts in progress", l,
            t.inflight_bytes);
    w.Gauge("granary_tenant_entries", "Committed objects", l, t.entries);
    w.Gauge("granary_tenant_admission_closed", "1 when the tenant may not write", l,
            t.admission_closed ? 1 : 0);
    w.Gauge("granary_tenant_over_quota", "1 when charged exceeds the effective quota", l,
            t.over_quota ? 1 : 0);
    const char* help = "Writes refused, by reason";
    w.Counter("granary_tenant_quota_reject_total", help,
              {{"tenant_id", t.tenant_id}, {"reason", "quota_exceeded"}}, t.rejects_quota);
    w.Counter("granary_tenant_quota_reject_total", help,
              {{"tenant_id", t.tenant_id}, {"reason", "admission_closed"}}, t.rejects_closed);
    w.Counter("granary_tenant_evicted_objects_total", "Objects evicted (every reason)", l,
              t.evicted_objects);
    w.Counter("granary_tenant_evicted_bytes_total", "Charged bytes freed by eviction", l,
              t.evicted_bytes);
  }
}

}  // namespace

void ExportMasterGauges(common::MetricsRegistry* metrics, std::function<MasterStats()> stats,
                        const tenant::QuotaLedger* ledger, const SegmentRegistry* segments) {
  metrics->AddCollector([stats = std::move(stats), ledger, segments](common::MetricsWriter& w) {
    MasterStats s = stats();
    w.Gauge("granary_master_objects", "Objects in the table", {}, s.objects);
    w.Gauge("granary_master_objects_processing", "Objects with a put in progress", {},
            s.processing);
    for (proto::Tier tier : proto::kTiers) {
      const SegmentRegistry::Totals t = segments->totals(tier);
      const common::MetricLabels l = {{"tier", TierName(tier)}};
      w.Gauge("granary_master_capacity_bytes", "Mounted segment bytes", l, t.capacity);
      w.Gauge("granary_master_used_bytes", "Allocated segment bytes", l, t.used);
      w.Gauge("granary_master_tier_segments", "Mounted segments of the tier", l, t.segments);
      const SegmentRegistry::Evictions e = segments->Evicted(tier);
      w.Counter("granary_master_tier_evicted_objects_total",
                "Objects evicted from the tier's segments (space, watermark, quota, entries)", l,
                e.objects);
      w.Counter("granary_master_tier_evicted_bytes_total",
                "Placed bytes (every replica) that eviction freed on the tier", l, e.bytes);
    }
    w.Gauge("granary_master_segments", "Mounted segments", {}, s.segments);
    w.Gauge("granary_master_sessions", "Live sessions", {}, s.sessions);
    WriteTenantGauges(w, *ledger);
    for (const auto& p : segments->Pools()) {
      common::MetricLabels l = {{"tenant", p.tenant}};
      w.Gauge("granary_pool_capacity_bytes", "Bytes of the segments dedicated to a tenant (--pool)",
              l, p.totals.capacity);
      w.Gauge("granary_pool_used_bytes", "Allocated bytes of a tenant's pool", l, p.totals.used);
      w.Gauge("granary_pool_segments", "Mounted segments of a tenant's pool", l, p.totals.segments);
    }
    w.Gauge("granary_master_allocator_fragmentation",
            "Mean over segments of 1 - largest free block / free bytes", {},
            segments->MeanFragmentation());
  });
}

}  // namespace granary::master
