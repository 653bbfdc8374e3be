"""Argument checking and conversion for the Mooncake layer: types (TypeError, as pybind's casts
would raise), sizes with units, host:port, tenant resolution, setup(dict) keys, device-pointer
probing and the per-thread staging buffer used by the scatter/gather calls.

Pure functions except the CUDA probe (loaded once).
"""

import ctypes
import os
import re
import threading

from . import mooncake_codes as codes

MAX_KEY_BYTES = 16 * 1024  # the master's limit (proto::kMaxKeyBytes)
KIB = 1024
TIB = 1024 ** 4
DEFAULT_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_LOCAL_BUFFER_SIZE = 16 * 1024 * 1024
DEFAULT_MASTER = "127.0.0.1:50051"


def check_key(key, where):
    if not isinstance(key, (str, bytes)):
        raise TypeError(f"{where}(): incompatible function arguments: a key must be str, "
                        f"not {type(key).__name__}")
    return key


def key_code(key):
    """0 for a valid key, else -400 (empty, or over the master's length limit)."""
    n = len(key.encode() if isinstance(key, str) else key)
    return codes.INVALID_KEY if n == 0 or n > MAX_KEY_BYTES else codes.OK


def valid_str_keys(keys):
    """True when `keys` (a list) holds only non-empty str keys surely within the length limit:
    the common case, checked with C-level loops so that a batch pays no per-key Python."""
    return (bool(keys) and set(map(type, keys)) == {str} and min(map(len, keys)) > 0
            and max(map(len, keys)) <= MAX_KEY_BYTES // 4)  # <= 4 UTF-8 bytes per character


_STR = {str}
_INT = {int}


def plain_batch(keys, ptrs, sizes):
    """True for the common batch call, which then needs no other check: three lists of one
    length n > 0; keys non-empty str surely within the length limit; addresses ints >= 0; sizes
    ints > 0. One C-level pass per test and no Python loop (an engine's 32-key batch spends
    about 3 us here); anything else takes the checked path, which names what is wrong."""
    if type(keys) is not list or type(ptrs) is not list or type(sizes) is not list:
        return False
    n = len(keys)
    return (n > 0 and len(ptrs) == n and len(sizes) == n and set(map(type, keys)) == _STR
            and set(map(type, ptrs)) == _INT and set(map(type, sizes)) == _INT
            and min(ptrs) >= 0 and min(sizes) > 0 and min(map(len, keys)) > 0
            and max(map(len, keys)) <= MAX_KEY_BYTES // 4)  # <= 4 UTF-8 bytes per character


def check_keys(keys, where):
    if type(keys) is list and valid_str_keys(keys):
        return keys
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise TypeError(f"{where}(): incompatible function arguments: keys must be a list of "
                        f"str, not {type(keys).__name__}")
    keys = list(keys)
    for k in keys:
        check_key(k, where)
    return keys


def check_uint(value, where, name):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be an int, "
                        f"not {type(value).__name__}")
    value = value.__index__()
    if value < 0:
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be >= 0, "
                        f"got {value}")
    return value


def check_uints(values, where, name):
    # The common case, a list of non-negative ints, without a Python-level loop.
    if type(values) is list and (not values or (set(map(type, values)) == {int}
                                                and min(values) >= 0)):
        return values
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be a list of "
                        f"int, not {type(values).__name__}")
    return [check_uint(v, where, name) for v in values]


def check_uint_lists(values, where, name):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be a list of "
                        f"lists of int, not {type(values).__name__}")
    return [check_uints(v, where, name) for v in values]


def check_str(value, where, name, default):
    if value is None:
        return default
    if not isinstance(value, str):
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be str, "
                        f"not {type(value).__name__}")
    return value


def check_bool(value, where, name):
    if not isinstance(value, (bool, int)) and type(value).__name__ != "bool_":
        raise TypeError(f"{where}(): incompatible function arguments: {name} must be bool, "
                        f"not {type(value).__name__}")
    return bool(value)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": KIB, "m": KIB ** 2, "g": KIB ** 3, "t": KIB ** 4}


def parse_size(value):
    """An int, or "16MB"/"16 MB"/"4gb"/"4GiB" (binary units); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ValueError(f"not a size: {value!r}")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _UNITS[unit])


def split_host_port(hostname):
    """'host', 'host:port', '[v6]:port' -> (host, port or 0)."""
    hostname = hostname.strip()
    if hostname.startswith("["):
        host, _, rest = hostname[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hostname.count(":") == 1:
        host, port = hostname.split(":")
    else:
        host, port = hostname, ""
    try:
        return host or "127.0.0.1", int(port) if port else 0
    except ValueError:
        return host, 0


def resolve_tenant(arg):
    """A tenant_id argument other than "default" (and not blank), then GRANARY_TENANT_ID, then
    MOONCAKE_TENANT_ID, then "default"."""
    if arg is not None and str(arg).strip() and str(arg).strip() != "default":
        return str(arg).strip()
    for var in ("GRANARY_TENANT_ID", "MOONCAKE_TENANT_ID"):
        v = os.environ.get(var, "").strip()
        if v:
            return v
    return "default"


def truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


# setup(dict): Mooncake's keys, plus the engines' JSON spellings as aliases.
DICT_ALIASES = {"device_name": "rdma_devices", "master_server_address": "master_server_addr"}
DICT_KEYS = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
             "protocol", "rdma_devices", "master_server_addr", "ipc_socket_path",
             "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
             "client_http_port"}


def config_from_dict(config):
    """setup(dict) -> the keyword arguments of setup(); ValueError names the bad key."""
    values = {}
    for key, value in config.items():
        key = str(key)
        name = DICT_ALIASES.get(key, key)
        if name not in DICT_KEYS and name.startswith("master"):
            # Ignoring it would quietly connect to the default master instead.
            raise ValueError(f"key {key!r} is not a setup key: the master's address goes in "
                             "'master_server_addr' (or 'master_server_address', as in "
                             "Mooncake's config)")
        if name not in DICT_KEYS:
            codes.LOG.once(f"setup(dict): unknown key {key!r} ignored")
            continue
        value = "" if value is None else str(value)
        if name in values and values[name] != value:
            raise ValueError(f"{key!r} and its other spelling give different values "
                             f"({values[name]!r}, {value!r})")
        values[name] = value
    for required in ("local_hostname", "metadata_server"):
        if required not in values:
            raise ValueError(f"{required!r} is required")
    out = {"local_hostname": values["local_hostname"],
           "metadata_server": values["metadata_server"]}
    for name, limit in (("global_segment_size", None), ("local_buffer_size", TIB)):
        size = parse_size(values.get(name, DEFAULT_SEGMENT_SIZE))
        if size != 0 and size < KIB:
            raise ValueError(f"{name} {size} is below 1 KiB (use 0 for none)")
        if limit is not None and size > limit:
            raise ValueError(f"{name} {size} is above 1 TiB")
        out[name] = size
    out["protocol"] = values.get("protocol", "tcp")
    out["rdma_devices"] = values.get("rdma_devices", "")
    out["master_server_addr"] = values.get("master_server_addr", DEFAULT_MASTER)
    out["enable_ssd_offload"] = truthy(values.get("enable_ssd_offload", "false"))
    out["ssd_offload_path"] = values.get("ssd_offload_path", "")
    out["tenant_id"] = values.get("tenant_id", "default")
    out["enable_client_http_server"] = truthy(values.get("enable_client_http_server", "false"))
    out["client_http_port"] = int(values.get("client_http_port", "9300"))
    if "ipc_socket_path" in values:
        codes.LOG.once("setup(dict): ipc_socket_path accepted and ignored (no real-client "
                       "process in Granary)", level=20)
    return out


def is_device_pointer(granary_module, addr, size):
    """True when [addr, addr+size) touches device memory: the client's own check (the CUDA
    driver when loaded, and the test-only fake ranges)."""
    return bool(granary_module._is_device_pointer(addr, size))
