"""Hostile sizes and configs from Python (docs/bad_input.md, "Resources"): an EmbeddedNode far
larger than the machine is refused before anything is allocated; a negative size names the
rule; a config that names the master under a key Granary does not read is an error, not a
client quietly connected to the default master."""

import os

import numpy as np
import pytest

import granary
from granary import mooncake_args
from granary.mooncake import MooncakeDistributedStore

CLUSTER_ARGS = {"nodes": 1, "segment_size": "64MB"}
TRANSPORTS = ["default"]
MIB = 1 << 20


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def large_shm_files():
    """Regular files in /dev/shm holding more than 1 MiB, by name."""
    out = set()
    for name in os.listdir("/dev/shm"):
        path = os.path.join("/dev/shm", name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isfile(path) and st.st_blocks * 512 > MIB:
            out.add(name)
    return out


def test_embedded_node_of_2_to_63_bytes_is_refused_before_any_allocation(cluster):
    shm_before = large_shm_files()
    rss_before = rss_bytes()
    segments_before = cluster.segment_count()
    with pytest.raises(granary.InvalidArgument) as e:
        granary.EmbeddedNode(cluster.master, 1 << 63)
    msg = str(e.value)
    assert "host segment" in msg and "9223372036854775808 bytes" in msg, msg
    assert "physical memory" in msg, msg
    assert large_shm_files() - shm_before == set()
    assert rss_bytes() - rss_before < 64 * MIB
    assert cluster.segment_count() == segments_before
    # The master and its node still serve.
    with granary.Client(master=cluster.master) as c:
        c.put("hostile/after-embedded", b"ok")
        assert c.get("hostile/after-embedded") == b"ok"


def test_put_from_with_a_negative_size_names_the_rule(cluster):
    buf = np.zeros(4096, dtype=np.uint8)
    with granary.Client(master=cluster.master) as c:
        with pytest.raises(granary.InvalidArgument,
                           match=r"size -1 is not a valid size: a size is a whole number of bytes "
                                 r"from 0 to the buffer's length \(None: the whole buffer\)"):
            c.put_from("hostile/negative", buf, size=-1)
        with pytest.raises(granary.InvalidArgument, match="size 4097 is larger than"):
            c.put_from("hostile/negative", buf, size=4097)
        with pytest.raises(granary.NotFound):
            c.get("hostile/negative")


def test_a_config_master_key_is_an_error_naming_the_key_to_use(cluster):
    for config in ({"master": cluster.master}, {"master_addr": cluster.master}):
        with pytest.raises(granary.InvalidArgument) as e:
            granary.Client(config)
        msg = str(e.value)
        key = next(iter(config))
        assert f"key '{key}' is not a config key" in msg, msg
        assert "'master_server_address'" in msg, msg
    # The keys Granary and Mooncake read work, and so does the keyword.
    with granary.Client({"master_server_address": cluster.master}) as c:
        assert c.master == cluster.master
    with granary.Client(master=cluster.master) as c:
        assert c.master == cluster.master


def test_mooncake_setup_dict_master_key_is_refused_naming_the_key_to_use(cluster):
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": 0, "local_buffer_size": "16 MB", "protocol": "tcp"}
    with pytest.raises(ValueError, match=r"key 'master' is not a setup key: the master's address "
                                         r"goes in 'master_server_addr'"):
        mooncake_args.config_from_dict(dict(cfg, master=cluster.master))
    s = MooncakeDistributedStore()
    assert s.setup(dict(cfg, master=cluster.master)) == -600
    assert s.setup(dict(cfg, master_server_address=cluster.master)) == 0
    s.close()
