#pragma once

// Shared by the disk tier's tests: a temporary directory on the machine's file system, a tmpfs
// mounted for a test (root only), and random bytes.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace granary::testing {

inline std::string NewDir(const std::string& under) {
  std::string tmpl = under + "/granary_disk_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// A directory on the test machine's file system, removed with what is in it.
class TempDir {
 public:
  TempDir() : path_(NewDir(::testing::TempDir())) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A tmpfs of `bytes` mounted on a new directory (root only); unmounted and removed at the end.
class Tmpfs {
 public:
  explicit Tmpfs(uint64_t bytes, bool read_only = false) : dir_(NewDir(::testing::TempDir())) {
    const std::string data = "size=" + std::to_string(bytes);
    mounted_ = !dir_.empty() && ::mount("granary-test", dir_.c_str(), "tmpfs",
                                        read_only ? MS_RDONLY : 0, data.c_str()) == 0;
    if (!mounted_) why_ = std::string("mount tmpfs: ") + std::strerror(errno);
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string why_;
};

inline std::vector<unsigned char> Random(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = rng();
    std::memcpy(out.data() + i, &w, std::min<size_t>(8, n - i));
  }
  return out;
}

}  // namespace granary::testing

#define REQUIRE_TMPFS(fs)                                                 \
  if (!(fs).mounted()) {                                                  \
    GTEST_SKIP() << "needs root to mount a tmpfs (" << (fs).why() << ")"; \
  }
