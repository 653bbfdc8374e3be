#include "granary/kv_key.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace granary {
namespace {

using Triple = std::tuple<std::string, std::string, std::optional<std::string>>;

KvKey Key(std::string model, std::string scheme, std::optional<std::string> adapter,
          std::string hash) {
  return KvKey{std::move(model), std::move(scheme), std::move(adapter), std::move(hash)};
}

std::string Prefix(const KvKey& k) { return KvKeyPrefix(k.model, k.hash_scheme, k.adapter_id); }

bool StartsWith(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

bool Contains(absl::string_view s, absl::string_view sub) {
  return s.find(sub) != absl::string_view::npos;
}

// Bytes that look like the format's own syntax, plus NUL, newline, UTF-8 and a non-UTF-8 byte.
const std::vector<std::string>& Atoms() {
  static const auto* atoms = new std::vector<std::string>{"a",
                                                          "m",
                                                          "/",
                                                          ":",
                                                          "0",
                                                          "1",
                                                          "9",
                                                          "10",
                                                          "1:",
                                                          "0:",
                                                          "2:ab",
                                                          "kv1/",
                                                          "-",
                                                          "/-/",
                                                          "-/",
                                                          "1:a/",
                                                          "/1:",
                                                          std::string("\0", 1),
                                                          std::string("a\0b", 3),
                                                          "\n",
                                                          " ",
                                                          "\xc3\xa9",          // é
                                                          "\xf0\x9f\x98\x80",  // 😀
                                                          "\xff"};
  return *atoms;
}

std::string RandomField(std::mt19937& rng) {
  const auto& atoms = Atoms();
  std::string f;
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) f += atoms[rng() % atoms.size()];
  return f;
}

// About 2000 distinct valid keys: ~700 distinct (model, scheme, adapter) triples with up to
// three prefix hashes each, every field built from adversarial atoms. Deterministic.
std::vector<KvKey> AdversarialKeys() {
  std::mt19937 rng(20240607);
  std::set<Triple> triples;
  while (triples.size() < 700) {
    std::optional<std::string> adapter;
    if (rng() % 3 != 0) adapter = RandomField(rng);
    triples.emplace(RandomField(rng), RandomField(rng), std::move(adapter));
  }
  std::vector<KvKey> keys;
  for (const auto& [model, scheme, adapter] : triples) {
    std::set<std::string> hashes;
    while (hashes.size() < 3) hashes.insert(RandomField(rng));
    for (const auto& h : hashes) keys.push_back(Key(model, scheme, adapter, h));
  }
  return keys;
}

TEST(KvKeyTest, DocumentedEncodingsAreExact) {
  EXPECT_EQ(EncodeKvKey(Key("llama-3-8b", "sha256", std::nullopt, "ab12")),
            "kv1/10:llama-3-8b/6:sha256/-/4:ab12");
  EXPECT_EQ(EncodeKvKey(Key("llama-3-8b", "sha256", "lora/fr", "ab12")),
            "kv1/10:llama-3-8b/6:sha256/7:lora/fr/4:ab12");
  // Lengths count bytes, not characters; contents are raw (NUL, newline).
  EXPECT_EQ(EncodeKvKey(Key("mod\xc3\xa8le", "xxh3", "-", std::string("\0\n", 2))),
            "kv1/7:mod\xc3\xa8le/4:xxh3/1:-/2:" + std::string("\0\n", 2));
  // Syntax inside a field is just bytes.
  EXPECT_EQ(EncodeKvKey(Key("1:a/", "kv1/", ":", "/-/")), "kv1/4:1:a//4:kv1//1::/3:/-/");
  EXPECT_EQ(EncodeKvKey(Key("m", "s", std::nullopt, std::string(1024, 'h'))),
            "kv1/1:m/1:s/-/1024:" + std::string(1024, 'h'));
  EXPECT_EQ(KvKeyPrefix("llama-3-8b", "sha256", std::nullopt), "kv1/10:llama-3-8b/6:sha256/-/");
  EXPECT_EQ(KvKeyPrefix("llama-3-8b", "sha256", "lora/fr"),
            "kv1/10:llama-3-8b/6:sha256/7:lora/fr/");
}

TEST(KvKeyTest, RoundTrips) {
  for (const KvKey& k : {Key("llama-3-8b", "sha256", std::nullopt, "ab12"),
                         Key("llama-3-8b", "sha256", "lora/fr", "ab12"),
                         Key(std::string("\0", 1), "\n", "\xff", "\xf0\x9f\x98\x80")}) {
    ASSERT_TRUE(ValidateKvKey(k).ok()) << ValidateKvKey(k);
    auto d = DecodeKvKey(EncodeKvKey(k));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, k);
  }
}

TEST(KvKeyTest, AdversarialKeysAreInjectiveAndRoundTrip) {
  const std::vector<KvKey> keys = AdversarialKeys();
  ASSERT_GE(keys.size(), 2000u);
  std::map<std::string, size_t> seen;  // encoding -> index of the key that produced it
  for (size_t i = 0; i < keys.size(); ++i) {
    const KvKey& k = keys[i];
    ASSERT_TRUE(ValidateKvKey(k).ok()) << ValidateKvKey(k);
    const std::string e = EncodeKvKey(k);
    auto [it, inserted] = seen.emplace(e, i);
    ASSERT_TRUE(inserted) << "keys " << it->second << " and " << i << " both encode to " << e;
    auto d = DecodeKvKey(e);
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(*d, k) << "encoding " << e;
  }
}

TEST(KvKeyTest, PrefixIsSharedOnlyWithinOneTriple) {
  const std::vector<KvKey> keys = AdversarialKeys();
  std::map<Triple, std::string> prefixes;
  std::vector<std::pair<Triple, std::string>> encoded;
  for (const KvKey& k : keys) {
    const std::string e = EncodeKvKey(k);
    const std::string p = Prefix(k);
    ASSERT_TRUE(StartsWith(e, p)) << e << " does not start with " << p;
    // The prefix ends right before the prefix_hash length.
    ASSERT_EQ(e.substr(p.size()), std::to_string(k.prefix_hash.size()) + ":" + k.prefix_hash);
    Triple t{k.model, k.hash_scheme, k.adapter_id};
    prefixes.emplace(t, p);
    encoded.emplace_back(std::move(t), e);
  }
  ASSERT_GE(prefixes.size(), 700u);
  size_t violations = 0;
  std::string example;
  for (const auto& [t, p] : prefixes) {
    for (const auto& [other, e] : encoded) {
      if (other != t && StartsWith(e, p)) {
        if (violations++ == 0) example = "prefix " + p + " matches key " + e;
      }
    }
  }
  EXPECT_EQ(violations, 0u) << example;
}

TEST(KvKeyTest, AbsentAndPresentAdapterDiffer) {
  const KvKey base = Key("m", "s", std::nullopt, "h");
  const KvKey dash = Key("m", "s", "-", "h");
  const KvKey empty = Key("m", "s", "", "h");
  EXPECT_NE(EncodeKvKey(base), EncodeKvKey(dash));
  EXPECT_NE(EncodeKvKey(base), EncodeKvKey(empty));
  EXPECT_NE(Prefix(base), Prefix(dash));
  EXPECT_FALSE(StartsWith(EncodeKvKey(dash), Prefix(base)));
  EXPECT_FALSE(StartsWith(EncodeKvKey(base), Prefix(dash)));
  EXPECT_TRUE(ValidateKvKey(dash).ok());
  auto d = DecodeKvKey(EncodeKvKey(dash));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->adapter_id, std::optional<std::string>("-"));
  d = DecodeKvKey(EncodeKvKey(base));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->adapter_id.has_value());
}

TEST(KvKeyTest, EmptyFieldsAreRejectedByName) {
  struct Case {
    KvKey key;
    const char* field;
  };
  for (const Case& c : {Case{Key("", "s", std::nullopt, "h"), "model"},
                        Case{Key("m", "", std::nullopt, "h"), "hash_scheme"},
                        Case{Key("m", "s", "", "h"), "adapter_id"},
                        Case{Key("m", "s", std::nullopt, ""), "prefix_hash"}}) {
    absl::Status s = ValidateKvKey(c.key);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(Contains(s.message(), c.field)) << s;
    // Encode is total, but Decode only accepts encodings of valid keys.
    auto d = DecodeKvKey(EncodeKvKey(c.key));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(Contains(d.status().message(), c.field)) << d.status();
  }
}

TEST(KvKeyTest, FieldLimitIs1024Bytes) {
  const std::string ok(kKvKeyMaxFieldBytes, 'x');
  const std::string big(kKvKeyMaxFieldBytes + 1, 'x');
  struct Case {
    KvKey ok_key;
    KvKey big_key;
    const char* field;
  };
  for (const Case& c : {Case{Key(ok, "s", "a", "h"), Key(big, "s", "a", "h"), "model"},
                        Case{Key("m", ok, "a", "h"), Key("m", big, "a", "h"), "hash_scheme"},
                        Case{Key("m", "s", ok, "h"), Key("m", "s", big, "h"), "adapter_id"},
                        Case{Key("m", "s", "a", ok), Key("m", "s", "a", big), "prefix_hash"}}) {
    EXPECT_TRUE(ValidateKvKey(c.ok_key).ok()) << ValidateKvKey(c.ok_key);
    auto d = DecodeKvKey(EncodeKvKey(c.ok_key));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, c.ok_key);

    absl::Status s = ValidateKvKey(c.big_key);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(Contains(s.message(), c.field)) << s;
    EXPECT_TRUE(Contains(s.message(), "1025")) << s;
    d = DecodeKvKey(EncodeKvKey(c.big_key));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(Contains(d.status().message(), c.field)) << d.status();
  }
}

TEST(KvKeyTest, TotalLimitIs4096EncodedBytes) {
  const std::string f(kKvKeyMaxFieldBytes, 'x');
  // "kv1/" + 3 * "1024:" + "998:" + 3 * "/" = 26 bytes of syntax, 3 * 1024 + 998 of content.
  const KvKey at_limit = Key(f, f, f, std::string(998, 'h'));
  ASSERT_EQ(EncodeKvKey(at_limit).size(), 4096u);
  EXPECT_TRUE(ValidateKvKey(at_limit).ok()) << ValidateKvKey(at_limit);
  auto d = DecodeKvKey(EncodeKvKey(at_limit));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, at_limit);

  const KvKey over = Key(f, f, f, std::string(999, 'h'));
  ASSERT_EQ(EncodeKvKey(over).size(), 4097u);
  absl::Status s = ValidateKvKey(over);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "4097")) << s;
  EXPECT_EQ(DecodeKvKey(EncodeKvKey(over)).status().code(), absl::StatusCode::kInvalidArgument);

  const KvKey all_max = Key(f, f, f, f);  // every field legal, too long in all
  ASSERT_EQ(EncodeKvKey(all_max).size(), 4123u);
  s = ValidateKvKey(all_max);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "4123")) << s;
}

struct Malformed {
  const char* name;
  std::string input;
  const char* expect;  // a substring of the error message
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

class KvKeyMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(KvKeyMalformedTest, IsRejectedWithAReason) {
  const Malformed& m = GetParam();
  auto d = DecodeKvKey(m.input);
  ASSERT_FALSE(d.ok()) << "decoded " << m.name;
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(d.status().message(), m.expect))
      << "want \"" << m.expect << "\" in: " << d.status();
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, KvKeyMalformedTest,
    ::testing::Values(
        Malformed{"Empty", "", "version"}, Malformed{"VersionOnlyPartly", "kv1", "version"},
        Malformed{"WrongVersion", "kv2/1:m/1:s/-/1:h", "version"},
        Malformed{"UpperCaseVersion", "KV1/1:m/1:s/-/1:h", "version"},
        Malformed{"VersionOnly", "kv1/", "length of model"},
        Malformed{"LeadingZeroModel", "kv1/01:m/1:s/-/1:h", "leading zero"},
        Malformed{"ZeroZeroLength", "kv1/1:m/1:s/00:/1:h", "leading zero"},
        Malformed{"LeadingZeroPrefixHash", "kv1/1:m/1:s/-/01:h", "leading zero"},
        Malformed{"LengthPastEnd", "kv1/1:m/1:s/-/5:h", "runs past the end"},
        Malformed{"ModelLengthPastEnd", "kv1/30:m/1:s/-/1:h", "runs past the end"},
        Malformed{"TrailingGarbage", "kv1/1:m/1:s/-/1:hx", "trailing"},
        Malformed{"TrailingSlash", "kv1/1:m/1:s/-/1:h/", "trailing"},
        Malformed{"TrailingNul", std::string("kv1/1:m/1:s/-/1:h\0", 18), "trailing"},
        Malformed{"MissingSlashAfterModel", "kv1/1:m1:s/-/1:h", "'/' after model"},
        Malformed{"MissingSlashAfterScheme", "kv1/1:m/1:s-/1:h", "'/' after hash_scheme"},
        Malformed{"MissingSlashAfterAdapter", "kv1/1:m/1:s/-1:h", "'/' after adapter_id"},
        Malformed{"DoubleDashAdapter", "kv1/1:m/1:s/--/1:h", "'/' after adapter_id"},
        Malformed{"MissingColon", "kv1/1m/1:s/-/1:h", "':' after the length of model"},
        Malformed{"NonDigitLength", "kv1/x:m/1:s/-/1:h", "length of model"},
        Malformed{"SignedLength", "kv1/+1:m/1:s/-/1:h", "length of model"},
        Malformed{"SpaceInLength", "kv1/ 1:m/1:s/-/1:h", "length of model"},
        Malformed{"NulInLength", std::string("kv1/1\0:m/1:s/-/1:h", 18), "':' after"},
        Malformed{"MissingPrefixHash", "kv1/1:m/1:s/-/", "length of prefix_hash"},
        Malformed{"MissingAdapterPart", "kv1/1:m/1:s//1:h", "length of adapter_id"},
        Malformed{"HugeLength", "kv1/99999999999999999999:m/1:s/-/1:h",
                  "exceeds the 4096-byte key limit"},
        Malformed{"Length2Pow64Plus1", "kv1/1:m/18446744073709551617:s/-/1:h",
                  "exceeds the 4096-byte key limit"},
        Malformed{"EmptyModel", "kv1/0:/1:s/-/1:h", "model is empty"},
        Malformed{"EmptyAdapter", "kv1/1:m/1:s/0:/1:h", "adapter_id is present but empty"},
        Malformed{"EmptyPrefixHash", "kv1/1:m/1:s/-/0:", "prefix_hash is empty"},
        Malformed{"FieldTooLong", "kv1/1025:" + std::string(1025, 'm') + "/1:s/-/1:h",
                  "model is 1025 bytes"},
        Malformed{"TooLongOverall", "kv1/1:m/1:s/-/4084:" + std::string(4084, 'h'), "4103"}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return std::string(info.param.name); });

// Random byte-level mutations of valid encodings: Decode must never crash or read out of bounds
// (run under ASan), and whatever it accepts must be canonical — re-encoding gives the input.
TEST(KvKeyTest, RandomMutationsNeverCrashAndAcceptedInputsAreCanonical) {
  const std::vector<KvKey> keys = AdversarialKeys();
  std::vector<std::string> bases;
  for (const KvKey& k : keys) bases.push_back(EncodeKvKey(k));
  static const char kSyntax[] = {'/', ':', '-', '0', '1', '9', 'k', 'v', '\0', '\xff'};
  std::mt19937 rng(7);
  size_t accepted = 0;
  size_t changed_and_accepted = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    const std::string& base = bases[rng() % bases.size()];
    std::string m = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = m.empty() ? 0 : rng() % (m.size() + 1);
      const char c = (rng() % 2) ? kSyntax[rng() % sizeof(kSyntax)] : static_cast<char>(rng());
      switch (rng() % 6) {
        case 0:  // overwrite a byte
          if (pos < m.size()) m[pos] = c;
          break;
        case 1:  // insert a byte
          m.insert(m.begin() + static_cast<std::ptrdiff_t>(pos), c);
          break;
        case 2:  // delete a byte
          if (pos < m.size()) m.erase(pos, 1);
          break;
        case 3:  // truncate
          m.resize(pos);
          break;
        case 4:  // bump a digit (a length) up or down
          if (pos < m.size() && m[pos] >= '0' && m[pos] <= '9') {
            m[pos] = static_cast<char>('0' + (m[pos] - '0' + 1 + rng() % 9) % 10);
          }
          break;
        case 5:  // duplicate a slice
          if (pos < m.size()) m.insert(pos, m.substr(pos, 1 + rng() % 8));
          break;
      }
    }
    auto d = DecodeKvKey(m);
    if (!d.ok()) {
      ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ++accepted;
    if (m != base) ++changed_and_accepted;
    ASSERT_TRUE(ValidateKvKey(*d).ok()) << ValidateKvKey(*d);
    ASSERT_EQ(EncodeKvKey(*d), m);
  }
  // The loop must exercise both outcomes to mean anything.
  EXPECT_GT(accepted, 0u);
  EXPECT_GT(changed_and_accepted, 0u);
  EXPECT_LT(accepted, 100000u);
}

}  // namespace
}  // namespace granary
