#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace granary {
namespace {

TEST(Utf8Test, WellFormedTextIsValid) {
  const std::vector<std::string> valid = {"",
                                          "tenant-a",
                                          "caf\xc3\xa9",
                                          "\xe2\x82\xac",
                                          "\xf0\x9f\x98\x80",
                                          "\xef\xbf\xbd",
                                          std::string("a\0b", 3)};
  for (const std::string& s : valid) {
    EXPECT_TRUE(common::IsValidUtf8(s)) << s;
    EXPECT_EQ(common::EscapeInvalidUtf8(s), s);
  }
}

TEST(Utf8Test, FindsTheFirstByteOutsideUtf8) {
  struct Case {
    std::string s;
    size_t at;
  };
  const Case cases[] = {
      {"\xff", 0},              // never in UTF-8
      {"ab\x80", 2},            // a stray continuation byte
      {"\xc0\xaf", 0},          // overlong '/'
      {"\xe0\x80\xaf", 0},      // overlong, three bytes
      {"\xed\xa0\x80", 0},      // a surrogate
      {"\xf4\x90\x80\x80", 0},  // above U+10FFFF
      {"ok\xe2\x82", 2},        // cut short
      {"\xc3\xa9\xc3", 2},      // cut short after a good one
      {"\xf5\x80\x80\x80", 0},  // lead byte past F4
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(common::IsValidUtf8(c.s));
    EXPECT_EQ(common::FirstInvalidUtf8Byte(c.s), c.at);
  }
}

TEST(Utf8Test, EscapesBadBytesAndBackslashesOnlyWhenInvalid) {
  EXPECT_EQ(common::EscapeInvalidUtf8("a\xff"
                                      "b"),
            "a\\xffb");
  EXPECT_EQ(common::EscapeInvalidUtf8("caf\xc3\xa9\xff"), "caf\xc3\xa9\\xff");  // good UTF-8 kept
  EXPECT_EQ(common::EscapeInvalidUtf8("\\\xff"), "\\\\\\xff");  // backslash doubled, then the byte
  EXPECT_EQ(common::EscapeInvalidUtf8("\\x"), "\\x");           // valid: unchanged
  EXPECT_TRUE(common::IsValidUtf8(common::EscapeInvalidUtf8("\xc0\x80\xfe\xff")));
}

}  // namespace
}  // namespace granary
