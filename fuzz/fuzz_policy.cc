// libFuzzer target: the tenant policy YAML parser.
// Invariant: when ParsePolicy accepts a document, SerializePolicy of the result parses back to
// an equal Policy (abort otherwise).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "master/tenant/policy.h"

using granary::master::tenant::ParsePolicy;
using granary::master::tenant::SerializePolicy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // yaml-cpp recurses per nesting level; very deep documents exhaust the stack before any
  // Granary code runs. Keep inputs to a size real policies have.
  if (size > 64 * 1024) return 0;
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto p = ParsePolicy(in);
  if (!p.ok()) return 0;
  for (const auto& t : p->tenants) {
    if (p->Find(t.name) != &t) {
      std::fprintf(stderr, "Policy::Find(\"%s\") does not find its own tenant\n", t.name.c_str());
      std::abort();
    }
  }
  const std::string yaml = SerializePolicy(*p);
  auto again = ParsePolicy(yaml);
  if (!again.ok()) {
    std::fprintf(stderr, "serialized policy does not parse: %s\n--- yaml ---\n%s\n",
                 again.status().ToString().c_str(), yaml.c_str());
    std::abort();
  }
  if (!(*again == *p)) {
    std::fprintf(stderr, "policy round trip changed the policy\n--- yaml ---\n%s\n", yaml.c_str());
    std::abort();
  }
  return 0;
}
