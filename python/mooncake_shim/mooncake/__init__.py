"""Granary's stand-in for Mooncake's Python package (opt-in: it shadows a real Mooncake).

`from mooncake.store import MooncakeDistributedStore, ReplicateConfig, MooncakeHostMemAllocator`
gives Granary's classes (granary.mooncake), so vLLM's MooncakeStoreConnector, SGLang's HiCache
`mooncake` backend and LMCache's `mooncakestore://` connector run unchanged. Installed only by
`cmake --install build --component mooncake_shim` (or GRANARY_INSTALL_MOONCAKE_SHIM=1
scripts/install_python.sh). Only the store is provided: there is no transfer engine
(`mooncake.engine`) here.
"""

__granary_shim__ = True
