#pragma once

// Text helpers shared by the tests: whether one string contains another, and a whole file read or
// replaced.

#include <gtest/gtest.h>
#include <stdio.h>

#include <fstream>
#include <iterator>
#include <string>

namespace granary::testing {

inline bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The whole file ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file through a rename, as an operator's editor or config management would, so
// that a concurrent reader never sees half a file. A failed rename fails the test.
inline void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".edit";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0) << tmp << " -> " << path;
}

}  // namespace granary::testing
