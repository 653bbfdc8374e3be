// The CPU reference of the checksum (checksum.h).

#include "device/checksum.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace granary::device {

static_assert(std::endian::native == std::endian::little,
              "ChecksumCpu reads words with memcpy, which is little-endian only on such hosts");

uint64_t ChecksumCpu(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t full = bytes / 8;
  uint64_t sum = 0;
  for (size_t i = 0; i < full; ++i) {
    uint64_t word;
    std::memcpy(&word, p + 8 * i, sizeof(word));
    sum += ChecksumTerm(word, i);
  }
  if (const size_t tail = bytes % 8; tail > 0) {
    uint64_t word = 0;
    std::memcpy(&word, p + 8 * full, tail);
    sum += ChecksumTerm(word, full);
  }
  return ChecksumFinish(sum, bytes);
}

absl::Status ValidateChecksumRegions(const ChecksumRegion* regions, int n, const uint64_t* out) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("region count n must be >= 0, got ", n));
  }
  if (n > 0 && (regions == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(regions == nullptr ? "regions" : "out", " is null with n=", n));
  }
  for (int i = 0; i < n; ++i) {
    if (regions[i].bytes > 0 && regions[i].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("regions[", i, "] has bytes=", regions[i].bytes, " but a null data"));
    }
  }
  return absl::OkStatus();
}

absl::Status BatchChecksumCpu(const ChecksumRegion* regions, int n, uint64_t* out) {
  if (absl::Status s = ValidateChecksumRegions(regions, n, out); !s.ok()) return s;
  for (int i = 0; i < n; ++i) out[i] = ChecksumCpu(regions[i].data, regions[i].bytes);
  return absl::OkStatus();
}

}  // namespace granary::device
