#include "master/admin_body.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace granary::master {

using nlohmann::json;

// Reads {"requested_quota_bytes": N, "max_entries": M?, "pool_spill": B?, "default_tier": T?};
// names the bad field.
absl::StatusOr<QuotaBody> ParseQuotaBody(const std::string& body) {
  QuotaBody out;
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("body is not JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "requested_quota_bytes" && it.key() != "max_entries" &&
        it.key() != "pool_spill" && it.key() != "default_tier") {
      return absl::InvalidArgumentError(absl::StrCat("unknown field '", it.key(),
                                                     "' (expected requested_quota_bytes, "
                                                     "max_entries, pool_spill, default_tier)"));
    }
  }
  auto positive = [](const json& v, const char* name, uint64_t* out) -> absl::Status {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be an integer, got ", v.dump()));
    }
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u == 0 || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(name, " ", u, " is outside 1..2^63-1"));
      }
      *out = u;
      return absl::OkStatus();
    }
    int64_t i = v.get<int64_t>();
    if (i <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " ", i, " must be >= 1"));
    *out = static_cast<uint64_t>(i);
    return absl::OkStatus();
  };
  if (!j.contains("requested_quota_bytes")) {
    return absl::InvalidArgumentError("requested_quota_bytes is required");
  }
  if (absl::Status st = positive(j["requested_quota_bytes"], "requested_quota_bytes", &out.quota);
      !st.ok()) {
    return st;
  }
  if (j.contains("max_entries") && !j["max_entries"].is_null()) {
    uint64_t m = 0;
    if (absl::Status st = positive(j["max_entries"], "max_entries", &m); !st.ok()) return st;
    out.max_entries = m;
  }
  if (j.contains("pool_spill")) {
    const json& v = j["pool_spill"];
    if (!v.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool_spill must be true or false, got ", v.dump()));
    }
    out.pool_spill = v.get<bool>();
  }
  if (j.contains("default_tier")) {
    const json& v = j["default_tier"];
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("default_tier must be \"host\", \"gpu\" or \"any\", got ", v.dump()));
    }
    absl::StatusOr<TierPreference> t = ParseTierPreference(v.get<std::string>());
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("default_tier: ", t.status().message()));
    out.default_tier = *t;
  }
  return out;
}

}  // namespace granary::master
