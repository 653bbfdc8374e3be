"""mooncake.store, served by Granary (granary.mooncake). See docs/engines.md."""

from granary.mooncake import *  # noqa: F401,F403
from granary.mooncake import (BufferHandle, MooncakeDistributedStore,  # noqa: F401
                              MooncakeHostMemAllocator, ObjectDataType, ReplicaDescriptor,
                              ReplicaStatus, ReplicateConfig, SoftPinAction)
