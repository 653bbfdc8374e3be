#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/range.h"
#include "transport/context.h"

namespace granary::transport {

// A memory range registered with UCX (ucp_mem_map). Owns the registration, not the memory.
// Immutable after Create; safe to share across threads. Destroy before the Context.
class MemoryRegion {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MemoryRegion>> Create(Context* ctx,
                                                                            void* addr, size_t len,
                                                                            bool cuda = false);
  // Host memory that UCX allocates itself (UCP_MEM_MAP_ALLOCATE), and owns: unmapping frees it.
  // UCX places it in shared memory (sysv or posix) when it can, so a peer on the same host
  // maps it and reads or writes it with plain loads and stores instead of a system call per
  // transfer (cma).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MemoryRegion>> Allocate(Context* ctx,
                                                                              size_t len);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const { return addr_; }
  size_t length() const { return length_; }
  ucp_mem_h memh() const { return memh_; }
  bool Contains(const void* p, size_t n) const {
    return common::RangeWithin(reinterpret_cast<uintptr_t>(addr_), length_,
                               reinterpret_cast<uintptr_t>(p), n);
  }
  // The packed remote key a peer needs to read or write this range.
  [[nodiscard]] absl::StatusOr<std::string> PackRkey() const;

 private:
  MemoryRegion(Context* ctx, ucp_mem_h memh, void* addr, size_t len)
      : ctx_(ctx), memh_(memh), addr_(addr), length_(len) {}
  Context* ctx_;
  ucp_mem_h memh_;
  void* addr_;
  size_t length_;
};

}  // namespace granary::transport
