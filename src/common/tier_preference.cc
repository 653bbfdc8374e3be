#include "common/tier_preference.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace granary::common {

absl::string_view TierPreferenceName(TierPreference t) {
  switch (t) {
    case TierPreference::kHost:
      return "host";
    case TierPreference::kGpu:
      return "gpu";
    case TierPreference::kAny:
      return "any";
    case TierPreference::kDisk:
      return "disk";
  }
  return "unknown";
}

absl::StatusOr<TierPreference> ParseTierPreference(absl::string_view text) {
  for (TierPreference t :
       {TierPreference::kHost, TierPreference::kGpu, TierPreference::kAny, TierPreference::kDisk}) {
    if (text == TierPreferenceName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tier '", absl::CHexEscape(text), "' is not one of host, gpu, any, disk"));
}

}  // namespace granary::common
