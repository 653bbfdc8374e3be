#include "proto/codec.h"

#include "absl/strings/str_cat.h"

namespace granary::proto {

bool Reader::Need(size_t n, const char* field) {
  if (!status_.ok()) return false;
  if (in_.size() - pos_ < n) {
    status_ = absl::InvalidArgumentError(absl::StrCat("truncated frame: field '", field, "' needs ",
                                                      n, " bytes, ", in_.size() - pos_, " left"));
    return false;
  }
  return true;
}

#define GRANARY_READ_FIXED(T, n)         \
  if (!Need(n, field)) return 0;         \
  T v;                                   \
  std::memcpy(&v, in_.data() + pos_, n); \
  pos_ += n;                             \
  return v

uint8_t Reader::U8(const char* field) { GRANARY_READ_FIXED(uint8_t, 1); }
uint16_t Reader::U16(const char* field) { GRANARY_READ_FIXED(uint16_t, 2); }
uint32_t Reader::U32(const char* field) { GRANARY_READ_FIXED(uint32_t, 4); }
uint64_t Reader::U64(const char* field) { GRANARY_READ_FIXED(uint64_t, 8); }
#undef GRANARY_READ_FIXED

bool Reader::Bool(const char* field) {
  uint8_t v = U8(field);
  if (v > 1) {
    Fail(absl::InvalidArgumentError(absl::StrCat("field '", field, "' is not a bool: ", v)));
    return false;
  }
  return v == 1;
}

std::string Reader::Str(const char* field, size_t max_len) {
  return std::string(View(field, max_len));
}

absl::string_view Reader::View(const char* field, size_t max_len) {
  uint32_t n = U32(field);
  if (!ok()) return {};
  if (n > max_len) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' is ", n, " bytes, limit ", max_len)));
    return {};
  }
  if (!Need(n, field)) return {};
  absl::string_view v = in_.substr(pos_, n);
  pos_ += n;
  return v;
}

uint32_t Reader::Count(const char* field, uint32_t max_count, size_t min_entry_bytes) {
  uint32_t n = U32(field);
  if (!ok()) return 0;
  if (n > max_count) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' has ", n, " entries, limit ", max_count)));
    return 0;
  }
  if (min_entry_bytes > 0 && static_cast<uint64_t>(n) * min_entry_bytes > remaining()) {
    Fail(absl::InvalidArgumentError(absl::StrCat("truncated frame: field '", field, "' claims ", n,
                                                 " entries but only ", remaining(),
                                                 " bytes remain")));
    return 0;
  }
  return n;
}

absl::Status Reader::Finish() {
  if (!status_.ok()) return status_;
  if (pos_ != in_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame has ", in_.size() - pos_, " trailing bytes"));
  }
  return absl::OkStatus();
}

}  // namespace granary::proto
