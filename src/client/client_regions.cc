// ClientImpl's scatter-list forms (include/granary/client.h): a key with more than one region
// is gathered into, or read into and scattered from, one staging buffer per batch
// (client/device_staging.h), on the device when the list has device memory, and that buffer
// goes to BatchPutFrom / BatchGetInto, whose device paths (client/device_transfers.h) then move
// it. The paged-KV calls sit on top of the client in paged_kv.cc (include/granary/paged_kv.h).
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/device_check.h"
#include "client/device_staging.h"
#include "client/engine_order.h"
#include "device/device_backend.h"

namespace granary::client {

namespace {

// Where a scatter list lives: -1 all host memory, else the device of its first device region;
// a refusal (BufferDevice's) for a region no path can use.
absl::StatusOr<int> RegionsDevice(const std::vector<BufferRegion>& regions) {
  int device = -1;
  for (const BufferRegion& r : regions) {
    absl::StatusOr<int> d = BufferDevice(r.data, r.size);
    if (!d.ok()) return d.status();
    if (device < 0) device = *d;
  }
  return device;
}

// A multi-region key's place in the staging buffer of its device.
struct Staged {
  size_t key = 0;
  int device = -1;
  size_t offset = 0;
  size_t bytes = 0;
};

// Plans the staging of every key whose list has more than one region: (*out)[i] gets the refusal
// of a bad list; the direct (one-region) keys are left to the caller. Returns the bytes each
// device (-1: host) needs.
absl::flat_hash_map<int, size_t> PlanStaging(absl::Span<const std::vector<BufferRegion>> regions,
                                             std::vector<absl::Status>* out,
                                             std::vector<Staged>* staged) {
  absl::flat_hash_map<int, size_t> need;
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto& list = regions[i];
    if (list.empty()) {
      (*out)[i] = absl::InvalidArgumentError(absl::StrCat("key ", i, ": an empty region list"));
      continue;
    }
    if (list.size() == 1) continue;
    absl::StatusOr<int> d = RegionsDevice(list);
    if (!d.ok()) {
      (*out)[i] = d.status();
      continue;
    }
    size_t bytes = 0;
    for (const BufferRegion& r : list) bytes += r.size;
    staged->push_back({i, *d, need[*d], bytes});
    need[*d] += bytes;
  }
  return need;
}

absl::StatusOr<absl::flat_hash_map<int, std::unique_ptr<Scratch>>> AllocateStaging(
    const absl::flat_hash_map<int, size_t>& need, StagingPool* pool) {
  absl::flat_hash_map<int, std::unique_ptr<Scratch>> scratch;
  for (const auto& [device, bytes] : need) {
    auto s = std::make_unique<Scratch>(pool);
    absl::Status st = s->Allocate(device, bytes);
    if (!st.ok()) return st;
    scratch[device] = std::move(s);
  }
  return scratch;
}

}  // namespace

std::vector<absl::Status> ClientImpl::BatchPutFromRegions(
    absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions,
    const PutOptions& options) {
  const DeviceWait& wait = options.wait;
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  if (regions.size() != n) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat(n, " keys but ", regions.size(), " region lists")));
    return out;
  }
  // The stream contract (DeviceWait): one order for the gathers and the puts, its event on the
  // device of the first device region.
  std::unique_ptr<EngineOrder> order;
  if (!wait.empty()) {
    int device = -1;
    for (size_t i = 0; i < n && device < 0; ++i) {
      for (const BufferRegion& r : regions[i]) {
        absl::StatusOr<int> d = BufferDevice(r.data, r.size);
        if (d.ok() && *d >= 0) {
          device = *d;
          break;
        }
      }
    }
    absl::StatusOr<std::unique_ptr<EngineOrder>> made = EngineOrder::Create(wait, device);
    if (!made.ok()) {
      out.assign(n, made.status());
      return out;
    }
    order = *std::move(made);
  }
  std::vector<Staged> staged;
  auto scratch = AllocateStaging(PlanStaging(regions, &out, &staged), &staging_);
  if (!scratch.ok()) {
    for (const Staged& s : staged) out[s.key] = scratch.status();
  }
  absl::flat_hash_map<int, std::vector<device::CopyRegion>> gathers;
  std::vector<size_t> index(n, SIZE_MAX);  // key -> position in `staged`
  for (size_t j = 0; j < staged.size() && scratch.ok(); ++j) {
    const Staged& s = staged[j];
    index[s.key] = j;
    unsigned char* at = (*scratch)[s.device]->data() + s.offset;
    for (const BufferRegion& r : regions[s.key]) {
      gathers[s.device].push_back({r.data, at, r.size});
      at += r.size;
    }
  }
  for (auto& [device, list] : gathers) {
    // The gathers copy synchronously (or by the CPU): the host waits for the engine.
    absl::Status st = order == nullptr ? absl::OkStatus() : order->OnHost();
    if (st.ok()) st = CopyAll(&region_streams_, device, list);
    if (st.ok()) continue;
    for (const Staged& s : staged) {
      if (s.device == device) out[s.key] = st;
    }
  }
  std::vector<std::string> k;
  std::vector<const void*> ptrs;
  std::vector<size_t> sizes, which;
  for (size_t i = 0; i < n; ++i) {
    if (!out[i].ok()) continue;
    k.push_back(keys[i]);
    if (index[i] == SIZE_MAX) {
      ptrs.push_back(regions[i][0].data);
      sizes.push_back(regions[i][0].size);
    } else {
      const Staged& s = staged[index[i]];
      ptrs.push_back((*scratch)[s.device]->data() + s.offset);
      sizes.push_back(s.bytes);
    }
    which.push_back(i);
  }
  std::vector<absl::Status> res = PutWaiting(k, ptrs, sizes, PutFlags(options), wait, order.get());
  for (size_t j = 0; j < which.size() && j < res.size(); ++j) out[which[j]] = std::move(res[j]);
  return out;
}

std::vector<absl::StatusOr<size_t>> ClientImpl::BatchGetIntoRegions(
    absl::Span<const std::string> keys, absl::Span<const std::vector<BufferRegion>> regions,
    const GetOptions& options) {
  const size_t n = keys.size();
  std::vector<absl::Status> bad(n);
  std::vector<absl::StatusOr<size_t>> out(n, absl::UnknownError("not attempted"));
  if (regions.size() != n) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat(n, " keys but ", regions.size(), " region lists")));
    return out;
  }
  std::vector<Staged> staged;
  auto scratch = AllocateStaging(PlanStaging(regions, &bad, &staged), &staging_);
  if (!scratch.ok()) {
    for (const Staged& s : staged) bad[s.key] = scratch.status();
  }
  std::vector<size_t> index(n, SIZE_MAX);
  for (size_t j = 0; j < staged.size(); ++j) index[staged[j].key] = j;
  std::vector<std::string> k;
  std::vector<void*> ptrs;
  std::vector<size_t> caps, which;
  for (size_t i = 0; i < n; ++i) {
    if (!bad[i].ok()) {
      out[i] = bad[i];
      continue;
    }
    k.push_back(keys[i]);
    if (index[i] == SIZE_MAX) {
      ptrs.push_back(regions[i][0].data);
      caps.push_back(regions[i][0].size);
    } else {
      const Staged& s = staged[index[i]];
      ptrs.push_back((*scratch)[s.device]->data() + s.offset);
      caps.push_back(s.bytes);
    }
    which.push_back(i);
  }
  std::vector<absl::StatusOr<size_t>> res = BatchGetInto(k, ptrs, caps, options);
  absl::flat_hash_map<int, std::vector<device::CopyRegion>> scatters;
  for (size_t j = 0; j < which.size() && j < res.size(); ++j) {
    const size_t i = which[j];
    out[i] = std::move(res[j]);
    if (!out[i].ok() || index[i] == SIZE_MAX) continue;
    const Staged& s = staged[index[i]];
    const unsigned char* from = (*scratch)[s.device]->data() + s.offset;
    size_t left = *out[i];
    for (const BufferRegion& r : regions[i]) {
      const size_t take = std::min(left, r.size);
      if (take == 0) break;
      scatters[s.device].push_back({from, r.data, take});
      from += take;
      left -= take;
    }
  }
  for (auto& [device, list] : scatters) {
    absl::Status st = CopyAll(&region_streams_, device, list);
    if (st.ok()) continue;
    for (const Staged& s : staged) {
      if (s.device == device && out[s.key].ok()) out[s.key] = st;
    }
  }
  return out;
}

}  // namespace granary::client
