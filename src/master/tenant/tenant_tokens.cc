#include "master/tenant/tenant_tokens.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"
#include "master/tenant/policy.h"

namespace granary::master::tenant {

absl::StatusOr<TokenHashes> ParseTokensFile(absl::string_view text, absl::string_view path) {
  TokenHashes out;
  std::map<std::string, size_t> first_line;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tenant_tokens_file '", path, "' line ", line_no, ": ", why));
    };
    absl::string_view body = absl::StripAsciiWhitespace(line);
    if (body.empty() || body[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(body, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() == 1) {
      // Perhaps a token pasted on its own: name its length, not its content.
      return bad(absl::StrCat("expected '<tenant> <sha256hex>', got one field of ",
                              fields[0].size(), " characters"));
    }
    if (fields.size() != 2) {
      return bad(absl::StrCat("expected '<tenant> <sha256hex>', got ", fields.size(),
                              " fields for '", fields[0], "'"));
    }
    if (absl::Status st = ValidateTenantId(fields[0]); !st.ok()) return bad(st.message());
    absl::StatusOr<std::string> hex = NormalizeTokenSha256(fields[1]);
    if (!hex.ok()) {
      return bad(absl::StrCat("tenant '", fields[0], "': ", hex.status().message()));
    }
    std::string tenant(fields[0]);
    auto [it, fresh] = first_line.emplace(tenant, line_no);
    if (!fresh) {
      return bad(
          absl::StrCat("tenant '", tenant, "' is given twice (also on line ", it->second, ")"));
    }
    out.emplace(std::move(tenant), std::move(*hex));
  }
  return out;
}

absl::StatusOr<TokenHashes> LoadTokensFile(const std::string& path) {
  if (path.empty()) return TokenHashes{};
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read --tenant_tokens_file '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTokensFile(ss.str(), path);
}

std::optional<std::string> TokenCheck::ExpectedHash(const std::string& tenant) const {
  if (auto it = file_hashes_.find(tenant); it != file_hashes_.end()) return it->second;
  if (policy_hash_) {
    std::optional<std::string> h = policy_hash_(tenant);
    if (h.has_value() && !h->empty()) return h;
  }
  return std::nullopt;
}

absl::Status TokenCheck::Check(const std::string& tenant, absl::string_view token) const {
  std::optional<std::string> expected = ExpectedHash(tenant);
  if (!expected.has_value()) {
    if (!require_) return absl::OkStatus();
    return absl::UnauthenticatedError(
        absl::StrCat("tenant '", tenant,
                     "' requires a token, and none is configured for it on the master "
                     "(--require_tenant_tokens)"));
  }
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "tenant '", tenant, "' requires a token (set tenant_token or GRANARY_TENANT_TOKEN)"));
  }
  if (!common::ConstantTimeEquals(common::Sha256Hex(token), *expected)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the token for tenant '", tenant, "' does not match"));
  }
  return absl::OkStatus();
}

}  // namespace granary::master::tenant
