#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::transport {

// Maps a UCX status to an absl::Status with `what` in front of UCX's own words.
[[nodiscard]] absl::Status UcsError(ucs_status_t st, absl::string_view what);

// Owns one ucp_context (features: RMA, active messages, wakeup). Thread-safe: its workers may
// live on different threads. Outlives every Worker and MemoryRegion made from it.
class Context {
 public:
  // overrides: UCX configuration keys without the UCX_ prefix ("TLS" -> "tcp"), applied on top of
  // the environment.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Context>> Create(
      const std::string& name,
      const std::vector<std::pair<std::string, std::string>>& overrides = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucp_context_h handle() const { return context_; }
  // The network transport resources UCX opened ("tcp/lo", "rc_mlx5/mlx5_0:1"), read back from
  // ucp_context_print_info; memory transports (shm, cma, self) are left out.
  std::vector<std::string> NetResources() const;
  // True when this UCX build can register CUDA memory.
  bool SupportsCudaMemory() const;

 private:
  explicit Context(ucp_context_h c) : context_(c) {}
  ucp_context_h context_;
};

}  // namespace granary::transport
