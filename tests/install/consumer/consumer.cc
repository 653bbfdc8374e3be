// Puts and gets one value, and two paged-KV blocks, through an installed libgranary.so.
// Usage: consumer MASTER_HOST:PORT
#include <cstdio>
#include <string>
#include <vector>

#include "granary/client.h"
#include "granary/error_reason.h"
#include "granary/paged_kv.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MASTER_HOST:PORT\n", argv[0]);
    return 2;
  }
  granary::ClientOptions options;
  options.master_server_address = argv[1];
  auto client = granary::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "create: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const std::string value(1 << 20, 'g');
  if (absl::Status st = (*client)->Put("consumer/key", value); !st.ok()) {
    std::fprintf(stderr, "put: %s\n", st.ToString().c_str());
    return 1;
  }
  auto got = (*client)->Get("consumer/key");
  if (!got.ok() || *got != value) {
    std::fprintf(stderr, "get: %s\n", got.ok() ? "wrong bytes" : got.status().ToString().c_str());
    return 1;
  }
  // The public error-reason helpers are part of the library too.
  if (granary::ErrorReasonOf(absl::OkStatus()) != granary::ErrorReason::kNone ||
      std::string(granary::ErrorReasonName(granary::ErrorReason::kQuotaExceeded)) !=
          "QUOTA_EXCEEDED") {
    std::fprintf(stderr, "error reasons: wrong answer\n");
    return 1;
  }
  // Paged KV on top of the client (granary/paged_kv.h): blocks 1 and 3 of a host cache of
  // 4 blocks of 16 bytes round trip into zeroed caches, and blocks 0 and 2 stay zero.
  granary::PagedKvCache cache;
  cache.num_blocks = 4;
  cache.block_size = 2;
  cache.num_heads = 1;
  cache.head_dim = 4;
  cache.elem_bytes = 2;
  std::string k(64, '\0'), v(64, '\0');
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<char>('a' + i % 26);
    v[i] = static_cast<char>('A' + i % 26);
  }
  std::string k2(64, '\0'), v2(64, '\0');
  granary::PagedKv paged(**client);
  cache.k_cache = k.data();
  cache.v_cache = v.data();
  const std::vector<std::vector<int32_t>> blocks = {{1, 3}};
  const absl::Status kv_put = paged.Put({"consumer/kv"}, cache, blocks)[0];
  cache.k_cache = k2.data();
  cache.v_cache = v2.data();
  const absl::Status kv_get = kv_put.ok() ? paged.Get({"consumer/kv"}, cache, blocks)[0] : kv_put;
  auto listed = [](const std::string& full) {  // blocks 1 and 3 of `full`, the others zero
    std::string only(full.size(), '\0');
    only.replace(16, 16, full, 16, 16);
    only.replace(48, 16, full, 48, 16);
    return only;
  };
  if (!kv_get.ok() || k2 != listed(k) || v2 != listed(v)) {
    std::fprintf(stderr, "paged kv: %s\n", kv_get.ok() ? "wrong bytes" : kv_get.ToString().c_str());
    return 1;
  }
  std::printf("consumer: 1 MiB put and get, and paged KV, through the installed granary::client\n");
  return 0;
}
