#include "granary/kv_key.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/messages.h"

namespace granary {

static_assert(kKvKeyMaxEncodedBytes == proto::kMaxKeyBytes,
              "a structured KV key must fit Granary's key limit exactly");

namespace {

constexpr absl::string_view kVersion = "kv1/";
constexpr char kSep = '/';
constexpr char kLenEnd = ':';
constexpr absl::string_view kNoAdapter = "-";  // the adapter part of a base-model key
// How much of an offending value an error message quotes.
constexpr size_t kExcerptBytes = 48;

// The first kExcerptBytes of `s`, C-escaped and quoted, for error messages.
std::string Excerpt(absl::string_view s) {
  const bool cut = s.size() > kExcerptBytes;
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kExcerptBytes)), cut ? "\"..." : "\"");
}

size_t DecimalDigits(size_t n) {
  size_t d = 1;
  for (; n >= 10; n /= 10) ++d;
  return d;
}

// Bytes of "<len>:<field>".
size_t FieldBytes(absl::string_view f) { return DecimalDigits(f.size()) + 1 + f.size(); }

size_t PrefixBytes(absl::string_view model, absl::string_view hash_scheme,
                   const std::optional<std::string>& adapter_id) {
  return kVersion.size() + FieldBytes(model) + 1 + FieldBytes(hash_scheme) + 1 +
         (adapter_id ? FieldBytes(*adapter_id) : kNoAdapter.size()) + 1;
}

void AppendField(std::string* out, absl::string_view f) { absl::StrAppend(out, f.size(), ":", f); }

void AppendPrefix(std::string* out, absl::string_view model, absl::string_view hash_scheme,
                  const std::optional<std::string>& adapter_id) {
  out->append(kVersion.data(), kVersion.size());
  AppendField(out, model);
  out->push_back(kSep);
  AppendField(out, hash_scheme);
  out->push_back(kSep);
  if (adapter_id) {
    AppendField(out, *adapter_id);
  } else {
    out->append(kNoAdapter.data(), kNoAdapter.size());
  }
  out->push_back(kSep);
}

absl::Status CheckField(absl::string_view name, absl::string_view value) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat("kv key ", name, " is empty"));
  if (value.size() > kKvKeyMaxFieldBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv key ", name, " is ", value.size(),
                                                   " bytes, over the ", kKvKeyMaxFieldBytes,
                                                   "-byte field limit: ", Excerpt(value)));
  }
  return absl::OkStatus();
}

// A strict left-to-right reader over an encoded key. Every access is bounds-checked against
// in_; errors name the field and the byte offset where parsing stopped.
class Parser {
 public:
  explicit Parser(absl::string_view in) : in_(in) {}

  bool AtEnd() const { return pos_ == in_.size(); }
  bool Peek(char c) const { return pos_ < in_.size() && in_[pos_] == c; }
  bool IsDigitAt(size_t i) const { return i < in_.size() && in_[i] >= '0' && in_[i] <= '9'; }

  bool Consume(absl::string_view literal) {
    if (in_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::Status Expect(char c, absl::string_view after) {
    if (!Peek(c)) return Error(absl::StrCat("expected '", std::string(1, c), "' after ", after));
    ++pos_;
    return absl::OkStatus();
  }

  // Reads "<len>:<bytes>" and returns the bytes.
  absl::StatusOr<absl::string_view> Field(absl::string_view name) {
    const size_t start = pos_;
    if (Peek('0') && IsDigitAt(pos_ + 1)) {
      return Error(absl::StrCat("length of ", name, " has a leading zero"));
    }
    size_t len = 0;
    while (IsDigitAt(pos_)) {
      len = len * 10 + static_cast<size_t>(in_[pos_] - '0');
      ++pos_;
      // No field longer than the key limit can fit; stopping here keeps len far from overflow.
      if (len > kKvKeyMaxEncodedBytes) {
        return Error(absl::StrCat("length of ", name, " exceeds the ", kKvKeyMaxEncodedBytes,
                                  "-byte key limit"));
      }
    }
    if (pos_ == start) return Error(absl::StrCat("expected a decimal length of ", name));
    if (!Peek(kLenEnd)) return Error(absl::StrCat("expected ':' after the length of ", name));
    ++pos_;
    if (len > in_.size() - pos_) {
      return Error(absl::StrCat("length ", len, " of ", name, " runs past the end (",
                                in_.size() - pos_, " bytes left)"));
    }
    absl::string_view value = in_.substr(pos_, len);
    pos_ += len;
    return value;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed kv key at byte ", pos_, ": ", what, ": ", Excerpt(in_)));
  }

 private:
  absl::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeKvKey(const KvKey& k) {
  std::string out;
  out.reserve(PrefixBytes(k.model, k.hash_scheme, k.adapter_id) + FieldBytes(k.prefix_hash));
  AppendPrefix(&out, k.model, k.hash_scheme, k.adapter_id);
  AppendField(&out, k.prefix_hash);
  return out;
}

std::string KvKeyPrefix(absl::string_view model, absl::string_view hash_scheme,
                        const std::optional<std::string>& adapter_id) {
  std::string out;
  out.reserve(PrefixBytes(model, hash_scheme, adapter_id));
  AppendPrefix(&out, model, hash_scheme, adapter_id);
  return out;
}

absl::Status ValidateKvKey(const KvKey& k) {
  if (auto s = CheckField("model", k.model); !s.ok()) return s;
  if (auto s = CheckField("hash_scheme", k.hash_scheme); !s.ok()) return s;
  if (k.adapter_id) {
    if (k.adapter_id->empty()) {
      return absl::InvalidArgumentError(
          "kv key adapter_id is present but empty (leave it unset for the base model)");
    }
    if (auto s = CheckField("adapter_id", *k.adapter_id); !s.ok()) return s;
  }
  if (auto s = CheckField("prefix_hash", k.prefix_hash); !s.ok()) return s;
  const size_t total =
      PrefixBytes(k.model, k.hash_scheme, k.adapter_id) + FieldBytes(k.prefix_hash);
  if (total > kKvKeyMaxEncodedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv key encodes to ", total,
                                                   " bytes, over Granary's ", kKvKeyMaxEncodedBytes,
                                                   "-byte key limit"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvKey> DecodeKvKey(absl::string_view encoded) {
  if (encoded.size() > kKvKeyMaxEncodedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("encoded kv key is ", encoded.size(),
                                                   " bytes, over Granary's ", kKvKeyMaxEncodedBytes,
                                                   "-byte key limit"));
  }
  Parser p(encoded);
  if (!p.Consume(kVersion)) return p.Error("expected the version prefix \"kv1/\"");

  KvKey k;
  GRANARY_ASSIGN_OR_RETURN(auto model, p.Field("model"));
  GRANARY_RETURN_IF_ERROR(p.Expect(kSep, "model"));
  GRANARY_ASSIGN_OR_RETURN(auto scheme, p.Field("hash_scheme"));
  GRANARY_RETURN_IF_ERROR(p.Expect(kSep, "hash_scheme"));
  if (!p.Consume(kNoAdapter)) {
    GRANARY_ASSIGN_OR_RETURN(auto adapter, p.Field("adapter_id"));
    k.adapter_id.emplace(adapter);
  }
  GRANARY_RETURN_IF_ERROR(p.Expect(kSep, "adapter_id"));
  GRANARY_ASSIGN_OR_RETURN(auto prefix_hash, p.Field("prefix_hash"));
  if (!p.AtEnd()) return p.Error("trailing bytes after prefix_hash");

  k.model = std::string(model);
  k.hash_scheme = std::string(scheme);
  k.prefix_hash = std::string(prefix_hash);
  if (auto s = ValidateKvKey(k); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "encoded kv key decodes to an invalid key: ", s.message(), "; input ", Excerpt(encoded)));
  }
  return k;
}

}  // namespace granary
