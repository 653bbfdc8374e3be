#include "master/admin_auth.h"

#include <gtest/gtest.h>

#include <fstream>

namespace granary::master {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(AdminAuth, NoTokenAllowsEverything) {
  AdminAuth a = AdminAuth::None();
  EXPECT_FALSE(a.enabled());
  EXPECT_TRUE(a.Allows(""));
}

TEST(AdminAuth, OnlyTheExactBearerTokenIsAllowed) {
  auto a = AdminAuth::FromFile(WriteFile("tok", "  s3cret-token\n"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->Allows("Bearer s3cret-token"));
  for (const char* bad :
       {"", "s3cret-token", "Bearer ", "Bearer s3cret-toke", "Bearer s3cret-tokenX",
        "Bearer S3cret-token", "bearer s3cret-token", "Basic s3cret-token"}) {
    EXPECT_FALSE(a->Allows(bad)) << bad;
  }
}

TEST(AdminAuth, MissingOrEmptyTokenFileIsAnErrorNamingThePath) {
  auto missing = AdminAuth::FromFile("/nonexistent/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/token"), absl::string_view::npos);
  std::string empty = WriteFile("empty", " \n");
  auto e = AdminAuth::FromFile(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(empty), absl::string_view::npos);
}

}  // namespace
}  // namespace granary::master
