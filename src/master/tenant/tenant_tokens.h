#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::master::tenant {

// tenant -> SHA-256 of its client token (64 lowercase hex characters).
using TokenHashes = std::map<std::string, std::string>;

// Parses the master's --tenant_tokens_file: one `<tenant> <sha256hex>` per line, separated by
// spaces or tabs; blank lines and lines whose first non-blank character is '#' are skipped.
// Hex digits may be upper or lower case (stored lower case). INVALID_ARGUMENT naming `path`,
// the line number and the bad value for: a line without exactly two fields, an invalid tenant
// id, a hash that is not 64 hex digits, a tenant given twice.
[[nodiscard]] absl::StatusOr<TokenHashes> ParseTokensFile(absl::string_view text,
                                                          absl::string_view path);
// Reads and parses the file. An empty path is no file (no entries); an unreadable file is an
// error naming the path.
[[nodiscard]] absl::StatusOr<TokenHashes> LoadTokensFile(const std::string& path);

// Decides whether a client hello may claim a tenant (docs/architecture.md section 5,
// docs/security.md). The expected hash of a tenant is its entry in the tokens file if it has one,
// else the token_sha256 of its policy entry, looked up at each call (so policy reloads and admin
// changes apply to the next hello). With no expected hash the claim is allowed, unless
// `require` (--require_tenant_tokens) is set.
//
// Per call: one SHA-256 of the token, one map lookup, one policy lookup, a 64-byte constant-time
// compare. Copyable; immutable after construction; thread-safe when `policy_hash` is.
class TokenCheck {
 public:
  // The policy's token_sha256 for a tenant, if any (empty string or nullopt: none).
  using PolicyLookup = std::function<std::optional<std::string>(const std::string& tenant)>;

  TokenCheck() = default;  // no tokens anywhere, not required: every claim is allowed
  TokenCheck(TokenHashes file_hashes, bool require, PolicyLookup policy_hash)
      : file_hashes_(std::move(file_hashes)),
        require_(require),
        policy_hash_(std::move(policy_hash)) {}

  // The hash a client of `tenant` must match, if any.
  std::optional<std::string> ExpectedHash(const std::string& tenant) const;
  // OK, or UNAUTHENTICATED naming the tenant (never the token): "tenant 'x' requires a token",
  // "the token for tenant 'x' does not match".
  [[nodiscard]] absl::Status Check(const std::string& tenant, absl::string_view token) const;
  bool require() const { return require_; }

 private:
  TokenHashes file_hashes_;
  bool require_ = false;
  PolicyLookup policy_hash_;
};

}  // namespace granary::master::tenant
