#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::master {

// Bearer-token check for the mutating admin endpoints (--admin_token_file). Immutable after
// Create; thread-safe. With no token configured every request is allowed (the default, for a
// trusted network); with one, a request must carry "Authorization: Bearer <token>".
class AdminAuth {
 public:
  // Empty path: no token. Otherwise the file's content, with surrounding whitespace removed,
  // is the token; a missing, unreadable or empty file is an error naming the path.
  static absl::StatusOr<AdminAuth> FromFile(const std::string& path);
  static AdminAuth None() { return AdminAuth(""); }

  bool enabled() const { return !token_.empty(); }
  // True when no token is configured or the Authorization header carries it. The comparison
  // takes the same time wherever the first difference is.
  bool Allows(absl::string_view authorization_header) const;

 private:
  explicit AdminAuth(std::string token) : token_(std::move(token)) {}
  std::string token_;
};

}  // namespace granary::master
