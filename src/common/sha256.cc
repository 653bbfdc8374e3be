#include "common/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/log.h"

namespace granary::common {

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Fails only when OpenSSL cannot allocate its context: not an input error.
  GRANARY_CHECK(EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) == 1)
      << "EVP_Digest(SHA-256) failed";
  GRANARY_CHECK(len == 32) << len;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '\0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace granary::common
