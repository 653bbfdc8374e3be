#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/codec.h"

namespace granary::proto {

// Field visitors. Every wire struct lists its fields once, in wire order, in
//
//   template <class V> static constexpr void Fields(V& v) { using S = ThisStruct; ... }
//
// calling v once per field with a member pointer, the field's name (error messages name it)
// and, for strings and lists, their bounds:
//
//   v(&S::size, "size");                      // bool, u8, u16, u32, u64, i32 (as u32), an enum
//   v(&S::key, "key", kMaxKeyBytes);          // u32 length, then at most that many bytes
//   v(&S::status, "status");                  // a nested struct with its own Fields
//   v(&S::entries, "entries", kMaxBatch);     // u32 count, then each element
//   v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);  // a list of bounded strings
//   v.Optional(&S::has_x, &S::x, "has_x");    // a bool, then x only when it is true
//   v.Check([](const S& m) -> absl::Status {...});  // a rule over the decoded fields
//   if (!v.Since(14)) return;                 // the fields below came in protocol 14
//
// Encode, Decode, operator== and the least encoded size (kMinEncodedBytes, which bounds the
// count a list may claim) are all derived from that one list. Little-endian, no padding, no
// tags: the wire format is exactly the sequence of fields. A member that Fields does not name
// is not on the wire and not compared.
//
// Versions (docs/protocol.md): fields are only ever appended, each new one behind a Since() of
// the version that brought it. A Writer or Reader of an older version (codec.h) stops at the
// first Since() above it: an older peer's message lacks those fields, and decodes with them
// left at their defaults.
//
// Cost: the same as hand-written code. Every visitor call inlines; the member pointers and
// bounds are constants; Check runs once per decoded struct.

// The visitors' steps are forced inline: each member pointer then folds to a fixed offset, as
// in hand-written code (GCC otherwise keeps some steps out of line and encodes up to 1.5x
// slower; bench/codec_bench.cc).
#define GRANARY_FIELD_INLINE [[gnu::always_inline]] inline

// The byte values an enum field may take; any other is refused as "unknown <kNoun> <value>".
// Specialize for each enum on the wire (one byte each).
template <class E>
struct WireEnum;

struct NullFieldVisitor {
  template <class... A>
  constexpr void operator()(A&&...) {}
  template <class... A>
  constexpr void Optional(A&&...) {}
  template <class C>
  constexpr void Check(C&&) {}
  constexpr bool Since(uint16_t) { return true; }
};

// A struct with a Fields list.
template <class T>
concept WireStruct = requires(NullFieldVisitor& v) {
  T::Fields(v);
};

template <class T>
inline constexpr bool kIsVector = false;
template <class E>
inline constexpr bool kIsVector<std::vector<E>> = true;

// ----- The least encoded size of a value, for a count's plausibility check.

template <class S>
struct FieldSizer;

template <class F>
constexpr size_t MinBytesOf() {
  if constexpr (std::is_same_v<F, bool> || std::is_enum_v<F> || std::is_same_v<F, uint8_t>) {
    return 1;
  } else if constexpr (std::is_same_v<F, uint16_t>) {
    return 2;
  } else if constexpr (std::is_same_v<F, uint32_t> || std::is_same_v<F, int32_t>) {
    return 4;
  } else if constexpr (std::is_same_v<F, uint64_t>) {
    return 8;
  } else if constexpr (std::is_same_v<F, std::string> || std::is_same_v<F, absl::string_view> ||
                       kIsVector<F>) {
    return 4;  // the length or count
  } else {
    static_assert(WireStruct<F>, "not a wire field type");
    FieldSizer<F> v;
    F::Fields(v);
    return v.bytes;
  }
}

// Counts the fields every version this build speaks has (an optional value as its flag alone),
// so the bound holds for an older peer's message too.
template <class S>
struct FieldSizer {
  size_t bytes = 0;
  template <class F, class... Bound>
  constexpr void operator()(F S::*, const char*, Bound...) {
    bytes += MinBytesOf<F>();
  }
  template <class F>
  constexpr void Optional(bool S::*, F S::*, const char*) {
    bytes += 1;
  }
  template <class C>
  constexpr void Check(C&&) {}
  constexpr bool Since(uint16_t version) const { return version <= kMinProtocolVersion; }
};

// The least number of bytes a T takes on the wire.
template <WireStruct T>
inline constexpr size_t kMinEncodedBytes = MinBytesOf<T>();

// ----- Encoding: first the exact size, then every field through a cursor into that many bytes
// (one resize of the output, then fixed-size copies: no per-field string append).

// Whether every F takes the same bytes on the wire (no string, list or optional inside).
template <class S>
struct FixedSizeCheck;
template <class F>
constexpr bool IsFixedSize() {
  if constexpr (std::is_same_v<F, std::string> || std::is_same_v<F, absl::string_view> ||
                kIsVector<F>) {
    return false;
  } else if constexpr (WireStruct<F>) {
    FixedSizeCheck<F> v;
    F::Fields(v);
    return v.fixed;
  } else {
    return true;
  }
}
template <class S>
struct FixedSizeCheck {
  bool fixed = true;
  template <class F, class... Bound>
  constexpr void operator()(F S::*, const char*, Bound...) {
    fixed = fixed && IsFixedSize<F>();
  }
  template <class F>
  constexpr void Optional(bool S::*, F S::*, const char*) {
    fixed = false;
  }
  template <class C>
  constexpr void Check(C&&) {}
  // Its size depends on the version.
  constexpr bool Since(uint16_t) {
    fixed = false;
    return false;
  }
};

template <class F>
GRANARY_FIELD_INLINE size_t EncodedSize(const F& v, uint16_t version);

template <class S>
class FieldMeasure {
 public:
  FieldMeasure(const S& m, uint16_t version) : m_(m), version_(version) {}
  template <class F, class... Bound>
  GRANARY_FIELD_INLINE void operator()(F S::*p, const char*, Bound...) {
    bytes_ += EncodedSize(m_.*p, version_);
  }
  template <class F>
  GRANARY_FIELD_INLINE void Optional(bool S::*has, F S::*p, const char*) {
    bytes_ += 1 + (m_.*has ? EncodedSize(m_.*p, version_) : 0);
  }
  template <class C>
  void Check(C&&) {}
  bool Since(uint16_t version) const { return version_ >= version; }
  size_t bytes() const { return bytes_; }

 private:
  const S& m_;
  const uint16_t version_;
  size_t bytes_ = 0;
};

// The bytes v takes on the wire in `version`.
template <class F>
GRANARY_FIELD_INLINE size_t EncodedSize(const F& v, uint16_t version) {
  if constexpr (IsFixedSize<F>()) {
    return MinBytesOf<F>();
  } else if constexpr (std::is_same_v<F, std::string> || std::is_same_v<F, absl::string_view>) {
    return 4 + v.size();
  } else if constexpr (kIsVector<F>) {
    using E = typename F::value_type;
    if constexpr (IsFixedSize<E>()) {
      return 4 + v.size() * MinBytesOf<E>();
    } else {
      size_t n = 4;
      for (const auto& e : v) n += EncodedSize(e, version);
      return n;
    }
  } else {
    FieldMeasure<F> m(v, version);
    F::Fields(m);
    return m.bytes();
  }
}

// Writes into bytes sized beforehand by EncodedSize (little-endian, as Writer).
struct EncodeCursor {
  char* at;
  uint16_t version;
  template <class T>
  GRANARY_FIELD_INLINE void Fixed(T v) {
    std::memcpy(at, &v, sizeof(T));
    at += sizeof(T);
  }
  GRANARY_FIELD_INLINE void Bytes(absl::string_view s) {
    Fixed(static_cast<uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(at, s.data(), s.size());
    at += s.size();
  }
};
// Appends to reserved space instead: for a large message, whose zero-fill by a resize would
// cost more than the appends (its bytes are mostly a few long strings).
struct EncodeAppender {
  std::string* out;
  uint16_t version;
  template <class T>
  GRANARY_FIELD_INLINE void Fixed(T v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  GRANARY_FIELD_INLINE void Bytes(absl::string_view s) {
    Fixed(static_cast<uint32_t>(s.size()));
    out->append(s.data(), s.size());
  }
};
// Messages up to this size are encoded through EncodeCursor, larger ones through EncodeAppender.
inline constexpr size_t kEncodeCursorLimit = 16 << 10;

template <class F, class Sink>
GRANARY_FIELD_INLINE void PutValue(const F& v, Sink& c);

template <class S, class Sink>
class FieldEncoder {
 public:
  FieldEncoder(const S& m, Sink& c) : m_(m), c_(c) {}
  template <class F, class... Bound>
  GRANARY_FIELD_INLINE void operator()(F S::*p, const char*, Bound...) {
    PutValue(m_.*p, c_);
  }
  template <class F>
  GRANARY_FIELD_INLINE void Optional(bool S::*has, F S::*p, const char*) {
    c_.template Fixed<uint8_t>(m_.*has ? 1 : 0);
    if (m_.*has) PutValue(m_.*p, c_);
  }
  template <class C>
  void Check(C&&) {}
  bool Since(uint16_t version) const { return c_.version >= version; }

 private:
  const S& m_;
  Sink& c_;
};

template <class F, class Sink>
GRANARY_FIELD_INLINE void PutValue(const F& v, Sink& c) {
  if constexpr (std::is_same_v<F, bool>) {
    c.template Fixed<uint8_t>(v ? 1 : 0);
  } else if constexpr (std::is_enum_v<F>) {
    c.Fixed(static_cast<uint8_t>(v));
  } else if constexpr (std::is_same_v<F, int32_t>) {
    c.Fixed(static_cast<uint32_t>(v));
  } else if constexpr (std::is_integral_v<F>) {
    c.Fixed(v);
  } else if constexpr (std::is_same_v<F, std::string> || std::is_same_v<F, absl::string_view>) {
    c.Bytes(v);
  } else if constexpr (kIsVector<F>) {
    c.Fixed(static_cast<uint32_t>(v.size()));
    for (const auto& e : v) PutValue(e, c);
  } else {
    static_assert(WireStruct<F>, "not a wire field type");
    FieldEncoder<F, Sink> sub(v, c);
    F::Fields(sub);
  }
}

// Appends v's encoding to w's output. Cost: one pass for the size, then one resize and a copy
// per field (no allocation beyond the output's growth).
template <class F>
void PutValue(const F& v, Writer& w) {
  const size_t n = EncodedSize(v, w.version());
  if (n <= kEncodeCursorLimit) {
    EncodeCursor c{w.Extend(n), w.version()};
    PutValue(v, c);
  } else {
    EncodeAppender a{w.Reserve(n), w.version()};
    PutValue(v, a);
  }
}

// ----- Decoding.

template <class F>
inline void GetValue(Reader& r, F* out, const char* name);
inline void GetValue(Reader& r, std::string* out, const char* name, size_t max_len) {
  *out = r.Str(name, max_len);
}
inline void GetValue(Reader& r, absl::string_view* out, const char* name, size_t max_len) {
  *out = r.View(name, max_len);
}
// A list: at most max_count elements, each at least kMinEncodedBytes of what is left (a small
// body cannot make the decoder size a huge vector); element_bound bounds string elements.
template <class E, class... ElementBound>
inline void GetValue(Reader& r, std::vector<E>* out, const char* name, uint32_t max_count,
                     ElementBound... element_bound) {
  const uint32_t n = r.Count(name, max_count, MinBytesOf<E>());
  out->resize(n);
  for (auto& e : *out) GetValue(r, &e, name, static_cast<size_t>(element_bound)...);
}

template <class S>
class FieldDecoder {
 public:
  FieldDecoder(S& m, Reader& r) : m_(m), r_(r) {}
  template <class F, class... Bound>
  GRANARY_FIELD_INLINE void operator()(F S::*p, const char* name, Bound... bound) {
    GetValue(r_, &(m_.*p), name, bound...);
  }
  template <class F>
  GRANARY_FIELD_INLINE void Optional(bool S::*has, F S::*p, const char* name) {
    m_.*has = r_.Bool(name);
    if (m_.*has) GetValue(r_, &(m_.*p), name);
  }
  template <class C>
  GRANARY_FIELD_INLINE void Check(C&& rule) {
    if (!r_.ok()) return;
    if (absl::Status st = rule(static_cast<const S&>(m_)); !st.ok()) r_.Fail(std::move(st));
  }
  bool Since(uint16_t version) const { return r_.version() >= version; }

 private:
  S& m_;
  Reader& r_;
};

template <class F>
inline void GetValue(Reader& r, F* out, const char* name) {
  if constexpr (std::is_same_v<F, bool>) {
    *out = r.Bool(name);
  } else if constexpr (std::is_enum_v<F>) {
    const uint8_t raw = r.U8(name);
    if (r.ok() && (raw < WireEnum<F>::kMin || raw > WireEnum<F>::kMax)) {
      r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown ", WireEnum<F>::kNoun, " ", raw)));
    }
    *out = static_cast<F>(raw);
  } else if constexpr (std::is_same_v<F, uint8_t>) {
    *out = r.U8(name);
  } else if constexpr (std::is_same_v<F, uint16_t>) {
    *out = r.U16(name);
  } else if constexpr (std::is_same_v<F, uint32_t>) {
    *out = r.U32(name);
  } else if constexpr (std::is_same_v<F, int32_t>) {
    *out = static_cast<int32_t>(r.U32(name));
  } else if constexpr (std::is_same_v<F, uint64_t>) {
    *out = r.U64(name);
  } else {
    static_assert(WireStruct<F>, "not a wire field type (strings and lists need a bound)");
    FieldDecoder<F> sub(*out, r);
    F::Fields(sub);
  }
}

// ----- Equality.

template <class S>
class FieldsEqual {
 public:
  FieldsEqual(const S& a, const S& b) : a_(a), b_(b) {}
  template <class F, class... Bound>
  void operator()(F S::*p, const char*, Bound...) {
    equal_ = equal_ && a_.*p == b_.*p;
  }
  template <class F>
  void Optional(bool S::*has, F S::*p, const char*) {
    equal_ = equal_ && a_.*has == b_.*has && (!(a_.*has) || a_.*p == b_.*p);
  }
  template <class C>
  void Check(C&&) {}
  bool Since(uint16_t) const { return true; }
  bool equal() const { return equal_; }

 private:
  const S& a_;
  const S& b_;
  bool equal_ = true;
};

// ----- What the wire structs get from their Fields.

template <WireStruct T>
void Encode(const T& m, Writer& w) {
  PutValue(m, w);
}

// Reads T's fields; the first failure names the field. The caller checks that nothing is left.
template <WireStruct T>
[[nodiscard]] absl::Status Decode(Reader& r, T* m) {
  FieldDecoder<T> d(*m, r);
  T::Fields(d);
  return r.status();
}

// Field by field, as Fields lists them (an optional value only when present).
template <WireStruct T>
bool operator==(const T& a, const T& b) {
  FieldsEqual<T> v(a, b);
  T::Fields(v);
  return v.equal();
}

}  // namespace granary::proto

#undef GRANARY_FIELD_INLINE
