"""The granary package's surface without a cluster: the stub (_granary.pyi) matches the module,
everything public has a docstring, and statuses map onto the exception hierarchy."""

import ast
import os
import pickle

import pytest

import granary
from granary import _errors, _granary


def stub_names():
    """{class name: set of member names} and the module-level functions of _granary.pyi."""
    path = os.path.join(os.path.dirname(granary.__file__), "_granary.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    classes, functions = {}, set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    return classes, functions


def public_members(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


def test_stub_matches_module():
    classes, functions = stub_names()
    compiled = {n for n, v in vars(_granary).items() if isinstance(v, type)}
    assert set(classes) == compiled
    for name, members in classes.items():
        assert public_members(getattr(_granary, name)) == {m for m in members
                                                           if not m.startswith("_")}, name
    assert functions == {n for n, v in vars(_granary).items()
                         if callable(v) and not isinstance(v, type) and not n.startswith("__")}


def test_docstrings():
    for name in dir(_granary):
        obj = getattr(_granary, name)
        if name.startswith("__") or not callable(obj):
            continue
        assert obj.__doc__, name
        if isinstance(obj, type):
            for m in public_members(obj):
                assert getattr(obj, m).__doc__, f"{name}.{m}"
    for cls in vars(_errors).values():
        if isinstance(cls, type) and issubclass(cls, Exception):
            assert cls.__doc__ and cls.__module__ == "granary"


@pytest.mark.parametrize("code,reason,cls", [
    ("RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", granary.QuotaExceeded),
    ("RESOURCE_EXHAUSTED", "TENANT_NOT_REGISTERED", granary.TenantNotRegistered),
    ("RESOURCE_EXHAUSTED", "NONE", granary.OutOfSpace),
    ("RESOURCE_EXHAUSTED", "ADMISSION_CLOSED", granary.ResourceExhausted),
    ("FAILED_PRECONDITION", "HAS_LEASE", granary.HasLease),
    ("INVALID_ARGUMENT", "DEVICE_POINTER", granary.DevicePointer),
    ("NOT_FOUND", "NONE", granary.NotFound),
    ("ALREADY_EXISTS", "NONE", granary.AlreadyExists),
    ("UNAUTHENTICATED", "NONE", granary.Unauthenticated),
    ("PERMISSION_DENIED", "NONE", granary.PermissionDenied),
    ("UNAVAILABLE", "NONE", granary.Unavailable),
    ("UNAVAILABLE", "NOT_LEADER", granary.NotLeader),
    ("DEADLINE_EXCEEDED", "NONE", granary.DeadlineExceeded),
    ("INVALID_ARGUMENT", "NONE", granary.InvalidArgument),
    ("FAILED_PRECONDITION", "NONE", granary.FailedPrecondition),
    ("INTERNAL", "NONE", granary.Internal),
    ("DATA_LOSS", "NONE", granary.Error),
])
def test_error_mapping(code, reason, cls):
    e = _errors._from_status(code, reason, "why")
    assert type(e) is cls and isinstance(e, granary.Error)
    assert (e.code, e.reason, e.message, str(e)) == (code, reason, "why", "why")
    assert pickle.loads(pickle.dumps(e)) == e


def test_error_hierarchy():
    assert issubclass(granary.DevicePointer, granary.InvalidArgument)
    assert issubclass(granary.Closed, granary.FailedPrecondition)
    assert issubclass(granary.HasLease, granary.FailedPrecondition)
    assert issubclass(granary.NotLeader, granary.Unavailable)
    for cls in (granary.QuotaExceeded, granary.TenantNotRegistered, granary.OutOfSpace):
        assert issubclass(cls, granary.ResourceExhausted)
    c = granary.Closed("the client is closed")
    assert (c.code, c.reason) == ("FAILED_PRECONDITION", "NONE")


def test_all_exports():
    for name in granary.__all__:
        assert hasattr(granary, name), name
