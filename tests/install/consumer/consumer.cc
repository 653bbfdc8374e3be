// Puts and gets one value through an installed libgranary.so. Usage: consumer MASTER_HOST:PORT
#include <cstdio>
#include <string>

#include "granary/client.h"
#include "granary/error_reason.h"

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
  std::printf("consumer: 1 MiB put and get through the installed granary::client\n");
  return 0;
}
