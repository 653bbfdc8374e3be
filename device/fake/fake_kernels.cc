// The fake backend's kernels (fake_kernels.h).

#include "device/fake/fake_kernels.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace granary::device::internal {
namespace {

// How many bytes of each cache one gather or scatter may touch.
size_t CacheBytes(const PagedKvLayout& layout) {
  return static_cast<size_t>(layout.num_blocks - 1) * layout.BlockStride() + layout.BlockBytes();
}

}  // namespace

absl::Status FakeKernels::GatherBlocks(int device, const PagedKvLayout& layout, const void* k_cache,
                                       const void* v_cache, const int32_t* block_ids, int n,
                                       void* out, void* stream) {
  return MoveBlocks("GatherBlocksGpu", device, layout, block_ids, n, /*scatter=*/false, out,
                    k_cache, v_cache, stream);
}

absl::Status FakeKernels::ScatterBlocks(int device, const PagedKvLayout& layout, const void* in,
                                        const int32_t* block_ids, int n, void* k_cache,
                                        void* v_cache, void* stream) {
  return MoveBlocks("ScatterBlocksGpu", device, layout, block_ids, n, /*scatter=*/true, in, k_cache,
                    v_cache, stream);
}

absl::Status FakeKernels::MoveBlocks(const char* op, int device, const PagedKvLayout& layout,
                                     const int32_t* block_ids, int n, bool scatter,
                                     const void* buffer, const void* k_cache, const void* v_cache,
                                     void* stream) {
  absl::StatusOr<BlockOpViews> views =
      PrepareBlockOp(op, device, layout, block_ids, n, scatter, buffer, k_cache, v_cache);
  if (!views.ok() || n == 0) return views.status();
  return LaunchFake([&] {
    return runtime_.Submit(
        op, stream,
        [this, layout, scatter, views = *views,
         ids = std::vector<int32_t>(block_ids, block_ids + n)] {
          return runtime_.Execute([&] {
            const int count = static_cast<int>(ids.size());
            return scatter
                       ? ScatterBlocksCpu(layout, views.buffer, ids.data(), count, views.k, views.v)
                       : GatherBlocksCpu(layout, views.k, views.v, ids.data(), count, views.buffer);
          });
        });
  });
}

absl::Status FakeKernels::BatchCopy(int device, const CopyRegion* regions, int n, void* stream) {
  if (absl::Status s = runtime_.CheckDevice("BatchCopyGpu", device); !s.ok()) return s;
  return LaunchFake([&] { return runtime_.CopyRegions("BatchCopyGpu", stream, regions, n); });
}

// The CPU reference on the alias views; `out` is written by the stream worker (or before
// return for the default stream). Region data outside fake device memory is host memory, read
// in place (refused in strict pinned mode unless pinned), as for the other kernels.
absl::Status FakeKernels::BatchChecksum(int device, const ChecksumRegion* regions, int n,
                                        uint64_t* out, void* stream) {
  const char* op = "BatchChecksum";
  if (absl::Status s = runtime_.CheckDevice(op, device); !s.ok()) return s;
  if (absl::Status s = ValidateChecksumRegions(regions, n, out); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  if (const PointerInfo info = runtime_.Classify(out); info.kind == MemoryKind::kDevice) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": out ", Addr(out), " is device memory; it must be host memory"));
  }
  const bool strict = runtime_.Strict();
  std::vector<ChecksumRegion> aliased(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (regions[i].bytes == 0) continue;
    const std::string where = absl::StrCat("regions[", i, "].data");
    absl::StatusOr<unsigned char*> data =
        runtime_.Translate(op, where.c_str(), regions[i].data, regions[i].bytes, strict);
    if (!data.ok()) return data.status();
    aliased[i] = {*data, regions[i].bytes};
  }
  return LaunchFake([&] {
    return runtime_.Submit(op, stream, [this, aliased = std::move(aliased), out] {
      return runtime_.Execute(
          [&] { return BatchChecksumCpu(aliased.data(), static_cast<int>(aliased.size()), out); });
    });
  });
}

// The swaps run on the alias with std::atomic_ref: the alias is a shared mapping, so they are
// atomic against another process's fake copies (which are memcpy of whole 8-byte words at
// aligned addresses on x86-64) as CUDA's atomics are against DMA writes.
absl::Status FakeKernels::CompareExchange64(int device, const CasOp64* ops, int n) {
  constexpr const char* kOp = "CompareExchange64";
  if (absl::Status s = runtime_.CheckDevice(kOp, device); !s.ok()) return s;
  if (n < 0 || (n > 0 && ops == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", n, " ops at ", Addr(ops)));
  }
  std::vector<uint64_t*> words(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat("ops[", i, "].p");
    if (reinterpret_cast<uintptr_t>(ops[i].p) % 8 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": ", name, " ", Addr(ops[i].p), " is not 8-byte aligned"));
    }
    if (absl::Status s = runtime_.CheckOnDevice(kOp, name.c_str(), ops[i].p); !s.ok()) return s;
    absl::StatusOr<unsigned char*> at = runtime_.Translate(kOp, name.c_str(), ops[i].p, 8, false);
    if (!at.ok()) return at.status();
    words[i] = reinterpret_cast<uint64_t*>(*at);
  }
  return LaunchFake([&] {
    return runtime_.Execute([&] {
      for (int i = 0; i < n; ++i) {
        uint64_t expected = ops[i].expected;
        std::atomic_ref<uint64_t>(*words[i]).compare_exchange_strong(expected, ops[i].desired,
                                                                     std::memory_order_acq_rel);
      }
      return absl::OkStatus();
    });
  });
}

absl::StatusOr<FakeKernels::BlockOpViews> FakeKernels::PrepareBlockOp(
    const char* op, int device, const PagedKvLayout& layout, const int32_t* block_ids, int n,
    bool scatter, const void* buffer, const void* k_cache, const void* v_cache) {
  if (absl::Status s = runtime_.CheckDevice(op, device); !s.ok()) return s;
  if (absl::Status s = ValidateBlockIds(layout, block_ids, n, /*reject_duplicates=*/scatter);
      !s.ok()) {
    return s;
  }
  BlockOpViews views;
  if (n == 0) return views;
  const bool strict = runtime_.Strict();
  const std::pair<const char*, const void*> caches[] = {{"k_cache", k_cache}, {"v_cache", v_cache}};
  unsigned char** targets[] = {&views.k, &views.v};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<unsigned char*> alias =
        runtime_.Translate(op, caches[i].first, caches[i].second, CacheBytes(layout), strict);
    if (!alias.ok()) return alias.status();
    *targets[i] = *alias;
  }
  absl::StatusOr<unsigned char*> alias =
      runtime_.Translate(op, scatter ? "in" : "out", buffer, layout.GatheredBytes(n), strict);
  if (!alias.ok()) return alias.status();
  views.buffer = *alias;
  return views;
}

}  // namespace granary::device::internal
