"""mooncake.async_store, served by Granary: `await store.async_<name>(...)` runs `<name>` in
the event loop's default executor."""

from granary.mooncake import MooncakeDistributedStoreAsync  # noqa: F401
