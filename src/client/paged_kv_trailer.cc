#include "client/paged_kv_trailer.h"

namespace granary::client {
namespace {

void StoreLittle(uint64_t v, int bytes, unsigned char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t LoadLittle(const unsigned char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

void EncodeKvTrailer(uint64_t checksum, unsigned char* out) {
  StoreLittle(kKvTrailerMagic, 4, out);
  StoreLittle(kKvChecksumAlgorithm, 4, out + 4);
  StoreLittle(checksum, 8, out + 8);
}

KvTrailer DecodeKvTrailer(const unsigned char* in) {
  KvTrailer t;
  t.magic = static_cast<uint32_t>(LoadLittle(in, 4));
  t.algorithm = static_cast<uint32_t>(LoadLittle(in + 4, 4));
  t.checksum = LoadLittle(in + 8, 8);
  return t;
}

}  // namespace granary::client
