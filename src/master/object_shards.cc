#include "master/object_shards.h"

#include "proto/alloc_header.h"

namespace granary::master {

std::string TableKey(const std::string& tenant, const std::string& key) {
  std::string k;
  TableKeyInto(tenant, key, &k);
  return k;
}

void TableKeyInto(const std::string& tenant, const std::string& key, std::string* out) {
  out->clear();
  out->reserve(tenant.size() + 1 + key.size());
  out->append(tenant);
  out->push_back('\0');
  out->append(key);
}

std::string TenantOfKey(absl::string_view table_key) {
  return std::string(table_key.substr(0, table_key.find('\0')));
}

uint64_t AllocBytes(uint64_t value_size) {
  const uint64_t a = proto::kAllocAlignment;
  return (proto::kAllocHeaderSize + value_size + a - 1) / a * a;
}

uint64_t PlacedBytes(const Placements& ps) {
  uint64_t b = 0;
  for (const auto& p : ps) b += p.size;
  return b;
}

}  // namespace granary::master
