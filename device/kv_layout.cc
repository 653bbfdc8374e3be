// CPU reference for the KV-layout operations, and the validation every version shares.

#include "device/kv_layout.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/kv_regions.h"

namespace granary::device {
namespace {

// a * b, or -1 when it overflows int64 (both are positive).
int64_t CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

absl::Status CheckPositive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("PagedKvLayout.", field, " must be positive, got ", value));
}

// Validation shared by gather and scatter: layout, ids, and the three pointers.
absl::Status ValidateBlockOp(const char* op, const PagedKvLayout& layout, const void* k_cache,
                             const void* v_cache, const int32_t* block_ids, int n,
                             const void* buffer, bool reject_duplicates) {
  if (absl::Status s = ValidateBlockIds(layout, block_ids, n, reject_duplicates); !s.ok()) {
    return s;
  }
  if (n > 0 && (k_cache == nullptr || v_cache == nullptr || buffer == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": null pointer (k_cache=", k_cache == nullptr ? "null" : "set",
                     ", v_cache=", v_cache == nullptr ? "null" : "set",
                     ", buffer=", buffer == nullptr ? "null" : "set", ") with n=", n));
  }
  return absl::OkStatus();
}

// The copies between K(block_ids[i]), V(block_ids[i]) and consecutive BlockBytes() slices of
// `buffer`: into the buffer (a gather) when `to_buffer`, else out of it (a scatter). Assumes
// ValidateBlockOp passed. Each side is writable memory of the caller (const only for the gather
// source).
void AppendBlockCopies(const PagedKvLayout& layout, const void* k_cache, const void* v_cache,
                       const int32_t* block_ids, int n, const void* buffer, bool to_buffer,
                       std::vector<CopyRegion>* regions) {
  const size_t block = layout.BlockBytes();
  const size_t stride = layout.BlockStride();
  auto* k = static_cast<unsigned char*>(const_cast<void*>(k_cache));
  auto* v = static_cast<unsigned char*>(const_cast<void*>(v_cache));
  auto* buf = static_cast<unsigned char*>(const_cast<void*>(buffer));
  for (int i = 0; i < n; ++i) {
    const size_t offset = static_cast<size_t>(block_ids[i]) * stride;
    const std::pair<unsigned char*, unsigned char*> pairs[] = {{k + offset, buf},
                                                               {v + offset, buf + block}};
    for (const auto& [cache, slice] : pairs) {
      regions->push_back(to_buffer ? CopyRegion{cache, slice, block}
                                   : CopyRegion{slice, cache, block});
    }
    buf += 2 * block;
  }
}

}  // namespace

absl::Status PagedKvLayout::Validate() const {
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"num_blocks", num_blocks},
                                     {"block_size", block_size},
                                     {"num_heads", num_heads},
                                     {"head_dim", head_dim},
                                     {"elem_bytes", elem_bytes}}) {
    if (absl::Status s = CheckPositive(field, value); !s.ok()) return s;
  }
  int64_t block_bytes = CheckedMul(CheckedMul(block_size, num_heads), head_dim);
  block_bytes = block_bytes < 0 ? -1 : CheckedMul(block_bytes, elem_bytes);
  if (block_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvLayout block bytes overflow int64: block_size=", block_size,
                     " num_heads=", num_heads, " head_dim=", head_dim, " elem_bytes=", elem_bytes));
  }
  if (block_stride_bytes < 0 || (block_stride_bytes > 0 && block_stride_bytes < block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvLayout.block_stride_bytes must be 0 (dense) or at least the block "
                     "size ",
                     block_bytes, ", got ", block_stride_bytes));
  }
  const int64_t stride = block_stride_bytes > 0 ? block_stride_bytes : block_bytes;
  if (CheckedMul(num_blocks, stride) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PagedKvLayout cache size overflows int64: ",
                                                   "num_blocks=", num_blocks, " stride=", stride));
  }
  return absl::OkStatus();
}

size_t PagedKvLayout::BlockBytes() const {
  return static_cast<size_t>(block_size) * num_heads * head_dim * elem_bytes;
}

size_t PagedKvLayout::BlockStride() const {
  return block_stride_bytes > 0 ? static_cast<size_t>(block_stride_bytes) : BlockBytes();
}

size_t PagedKvLayout::GatheredBytes(int n) const {
  return 2 * static_cast<size_t>(n) * BlockBytes();
}

absl::Status ValidateBlockIds(const PagedKvLayout& layout, const int32_t* block_ids, int n,
                              bool reject_duplicates) {
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("block count n must be >= 0, got ", n));
  if (n == 0) return absl::OkStatus();
  if (block_ids == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("block_ids is null with n=", n));
  }
  if (CheckedMul(2 * static_cast<int64_t>(n), static_cast<int64_t>(layout.BlockBytes())) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gathered size of ", n, " blocks of ",
                                                   layout.BlockBytes(),
                                                   " bytes (K and V) overflows int64"));
  }
  for (int i = 0; i < n; ++i) {
    if (block_ids[i] < 0 || block_ids[i] >= layout.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block_ids[", i, "] = ", block_ids[i], " is out of range [0, ", layout.num_blocks, ")"));
    }
  }
  if (reject_duplicates && n > 1) {
    // O(n log n) and one allocation: n is a request's block count, not the cache size.
    std::vector<std::pair<int32_t, int>> sorted(n);
    for (int i = 0; i < n; ++i) sorted[i] = {block_ids[i], i};
    std::sort(sorted.begin(), sorted.end());
    for (int i = 1; i < n; ++i) {
      if (sorted[i].first == sorted[i - 1].first) {
        return absl::InvalidArgumentError(absl::StrCat(
            "block id ", sorted[i].first, " is listed twice (block_ids[", sorted[i - 1].second,
            "] and block_ids[", sorted[i].second, "]); a scatter needs distinct blocks"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GatherBlocksCpu(const PagedKvLayout& layout, const void* k_cache, const void* v_cache,
                             const int32_t* block_ids, int n, void* out) {
  if (absl::Status s = ValidateBlockOp("GatherBlocksCpu", layout, k_cache, v_cache, block_ids, n,
                                       out, /*reject_duplicates=*/false);
      !s.ok()) {
    return s;
  }
  const size_t block = layout.BlockBytes();
  const size_t stride = layout.BlockStride();
  const auto* k = static_cast<const unsigned char*>(k_cache);
  const auto* v = static_cast<const unsigned char*>(v_cache);
  auto* dst = static_cast<unsigned char*>(out);
  for (int i = 0; i < n; ++i) {
    const size_t offset = static_cast<size_t>(block_ids[i]) * stride;
    std::memcpy(dst, k + offset, block);
    std::memcpy(dst + block, v + offset, block);
    dst += 2 * block;
  }
  return absl::OkStatus();
}

absl::Status ScatterBlocksCpu(const PagedKvLayout& layout, const void* in, const int32_t* block_ids,
                              int n, void* k_cache, void* v_cache) {
  if (absl::Status s = ValidateBlockOp("ScatterBlocksCpu", layout, k_cache, v_cache, block_ids, n,
                                       in, /*reject_duplicates=*/true);
      !s.ok()) {
    return s;
  }
  const size_t block = layout.BlockBytes();
  const size_t stride = layout.BlockStride();
  auto* k = static_cast<unsigned char*>(k_cache);
  auto* v = static_cast<unsigned char*>(v_cache);
  const auto* src = static_cast<const unsigned char*>(in);
  for (int i = 0; i < n; ++i) {
    const size_t offset = static_cast<size_t>(block_ids[i]) * stride;
    std::memcpy(k + offset, src, block);
    std::memcpy(v + offset, src + block, block);
    src += 2 * block;
  }
  return absl::OkStatus();
}

absl::Status BatchCopyCpu(const CopyRegion* regions, int n) {
  if (absl::Status s = internal::ValidateRegions(regions, n); !s.ok()) return s;
  for (int i = 0; i < n; ++i) {
    if (regions[i].bytes > 0) std::memcpy(regions[i].dst, regions[i].src, regions[i].bytes);
  }
  return absl::OkStatus();
}

absl::Status AppendGatherRegions(const PagedKvLayout& layout, const void* k_cache,
                                 const void* v_cache, const int32_t* block_ids, int n, void* out,
                                 std::vector<CopyRegion>* regions) {
  if (absl::Status s = ValidateBlockOp("GatherBlocks", layout, k_cache, v_cache, block_ids, n, out,
                                       /*reject_duplicates=*/false);
      !s.ok()) {
    return s;
  }
  AppendBlockCopies(layout, k_cache, v_cache, block_ids, n, out, /*to_buffer=*/true, regions);
  return absl::OkStatus();
}

absl::Status AppendScatterRegions(const PagedKvLayout& layout, const void* in,
                                  const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                                  std::vector<CopyRegion>* regions) {
  if (absl::Status s = ValidateBlockOp("ScatterBlocks", layout, k_cache, v_cache, block_ids, n, in,
                                       /*reject_duplicates=*/true);
      !s.ok()) {
    return s;
  }
  AppendBlockCopies(layout, k_cache, v_cache, block_ids, n, in, /*to_buffer=*/false, regions);
  return absl::OkStatus();
}

namespace internal {

absl::Status ValidateRegions(const CopyRegion* regions, int n) {
  if (n < 0)
    return absl::InvalidArgumentError(absl::StrCat("region count n must be >= 0, got ", n));
  if (n > 0 && regions == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regions is null with n=", n));
  }
  for (int i = 0; i < n; ++i) {
    if (regions[i].bytes > 0 && (regions[i].src == nullptr || regions[i].dst == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("regions[", i, "] has bytes=", regions[i].bytes, " but a null ",
                       regions[i].src == nullptr ? "src" : "dst"));
    }
  }
  return absl::OkStatus();
}

std::vector<CopyRegion> SplitIntoChunks(const CopyRegion* regions, size_t n, size_t max_chunk) {
  std::vector<CopyRegion> chunks;
  chunks.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto* src = static_cast<const unsigned char*>(regions[i].src);
    auto* dst = static_cast<unsigned char*>(regions[i].dst);
    for (size_t done = 0; done < regions[i].bytes; done += max_chunk) {
      chunks.push_back({src + done, dst + done, std::min(max_chunk, regions[i].bytes - done)});
    }
  }
  return chunks;
}

}  // namespace internal
}  // namespace granary::device
