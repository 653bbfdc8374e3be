#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace granary::common {

// SHA-256 of `data` as 64 lowercase hex characters (OpenSSL libcrypto, EVP_sha256). One hash
// and one 64-byte string per call; meant for credentials, not for the data path.
std::string Sha256Hex(absl::string_view data);

// True when a and b hold the same bytes. For secrets: when the lengths are equal, the time
// taken does not depend on where the first difference is (OpenSSL CRYPTO_memcmp). The lengths
// themselves are not hidden, so compare fixed-size values (hashes).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace granary::common
