#include "master/admin_auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace granary::master {

absl::StatusOr<AdminAuth> AdminAuth::FromFile(const std::string& path) {
  if (path.empty()) return None();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --admin_token_file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--admin_token_file '", path, "' is empty"));
  }
  return AdminAuth(common::Sha256Hex(token));
}

bool AdminAuth::Allows(absl::string_view header) const {
  if (token_sha256_.empty()) return true;
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(header, kBearer)) return false;
  return common::ConstantTimeEquals(common::Sha256Hex(header.substr(kBearer.size())),
                                    token_sha256_);
}

}  // namespace granary::master
