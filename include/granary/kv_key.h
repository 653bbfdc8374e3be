#pragma once

// Structured KV keys (docs/architecture.md section 4): inference engines key KV blocks by model,
// hash scheme, optional LoRA adapter and prefix hash. These helpers turn such a tuple into one
// canonical Granary key and back.
//
// Encoding (format version 1), human-readable and length-prefixed so that no field content can
// forge a boundary:
//
//   "kv1/" + len(model) + ":" + model + "/" + len(hash_scheme) + ":" + hash_scheme + "/"
//          + ("-" if no adapter, else len(adapter_id) + ":" + adapter_id) + "/"
//          + len(prefix_hash) + ":" + prefix_hash
//
// Lengths are decimal byte counts with no leading zeros; field contents are raw bytes (any
// byte, NUL included, is allowed). Examples:
//
//   {"llama-3-8b", "sha256", none,      "ab12"} -> "kv1/10:llama-3-8b/6:sha256/-/4:ab12"
//   {"llama-3-8b", "sha256", "lora/fr", "ab12"} -> "kv1/10:llama-3-8b/6:sha256/7:lora/fr/4:ab12"
//
// An absent adapter is "-"; a present adapter always starts with a digit, and a present but
// empty adapter ("0:") is invalid, so absent and empty never collide.
//
// Every key of one (model, hash_scheme, adapter_id) starts with KvKeyPrefix(...) — the encoding
// up to and including the "/" before the prefix_hash length — and, because the encoding is
// self-delimiting, no other triple's key does. `granary ls <prefix>` and List(prefix) therefore
// find exactly the blocks of one model/scheme/adapter.
//
// All functions are pure and thread-safe. Cost: EncodeKvKey and KvKeyPrefix make one allocation
// (the result, reserved at its exact size); DecodeKvKey copies each field once.

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary {

// Largest model, hash_scheme, adapter_id or prefix_hash, in bytes.
inline constexpr size_t kKvKeyMaxFieldBytes = 1024;
// Largest encoded key, in bytes: Granary's key limit.
inline constexpr size_t kKvKeyMaxEncodedBytes = 4096;

struct KvKey {
  std::string model;                      // e.g. "llama-3-8b"; required.
  std::string hash_scheme;                // how prefix_hash was computed, e.g. "sha256"; required.
  std::optional<std::string> adapter_id;  // LoRA adapter; absent for the base model.
  std::string prefix_hash;                // hash of the token prefix this block ends; required.

  bool operator==(const KvKey&) const = default;
};

// The canonical encoding above. Total and injective over all KvKeys, valid or not; callers that
// take a KvKey from outside should ValidateKvKey first, because DecodeKvKey only accepts the
// encodings of valid keys. Decode(Encode(k)) == k exactly when ValidateKvKey(k) is OK.
std::string EncodeKvKey(const KvKey& k);

// Inverse of EncodeKvKey. INVALID_ARGUMENT, naming what is wrong and where, for any input that
// is not EncodeKvKey of a valid key: wrong version prefix, missing separator, non-digit or
// zero-padded length, length past the end, trailing bytes, or a decoded key that fails
// ValidateKvKey. Never reads outside `encoded`.
[[nodiscard]] absl::StatusOr<KvKey> DecodeKvKey(absl::string_view encoded);

// OK when model, hash_scheme and prefix_hash are non-empty, adapter_id (if present) is
// non-empty, every field is at most kKvKeyMaxFieldBytes and the encoding is at most
// kKvKeyMaxEncodedBytes. Otherwise INVALID_ARGUMENT naming the field.
[[nodiscard]] absl::Status ValidateKvKey(const KvKey& k);

// The common prefix of every encoded key of (model, hash_scheme, adapter_id):
// "kv1/<len>:<model>/<len>:<hash_scheme>/<adapter part>/".
std::string KvKeyPrefix(absl::string_view model, absl::string_view hash_scheme,
                        const std::optional<std::string>& adapter_id);

}  // namespace granary
