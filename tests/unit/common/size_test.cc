#include "common/size.h"

#include <gtest/gtest.h>

namespace granary {
namespace {

TEST(ParseSize, PlainBytesAndBinaryUnits) {
  EXPECT_EQ(*common::ParseSize("0"), 0u);
  EXPECT_EQ(*common::ParseSize("4096"), 4096u);
  EXPECT_EQ(*common::ParseSize("1B"), 1u);
  EXPECT_EQ(*common::ParseSize("64KB"), 64u * 1024);
  EXPECT_EQ(*common::ParseSize("64kib"), 64u * 1024);
  EXPECT_EQ(*common::ParseSize("3 MB"), 3u * 1024 * 1024);
  EXPECT_EQ(*common::ParseSize("2GB"), 2ull << 30);
  EXPECT_EQ(*common::ParseSize(" 1TiB "), 1ull << 40);
}

TEST(ParseSize, RejectsBadValuesNamingThem) {
  for (const char* bad : {"", "-1", "1.5GB", "GB", "12XB", "1 G B", "0x10"}) {
    auto r = common::ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("1 KB = 1024 B"), std::string::npos);
  }
}

// A decimal point is refused as such, not as a unit '.5GB' (the message says the number must be
// whole, and gives the same amount in a smaller unit when it is whole there).
TEST(ParseSize, FractionsAreRefusedAsNotWholeWithTheSameAmountInASmallerUnit) {
  auto r = common::ParseSize("1.5GB");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().find("unknown unit"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("invalid size '1.5GB': the number must be whole (1.5GB = "
                                      "1536MB)"),
            std::string::npos)
      << r.status();
  EXPECT_NE(common::ParseSize("0.25 tb").status().message().find("(0.25TB = 256GB)"),
            std::string::npos);
  // 2.001 KB = 2049.024 B is not whole in any unit: no hint.
  EXPECT_EQ(common::ParseSize("2.001KB").status().message().find("(2.001KB = "), std::string::npos);
  EXPECT_NE(common::ParseSize("2.5KB").status().message().find("(2.5KB = 2560B)"),
            std::string::npos);
  for (const char* bad : {"1.5", "1.0", "1.", "1.GB", ".5GB", "3.0B", "1.5XB"}) {
    auto b = common::ParseSize(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find(std::string("'") + bad + "'"), std::string::npos);
    if (std::string(bad) != "1.5XB") {
      EXPECT_NE(b.status().message().find("must be whole"), std::string::npos) << b.status();
    }
  }
  // Past what the hint can say exactly: refused all the same, without a hint.
  EXPECT_FALSE(common::ParseSize("99999999999999.5TB").ok());
  EXPECT_FALSE(common::ParseSize("1.0000000000000000000001GB").ok());
}

TEST(ParseSize, RejectsOverflowPast2To63) {
  EXPECT_EQ(*common::ParseSize("9223372036854775807"), 9223372036854775807ull);
  EXPECT_FALSE(common::ParseSize("9223372036854775808").ok());
  EXPECT_FALSE(common::ParseSize("8388608TB").ok());  // 2^23 * 2^40 = 2^63
  EXPECT_EQ(*common::ParseSize("8388607TB"), 8388607ull << 40);
  EXPECT_FALSE(common::ParseSize("99999999999999999999999").ok());
}

TEST(ParseSize, PositiveRejectsZero) {
  EXPECT_FALSE(common::ParsePositiveSize("0KB").ok());
  EXPECT_EQ(*common::ParsePositiveSize("1KB"), 1024u);
}

TEST(FormatSize, UsesBinaryUnits) {
  EXPECT_EQ(common::FormatSize(512), "512 B");
  EXPECT_EQ(common::FormatSize(1024 * 1024), "1 MB");
  EXPECT_EQ(common::FormatSize(1536), "1.50 KB");
}

}  // namespace
}  // namespace granary
