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
  [[nodiscard]] static absl::StatusOr<AdminAuth> FromFile(const std::string& path);
  static AdminAuth None() { return AdminAuth(""); }

  bool enabled() const { return !token_sha256_.empty(); }
  // True when no token is configured or the Authorization header carries it. The SHA-256 of
  // the given token is compared with the token's in constant time (ConstantTimeEquals, as for
  // tenant tokens), so neither the position of a difference nor the token's length shows.
  bool Allows(absl::string_view authorization_header) const;

 private:
  explicit AdminAuth(std::string token_sha256) : token_sha256_(std::move(token_sha256)) {}
  std::string token_sha256_;  // empty: no token
};

}  // namespace granary::master
