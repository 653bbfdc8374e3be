#include "master/master_options.h"

#include "absl/strings/str_cat.h"

namespace granary::master {

absl::Status MasterOptions::Validate() const {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (client_ttl_ms < 100)
    return bad("--client_ttl must be at least 0.1 s, got ", client_ttl_ms, " ms");
  if (put_start_timeout_ms < 100) {
    return bad("--put_start_timeout_sec must be positive, got ", put_start_timeout_ms, " ms");
  }
  if (write_window_ms != 0 && (write_window_ms < 100 || write_window_ms > put_start_timeout_ms)) {
    return bad("--write_window_ms ", write_window_ms, " is outside 100..", put_start_timeout_ms,
               " (--put_start_timeout_sec; 0 picks min(2000, that))");
  }
  if (restart_quarantine_margin_ms < 0) {
    return bad("--restart_quarantine_margin_ms must not be negative, got ",
               restart_quarantine_margin_ms);
  }
  if (aborted_put_hold_ms < -1) {
    return bad("--aborted_put_hold_ms must be -1 (2 x client_ttl + margin), 0 or more, got ",
               aborted_put_hold_ms);
  }
  if (kv_lease_ttl_ms <= 0)
    return bad("--default_kv_lease_ttl must be positive, got ", kv_lease_ttl_ms);
  if (!(eviction_high_watermark_ratio > 0 && eviction_high_watermark_ratio <= 1)) {
    return bad("--eviction_high_watermark_ratio must be in (0, 1], got ",
               eviction_high_watermark_ratio);
  }
  if (!(eviction_ratio > 0 && eviction_ratio <= 1)) {
    return bad("--eviction_ratio must be in (0, 1], got ", eviction_ratio);
  }
  if (cluster_id.empty()) return bad("--cluster_id must not be empty");
  if (tenant_quota_connector_type != "file" && tenant_quota_connector_type != "etcd") {
    return bad("--tenant_quota_connector_type '", tenant_quota_connector_type,
               "' is not one of file, etcd");
  }
  if (enable_multi_tenants && tenant_quota_connector_uri.empty()) {
    return bad(
        "--enable_multi_tenants needs --tenant_quota_connector_uri (a policy file path, or "
        "etcd host:port)");
  }
  if (require_tenant_tokens && tenant_tokens_file.empty() && !enable_multi_tenants) {
    return bad(
        "--require_tenant_tokens needs token hashes: give --tenant_tokens_file, or "
        "--enable_multi_tenants with token_sha256 in the policy (else no client could "
        "connect)");
  }
  if (tick_ms <= 0) return bad("tick must be positive, got ", tick_ms);
  if (enable_ha) {
    if (etcd_endpoints.empty()) {
      return bad("--enable_ha needs --etcd_endpoints (host:port[,host:port...])");
    }
    if (cluster_id.find('/') != std::string::npos) {
      return bad("--cluster_id '", cluster_id, "' must not contain '/' (it is an etcd key part)");
    }
    if (ha_lease_ttl_sec < 1 || ha_lease_ttl_sec > 3600) {
      return bad("--ha_lease_ttl_sec must be in 1..3600, got ", ha_lease_ttl_sec);
    }
    if (ha_margin_ms < 0 || ha_margin_ms >= ha_lease_ttl_sec * 1000) {
      return bad("the HA fencing margin must be in 0..TTL, got ", ha_margin_ms, " ms for a TTL of ",
                 ha_lease_ttl_sec, " s");
    }
  } else if (!etcd_endpoints.empty()) {
    return bad(
        "--etcd_endpoints is only used with --enable_ha (the quota policy's etcd is "
        "--tenant_quota_connector_uri)");
  }
  return absl::OkStatus();
}

}  // namespace granary::master
