#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace granary {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256Hex, KnownVectors) {
  EXPECT_EQ(common::Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(common::Sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(common::Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(common::Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Hex, BinaryInputIsHashedWhole) {
  const std::string with_nul("a\0b", 3);
  EXPECT_NE(common::Sha256Hex(with_nul), common::Sha256Hex("a"));
  EXPECT_EQ(common::Sha256Hex(with_nul).size(), 64u);
}

TEST(ConstantTimeEquals, ComparesBytesAndLengths) {
  EXPECT_TRUE(common::ConstantTimeEquals("", ""));
  EXPECT_TRUE(common::ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(common::ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(common::ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(common::ConstantTimeEquals("", "a"));
  EXPECT_FALSE(common::ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

}  // namespace
}  // namespace granary
