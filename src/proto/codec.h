#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/frame.h"

namespace granary::proto {

// Appends little-endian fields to a string. Strings are a u32 length then the bytes.
// `version` is the protocol the output is for: a struct's fields past a Since() above it are
// left out (fields.h). Cost: amortized O(1) per field, no allocation beyond the string's growth.
class Writer {
 public:
  explicit Writer(std::string* out, uint16_t version = kProtocolVersion)
      : out_(out), version_(version) {}
  uint16_t version() const { return version_; }
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_->append(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  // Grows the output by n bytes (zeroed) and returns where they start, for the caller to fill
  // at once (proto::Encode: one resize per message instead of one append per field).
  char* Extend(size_t n) {
    const size_t at = out_->size();
    out_->resize(at + n);
    return out_->data() + at;
  }
  // Makes room for n more bytes without writing them; returns the output to append to.
  std::string* Reserve(size_t n) {
    out_->reserve(out_->size() + n);
    return out_;
  }

 private:
  std::string* out_;
  uint16_t version_;
};

// Reads fields written by Writer from a bounded view. Every read checks the remaining length;
// the first failure sticks (later reads return zero values) and status() names the field.
// Never reads past the view. `version` is the protocol the input was written for: a struct's
// fields past a Since() above it are not read, and keep their defaults (fields.h).
class Reader {
 public:
  explicit Reader(absl::string_view in, uint16_t version = kProtocolVersion)
      : in_(in), version_(version) {}
  uint16_t version() const { return version_; }
  uint8_t U8(const char* field);
  uint16_t U16(const char* field);
  uint32_t U32(const char* field);
  uint64_t U64(const char* field);
  bool Bool(const char* field);
  // A string of at most max_len bytes.
  std::string Str(const char* field, size_t max_len);
  // The same, as a view into the input (no copy): valid while the input is.
  absl::string_view View(const char* field, size_t max_len);
  // A count prefix for a repeated field, at most max_count, and at least min_entry_bytes
  // bytes per entry must remain (so a small frame cannot claim a huge count).
  uint32_t Count(const char* field, uint32_t max_count, size_t min_entry_bytes);
  void Fail(absl::Status st) {
    if (status_.ok()) status_ = std::move(st);
  }
  // Ok when every byte was consumed and no read failed.
  [[nodiscard]] absl::Status Finish();
  [[nodiscard]] const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  bool Need(size_t n, const char* field);
  absl::string_view in_;
  size_t pos_ = 0;
  absl::Status status_;
  uint16_t version_;
};

}  // namespace granary::proto
