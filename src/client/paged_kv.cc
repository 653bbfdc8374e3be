// PagedKv (include/granary/paged_kv.h): gathers an engine's paged blocks into one staging
// buffer per batch, on the caches' device (one kernel launch) or in host memory, and hands it
// to Client::BatchPutFrom; reads into it with Client::BatchGetInto and scatters back (one
// launch). With the checksum (client/paged_kv_trailer.h) one checksum launch per batch and one
// trailer copy each way come on top.
#include "granary/paged_kv.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/device_check.h"
#include "client/device_staging.h"
#include "client/engine_order.h"
#include "client/paged_kv_trailer.h"
#include "client/staging_pool.h"
#include "client/stream_pool.h"
#include "common/quote.h"
#include "device/checksum.h"
#include "device/device_backend.h"
#include "device/kv_layout.h"

namespace granary {

using client::BufferDevice;
using client::CopyAll;
using client::DecodeKvTrailer;
using client::EncodeKvTrailer;
using client::EngineOrder;
using client::kKvChecksumAlgorithm;
using client::kKvTrailerBytes;
using client::kKvTrailerMagic;
using client::KvTrailer;
using client::OnStream;
using client::RunCopyKernel;
using client::Scratch;
using client::StagingPool;
using client::StreamPool;

namespace {

device::PagedKvLayout LayoutOf(const PagedKvCache& c) {
  device::PagedKvLayout l;
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
absl::StatusOr<int> CheckBatch(absl::Span<const std::string> keys, const PagedKvCache& cache,
                               absl::Span<const std::vector<int32_t>> block_ids,
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
  const device::PagedKvLayout layout = LayoutOf(cache);
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
      (*out)[i] = absl::InvalidArgumentError(
          absl::StrCat("key ", common::QuotedKey(keys[i]), ": an empty block list"));
      continue;
    }
    absl::Status st = device::ValidateBlockIds(layout, ids.data(), static_cast<int>(ids.size()),
                                               reject_duplicates);
    if (!st.ok()) {
      (*out)[i] = absl::Status(
          st.code(), absl::StrCat("key ", common::QuotedKey(keys[i]), ": ", st.message()));
      continue;
    }
    if (!reject_duplicates) continue;
    for (int32_t b : ids) {
      auto [it, fresh] = first_key.try_emplace(b, i);
      if (!fresh) {
        (*out)[i] = absl::InvalidArgumentError(absl::StrCat(
            "key ", common::QuotedKey(keys[i]), ": block ", b, " is also listed by key ",
            common::QuotedKey(keys[it->second]), " of the batch (a scatter would race)"));
        break;
      }
    }
  }
  return *k;
}

// CheckBatch for n = keys.size() keys, into a fresh *out of n statuses; a refusal of the whole
// batch goes to every key.
absl::StatusOr<int> CheckPagedKv(absl::Span<const std::string> keys, const PagedKvCache& cache,
                                 absl::Span<const std::vector<int32_t>> block_ids,
                                 bool reject_duplicates, std::vector<absl::Status>* out) {
  out->assign(keys.size(), absl::OkStatus());
  absl::StatusOr<int> device = CheckBatch(keys, cache, block_ids, reject_duplicates, out);
  if (!device.ok()) out->assign(keys.size(), device.status());
  return device;
}

// The staging of a paged-KV batch: the keys that passed the checks, each one's place in the
// staging buffer and its blocks' size (the payload); `trailer` bytes follow each payload (a
// checksum trailer, or room for one). After the keys' slices, a trailer area of trailer bytes
// per key collects the trailers in one place, so that they cross between host and device in
// one copy.
struct KvSlices {
  std::vector<size_t> which, offsets, payloads;
  size_t trailer = 0;
  size_t total = 0;  // the keys' slices; the trailer area starts here
  size_t value(size_t j) const { return payloads[j] + trailer; }
  size_t staging_bytes() const { return total + which.size() * trailer; }
};
KvSlices SliceKv(const device::PagedKvLayout& layout,
                 absl::Span<const std::vector<int32_t>> block_ids,
                 const std::vector<absl::Status>& out, size_t trailer) {
  KvSlices k;
  k.trailer = trailer;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].ok()) continue;
    k.which.push_back(i);
    k.offsets.push_back(k.total);
    k.payloads.push_back(layout.GatheredBytes(static_cast<int>(block_ids[i].size())));
    k.total += k.value(k.payloads.size() - 1);
  }
  return k;
}

// Gathers (or scatters, `scatter`) the blocks of the keys at positions `slots` of `sl` between
// the caches and their slices of `staging`: one launch.
absl::Status MoveKvBlocks(StreamPool* streams, int device, const device::PagedKvLayout& layout,
                          const PagedKvCache& cache,
                          absl::Span<const std::vector<int32_t>> block_ids, const KvSlices& sl,
                          absl::Span<const size_t> slots, unsigned char* staging, bool scatter) {
  std::vector<device::CopyRegion> regions;
  for (size_t j : slots) {
    const auto& ids = block_ids[sl.which[j]];
    const int n = static_cast<int>(ids.size());
    unsigned char* slice = staging + sl.offsets[j];
    absl::Status st = scatter ? device::AppendScatterRegions(layout, slice, ids.data(), n,
                                                             cache.k_cache, cache.v_cache, &regions)
                              : device::AppendGatherRegions(layout, cache.k_cache, cache.v_cache,
                                                            ids.data(), n, slice, &regions);
    if (!st.ok()) return st;
  }
  absl::Status st = RunCopyKernel(streams, device, regions);
  if (st.ok()) return st;
  return absl::Status(
      st.code(), absl::StrCat(scatter ? "scattering" : "gathering", " the blocks: ", st.message()));
}

// Moves the trailers of the keys at `slots` between their slices and `host` (kKvTrailerBytes
// each, in slot order) through the trailer area: to the slices (`to_slices`) one host-to-device
// copy then one launch, from them one launch then one copy. Memcpy for host staging.
absl::Status MoveKvTrailers(StreamPool* streams, int device, const KvSlices& sl,
                            absl::Span<const size_t> slots, unsigned char* staging,
                            unsigned char* host, bool to_slices) {
  unsigned char* area = staging + sl.total;
  const std::vector<device::CopyRegion> bulk = {
      to_slices ? device::CopyRegion{host, area, slots.size() * kKvTrailerBytes}
                : device::CopyRegion{area, host, slots.size() * kKvTrailerBytes}};
  std::vector<device::CopyRegion> spread;
  for (size_t q = 0; q < slots.size(); ++q) {
    unsigned char* slot = staging + sl.offsets[slots[q]] + sl.payloads[slots[q]];
    unsigned char* parked = area + q * kKvTrailerBytes;
    spread.push_back(to_slices ? device::CopyRegion{parked, slot, kKvTrailerBytes}
                               : device::CopyRegion{slot, parked, kKvTrailerBytes});
  }
  absl::Status st =
      to_slices ? CopyAll(streams, device, bulk) : RunCopyKernel(streams, device, spread);
  if (st.ok()) {
    st = to_slices ? RunCopyKernel(streams, device, spread) : CopyAll(streams, device, bulk);
  }
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("moving the checksum trailers: ", st.message()));
}

// The checksums of the payloads of the keys at `slots`: one launch on `device`, the CPU reference
// for host staging.
absl::StatusOr<std::vector<uint64_t>> KvChecksums(StreamPool* streams, int device,
                                                  const KvSlices& sl,
                                                  absl::Span<const size_t> slots,
                                                  const unsigned char* staging) {
  std::vector<device::ChecksumRegion> regions;
  for (size_t j : slots) regions.push_back({staging + sl.offsets[j], sl.payloads[j]});
  std::vector<uint64_t> sums(regions.size());
  const int n = static_cast<int>(regions.size());
  absl::Status st =
      device < 0
          ? device::BatchChecksumCpu(regions.data(), n, sums.data())
          : OnStream(streams, device, [&](device::DeviceBackend& b, void* stream) {
              return b.kernels().BatchChecksum(device, regions.data(), n, sums.data(), stream);
            });
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("checksumming the blocks: ", st.message()));
  }
  return sums;
}

// Whether a value of `got` bytes read for `key` (its `blocks` blocks are `payload` bytes) is the
// kind the caller asked for (`checksum`): OK when it may be scattered (with checksum on, after
// its checksum is verified), else the FAILED_PRECONDITION that says why. `trailer` is the decoded
// last kKvTrailerBytes of a value of payload + kKvTrailerBytes bytes, null for any other size.
absl::Status ClassifyKvValue(const std::string& key, size_t blocks, size_t payload, size_t got,
                             const KvTrailer* trailer, bool checksum) {
  const bool has_trailer = trailer != nullptr && trailer->magic == kKvTrailerMagic;
  static constexpr char kNothing[] = "; nothing was scattered";
  if (has_trailer && !checksum) {
    return absl::FailedPreconditionError(
        absl::StrCat("key ", common::QuotedKey(key), " holds ", blocks,
                     " blocks and a checksum trailer (stored ",
                     "with PagedKvOptions::checksum): read it with checksum on", kNothing));
  }
  if (got == payload && checksum) {
    return absl::FailedPreconditionError(absl::StrCat(
        "key ", common::QuotedKey(key), " holds ", blocks, " blocks without a checksum trailer ",
        "(stored with checksum off): read it with checksum off", kNothing));
  }
  if (has_trailer && trailer->algorithm != kKvChecksumAlgorithm) {
    return absl::FailedPreconditionError(
        absl::StrCat("key ", common::QuotedKey(key), ": checksum algorithm ", trailer->algorithm,
                     " is not known (this client has ", kKvChecksumAlgorithm, ")", kNothing));
  }
  if (got == payload || has_trailer) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "key ", common::QuotedKey(key), " holds ", got, " bytes but ", blocks,
      " blocks of this layout are ", payload,
      checksum ? absl::StrCat(" (", payload + kKvTrailerBytes, " with a checksum trailer)") : "",
      " (stored with another layout?)", kNothing));
}

// Checksums the payloads of the slots `verify` (one launch) against their stored trailers
// (trailers[t] is the trailer of slot trailed[t]): a match goes to *good, a mismatch is
// DATA_LOSS in (*out)[key] naming both checksums.
void VerifyKvChecksums(StreamPool* streams, int device, absl::Span<const std::string> keys,
                       const KvSlices& sl, absl::Span<const size_t> verify,
                       const std::vector<size_t>& trailed, const unsigned char* trailers,
                       const unsigned char* staging, std::vector<size_t>* good,
                       std::vector<absl::Status>* out) {
  if (verify.empty()) return;
  absl::StatusOr<std::vector<uint64_t>> sums = KvChecksums(streams, device, sl, verify, staging);
  for (size_t q = 0; q < verify.size(); ++q) {
    const size_t j = verify[q];
    const size_t i = sl.which[j];
    if (!sums.ok()) {
      (*out)[i] = sums.status();
      continue;
    }
    const size_t t = std::lower_bound(trailed.begin(), trailed.end(), j) - trailed.begin();
    const uint64_t stored = DecodeKvTrailer(trailers + t * kKvTrailerBytes).checksum;
    if (stored == (*sums)[q]) {
      good->push_back(j);
      continue;
    }
    (*out)[i] = absl::DataLossError(
        absl::StrCat("key ", common::QuotedKey(keys[i]), ": checksum mismatch: its trailer says 0x",
                     absl::Hex(stored), " but its ", sl.payloads[j], " bytes of blocks hash to 0x",
                     absl::Hex((*sums)[q]), " (the value is corrupt); nothing was scattered"));
  }
}

}  // namespace

struct PagedKv::Staging {
  StagingPool pool;    // staging buffers of the gathers and scatters, kept for reuse
  StreamPool streams;  // streams of their launches (never the legacy stream)
};

PagedKv::PagedKv(Client& client) : client_(client), staging_(std::make_unique<Staging>()) {}

PagedKv::~PagedKv() = default;

std::vector<absl::Status> PagedKv::Put(absl::Span<const std::string> keys,
                                       const PagedKvCache& cache,
                                       absl::Span<const std::vector<int32_t>> block_ids,
                                       const PagedKvOptions& options) {
  std::vector<absl::Status> out;
  const absl::StatusOr<int> device = CheckPagedKv(keys, cache, block_ids, false, &out);
  if (!device.ok()) return out;
  const device::PagedKvLayout layout = LayoutOf(cache);
  // One gather for the batch, each key's blocks into its slice (then its trailer).
  const KvSlices sl = SliceKv(layout, block_ids, out, options.checksum ? kKvTrailerBytes : 0);
  if (sl.which.empty()) return out;
  std::vector<size_t> all(sl.which.size());
  for (size_t j = 0; j < all.size(); ++j) all[j] = j;
  Scratch scratch(&staging_->pool);
  absl::Status st = scratch.Allocate(*device, sl.staging_bytes());
  // The stream contract (DeviceWait): the gather runs synchronously, so the host waits for the
  // engine before it.
  if (st.ok() && !options.wait.empty()) {
    absl::StatusOr<std::unique_ptr<EngineOrder>> order = EngineOrder::Create(options.wait, *device);
    st = order.ok() ? (*order)->OnHost() : order.status();
  }
  if (st.ok())
    st = MoveKvBlocks(&staging_->streams, *device, layout, cache, block_ids, sl, all,
                      scratch.data(), false);
  if (st.ok() && options.checksum) {
    absl::StatusOr<std::vector<uint64_t>> sums =
        KvChecksums(&staging_->streams, *device, sl, all, scratch.data());
    std::vector<unsigned char> trailers(all.size() * kKvTrailerBytes);
    for (size_t j = 0; sums.ok() && j < all.size(); ++j) {
      EncodeKvTrailer((*sums)[j], trailers.data() + j * kKvTrailerBytes);
    }
    st = sums.ok() ? MoveKvTrailers(&staging_->streams, *device, sl, all, scratch.data(),
                                    trailers.data(), true)
                   : sums.status();
  }
  if (!st.ok()) {
    for (size_t i : sl.which) out[i] = st;
    return out;
  }
  std::vector<std::string> k;
  std::vector<const void*> ptrs;
  std::vector<size_t> sizes;
  for (size_t j = 0; j < sl.which.size(); ++j) {
    k.push_back(keys[sl.which[j]]);
    ptrs.push_back(scratch.data() + sl.offsets[j]);
    sizes.push_back(sl.value(j));
  }
  std::vector<absl::Status> res = client_.BatchPutFrom(k, ptrs, sizes);
  for (size_t j = 0; j < sl.which.size() && j < res.size(); ++j) {
    out[sl.which[j]] = std::move(res[j]);
  }
  return out;
}

std::vector<absl::Status> PagedKv::Get(absl::Span<const std::string> keys,
                                       const PagedKvCache& cache,
                                       absl::Span<const std::vector<int32_t>> block_ids,
                                       const PagedKvOptions& options) {
  std::vector<absl::Status> out;
  const absl::StatusOr<int> device = CheckPagedKv(keys, cache, block_ids, true, &out);
  if (!device.ok()) return out;
  const device::PagedKvLayout layout = LayoutOf(cache);
  // Room for a trailer either way, so that a value of the other kind is recognised, not cut.
  const KvSlices sl = SliceKv(layout, block_ids, out, kKvTrailerBytes);
  absl::Span<const size_t> which = sl.which;
  if (which.empty()) return out;
  Scratch scratch(&staging_->pool);
  if (absl::Status st = scratch.Allocate(*device, sl.staging_bytes()); !st.ok()) {
    for (size_t i : which) out[i] = st;
    return out;
  }
  std::vector<std::string> k;
  std::vector<void*> ptrs;
  std::vector<size_t> caps;
  for (size_t j = 0; j < which.size(); ++j) {
    k.push_back(keys[which[j]]);
    ptrs.push_back(scratch.data() + sl.offsets[j]);
    caps.push_back(sl.value(j));
  }
  std::vector<absl::StatusOr<size_t>> res = client_.BatchGetInto(k, ptrs, caps);
  std::vector<size_t> read, trailed;  // slots read; those as long as blocks + a trailer
  for (size_t j = 0; j < which.size(); ++j) {
    if (j >= res.size() || !res[j].ok()) {
      out[which[j]] = j < res.size() ? res[j].status() : absl::InternalError("no result");
      continue;
    }
    read.push_back(j);
    if (*res[j] == sl.value(j)) trailed.push_back(j);
  }
  // The trailers, in one launch and one copy.
  std::vector<unsigned char> trailers(trailed.size() * kKvTrailerBytes);
  absl::Status st = trailed.empty() ? absl::OkStatus()
                                    : MoveKvTrailers(&staging_->streams, *device, sl, trailed,
                                                     scratch.data(), trailers.data(), false);
  std::vector<size_t> good, verify;
  for (size_t j : read) {
    const size_t i = which[j];
    const auto at = std::lower_bound(trailed.begin(), trailed.end(), j);
    const bool long_value = at != trailed.end() && *at == j;
    if (long_value && !st.ok()) {
      out[i] = st;
      continue;
    }
    const KvTrailer trailer =
        long_value ? DecodeKvTrailer(trailers.data() + (at - trailed.begin()) * kKvTrailerBytes)
                   : KvTrailer{};
    out[i] = ClassifyKvValue(keys[i], block_ids[i].size(), sl.payloads[j], *res[j],
                             long_value ? &trailer : nullptr, options.checksum);
    if (!out[i].ok()) continue;
    (options.checksum ? verify : good).push_back(j);
  }
  // One checksum launch for the values with a trailer; a mismatch scatters nothing of that key.
  VerifyKvChecksums(&staging_->streams, *device, keys, sl, verify, trailed, trailers.data(),
                    scratch.data(), &good, &out);
  // One scatter for every key that passed (CheckPagedKv rejected blocks shared between keys).
  std::sort(good.begin(), good.end());
  st = MoveKvBlocks(&staging_->streams, *device, layout, cache, block_ids, sl, good, scratch.data(),
                    true);
  if (!st.ok()) {
    for (size_t j : good) out[which[j]] = st;
  }
  return out;
}

}  // namespace granary
