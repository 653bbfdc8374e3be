"""The value types of Mooncake's store module: ReplicateConfig, the enums, BufferHandle,
ReplicaDescriptor and MooncakeHostMemAllocator. Plain Python; no cluster needed.

Thread safety: ReplicateConfig and the descriptors are plain values (one thread writes, or
none). MooncakeHostMemAllocator is thread-safe (one lock around its table).
"""

import ctypes
import enum
import mmap
import threading


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class SoftPinAction(enum.IntEnum):
    PRESERVE = 0  # keep what the object had (a new object: not pinned)
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3


_CONFIG_DEFAULTS = (
    ("replica_num", 1),
    ("nof_replica_num", 0),
    ("dfs_replica_num", 0),
    ("soft_pin_action", SoftPinAction.PRESERVE),
    ("soft_pin_ttl_ms", None),
    ("with_hard_pin", False),
    ("preferred_segment", ""),
    ("preferred_segments", None),  # [] per instance
    ("preferred_nof_segments", None),  # [] per instance
    ("prefer_alloc_in_same_node", False),
    ("data_type", ObjectDataType.UNKNOWN),
    ("group_ids", None),
)


class ReplicateConfig:
    """Mooncake's per-put options (replica.h). Every field has Mooncake's default; keyword
    arguments set fields at construction (Mooncake's only takes none). There is no tenant_id:
    the tenant belongs to the client. Unknown attributes raise AttributeError, as on the
    pybind class."""

    __slots__ = tuple(name for name, _ in _CONFIG_DEFAULTS)

    def __init__(self, **fields):
        for name, default in _CONFIG_DEFAULTS:
            if name in ("preferred_segments", "preferred_nof_segments"):
                default = []
            object.__setattr__(self, name, default)
        for name, value in fields.items():
            if name not in self.__slots__:
                raise TypeError(f"ReplicateConfig(): unexpected keyword argument '{name}'")
            setattr(self, name, value)

    # Older Mooncake spelled the soft pin as a bool.
    @property
    def with_soft_pin(self):
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value):
        self.soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    def __str__(self):
        parts = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in _CONFIG_DEFAULTS)
        return f"ReplicateConfig({parts})"

    __repr__ = __str__


class BufferHandle(bytearray):
    """A value read by get_buffer/batch_get_buffer: buffer protocol (writable, 1-D bytes),
    `.ptr()` (its address), `.size()` and `len()`. Its memory is pinned for its lifetime (it
    cannot be resized), so `.ptr()` stays valid while the handle is alive."""

    def __init__(self, data=b""):
        super().__init__(data)
        self._view = (ctypes.c_char * len(self)).from_buffer(self)  # pins the memory

    def ptr(self):
        return ctypes.addressof(self._view) if len(self) else 0

    def size(self):
        return len(self)

    def __repr__(self):
        return f"<BufferHandle size={len(self)} ptr=0x{self.ptr():x}>"


class BufferDescriptor:
    """Where one memory replica lives: `size`, `buffer_address` (0: Granary does not hand out
    remote addresses), `transport_endpoint` (the node's host:port)."""

    __slots__ = ("size", "buffer_address", "transport_endpoint")

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """Where one disk replica lives: `object_size`, and `file_path`, which names the node
    (granary://host:port): the node reads its disk tier for its clients, so there is no file a
    client opens itself."""

    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object: in a node's memory (tier host or gpu), or on a node's disk tier
    (tier disk, a disk replica). Granary has no client-local disk replicas."""

    __slots__ = ("status", "_memory", "_tier")

    def __init__(self, size, endpoint, status=ReplicaStatus.COMPLETE, tier="host"):
        self.status = status
        self._memory = MemoryDescriptor(BufferDescriptor(size, 0, endpoint))
        self._tier = tier

    def is_memory_replica(self):
        return self._tier != "disk"

    def is_disk_replica(self):
        return self._tier == "disk"

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        if self._tier == "disk":
            raise RuntimeError("this replica is on a node's disk tier; it has no memory descriptor")
        return self._memory

    def get_disk_descriptor(self):
        if self._tier != "disk":
            raise RuntimeError("this replica is in memory; it has no disk descriptor")
        bd = self._memory.buffer_descriptor
        return DiskDescriptor(f"granary://{bd.transport_endpoint}", bd.size)

    def __repr__(self):
        bd = self._memory.buffer_descriptor
        return (f"<ReplicaDescriptor {self.status.name} {self._tier} size={bd.size} at "
                f"{bd.transport_endpoint}>")


# Every allocation of every MooncakeHostMemAllocator: Mooncake's allocator is a process-wide
# singleton whose memory outlives the Python wrapper (SGLang wraps it in tensors and drops the
# wrapper), so the table is module-level.
_ALLOC_MU = threading.Lock()
_ALLOCATIONS = {}  # address -> (mmap, ctypes view pinning it)


class MooncakeHostMemAllocator:
    """Page-aligned anonymous host memory (mmap). `alloc(size) -> int` (0 on failure or for
    size 0), `free(ptr) -> int` (0, or -1 for an address it did not hand out). Each allocation
    costs one mmap; the memory is zeroed by the kernel. Not locked in RAM (mlock limits are
    usually far below KV pool sizes); register it with the store for fast transfers."""

    def alloc(self, size):
        size = int(size)
        if size <= 0:
            return 0
        try:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError, OverflowError):
            return 0
        view = (ctypes.c_char * size).from_buffer(m)
        addr = ctypes.addressof(view)
        with _ALLOC_MU:
            _ALLOCATIONS[addr] = (m, view)
        return addr

    def free(self, ptr):
        with _ALLOC_MU:
            entry = _ALLOCATIONS.pop(int(ptr), None)
        if entry is None:
            return -1
        m, view = entry
        del view
        del entry
        try:
            m.close()
        except BufferError:  # a view of it is still exported; the mapping lives on with it
            pass
        return 0
