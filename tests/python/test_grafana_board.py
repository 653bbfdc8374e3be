"""deploy/grafana/granary.json: it is what deploy/grafana/make_dashboard.py writes, it is a
well-formed dashboard (ids, grid, variables), and every metric its queries name exists in the
/metrics of a live master and node that have served puts and gets."""

import importlib.util
import json
import os
import re

import granary
from granary_cluster import Cluster, free_port, http_get

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARD = os.path.join(ROOT, "deploy", "grafana", "granary.json")
METRIC = re.compile(r"\b(granary_[a-z0-9_]+)")


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "make_dashboard", os.path.join(ROOT, "deploy", "grafana", "make_dashboard.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def queries(board):
    for p in board["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["expr"]
    for v in board["templating"]["list"]:
        if isinstance(v.get("query"), dict):
            yield v["name"], v["query"]["query"]


def test_committed_board_is_the_generators_output():
    with open(BOARD) as f:
        committed = f.read()
    assert committed == load_generator().render(), \
        "deploy/grafana/granary.json was edited by hand: run deploy/grafana/make_dashboard.py"


def test_board_is_well_formed():
    with open(BOARD) as f:
        board = json.load(f)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "job", "tenant"} <= names
    for p in board["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            for t in p["targets"]:
                assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    titles = " ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("capacity", "errors", "request time", "evicted", "quota", "rejects"):
        assert topic in titles, topic


def test_every_queried_metric_exists_in_live_metrics():
    with open(BOARD) as f:
        board = json.load(f)
    node_port = free_port()
    # A tenant limited to one entry: its second put evicts the first, so the per-tenant
    # eviction counter exists too.
    policy = "version: 1\ntenants:\n  - name: board-a\n    quota: 16MB\n    max_entries: 1\n"
    with Cluster(segment_size="64MB", node_flags=[f"--metrics_port={node_port}"],
                 policy_yaml=policy) as c:
        with granary.Client(master=c.master, tenant_id="board-a") as cl:
            cl.put("k0", b"y" * 4096)
            cl.put("k", b"x" * 4096)
            assert cl.get("k") == b"x" * 4096
            assert not cl.exists("k0")
            try:
                cl.get("missing")
            except granary.NotFound:
                pass
        text = http_get(c.http_port, "/metrics") + http_get(node_port, "/metrics")
    live = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}
    missing = {}
    for where, expr in queries(board):
        for name in METRIC.findall(expr):
            if name not in live:
                missing.setdefault(name, where)
    assert not missing, f"queried but not exported: {missing}"
    # The histogram the latency panels read has its buckets.
    assert "granary_master_request_seconds_bucket" in live
    # The node says which device backend it runs; never the fake unless asked for.
    backend = re.search(r'granary_device_backend\{backend="(\w+)"\} 1', text)
    assert backend and backend.group(1) in ("cuda", "none"), text
