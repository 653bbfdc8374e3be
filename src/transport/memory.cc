#include "transport/memory.h"

#include "absl/strings/str_cat.h"

namespace granary::transport {

absl::StatusOr<std::unique_ptr<MemoryRegion>> MemoryRegion::Create(Context* ctx, void* addr,
                                                                   size_t len, bool cuda) {
  if (addr == nullptr || len == 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot register ", len, " bytes at address ",
                                                   reinterpret_cast<uintptr_t>(addr)));
  }
  if (cuda && !ctx->SupportsCudaMemory()) {
    return absl::FailedPreconditionError(
        "this UCX build has no CUDA support: GPU memory cannot be registered (install a UCX built "
        "with --with-cuda, and include cuda_copy,cuda_ipc in UCX_TLS if it is set)");
  }
  ucp_mem_map_params_t p = {};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = addr;
  p.length = len;
  if (cuda) {
    p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(ctx->handle(), &p, &memh);
  if (st != UCS_OK) return UcsError(st, absl::StrCat("registering ", len, " bytes with UCX"));
  if (cuda) {
    // UCX must have seen CUDA memory: a region it took for host memory would be touched by
    // its shared-memory, cma and tcp paths from the CPU (NIXL checks the same after mapping).
    ucp_mem_attr_t attr = {};
    attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
    st = ucp_mem_query(memh, &attr);
    if (st != UCS_OK || attr.mem_type != UCS_MEMORY_TYPE_CUDA) {
      ucp_mem_unmap(ctx->handle(), memh);
      return absl::FailedPreconditionError(absl::StrCat(
          "UCX registered the ", len, " bytes at ", reinterpret_cast<uintptr_t>(addr), " as ",
          st != UCS_OK ? "memory of an unknown type" : ucs_memory_type_names[attr.mem_type],
          ", not as CUDA memory"));
    }
  }
  return std::unique_ptr<MemoryRegion>(new MemoryRegion(ctx, memh, addr, len));
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> MemoryRegion::Allocate(Context* ctx, size_t len) {
  if (len == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  ucp_mem_map_params_t p = {};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                 UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  p.address = nullptr;
  p.length = len;
  p.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(ctx->handle(), &p, &memh);
  if (st != UCS_OK) return UcsError(st, absl::StrCat("allocating ", len, " bytes through UCX"));
  ucp_mem_attr_t attr = {};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucp_mem_query(memh, &attr);
  if (st != UCS_OK) {
    ucp_mem_unmap(ctx->handle(), memh);
    return UcsError(st, "querying memory UCX allocated");
  }
  return std::unique_ptr<MemoryRegion>(new MemoryRegion(ctx, memh, attr.address, len));
}

MemoryRegion::~MemoryRegion() { ucp_mem_unmap(ctx_->handle(), memh_); }

absl::StatusOr<std::string> MemoryRegion::PackRkey() const {
  void* buf = nullptr;
  size_t size = 0;
  ucs_status_t st = ucp_rkey_pack(ctx_->handle(), memh_, &buf, &size);
  if (st != UCS_OK) return UcsError(st, "packing a UCX remote key");
  std::string out(static_cast<const char*>(buf), size);
  ucp_rkey_buffer_release(buf);
  return out;
}

}  // namespace granary::transport
