#include "master/admin_auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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
  return AdminAuth(std::move(token));
}

bool AdminAuth::Allows(absl::string_view header) const {
  if (token_.empty()) return true;
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(header, kBearer)) return false;
  absl::string_view given = header.substr(kBearer.size());
  // Constant time in the token's content: every byte is compared whatever the lengths.
  unsigned char diff = given.size() == token_.size() ? 0 : 1;
  for (size_t i = 0; i < token_.size(); ++i) {
    unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(token_[i]);
  }
  return diff == 0;
}

}  // namespace granary::master
