// libFuzzer target: structured KV key decoding.
// Invariants: when DecodeKvKey accepts an input, the key is valid, EncodeKvKey of it equals the
// input exactly, and the input starts with KvKeyPrefix of its triple (abort otherwise).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "granary/kv_key.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto k = granary::DecodeKvKey(in);
  if (!k.ok()) return 0;
  if (absl::Status st = granary::ValidateKvKey(*k); !st.ok()) {
    std::fprintf(stderr, "DecodeKvKey returned an invalid key: %s\n", st.ToString().c_str());
    std::abort();
  }
  const std::string enc = granary::EncodeKvKey(*k);
  if (enc != in) {
    std::fprintf(stderr, "EncodeKvKey(DecodeKvKey(x)) != x\n");
    std::abort();
  }
  const std::string prefix = granary::KvKeyPrefix(k->model, k->hash_scheme, k->adapter_id);
  if (!absl::StartsWith(in, prefix)) {
    std::fprintf(stderr, "key does not start with its KvKeyPrefix\n");
    std::abort();
  }
  return 0;
}
