// Client credentials: the --tenant_tokens_file format and the check made at client hello
// (which hash applies, require mode, what the errors say and do not say).

#include "master/tenant/tenant_tokens.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/sha256.h"

namespace granary::master::tenant {
namespace {

constexpr char kAbcSha256[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

bool Has(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

void ExpectBadFile(absl::string_view text, std::initializer_list<absl::string_view> parts) {
  absl::StatusOr<TokenHashes> parsed = ParseTokensFile(text, "/etc/granary/tokens");
  ASSERT_FALSE(parsed.ok()) << "accepted:\n" << text;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  EXPECT_TRUE(Has(parsed.status().message(), "'/etc/granary/tokens'")) << parsed.status();
  for (absl::string_view part : parts) {
    EXPECT_TRUE(Has(parsed.status().message(), part))
        << "message lacks '" << part << "': " << parsed.status().message();
  }
}

TEST(ParseTokensFileTest, LinesCommentsBlanksAndTabs) {
  const std::string b_hash = common::Sha256Hex("token-b");
  absl::StatusOr<TokenHashes> parsed = ParseTokensFile(
      absl::StrCat("# tenant tokens\n\n", "tenant-a ", kAbcSha256, "\n", "   # indented comment\n",
                   "\ttenant-b\t\t", absl::AsciiStrToUpper(b_hash), "   \r\n", "  \n"),
      "f");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, (TokenHashes{{"tenant-a", kAbcSha256}, {"tenant-b", b_hash}}));
}

TEST(ParseTokensFileTest, EmptyFileHasNoEntries) {
  for (const char* text : {"", "\n\n", "# nothing yet\n"}) {
    absl::StatusOr<TokenHashes> parsed = ParseTokensFile(text, "f");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(parsed->empty());
  }
}

TEST(ParseTokensFileTest, BadLinesNameTheFileTheLineAndTheValue) {
  // Hash of the wrong length, on line 3.
  ExpectBadFile(absl::StrCat("# c\n\ntenant-a ", absl::string_view(kAbcSha256).substr(0, 60), "\n"),
                {"line 3", "tenant 'tenant-a'", "'ba7816bf...'", "got 60"});
  // Not hex.
  std::string not_hex = kAbcSha256;
  not_hex[63] = 'z';
  ExpectBadFile(absl::StrCat("tenant-a ", not_hex), {"line 1", not_hex, "character 64 ('z')"});
  // A bad tenant id.
  ExpectBadFile(absl::StrCat("ok ", kAbcSha256, "\n_probe ", kAbcSha256),
                {"line 2", "'_probe'", "reserved"});
  // Three fields.
  ExpectBadFile(absl::StrCat("tenant-a ", kAbcSha256, " extra"),
                {"line 1", "3 fields for 'tenant-a'", "<tenant> <sha256hex>"});
  // The same tenant twice.
  ExpectBadFile(absl::StrCat("tenant-a ", kAbcSha256, "\n\ntenant-a ", kAbcSha256),
                {"line 3", "'tenant-a' is given twice", "line 1"});
}

TEST(ParseTokensFileTest, ALoneFieldIsNotEchoed) {
  // Perhaps a token pasted without its tenant: named by its length only.
  absl::StatusOr<TokenHashes> parsed = ParseTokensFile("\nsuper-secret-token\n", "f");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(Has(parsed.status().message(), "line 2")) << parsed.status();
  EXPECT_TRUE(Has(parsed.status().message(), "one field of 18 characters")) << parsed.status();
  EXPECT_FALSE(Has(parsed.status().message(), "super-secret")) << parsed.status();
  // A token written where its hash belongs: only its start is shown.
  parsed = ParseTokensFile("tenant-a super-secret-token\n", "f");
  ASSERT_FALSE(parsed.ok());
  EXPECT_FALSE(Has(parsed.status().message(), "super-secret-token")) << parsed.status();
  EXPECT_TRUE(Has(parsed.status().message(), "'super-se...'")) << parsed.status();
}

TEST(LoadTokensFileTest, ReadsAFileAndNamesAMissingOne) {
  absl::StatusOr<TokenHashes> none = LoadTokensFile("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  absl::StatusOr<TokenHashes> missing = LoadTokensFile("/nonexistent/granary_tokens");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Has(missing.status().message(), "/nonexistent/granary_tokens")) << missing.status();

  std::string path = ::testing::TempDir() + "/tokens_" + std::to_string(getpid());
  std::ofstream(path) << "tenant-a " << kAbcSha256 << "\nbad line here\n";
  absl::StatusOr<TokenHashes> bad = LoadTokensFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(), path)) << bad.status();
  EXPECT_TRUE(Has(bad.status().message(), "line 2")) << bad.status();
  std::ofstream(path, std::ios::trunc) << "tenant-a " << kAbcSha256 << "\n";
  absl::StatusOr<TokenHashes> good = LoadTokensFile(path);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->at("tenant-a"), kAbcSha256);
  std::remove(path.c_str());
}

// The policy lookup the master installs reads the live policy: a map the test changes.
class TokenCheckTest : public ::testing::Test {
 protected:
  TokenCheck Make(TokenHashes file, bool require) {
    return TokenCheck(std::move(file), require, [this](const std::string& t) {
      auto it = policy_.find(t);
      return it == policy_.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
  }
  std::map<std::string, std::string> policy_;
};

TEST_F(TokenCheckTest, NoHashAnywhereAllowsAnyClaim) {
  TokenCheck check = Make({}, false);
  EXPECT_TRUE(check.Check("tenant-a", "").ok());
  EXPECT_TRUE(check.Check("tenant-a", "whatever").ok());
  EXPECT_FALSE(check.ExpectedHash("tenant-a").has_value());
  EXPECT_TRUE(TokenCheck().Check("tenant-a", "").ok());
}

TEST_F(TokenCheckTest, PolicyHashNeedsTheMatchingToken) {
  policy_["tenant-a"] = kAbcSha256;
  TokenCheck check = Make({}, false);
  EXPECT_TRUE(check.Check("tenant-a", "abc").ok());
  absl::Status wrong = check.Check("tenant-a", "abd");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.message(), "the token for tenant 'tenant-a' does not match");
  absl::Status missing = check.Check("tenant-a", "");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Has(missing.message(), "tenant 'tenant-a' requires a token")) << missing;
  // Another tenant is unaffected; an empty policy hash is no hash.
  policy_["tenant-b"] = "";
  EXPECT_TRUE(check.Check("tenant-b", "").ok());
  // The lookup is live: a policy change applies to the next check.
  policy_.erase("tenant-a");
  EXPECT_TRUE(check.Check("tenant-a", "").ok());
  policy_["tenant-b"] = common::Sha256Hex("b-token");
  EXPECT_EQ(check.Check("tenant-b", "").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(check.Check("tenant-b", "b-token").ok());
}

TEST_F(TokenCheckTest, FileEntryOverridesThePolicy) {
  policy_["tenant-a"] = common::Sha256Hex("policy-token");
  TokenCheck check = Make({{"tenant-a", common::Sha256Hex("file-token")}}, false);
  EXPECT_TRUE(check.Check("tenant-a", "file-token").ok());
  EXPECT_EQ(check.Check("tenant-a", "policy-token").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(check.ExpectedHash("tenant-a"), common::Sha256Hex("file-token"));
}

TEST_F(TokenCheckTest, RequireRefusesTenantsWithoutAHash) {
  policy_["tenant-a"] = kAbcSha256;
  TokenCheck check = Make({{"tenant-f", common::Sha256Hex("f")}}, true);
  EXPECT_TRUE(check.require());
  EXPECT_TRUE(check.Check("tenant-a", "abc").ok());
  EXPECT_TRUE(check.Check("tenant-f", "f").ok());
  absl::Status none = check.Check("tenant-z", "any-token");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Has(none.message(), "tenant 'tenant-z' requires a token")) << none;
  EXPECT_TRUE(Has(none.message(), "--require_tenant_tokens")) << none;
  EXPECT_EQ(Make({}, false).Check("tenant-z", "").code(), absl::StatusCode::kOk);
}

TEST_F(TokenCheckTest, ErrorsNeverShowTheTokenOrTheHash) {
  const std::string token = "a-very-secret-token";
  policy_["tenant-a"] = common::Sha256Hex("the-right-one");
  TokenCheck check = Make({}, true);
  for (const auto& [tenant, given] : std::initializer_list<std::pair<std::string, std::string>>{
           {"tenant-a", token}, {"tenant-a", ""}, {"tenant-z", token}}) {
    absl::Status st = check.Check(tenant, given);
    ASSERT_FALSE(st.ok());
    EXPECT_FALSE(Has(st.message(), token)) << st;
    EXPECT_FALSE(Has(st.message(), common::Sha256Hex(token))) << st;
    EXPECT_FALSE(Has(st.message(), policy_["tenant-a"])) << st;
    EXPECT_TRUE(Has(st.message(), absl::StrCat("'", tenant, "'"))) << st;
  }
}

}  // namespace
}  // namespace granary::master::tenant
