// libFuzzer target: the master admin API's PUT /api/v1/tenant_quotas body parser.
// Invariants: never crashes or throws; an error's message is valid UTF-8 whatever the body
// held; on OK the quota (and max_entries, when set) is in 1..2^63-1 (pool_spill is a plain bool
// when present).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "common/utf8.h"
#include "master/admin_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<granary::master::QuotaBody> parsed = granary::master::ParseQuotaBody(body);
  if (!parsed.ok()) {
    if (!granary::common::IsValidUtf8(parsed.status().message())) {
      std::fprintf(stderr, "error message is not UTF-8\n");
      std::abort();
    }
    return 0;
  }
  const uint64_t quota = parsed->quota;
  const std::optional<uint64_t>& max_entries = parsed->max_entries;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (quota < 1 || quota > kMax) {
    std::fprintf(stderr, "accepted quota %llu outside 1..2^63-1\n", (unsigned long long)quota);
    std::abort();
  }
  if (max_entries.has_value() && (*max_entries < 1 || *max_entries > kMax)) {
    std::fprintf(stderr, "accepted max_entries %llu outside 1..2^63-1\n",
                 (unsigned long long)*max_entries);
    std::abort();
  }
  return 0;
}
