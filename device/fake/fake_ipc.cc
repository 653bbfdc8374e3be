// The fake backend's IPC (fake_runtime.h; fake_memory.h has the handle and the mappings) and its
// device UUIDs.

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "device/fake/fake_runtime.h"

namespace granary::device::internal {

absl::StatusOr<DeviceUuid> FakeRuntime::DeviceUuidOf(int device) {
  if (absl::Status s = CheckRange("DeviceUuid", device); !s.ok()) return s;  // no context
  return Uuid(device);
}

void FakeRuntime::FailNextIpcOpen() {
  common::MutexLock lock(&mu_);
  fail_next_ipc_open_ = true;
}

DeviceUuid FakeRuntime::Uuid(int device) const {
  DeviceUuid uuid = {
      options_.uuid_seed, 'g', 'r', 'a', 'n', 'a', 'r', 'y', '-', 'f', 'a', 'k', 'e', 0, 0, 0};
  uuid[15] = static_cast<uint8_t>(device);
  return uuid;
}

absl::StatusOr<std::string> FakeRuntime::ExportIpc(const void* p) {
  FakeIpcHandle handle;
  {
    common::MutexLock lock(&mu_);
    auto it = FindLocked(p);
    const Region* r = it == regions_.end() ? nullptr : &it->second;
    if (r == nullptr || r->kind != MemoryKind::kDevice || r->ipc_opened) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExportIpc: ", Addr(p), " is not fake device memory allocated in this process (it is ",
          r == nullptr ? "host" : (r->ipc_opened ? "an IPC mapping" : MemoryKindName(r->kind)),
          " memory)"));
    }
    handle.fd = r->map.fd;
    handle.device = r->device;
    handle.inode = r->map.inode;
    handle.offset = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->map.view);
    handle.size = r->bytes;
  }
  handle.pid = getpid();
  absl::StatusOr<uint64_t> start = ProcessStartTime(getpid());
  if (!start.ok()) return start.status();
  handle.start_time = *start;
  handle.uuid = Uuid(handle.device);
  return EncodeFakeIpc(handle);
}

absl::StatusOr<void*> FakeRuntime::OpenIpc(int device, absl::string_view blob) {
  if (absl::Status s = CheckDevice("OpenIpc", device); !s.ok()) return s;
  {
    common::MutexLock lock(&mu_);
    if (std::exchange(fail_next_ipc_open_, false)) {
      return absl::InternalError("OpenIpc: the fake IPC open failed (injected)");
    }
  }
  absl::StatusOr<FakeIpcHandle> handle = DecodeFakeIpc(blob);
  if (!handle.ok()) return handle.status();
  if (handle->pid == getpid()) {
    return absl::InvalidArgumentError(
        "OpenIpc: the handle was exported by this process; a process maps its own memory "
        "directly (CUDA refuses this open too)");
  }
  if (handle->device < 0 || handle->device >= options_.device_count ||
      handle->uuid != Uuid(handle->device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OpenIpc: the handle names fake device ", handle->device,
        " with a UUID this process does not have (another host, or another uuid_seed)"));
  }
  absl::StatusOr<int> fd = OpenExportedFd(*handle);
  if (!fd.ok()) return fd.status();
  const std::tuple<int64_t, uint64_t, uint64_t> source{handle->pid, handle->start_time,
                                                       handle->inode};
  {
    common::MutexLock lock(&mu_);
    if (void* mapped = ReopenLocked(source, handle->offset)) {
      close(*fd);
      return mapped;
    }
  }
  absl::StatusOr<FakeMapping> map = MapFakeFd(*fd, handle->size);
  if (!map.ok()) return map.status();
  common::MutexLock lock(&mu_);
  if (void* mapped = ReopenLocked(source, handle->offset)) {  // another thread mapped it first
    UnmapFake(*map);
    return mapped;
  }
  Region region;
  region.kind = MemoryKind::kDevice;
  region.device = handle->device;
  region.bytes = handle->size;
  region.map = *map;
  region.ipc_opened = true;
  region.ipc_source = source;
  region.ipc_opens[handle->offset] = 1;
  void* mapped = static_cast<unsigned char*>(map->view) + handle->offset;
  InsertLocked(reinterpret_cast<uintptr_t>(map->view), std::move(region));
  return mapped;
}

void* FakeRuntime::ReopenLocked(const std::tuple<int64_t, uint64_t, uint64_t>& source,
                                uint64_t offset) {
  for (auto& [start, region] : regions_) {
    if (!region.ipc_opened || region.ipc_source != source) continue;
    ++region.ipc_opens[offset];
    return reinterpret_cast<unsigned char*>(start) + offset;
  }
  return nullptr;
}

absl::Status FakeRuntime::CloseIpc(void* mapped) {
  Region region;
  {
    common::MutexLock lock(&mu_);
    const auto addr = reinterpret_cast<uintptr_t>(mapped);
    auto it = regions_.upper_bound(addr);
    if (it != regions_.begin()) --it;
    if (it == regions_.end() || !it->second.ipc_opened || addr < it->first ||
        !it->second.ipc_opens.contains(addr - it->first)) {
      return absl::InvalidArgumentError(
          absl::StrCat("CloseIpc: ", Addr(mapped), " is not a pointer OpenIpc returned"));
    }
    auto open = it->second.ipc_opens.find(addr - it->first);
    if (--open->second == 0) it->second.ipc_opens.erase(open);
    if (!it->second.ipc_opens.empty()) return absl::OkStatus();
    region = std::move(it->second);
    regions_.erase(it);
  }
  Release(0, region);
  return absl::OkStatus();
}

}  // namespace granary::device::internal
