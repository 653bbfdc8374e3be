// libFuzzer target: ParseSize / ParsePositiveSize / FormatSize.
// Invariants: an accepted size is at most 2^63-1, its plain decimal form parses back to the same
// value, and ParsePositiveSize agrees with ParseSize except for 0.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/string_view.h"
#include "common/size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto v = granary::common::ParseSize(in);
  auto p = granary::common::ParsePositiveSize(in);
  if (!v.ok()) {
    if (p.ok()) {
      std::fprintf(stderr, "ParsePositiveSize accepted what ParseSize rejected\n");
      std::abort();
    }
    return 0;
  }
  if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    std::fprintf(stderr, "ParseSize returned %llu > 2^63-1\n", (unsigned long long)*v);
    std::abort();
  }
  if (p.ok() != (*v != 0) || (p.ok() && *p != *v)) {
    std::fprintf(stderr, "ParsePositiveSize disagrees with ParseSize\n");
    std::abort();
  }
  const std::string text = std::to_string(*v);
  auto again = granary::common::ParseSize(text);
  if (!again.ok() || *again != *v) {
    std::fprintf(stderr, "ParseSize(\"%s\") does not give back %llu\n", text.c_str(),
                 (unsigned long long)*v);
    std::abort();
  }
  (void)granary::common::FormatSize(*v);
  return 0;
}
