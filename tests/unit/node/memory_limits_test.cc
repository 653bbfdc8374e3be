#include "node/memory_limits.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace granary::node {
namespace {

std::string WriteFile(const std::string& text) {
  char path[] = "/tmp/granary_meminfo_XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(MemoryLimits, ReadsTotalAndAvailableFromMeminfo) {
  const std::string path = WriteFile(
      "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:   20000000 kB\n"
      "HugePages_Total:       0\n");
  auto m = ReadMachineMemory(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->physical, 24000000ull << 10);
  EXPECT_EQ(m->available, 20000000ull << 10);
  unlink(path.c_str());
}

TEST(MemoryLimits, AMeminfoWithoutEitherLineIsAnErrorNamingTheFile) {
  const std::string path = WriteFile("MemTotal:       24000000 kB\n");
  auto m = ReadMachineMemory(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status();
  unlink(path.c_str());
  EXPECT_FALSE(ReadMachineMemory("/nonexistent/meminfo").ok());
}

TEST(MemoryLimits, TheRealMachineHasMemory) {
  auto m = ReadMachineMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->physical, 0u);
  EXPECT_LE(m->available, m->physical);
}

TEST(MemoryLimits, ASegmentLargerThanPhysicalMemoryIsInvalidNamingBothSizes) {
  const MachineMemory machine{.physical = 16ull << 30, .available = 8ull << 30};
  absl::Status st = CheckHostSegmentFits("host segment host0", uint64_t{1} << 63, machine);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("host segment host0 of 9223372036854775808 bytes"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find("physical memory, 17179869184 bytes (16 GB)"), std::string::npos)
      << st;
}

TEST(MemoryLimits, ASegmentLargerThanWhatIsAvailableIsResourceExhausted) {
  const MachineMemory machine{.physical = 16ull << 30, .available = 8ull << 30};
  absl::Status st = CheckHostSegmentFits("host segment host0", 12ull << 30, machine);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("12884901888 bytes (12 GB)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("8589934592 bytes (8 GB)"), std::string::npos) << st;
  EXPECT_TRUE(CheckHostSegmentFits("host segment host0", 8ull << 30, machine).ok());
  EXPECT_TRUE(CheckHostSegmentFits("host segment host0", 1ull << 20, machine).ok());
}

}  // namespace
}  // namespace granary::node
