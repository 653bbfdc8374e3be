// libFuzzer target: the master admin API's PUT /api/v1/tenant_quotas body parser.
// Invariants: never crashes or throws; on OK the quota (and max_entries, when set) is in
// 1..2^63-1.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "master/admin_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  uint64_t quota = 0;
  std::optional<uint64_t> max_entries;
  absl::Status st = granary::master::ParseQuotaBody(body, &quota, &max_entries);
  if (!st.ok()) return 0;
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
