#!/usr/bin/python3
"""Writes deploy/grafana/granary.json, the Grafana dashboard over Granary's Prometheus metrics.

The board is generated so that its panels stay uniform and every query is in one place: edit
this file and run it (`deploy/grafana/make_dashboard.py`), never the JSON by hand. The test
tests/python/test_grafana_board.py checks that the committed JSON is this script's output and
that every metric a query names exists in a live master's and node's /metrics.

Import: Grafana -> Dashboards -> New -> Import -> upload granary.json, pick the Prometheus data
source. Variables: $datasource, $job (the scrape jobs of masters and nodes), $tenant.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
MASTER = 'job=~"$job"'
TENANT = 'job=~"$job",tenant_id=~"$tenant"'

_panels = []
_y = 0


def _target(expr, legend, ref):
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}


def row(title):
    global _y
    _panels.append({"type": "row", "title": title, "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": _y}, "panels": []})
    _y += 1


def panels(*specs, height=8):
    """One line of panels, splitting the 24 grid columns evenly. spec: (title, unit,
    [(expr, legend)], description)."""
    global _y
    width = 24 // len(specs)
    for i, (title, unit, queries, description) in enumerate(specs):
        _panels.append({
            "type": "timeseries", "title": title, "description": description,
            "datasource": DS,
            "gridPos": {"h": height, "w": width, "x": i * width, "y": _y},
            "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi"}},
            "targets": [_target(e, l, chr(ord("A") + k)) for k, (e, l) in enumerate(queries)],
        })
    _y += height


row("Capacity")
panels(
    ("Capacity and usage per tier", "bytes",
     [(f"sum by (tier) (granary_master_capacity_bytes{{{MASTER}}})", "capacity {{tier}}"),
      (f"sum by (tier) (granary_master_used_bytes{{{MASTER}}})", "used {{tier}}")],
     "Bytes of every mounted segment and the bytes allocated in them, by tier (host, gpu)."),
    ("Objects", "short",
     [(f"sum(granary_master_objects{{{MASTER}}})", "objects"),
      (f"sum(granary_master_objects_processing{{{MASTER}}})", "puts in flight")],
     "Objects in the master's table; those still being written (PutStart without PutEnd)."),
    ("Segments, sessions, fragmentation", "short",
     [(f"sum(granary_master_segments{{{MASTER}}})", "segments"),
      (f"sum(granary_master_sessions{{{MASTER}}})", "sessions"),
      (f"max(granary_master_allocator_fragmentation{{{MASTER}}})", "fragmentation (0..1)")],
     "Mounted segments, client and node sessions, and the allocators' fragmentation."),
)
row("Operations")
panels(
    ("Operations by type", "ops",
     [(f"sum by (op) (rate(granary_master_ops_total{{{MASTER}}}[{RATE}]))", "{{op}}")],
     "Keys per second through the master, by operation."),
    ("Errors by type", "ops",
     [(f"sum(rate(granary_master_get_misses_total{{{MASTER}}}[{RATE}]))", "get misses"),
      (f"sum(rate(granary_master_allocation_failures_total{{{MASTER}}}[{RATE}]))",
       "allocation failures"),
      (f"sum(rate(granary_master_put_expired_total{{{MASTER}}}[{RATE}]))", "puts expired"),
      (f"sum(rate(granary_master_bad_requests_total{{{MASTER}}}[{RATE}]))", "bad requests"),
      (f"sum by (reason) (rate(granary_master_hello_rejects_total{{{MASTER}}}[{RATE}]))",
       "hello rejected ({{reason}})"),
      (f"sum(rate(granary_master_sessions_expired_total{{{MASTER}}}[{RATE}]))",
       "sessions expired"),
      (f"sum(rate(granary_master_lost_objects_total{{{MASTER}}}[{RATE}]))", "objects lost")],
     "What goes wrong, per second: misses, full segments, abandoned puts, refused hellos."),
)
panels(
    ("Request time p99 by type", "s",
     [("histogram_quantile(0.99, sum by (op, le) "
       f"(rate(granary_master_request_seconds_bucket{{{MASTER}}}[{RATE}])))", "{{op}}")],
     "The master's own time per request (decode, work under its locks, encode), no network."),
    ("Request time p50 by type", "s",
     [("histogram_quantile(0.5, sum by (op, le) "
       f"(rate(granary_master_request_seconds_bucket{{{MASTER}}}[{RATE}])))", "{{op}}")],
     "The median of the same."),
    ("Requests by type", "reqps",
     [(f"sum by (op) (rate(granary_master_request_seconds_count{{{MASTER}}}[{RATE}]))",
       "{{op}}")],
     "Requests per second (a batch of keys is one request)."),
)
row("Eviction")
panels(
    ("Evicted objects", "ops",
     [(f"sum(rate(granary_master_evicted_objects_total{{{MASTER}}}[{RATE}]))", "objects/s")],
     "Objects evicted by the watermark or by a tenant's quota or entry limit."),
    ("Evicted bytes", "Bps",
     [(f"sum(rate(granary_master_evicted_bytes_total{{{MASTER}}}[{RATE}]))", "bytes/s")],
     "Bytes freed by eviction."),
    ("Evicted bytes by tenant", "Bps",
     [(f"sum by (tenant_id) (rate(granary_tenant_evicted_bytes_total{{{TENANT}}}[{RATE}]))",
       "{{tenant_id}}")],
     "Bytes each tenant lost to eviction, for any reason."),
    ("Evictions by tenant and reason", "ops",
     [(f"sum by (tenant_id, reason) (rate(granary_tenant_evictions_total{{{TENANT}}}[{RATE}]))",
       "{{tenant_id}} {{reason}}")],
     "Whose objects go, and why: space, watermark, quota or max_entries."),
)
row("Tenants")
panels(
    ("Quota use per tenant", "percentunit",
     [(f"sum by (tenant_id) (granary_tenant_quota_charged_bytes{{{TENANT}}}) / sum by (tenant_id)"
       f" (granary_tenant_quota_effective_bytes{{{TENANT}}} > 0)", "{{tenant_id}}")],
     "Charged bytes over the effective quota (tenants with a quota)."),
    ("Charged and in-flight bytes", "bytes",
     [(f"sum by (tenant_id) (granary_tenant_quota_charged_bytes{{{TENANT}}})",
       "charged {{tenant_id}}"),
      (f"sum by (tenant_id) (granary_tenant_quota_inflight_bytes{{{TENANT}}})",
       "in flight {{tenant_id}}"),
      (f"sum by (tenant_id) (granary_tenant_quota_effective_bytes{{{TENANT}}})",
       "effective quota {{tenant_id}}")],
     "What each tenant holds, what its puts in flight reserve, and its effective quota."),
    ("Entries per tenant", "short",
     [(f"sum by (tenant_id) (granary_tenant_entries{{{TENANT}}})", "{{tenant_id}}")],
     "Objects each tenant holds."),
)
panels(
    ("Quota rejects", "ops",
     [(f"sum by (tenant_id, reason) (rate(granary_tenant_quota_reject_total{{{TENANT}}}[{RATE}]))",
       "{{tenant_id}} {{reason}}")],
     "Puts refused at allocation, by tenant and reason."),
    ("Over quota, admission closed", "short",
     [(f"sum by (tenant_id) (granary_tenant_over_quota{{{TENANT}}})", "over quota {{tenant_id}}"),
      (f"sum by (tenant_id) (granary_tenant_admission_closed{{{TENANT}}})",
       "closed {{tenant_id}}")],
     "1 while a tenant is above its quota, or closed to new writes."),
    ("Policy store and requested quota", "short",
     [(f"min(granary_tenant_policy_store_up{{{MASTER}}})", "policy store up"),
      (f"sum(granary_tenant_quota_requested_sum_bytes{{{MASTER}}}) / "
       f"sum(granary_tenant_capacity_bytes{{{MASTER}}})", "requested / capacity")],
     "Whether the policy store answers; how far the requested quotas oversubscribe capacity."),
)
row("Nodes and transport")
panels(
    ("Node segment bytes", "bytes",
     [(f"sum by (instance) (granary_node_segment_bytes{{{MASTER}}})", "{{instance}}")],
     "Bytes each node contributes."),
    ("Nodes connected to the master", "short",
     [(f"sum(granary_node_master_connected{{{MASTER}}})", "connected"),
      (f"sum(rate(granary_node_mounts_total{{{MASTER}}}[{RATE}]))", "mounts/s")],
     "Nodes with a live master session, and (re-)mounts per second."),
    ("Device backend", "short",
     [(f"sum by (backend) (granary_device_backend{{{MASTER}}})", "{{backend}}")],
     "Nodes per device backend (cuda, none; fake is CPU-only test memory and never belongs "
     "in production)."),
    ("Endpoints by transport", "short",
     [(f"sum by (rma, am) (rate(granary_transport_endpoints_total{{{MASTER}}}[{RATE}]))",
       "rma={{rma}} am={{am}}")],
     "New UCX endpoints per second by the transports UCX chose (rma / active messages)."),
)

for i, p in enumerate(_panels):
    p["id"] = i + 1

DASHBOARD = {
    "title": "Granary",
    "uid": "granary-overview",
    "description": "Granary KV-cache store: capacity, operations, errors, request times, "
                   "eviction, per-tenant quota. Generated by deploy/grafana/make_dashboard.py.",
    "tags": ["granary", "kv-cache"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "refresh": "10s",
    "time": {"from": "now-1h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
        {"name": "job", "type": "query", "datasource": DS, "label": "Job",
         "query": {"query": "label_values(granary_transport_endpoints_total, job)",
                   "refId": "job"},
         "definition": "label_values(granary_transport_endpoints_total, job)",
         "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
         "current": {"text": "All", "value": "$__all"}},
        {"name": "tenant", "type": "query", "datasource": DS, "label": "Tenant",
         "query": {"query": "label_values(granary_tenant_entries, tenant_id)",
                   "refId": "tenant"},
         "definition": "label_values(granary_tenant_entries, tenant_id)",
         "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
         "current": {"text": "All", "value": "$__all"}},
    ]},
    "annotations": {"list": []},
    "panels": _panels,
}


def render():
    return json.dumps(DASHBOARD, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    with open(os.path.join(HERE, "granary.json"), "w") as f:
        f.write(render())
    print(f"wrote {os.path.join(HERE, 'granary.json')}: {len(_panels)} panels")
