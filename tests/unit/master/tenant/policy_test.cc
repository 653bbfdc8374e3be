#include "master/tenant/policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace granary::master::tenant {
namespace {

constexpr absl::string_view kUnits = "1 KB = 1024 B";

// Parses `yaml`, expects INVALID_ARGUMENT, and checks that the message holds every `part`.
void ExpectInvalid(absl::string_view yaml, std::initializer_list<absl::string_view> parts) {
  absl::StatusOr<Policy> policy = ParsePolicy(yaml);
  ASSERT_FALSE(policy.ok()) << "accepted:\n" << yaml;
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument) << policy.status();
  for (absl::string_view part : parts) {
    EXPECT_NE(policy.status().message().find(part), absl::string_view::npos)
        << "message lacks '" << part << "': " << policy.status().message();
  }
}

// One tenant "t1" with the given quota line.
std::string WithQuota(absl::string_view quota) {
  return absl::StrCat("version: 1\ntenants:\n  - name: t1\n    quota: ", quota, "\n");
}

std::string WithMaxEntries(absl::string_view max_entries) {
  return absl::StrCat(
      "version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    max_entries: ", max_entries, "\n");
}

uint64_t QuotaOf(absl::string_view quota) {
  absl::StatusOr<Policy> policy = ParsePolicy(WithQuota(quota));
  EXPECT_TRUE(policy.ok()) << quota << ": " << policy.status();
  if (!policy.ok() || policy->tenants.size() != 1) return 0;
  return policy->tenants[0].quota_bytes;
}

TEST(ParsePolicyTest, DesignExample) {
  absl::StatusOr<Policy> policy = ParsePolicy(R"(
version: 1
tenants:
  - name: tenant-b
    quota: 500GB
  - name: tenant-a
    quota: 200GB          # comment
    max_entries: 200000
)");
  ASSERT_TRUE(policy.ok()) << policy.status();
  ASSERT_EQ(policy->tenants.size(), 2u);
  EXPECT_EQ(policy->tenants[0], (TenantPolicy{"tenant-a", 200ull << 30, 200000}));
  EXPECT_EQ(policy->tenants[1], (TenantPolicy{"tenant-b", 500ull << 30, std::nullopt}));
  ASSERT_NE(policy->Find("tenant-b"), nullptr);
  EXPECT_EQ(policy->Find("tenant-b")->quota_bytes, 500ull << 30);
  EXPECT_EQ(policy->Find("tenant-c"), nullptr);
}

TEST(ParsePolicyTest, UnitsAreBinary) {
  EXPECT_EQ(QuotaOf("4096"), 4096u);
  EXPECT_EQ(QuotaOf("\"4096\""), 4096u);
  EXPECT_EQ(QuotaOf("7B"), 7u);
  EXPECT_EQ(QuotaOf("1KB"), 1024u);
  EXPECT_EQ(QuotaOf("3 MB"), 3u << 20);
  EXPECT_EQ(QuotaOf("200GB"), 200ull << 30);
  EXPECT_EQ(QuotaOf("\"200 GB\""), 200ull << 30);
  EXPECT_EQ(QuotaOf("2TB"), 2ull << 40);
  EXPECT_EQ(QuotaOf("9223372036854775807"), 9223372036854775807ull);
  EXPECT_EQ(QuotaOf("8388607TB"), 8388607ull << 40);
}

TEST(ParsePolicyTest, EmptyTenantList) {
  absl::StatusOr<Policy> policy = ParsePolicy("version: 1\ntenants: []\n");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->tenants.empty());
}

TEST(ParsePolicyTest, EmptyDocument) {
  ExpectInvalid("", {"empty"});
  ExpectInvalid("# only a comment\n", {"empty"});
}

TEST(ParsePolicyTest, SyntaxErrorHasLine) {
  ExpectInvalid("version: 1\ntenants:\n  - name: [unclosed\n", {"YAML error", "line "});
  ExpectInvalid("version: 1\ntenants:\n  - name: \"a\n", {"line "});
}

TEST(ParsePolicyTest, MissingVersion) { ExpectInvalid("tenants: []\n", {"version", "missing"}); }

TEST(ParsePolicyTest, WrongVersion) {
  ExpectInvalid("version: 2\ntenants: []\n", {"version", "'2'"});
  ExpectInvalid("version: 1.0\ntenants: []\n", {"version", "'1.0'"});
}

TEST(ParsePolicyTest, MissingOrNullTenants) {
  ExpectInvalid("version: 1\n", {"tenants", "missing"});
  ExpectInvalid("version: 1\ntenants:\n", {"tenants", "list"});
}

TEST(ParsePolicyTest, UnknownTopLevelKey) {
  ExpectInvalid("version: 1\ntenants: []\nquotas: []\n", {"policy", "'quotas'", "unknown"});
}

TEST(ParsePolicyTest, UnknownTenantKey) {
  ExpectInvalid("version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    qouta: 2GB\n",
                {"tenant 't1'", "tenants[0]", "'qouta'", "unknown"});
}

TEST(ParsePolicyTest, KeyGivenTwice) {
  ExpectInvalid("version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    quota: 2GB\n",
                {"tenant 't1'", "'quota'", "twice"});
}

TEST(ParsePolicyTest, MoreThanOneDocument) {
  ExpectInvalid("version: 1\ntenants: []\n---\nversion: 1\ntenants: []\n", {"one YAML document"});
}

TEST(ParsePolicyTest, TenantNotAMap) {
  ExpectInvalid("version: 1\ntenants:\n  - t1\n", {"tenants[0]", "map"});
}

TEST(ParsePolicyTest, MissingName) {
  ExpectInvalid("version: 1\ntenants:\n  - quota: 1GB\n", {"tenants[0]", "'name'", "missing"});
}

TEST(ParsePolicyTest, EmptyName) {
  ExpectInvalid("version: 1\ntenants:\n  - name: \"\"\n    quota: 1GB\n",
                {"tenants[0]", "'name'", "empty"});
}

TEST(ParsePolicyTest, ReservedName) {
  ExpectInvalid(
      "version: 1\ntenants:\n  - name: ok\n    quota: 1\n  - name: _probe\n    quota: 1\n",
      {"tenants[1]", "'name'", "_probe", "'_'"});
}

TEST(ParsePolicyTest, NameWithTab) {
  ExpectInvalid("version: 1\ntenants:\n  - name: \"a\\tb\"\n    quota: 1GB\n",
                {"tenants[0]", "'name'", "a\\tb", "control"});
}

TEST(ParsePolicyTest, NameWithNul) {
  ExpectInvalid("version: 1\ntenants:\n  - name: \"a\\0b\"\n    quota: 1GB\n",
                {"tenants[0]", "'name'", "NUL"});
}

// yaml-cpp passes the bytes through; a name that is not UTF-8 (one an older master saved
// through the admin API) is refused like any bad name, shown escaped.
TEST(ParsePolicyTest, NameThatIsNotUtf8) {
  ExpectInvalid(
      "version: 1\ntenants:\n  - name: \"a\xff"
      "b\"\n    quota: 1GB\n",
      {"tenants[0]", "'name'", "'a\\xffb'", "UTF-8", "byte 1"});
}

TEST(ParsePolicyTest, NameLengthLimit) {
  std::string ok(128, 'n');
  absl::StatusOr<Policy> policy =
      ParsePolicy(absl::StrCat("version: 1\ntenants:\n  - name: ", ok, "\n    quota: 1GB\n"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->tenants[0].name, ok);
  ExpectInvalid(
      absl::StrCat("version: 1\ntenants:\n  - name: ", std::string(129, 'n'), "\n    quota: 1GB\n"),
      {"tenants[0]", "'name'", "128 bytes", "129"});
}

TEST(ParsePolicyTest, DuplicateName) {
  ExpectInvalid(
      "version: 1\ntenants:\n  - name: a\n    quota: 1\n  - name: b\n    quota: 1\n"
      "  - name: a\n    quota: 2\n",
      {"tenant 'a'", "tenants[2]", "'name'", "duplicate", "tenants[0]"});
}

TEST(ParsePolicyTest, MissingQuota) {
  ExpectInvalid("version: 1\ntenants:\n  - name: t1\n",
                {"tenant 't1'", "'quota'", "missing", kUnits});
}

TEST(ParsePolicyTest, ZeroQuota) {
  ExpectInvalid(WithQuota("0"), {"tenant 't1'", "'quota'", "positive", kUnits});
  ExpectInvalid(WithQuota("0GB"), {"tenant 't1'", "'quota'", "positive", kUnits});
}

TEST(ParsePolicyTest, NegativeQuota) {
  ExpectInvalid(WithQuota("-5GB"), {"tenant 't1'", "'quota'", "negative", kUnits});
}

TEST(ParsePolicyTest, FractionalQuota) {
  ExpectInvalid(WithQuota("1.5GB"), {"tenant 't1'", "'quota'", "fraction", kUnits});
  ExpectInvalid(WithQuota("1.0"), {"tenant 't1'", "'quota'", "fraction", kUnits});
}

TEST(ParsePolicyTest, OverflowingQuota) {
  ExpectInvalid(WithQuota("9223372036854775808"), {"tenant 't1'", "'quota'", "2^63-1", kUnits});
  ExpectInvalid(WithQuota("8388608TB"), {"tenant 't1'", "'quota'", "2^63-1", kUnits});
  ExpectInvalid(WithQuota("99999999999999999999999"), {"tenant 't1'", "'quota'", kUnits});
}

TEST(ParsePolicyTest, UnknownQuotaUnit) {
  ExpectInvalid(WithQuota("200XB"), {"tenant 't1'", "'quota'", "unit", kUnits});
  ExpectInvalid(WithQuota("1e9"), {"tenant 't1'", "'quota'", kUnits});
}

TEST(ParsePolicyTest, QuotaNotAScalar) {
  ExpectInvalid(WithQuota("[1, 2]"), {"tenant 't1'", "'quota'", "list", kUnits});
  ExpectInvalid(WithQuota(""), {"tenant 't1'", "'quota'", kUnits});
}

TEST(ParsePolicyTest, MaxEntries) {
  absl::StatusOr<Policy> policy = ParsePolicy(WithMaxEntries("200000"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->tenants[0].max_entries, 200000u);
}

TEST(ParsePolicyTest, ZeroMaxEntries) {
  ExpectInvalid(WithMaxEntries("0"), {"tenant 't1'", "'max_entries'", "0"});
}

TEST(ParsePolicyTest, NegativeMaxEntries) {
  ExpectInvalid(WithMaxEntries("-1"), {"tenant 't1'", "'max_entries'", "negative"});
}

TEST(ParsePolicyTest, FractionalMaxEntries) {
  ExpectInvalid(WithMaxEntries("1.5"), {"tenant 't1'", "'max_entries'", "whole number"});
}

TEST(ParsePolicyTest, MaxEntriesWithUnit) {
  ExpectInvalid(WithMaxEntries("10K"), {"tenant 't1'", "'max_entries'", "no unit"});
}

TEST(ParsePolicyTest, OverflowingMaxEntries) {
  ExpectInvalid(WithMaxEntries("9223372036854775808"),
                {"tenant 't1'", "'max_entries'", "too large"});
}

TEST(ParsePolicyTest, MaxEntriesNotAScalar) {
  ExpectInvalid(WithMaxEntries("{a: 1}"), {"tenant 't1'", "'max_entries'", "map"});
}

// sha256("abc") and sha256("") in hex.
constexpr char kAbcSha256[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string WithToken(absl::string_view token_sha256) {
  return absl::StrCat(
      "version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    token_sha256: ", token_sha256, "\n");
}

TEST(ParsePolicyTest, TokenSha256) {
  absl::StatusOr<Policy> policy = ParsePolicy(WithToken(kAbcSha256));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->tenants[0].token_sha256, kAbcSha256);
  // Quoted, and all digits (YAML would otherwise see a number): still the same string.
  const std::string digits(64, '7');
  policy = ParsePolicy(WithToken(absl::StrCat("\"", digits, "\"")));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->tenants[0].token_sha256, digits);
  // Optional: absent means no token.
  policy = ParsePolicy(WithQuota("1GB"));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE(policy->tenants[0].token_sha256.empty());
}

// Upper-case hex is accepted (some tools print it) and kept lower case, so that a hash
// compares equal however it was written.
TEST(ParsePolicyTest, TokenSha256UpperCaseIsStoredLowerCase) {
  absl::StatusOr<Policy> policy = ParsePolicy(WithToken(absl::AsciiStrToUpper(kAbcSha256)));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->tenants[0].token_sha256, kAbcSha256);
}

TEST(ParsePolicyTest, TokenSha256OfTheWrongLength) {
  // 63 digits: named with its start and length, and how to make a right one.
  ExpectInvalid(
      WithToken(absl::string_view(kAbcSha256).substr(0, 63)),
      {"tenant 't1'", "'token_sha256'", "'ba7816bf...'", "64 hex digits", "got 63", "sha256sum"});
  ExpectInvalid(WithToken(absl::StrCat(kAbcSha256, "0")), {"tenant 't1'", "got 65"});
  // A token pasted where its hash belongs: only its first 8 characters are shown.
  absl::StatusOr<Policy> pasted = ParsePolicy(WithToken("my-secret-token-value"));
  ASSERT_FALSE(pasted.ok());
  EXPECT_NE(pasted.status().message().find("'my-secre...'"), absl::string_view::npos)
      << pasted.status();
  EXPECT_EQ(pasted.status().message().find("my-secret-token-value"), absl::string_view::npos)
      << pasted.status();
  ExpectInvalid(WithToken("\"\""), {"tenant 't1'", "'token_sha256'", "got 0"});
}

TEST(ParsePolicyTest, TokenSha256NotHex) {
  std::string bad = kEmptySha256;
  bad[10] = 'g';
  ExpectInvalid(WithToken(bad), {"tenant 't1'", "'token_sha256'", bad, "character 11 ('g')"});
  // sha256sum's output line, pasted whole, has the wrong length.
  ExpectInvalid(WithToken(absl::StrCat("\"", kEmptySha256, "  -\"")),
                {"tenant 't1'", "'token_sha256'", "got 67"});
}

TEST(ParsePolicyTest, TokenSha256NotAScalar) {
  ExpectInvalid(WithToken("[1, 2]"), {"tenant 't1'", "'token_sha256'", "list"});
  ExpectInvalid(WithToken(""), {"tenant 't1'", "'token_sha256'", "nothing"});
}

std::string WithPoolSpill(absl::string_view value) {
  return absl::StrCat("version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    pool_spill: ", value,
                      "\n");
}

TEST(ParsePolicyTest, PoolSpill) {
  for (const char* yes : {"true", "True", "TRUE"}) {
    absl::StatusOr<Policy> p = ParsePolicy(WithPoolSpill(yes));
    ASSERT_TRUE(p.ok()) << yes << ": " << p.status();
    EXPECT_TRUE(p->tenants[0].pool_spill) << yes;
  }
  absl::StatusOr<Policy> no = ParsePolicy(WithPoolSpill("false"));
  ASSERT_TRUE(no.ok()) << no.status();
  EXPECT_FALSE(no->tenants[0].pool_spill);
  absl::StatusOr<Policy> absent = ParsePolicy(WithQuota("1GB"));
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->tenants[0].pool_spill);  // the default
}

TEST(ParsePolicyTest, PoolSpillNotABoolean) {
  ExpectInvalid(WithPoolSpill("yes"), {"tenant 't1'", "'pool_spill'", "line 5", "'yes'",
                                       "not a boolean", "true or false"});
  ExpectInvalid(WithPoolSpill("1"), {"'pool_spill'", "'1'", "not a boolean"});
  ExpectInvalid(WithPoolSpill("\"\""), {"'pool_spill'", "''", "not a boolean"});
  ExpectInvalid(WithPoolSpill("[true]"), {"'pool_spill'", "a list"});
  ExpectInvalid(WithPoolSpill(""), {"'pool_spill'", "nothing"});
}

std::string WithDefaultTier(absl::string_view value) {
  return absl::StrCat(
      "version: 1\ntenants:\n  - name: t1\n    quota: 1GB\n    default_tier: ", value, "\n");
}

TEST(ParsePolicyTest, DefaultTier) {
  for (common::TierPreference t : {common::TierPreference::kHost, common::TierPreference::kGpu,
                                   common::TierPreference::kAny, common::TierPreference::kDisk}) {
    absl::StatusOr<Policy> p = ParsePolicy(WithDefaultTier(common::TierPreferenceName(t)));
    ASSERT_TRUE(p.ok()) << common::TierPreferenceName(t) << ": " << p.status();
    EXPECT_EQ(p->tenants[0].default_tier, t);
  }
  absl::StatusOr<Policy> absent = ParsePolicy(WithQuota("1GB"));
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->tenants[0].default_tier, common::TierPreference::kHost);  // the default
}

TEST(ParsePolicyTest, DefaultTierNotATier) {
  ExpectInvalid(WithDefaultTier("GPU"),
                {"tenant 't1'", "'default_tier'", "line 5", "'GPU'", "host, gpu, any, disk"});
  ExpectInvalid(WithDefaultTier("ssd"), {"'default_tier'", "'ssd'"});
  ExpectInvalid(WithDefaultTier("[gpu]"), {"'default_tier'", "a list"});
  ExpectInvalid(WithDefaultTier(""), {"'default_tier'", "nothing"});
}

TEST(SerializePolicyTest, DefaultTierRoundTrips) {
  Policy policy;
  policy.tenants.push_back(TenantPolicy{.name = "a", .quota_bytes = 100});
  policy.tenants.push_back(TenantPolicy{.name = "b", .quota_bytes = 200});
  policy.tenants.back().default_tier = common::TierPreference::kGpu;
  policy.tenants.push_back(TenantPolicy{.name = "c", .quota_bytes = 300});
  policy.tenants.back().default_tier = common::TierPreference::kAny;
  const std::string yaml = SerializePolicy(policy);
  EXPECT_NE(yaml.find("default_tier: gpu"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("default_tier: any"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("default_tier: host"), std::string::npos) << yaml;  // the default
  absl::StatusOr<Policy> back = ParsePolicy(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, policy);
}

TEST(SerializePolicyTest, PoolSpillRoundTrips) {
  Policy policy;
  policy.tenants.push_back(TenantPolicy{"a", 100, std::nullopt, "", true});
  policy.tenants.push_back(TenantPolicy{"b", 200, 5});
  const std::string yaml = SerializePolicy(policy);
  EXPECT_NE(yaml.find("pool_spill: true"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("pool_spill: false"), std::string::npos) << yaml;  // the default is left out
  absl::StatusOr<Policy> back = ParsePolicy(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, policy);
}

TEST(SerializePolicyTest, TokenSha256RoundTrips) {
  Policy policy{{{"a", 1, std::nullopt, kAbcSha256},
                 {"b", 2, 3, std::string(64, '0')},
                 {"c", 3, std::nullopt, ""}}};
  std::string yaml = SerializePolicy(policy);
  absl::StatusOr<Policy> back = ParsePolicy(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, policy) << yaml;
  EXPECT_EQ(yaml.find("token_sha256", yaml.find("name: \"c\"")), std::string::npos) << yaml;
}

TEST(ValidateTenantIdTest, Rules) {
  EXPECT_TRUE(ValidateTenantId("tenant-a").ok());
  EXPECT_TRUE(ValidateTenantId("租户 a").ok());
  EXPECT_TRUE(ValidateTenantId(std::string(128, 'x')).ok());
  EXPECT_FALSE(ValidateTenantId(std::string(129, 'x')).ok());
  EXPECT_FALSE(ValidateTenantId("").ok());
  EXPECT_FALSE(ValidateTenantId("_probe").ok());
  EXPECT_TRUE(ValidateTenantId("a_b").ok());
  EXPECT_FALSE(ValidateTenantId("a\tb").ok());
  EXPECT_FALSE(ValidateTenantId("a\xff").ok());            // not UTF-8
  EXPECT_FALSE(ValidateTenantId("\xc0\xaf").ok());         // overlong
  EXPECT_FALSE(ValidateTenantId("\xe7\xa7").ok());         // cut short
  EXPECT_TRUE(ValidateTenantId("\xf0\x9f\x98\x80").ok());  // U+1F600
  EXPECT_FALSE(ValidateTenantId("a\nb").ok());
  EXPECT_FALSE(ValidateTenantId("a\x7f").ok());
  absl::Status nul = ValidateTenantId(absl::string_view("a\0b", 3));
  EXPECT_EQ(nul.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nul.message().find("NUL"), absl::string_view::npos) << nul;
  EXPECT_NE(ValidateTenantId("_x").message().find("'_x'"), absl::string_view::npos);
}

TEST(SerializePolicyTest, Empty) {
  std::string yaml = SerializePolicy(Policy{});
  absl::StatusOr<Policy> back = ParsePolicy(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(back->tenants.empty());
}

// Names that YAML would otherwise read as something else, or that need quoting.
TEST(SerializePolicyTest, AwkwardNames) {
  Policy policy;
  uint64_t q = 1;
  for (const char* name :
       {"true",   "null",    "~",           "123",      "- x", "a: b", "#c",  " lead",
        "trail ", "q\"uote", "back\\slash", "'single'", "{x}", "[y]",  "&a",  "*b",
        "!t",     "%p",      "@at",         "`b`",      "é",   "租户", "---", "..."}) {
    policy.tenants.push_back({name, q++, std::nullopt});
  }
  std::sort(policy.tenants.begin(), policy.tenants.end(),
            [](const TenantPolicy& a, const TenantPolicy& b) { return a.name < b.name; });
  std::string yaml = SerializePolicy(policy);
  absl::StatusOr<Policy> back = ParsePolicy(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, policy) << yaml;
}

TEST(SerializePolicyTest, RandomRoundTrip) {
  std::mt19937_64 rng(12345);
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_.:#'\"\\{}[],&*!|>%@`?";
  const std::vector<std::string> multibyte = {"é", "ß", "租", "户", "🙂"};
  for (int round = 0; round < 200; ++round) {
    Policy policy;
    std::set<std::string> names;
    const int count = static_cast<int>(rng() % 12);
    while (static_cast<int>(names.size()) < count) {
      std::string name;
      const size_t len = 1 + rng() % 40;
      while (name.size() < len) {
        if (rng() % 8 == 0) {
          name += multibyte[rng() % multibyte.size()];
        } else {
          name += alphabet[rng() % alphabet.size()];
        }
      }
      if (rng() % 10 == 0) name = std::string(128, 'z' - static_cast<char>(rng() % 26));
      if (ValidateTenantId(name).ok()) names.insert(name);
    }
    for (const std::string& name : names) {  // std::set: already sorted
      TenantPolicy t{name, 1 + rng() % 9223372036854775807ull, std::nullopt};
      if (rng() % 2) t.max_entries = 1 + rng() % 9223372036854775807ull;
      policy.tenants.push_back(t);
    }
    std::string yaml = SerializePolicy(policy);
    absl::StatusOr<Policy> back = ParsePolicy(yaml);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
    ASSERT_EQ(*back, policy) << yaml;
  }
}

TEST(SerializePolicyTest, SortsUnsortedInput) {
  Policy policy{{{"b", 2, std::nullopt}, {"a", 1, 5}}};
  absl::StatusOr<Policy> back = ParsePolicy(SerializePolicy(policy));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tenants[0].name, "a");
  EXPECT_EQ(back->tenants[1].name, "b");
  ASSERT_NE(policy.Find("a"), nullptr);  // Find works on unsorted policies too
  EXPECT_EQ(policy.Find("a")->max_entries, 5u);
}

// Regression (found by fuzz_policy): yaml-cpp 0.7's LoadAll loops forever on a stray ','
// at the top level; the parser must refuse it instead of hanging the master.
TEST(ParsePolicyTest, StrayCommaIsRefusedNotAHang) {
  for (const char* text : {",", "#\n , b:\n", "version: 1\n,\n"}) {
    auto p = ParsePolicy(text);
    EXPECT_FALSE(p.ok()) << text;
  }
}

}  // namespace
}  // namespace granary::master::tenant
