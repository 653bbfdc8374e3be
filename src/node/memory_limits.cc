#include "node/memory_limits.h"

#include <cstdint>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/size.h"

namespace granary::node {
namespace {

std::string Bytes(uint64_t n) { return absl::StrCat(n, " bytes (", common::FormatSize(n), ")"); }

}  // namespace

absl::StatusOr<MachineMemory> ReadMachineMemory(const std::string& meminfo) {
  std::ifstream in(meminfo);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", meminfo));
  MachineMemory m;
  bool total = false, available = false;
  std::string line;
  while (std::getline(in, line)) {
    // "MemTotal:       24575000 kB"
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() != 3 || f[2] != "kB") continue;
    uint64_t kb = 0;
    if (!absl::SimpleAtoi(f[1], &kb) || kb > (UINT64_MAX >> 10)) continue;
    if (f[0] == "MemTotal:") {
      m.physical = kb << 10;
      total = true;
    } else if (f[0] == "MemAvailable:") {
      m.available = kb << 10;
      available = true;
    }
  }
  if (!total || !available) {
    return absl::InternalError(absl::StrCat(meminfo, " lacks MemTotal or MemAvailable"));
  }
  return m;
}

absl::Status CheckHostSegmentFits(const std::string& what, uint64_t size,
                                  const MachineMemory& machine) {
  if (size > machine.physical) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", Bytes(size), " is larger than this machine's physical memory, ",
                     Bytes(machine.physical), ": nothing was allocated"));
  }
  if (size > machine.available) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", Bytes(size), " is more than the memory available now, ",
                     Bytes(machine.available), " (MemAvailable, of ",
                     common::FormatSize(machine.physical), " physical): nothing was allocated"));
  }
  return absl::OkStatus();
}

}  // namespace granary::node
