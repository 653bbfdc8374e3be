#pragma once

// Private to the fake backend (fake_backend.h): its mappings and its IPC handle.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device_backend.h"

namespace granary::device::internal {

// One memfd mapped twice: `view` (PROT_NONE when the memory is fake device memory; the
// addresses callers get) and `alias` (read-write; what the fake copy engine touches). Both are
// MAP_SHARED, so another process that maps the same memfd sees the same bytes. A plain value:
// UnmapFake releases it; nothing is released on destruction.
struct FakeMapping {
  int fd = -1;
  void* view = nullptr;
  unsigned char* alias = nullptr;
  size_t mapped = 0;  // bytes of each mapping: `bytes` rounded up to the page size
  size_t bytes = 0;   // bytes the caller asked for
  uint64_t inode = 0;
};

// A new memfd of `bytes` (> 0). `device_view`: the view is PROT_NONE; otherwise the view is the
// alias itself (managed memory, which the CPU may touch). RESOURCE_EXHAUSTED when the kernel
// has no memory or no fd left; INTERNAL for any other system error.
[[nodiscard]] absl::StatusOr<FakeMapping> MapNewFake(size_t bytes, bool device_view);

// The same two mappings of an existing memfd (takes ownership of `fd`, also on failure).
[[nodiscard]] absl::StatusOr<FakeMapping> MapFakeFd(int fd, size_t bytes);

// Unmaps both views and closes the fd. Idempotent on an empty mapping.
void UnmapFake(FakeMapping& mapping);

// What ExportIpc puts in the blob.
struct FakeIpcHandle {
  int64_t pid = 0;
  uint64_t start_time =
      0;  // the exporter's start time (/proc/<pid>/stat field 22): not a reused pid
  int32_t fd = -1;
  int32_t device = 0;
  uint64_t inode = 0;  // the memfd's inode: not a reused fd number
  uint64_t offset = 0;
  uint64_t size = 0;  // bytes of the whole allocation
  DeviceUuid uuid{};
};

std::string EncodeFakeIpc(const FakeIpcHandle& handle);
// INVALID_ARGUMENT naming the size or the magic when the blob is not a fake IPC handle.
[[nodiscard]] absl::StatusOr<FakeIpcHandle> DecodeFakeIpc(absl::string_view blob);

// The start time of process `pid`, in clock ticks since boot; UNAVAILABLE when it has exited.
[[nodiscard]] absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid);

// Opens the exporter's memfd through /proc/<pid>/fd/<fd> and checks that it is still the exported
// object: UNAVAILABLE when the exporter exited, its pid was reused, or the allocation was freed;
// FAILED_PRECONDITION when this process may not open it.
[[nodiscard]] absl::StatusOr<int> OpenExportedFd(const FakeIpcHandle& handle);

}  // namespace granary::device::internal
