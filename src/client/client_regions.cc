// ClientImpl's scatter-list forms and the paged-KV calls (include/granary/client.h): both gather
// into, or read into and scatter from, one staging buffer per batch, on the device when the
// engine's memory is device memory, and hand that buffer to BatchPutFrom / BatchGetInto, whose
// device paths (client/device_transfers.h) then move it.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/device_check.h"
#include "cuda/device_backend.h"
#include "cuda/kv_layout.h"

namespace granary::client {

namespace {

// One staging allocation: device memory of the backend (device >= 0) or host memory.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (device_ >= 0 && data_ != nullptr) backend_->Free(device_, data_);
  }
  [[nodiscard]] absl::Status Allocate(int device, size_t bytes) {
    device_ = device;
    if (bytes == 0) return absl::OkStatus();
    if (device < 0) {
      host_.resize(bytes);
      data_ = host_.data();
      return absl::OkStatus();
    }
    backend_ = &cuda::ActiveBackend();
    absl::StatusOr<void*> p = backend_->Alloc(device, bytes);
    if (!p.ok()) {
      device_ = -1;
      return absl::Status(p.status().code(),
                          absl::StrCat("allocating ", bytes, " bytes of staging on device ", device,
                                       ": ", p.status().message()));
    }
    data_ = static_cast<unsigned char*>(*p);
    return absl::OkStatus();
  }
  unsigned char* data() const { return data_; }
  int device() const { return device_; }

 private:
  cuda::DeviceBackend* backend_ = nullptr;
  int device_ = -1;
  unsigned char* data_ = nullptr;
  std::vector<unsigned char> host_;
};

// Copies the regions: memcpy when both sides are host memory (device < 0), else on the
// backend's copy engine (the direction from the pointers), complete on return.
absl::Status CopyAll(int device, const std::vector<cuda::CopyRegion>& regions) {
  if (regions.empty()) return absl::OkStatus();
  if (device < 0) {
    for (const cuda::CopyRegion& r : regions) std::memcpy(r.dst, r.src, r.bytes);
    return absl::OkStatus();
  }
  cuda::DeviceBackend& b = cuda::ActiveBackend();
  absl::Status st = b.BatchCopyAsync(nullptr, regions.data(), static_cast<int>(regions.size()));
  absl::Status synced = b.SynchronizeStream(nullptr);
  if (st.ok()) st = synced;
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("a staging copy on device ", device, " failed: ", st.message()));
  }
  return absl::OkStatus();
}

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
absl::flat_hash_map<int, size_t> PlanStaging(const std::vector<std::vector<BufferRegion>>& regions,
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
    const absl::flat_hash_map<int, size_t>& need) {
  absl::flat_hash_map<int, std::unique_ptr<Scratch>> scratch;
  for (const auto& [device, bytes] : need) {
    auto s = std::make_unique<Scratch>();
    absl::Status st = s->Allocate(device, bytes);
    if (!st.ok()) return st;
    scratch[device] = std::move(s);
  }
  return scratch;
}

cuda::PagedKvLayout LayoutOf(const PagedKvCache& c) {
  cuda::PagedKvLayout l;
  l.num_blocks = c.num_blocks;
  l.block_size = c.block_size;
  l.num_heads = c.num_heads;
  l.head_dim = c.head_dim;
  l.elem_bytes = c.elem_bytes;
  l.block_stride_bytes = c.block_stride_bytes;
  return l;
}

// The checks the paged-KV calls share: the layout, the caches' memory (both host, or both device
// memory of one device), and per key its block list. (*out)[i] gets a key's refusal; the result
// is the caches' device (-1: host) or the refusal of the whole batch.
absl::StatusOr<int> CheckPagedKv(const std::vector<std::string>& keys, const PagedKvCache& cache,
                                 const std::vector<std::vector<int32_t>>& block_ids,
                                 bool reject_duplicates, std::vector<absl::Status>* out) {
  if (block_ids.size() != keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(keys.size(), " keys but ", block_ids.size(), " block lists"));
  }
  if (cache.elem_bytes != 1 && cache.elem_bytes != 2 && cache.elem_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvCache.elem_bytes must be 1, 2 or 4 (fp8, fp16/bf16, fp32), got ",
                     cache.elem_bytes));
  }
  const cuda::PagedKvLayout layout = LayoutOf(cache);
  if (absl::Status st = layout.Validate(); !st.ok()) return st;
  if (cache.k_cache == nullptr || cache.v_cache == nullptr) {
    return absl::InvalidArgumentError("PagedKvCache: k_cache and v_cache must be set");
  }
  const size_t span =
      static_cast<size_t>(layout.num_blocks - 1) * layout.BlockStride() + layout.BlockBytes();
  absl::StatusOr<int> k = BufferDevice(cache.k_cache, span);
  if (!k.ok()) return k.status();
  absl::StatusOr<int> v = BufferDevice(cache.v_cache, span);
  if (!v.ok()) return v.status();
  if (*k != *v) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PagedKvCache: k_cache is in ", *k < 0 ? "host memory" : absl::StrCat("device ", *k),
        " but v_cache in ", *v < 0 ? "host memory" : absl::StrCat("device ", *v)));
  }
  absl::flat_hash_map<int32_t, size_t> first_key;  // block -> the key that lists it first
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& ids = block_ids[i];
    if (ids.empty()) {
      (*out)[i] =
          absl::InvalidArgumentError(absl::StrCat("key '", keys[i], "': an empty block list"));
      continue;
    }
    absl::Status st =
        cuda::ValidateBlockIds(layout, ids.data(), static_cast<int>(ids.size()), reject_duplicates);
    if (!st.ok()) {
      (*out)[i] = absl::Status(st.code(), absl::StrCat("key '", keys[i], "': ", st.message()));
      continue;
    }
    if (!reject_duplicates) continue;
    for (int32_t b : ids) {
      auto [it, fresh] = first_key.try_emplace(b, i);
      if (!fresh) {
        (*out)[i] = absl::InvalidArgumentError(
            absl::StrCat("key '", keys[i], "': block ", b, " is also listed by key '",
                         keys[it->second], "' of the batch (a scatter would race)"));
        break;
      }
    }
  }
  return *k;
}

// The keys of a paged-KV batch that passed the checks, each one's place in the batch's staging
// buffer and its value's size.
struct KvSlices {
  std::vector<size_t> which, offsets, sizes;
  size_t total = 0;
};
KvSlices SliceKv(const cuda::PagedKvLayout& layout,
                 const std::vector<std::vector<int32_t>>& block_ids,
                 const std::vector<absl::Status>& out) {
  KvSlices k;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].ok()) continue;
    k.which.push_back(i);
    k.offsets.push_back(k.total);
    k.sizes.push_back(layout.GatheredBytes(static_cast<int>(block_ids[i].size())));
    k.total += k.sizes.back();
  }
  return k;
}

}  // namespace

std::vector<absl::Status> ClientImpl::BatchPutFromRegions(
    const std::vector<std::string>& keys, const std::vector<std::vector<BufferRegion>>& regions) {
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  if (regions.size() != n) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat(n, " keys but ", regions.size(), " region lists")));
    return out;
  }
  std::vector<Staged> staged;
  auto scratch = AllocateStaging(PlanStaging(regions, &out, &staged));
  if (!scratch.ok()) {
    for (const Staged& s : staged) out[s.key] = scratch.status();
  }
  absl::flat_hash_map<int, std::vector<cuda::CopyRegion>> gathers;
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
    absl::Status st = CopyAll(device, list);
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
  std::vector<absl::Status> res = BatchPutFrom(k, ptrs, sizes);
  for (size_t j = 0; j < which.size() && j < res.size(); ++j) out[which[j]] = std::move(res[j]);
  return out;
}

std::vector<absl::StatusOr<size_t>> ClientImpl::BatchGetIntoRegions(
    const std::vector<std::string>& keys, const std::vector<std::vector<BufferRegion>>& regions) {
  const size_t n = keys.size();
  std::vector<absl::Status> bad(n);
  std::vector<absl::StatusOr<size_t>> out(n, absl::UnknownError("not attempted"));
  if (regions.size() != n) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat(n, " keys but ", regions.size(), " region lists")));
    return out;
  }
  std::vector<Staged> staged;
  auto scratch = AllocateStaging(PlanStaging(regions, &bad, &staged));
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
  std::vector<absl::StatusOr<size_t>> res = BatchGetInto(k, ptrs, caps);
  absl::flat_hash_map<int, std::vector<cuda::CopyRegion>> scatters;
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
    absl::Status st = CopyAll(device, list);
    if (st.ok()) continue;
    for (const Staged& s : staged) {
      if (s.device == device && out[s.key].ok()) out[s.key] = st;
    }
  }
  return out;
}

std::vector<absl::Status> ClientImpl::PutPagedKv(
    const std::vector<std::string>& keys, const PagedKvCache& cache,
    const std::vector<std::vector<int32_t>>& block_ids) {
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  absl::StatusOr<int> device = CheckPagedKv(keys, cache, block_ids, false, &out);
  if (!device.ok()) {
    out.assign(n, device.status());
    return out;
  }
  const cuda::PagedKvLayout layout = LayoutOf(cache);
  // One gather for the batch: the keys' lists back to back give each key a contiguous value.
  const KvSlices sl = SliceKv(layout, block_ids, out);
  const auto& [which, offsets, sizes, total] = sl;
  std::vector<int32_t> ids;
  for (size_t i : which) ids.insert(ids.end(), block_ids[i].begin(), block_ids[i].end());
  if (which.empty()) return out;
  Scratch scratch;
  absl::Status st = scratch.Allocate(*device, total);
  if (st.ok()) {
    st = *device < 0 ? cuda::GatherBlocksCpu(layout, cache.k_cache, cache.v_cache, ids.data(),
                                             static_cast<int>(ids.size()), scratch.data())
                     : cuda::ActiveBackend().GatherBlocks(
                           *device, layout, cache.k_cache, cache.v_cache, ids.data(),
                           static_cast<int>(ids.size()), scratch.data(), nullptr);
    if (!st.ok())
      st = absl::Status(st.code(), absl::StrCat("gathering the blocks: ", st.message()));
  }
  if (!st.ok()) {
    for (size_t i : which) out[i] = st;
    return out;
  }
  std::vector<std::string> k;
  std::vector<const void*> ptrs;
  for (size_t j = 0; j < which.size(); ++j) {
    k.push_back(keys[which[j]]);
    ptrs.push_back(scratch.data() + offsets[j]);
  }
  std::vector<absl::Status> res = BatchPutFrom(k, ptrs, sizes);
  for (size_t j = 0; j < which.size() && j < res.size(); ++j) out[which[j]] = std::move(res[j]);
  return out;
}

std::vector<absl::Status> ClientImpl::GetPagedKv(
    const std::vector<std::string>& keys, const PagedKvCache& cache,
    const std::vector<std::vector<int32_t>>& block_ids) {
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  absl::StatusOr<int> device = CheckPagedKv(keys, cache, block_ids, true, &out);
  if (!device.ok()) {
    out.assign(n, device.status());
    return out;
  }
  const cuda::PagedKvLayout layout = LayoutOf(cache);
  const KvSlices sl = SliceKv(layout, block_ids, out);
  const auto& [which, offsets, sizes, total] = sl;
  if (which.empty()) return out;
  Scratch scratch;
  if (absl::Status st = scratch.Allocate(*device, total); !st.ok()) {
    for (size_t i : which) out[i] = st;
    return out;
  }
  std::vector<std::string> k;
  std::vector<void*> ptrs;
  for (size_t j = 0; j < which.size(); ++j) {
    k.push_back(keys[which[j]]);
    ptrs.push_back(scratch.data() + offsets[j]);
  }
  std::vector<absl::StatusOr<size_t>> res = BatchGetInto(k, ptrs, sizes);
  std::vector<bool> good(which.size(), false);
  for (size_t j = 0; j < which.size() && j < res.size(); ++j) {
    const size_t i = which[j];
    if (!res[j].ok()) {
      out[i] = res[j].status();
    } else if (*res[j] != sizes[j]) {
      out[i] = absl::FailedPreconditionError(absl::StrCat("key '", keys[i], "' holds ", *res[j],
                                                          " bytes but ", block_ids[i].size(),
                                                          " blocks of this layout are ", sizes[j],
                                                          " (stored with another layout?); nothing "
                                                          "was scattered"));
    } else {
      good[j] = true;
    }
  }
  // One scatter per run of consecutive keys read (one for the whole batch when all were).
  for (size_t j = 0; j < which.size();) {
    if (!good[j]) {
      ++j;
      continue;
    }
    size_t end = j;
    std::vector<int32_t> ids;
    while (end < which.size() && good[end]) {
      const auto& b = block_ids[which[end]];
      ids.insert(ids.end(), b.begin(), b.end());
      ++end;
    }
    const void* in = scratch.data() + offsets[j];
    absl::Status st =
        *device < 0 ? cuda::ScatterBlocksCpu(layout, in, ids.data(), static_cast<int>(ids.size()),
                                             cache.k_cache, cache.v_cache)
                    : cuda::ActiveBackend().ScatterBlocks(*device, layout, in, ids.data(),
                                                          static_cast<int>(ids.size()),
                                                          cache.k_cache, cache.v_cache, nullptr);
    if (!st.ok()) {
      st = absl::Status(st.code(), absl::StrCat("scattering the blocks: ", st.message()));
      for (size_t q = j; q < end; ++q) out[which[q]] = st;
    }
    j = end;
  }
  return out;
}

}  // namespace granary::client
