// granary_master: metadata, placement and admin HTTP for a Granary cluster.
#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "master/master_options.h"
#include "master/master_server.h"

using granary::master::MasterOptions;

// Every default is MasterOptions' own (master_options.h), converted where the flag's unit
// differs; docs/flags.md lists them as --helpfull prints them.
DEFINE_uint32(rpc_port, MasterOptions{}.rpc_port,
              "RPC port for clients and nodes (0 = any free port)");
DEFINE_string(rpc_host, MasterOptions{}.rpc_host,
              "Interface the RPC port binds (127.0.0.1: this host only; :: for IPv6)");
DEFINE_uint32(metrics_port, MasterOptions{}.metrics_port,
              "HTTP port for /metrics, /health and /api/v1 (0 = any)");
DEFINE_string(metrics_host, MasterOptions{}.metrics_host, "HTTP bind address");
DEFINE_string(cluster_id, MasterOptions{}.cluster_id, "Cluster name (etcd key prefix)");
DEFINE_double(client_ttl, MasterOptions{}.client_ttl_ms / 1000.0,
              "Seconds without a heartbeat after which a session is dead");
DEFINE_int64(write_window_ms, MasterOptions{}.write_window_ms,
             "How long after its PutStart a client may write the granted space (then it cancels "
             "and the put fails UNAVAILABLE); 0: min(2000, put_start_timeout_sec)");
DEFINE_int64(restart_quarantine_margin_ms, MasterOptions{}.restart_quarantine_margin_ms,
             "After a restart or takeover, unreported space of re-mounted segments stays unused "
             "for the write window plus this margin (late writers of the previous master)");
DEFINE_int64(aborted_put_hold_ms, MasterOptions{}.aborted_put_hold_ms,
             "How long the space of a put aborted before its commit stays unused (cancelled tcp "
             "writes may still land); -1: 2 x client_ttl + restart_quarantine_margin_ms");
DEFINE_double(put_start_timeout_sec, MasterOptions{}.put_start_timeout_ms / 1000.0,
              "Seconds an allocation may stay uncommitted before it is freed");
DEFINE_uint64(default_kv_lease_ttl, static_cast<uint64_t>(MasterOptions{}.kv_lease_ttl_ms),
              "Read lease granted by Get, in milliseconds");
DEFINE_double(eviction_high_watermark_ratio, MasterOptions{}.eviction_high_watermark_ratio,
              "Evict when used/capacity exceeds this");
DEFINE_double(eviction_ratio, MasterOptions{}.eviction_ratio,
              "Fraction of capacity one eviction round frees");
DEFINE_bool(enable_multi_tenants, MasterOptions{}.enable_multi_tenants,
            "Enforce per-tenant byte quota at allocation time");
DEFINE_string(tenant_quota_connector_type, MasterOptions{}.tenant_quota_connector_type,
              "Where the quota policy lives: file or etcd");
DEFINE_string(tenant_quota_connector_uri, MasterOptions{}.tenant_quota_connector_uri,
              "Policy file path (file) or etcd endpoints host:port[,host:port] (etcd)");
DEFINE_string(admin_token_file, MasterOptions{}.admin_token_file,
              "File holding a bearer token that every mutating admin endpoint requires");
DEFINE_string(tenant_tokens_file, MasterOptions{}.tenant_tokens_file,
              "File of '<tenant> <sha256hex>' lines: a client hello for such a tenant must carry "
              "a token whose SHA-256 matches (overrides the policy's token_sha256)");
DEFINE_bool(require_tenant_tokens, MasterOptions{}.require_tenant_tokens,
            "Refuse a client hello for a tenant that has no token hash (file or policy)");
DEFINE_string(log_level, "info", "debug|info|warning|error");
DEFINE_bool(enable_ha, MasterOptions{}.enable_ha,
            "Campaign for leadership on etcd (--etcd_endpoints); only the elected master admits "
            "mutating requests, the others stand by and take over when it goes");
DEFINE_string(etcd_endpoints, MasterOptions{}.etcd_endpoints,
              "etcd endpoints for --enable_ha: host:port[,host:port...]");
DEFINE_int64(ha_lease_ttl_sec, MasterOptions{}.ha_lease_ttl_sec,
             "The leader's etcd lease TTL; a standby takes over at most about this long after "
             "the leader dies (at once on a graceful stop)");
DEFINE_string(ha_advertise_host, MasterOptions{}.ha_advertise_host,
              "Host written into the master view with the RPC and admin ports (default: "
              "--metrics_host unless 0.0.0.0, else the host name)");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("granary_master [flags]");
  // The command line as given (gflags removes the flags it parsed): an HA restart reuses it.
  std::vector<std::string> args(argv, argv + argc);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  granary::common::ConfigureMutexDeadlockDetection();
  granary::LogLevel level;
  if (!granary::common::ParseLogLevel(FLAGS_log_level, &level)) {
    fprintf(stderr, "granary_master: --log_level '%s' is not one of debug|info|warning|error\n",
            FLAGS_log_level.c_str());
    return 2;
  }
  granary::common::SetLogLevel(level);
  if (FLAGS_rpc_port > 65535 || FLAGS_metrics_port > 65535) {
    fprintf(stderr, "granary_master: ports must be 0..65535 (rpc_port=%u metrics_port=%u)\n",
            FLAGS_rpc_port, FLAGS_metrics_port);
    return 2;
  }
  MasterOptions o;
  o.rpc_port = static_cast<uint16_t>(FLAGS_rpc_port);
  o.rpc_host = FLAGS_rpc_host;
  o.metrics_port = static_cast<uint16_t>(FLAGS_metrics_port);
  o.metrics_host = FLAGS_metrics_host;
  o.cluster_id = FLAGS_cluster_id;
  o.client_ttl_ms = static_cast<int64_t>(FLAGS_client_ttl * 1000);
  o.put_start_timeout_ms = static_cast<int64_t>(FLAGS_put_start_timeout_sec * 1000);
  o.write_window_ms = FLAGS_write_window_ms;
  o.restart_quarantine_margin_ms = FLAGS_restart_quarantine_margin_ms;
  o.aborted_put_hold_ms = FLAGS_aborted_put_hold_ms;
  o.kv_lease_ttl_ms = static_cast<int64_t>(FLAGS_default_kv_lease_ttl);
  o.eviction_high_watermark_ratio = FLAGS_eviction_high_watermark_ratio;
  o.eviction_ratio = FLAGS_eviction_ratio;
  o.enable_multi_tenants = FLAGS_enable_multi_tenants;
  o.tenant_quota_connector_type = FLAGS_tenant_quota_connector_type;
  o.tenant_quota_connector_uri = FLAGS_tenant_quota_connector_uri;
  o.admin_token_file = FLAGS_admin_token_file;
  o.tenant_tokens_file = FLAGS_tenant_tokens_file;
  o.require_tenant_tokens = FLAGS_require_tenant_tokens;
  o.enable_ha = FLAGS_enable_ha;
  o.etcd_endpoints = FLAGS_etcd_endpoints;
  o.ha_lease_ttl_sec = FLAGS_ha_lease_ttl_sec;
  o.ha_advertise_host = FLAGS_ha_advertise_host;

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto server = granary::master::MasterServer::Create(o);
  if (!server.ok()) {
    fprintf(stderr, "granary_master: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::thread([&set, s = server->get()] {
    while (true) {
      int sig = 0;
      sigwait(&set, &sig);
      if (sig == SIGHUP) {
        absl::Status st = s->ReloadPolicy();
        GRANARY_LOG_INFO << "SIGHUP: tenant quota policy reload: "
                         << (st.ok() ? "OK" : st.ToString());
        continue;
      }
      GRANARY_LOG_INFO << "signal " << sig << ": shutting down";
      s->Shutdown();
      return;
    }
  }).detach();
  (*server)->Wait();
  const bool restart = (*server)->restart_requested();
  server->reset();
  if (restart) {
    // HA: this master led and was fenced; its tables are stale. Start over as a fresh standby
    // (same flags), which rebuilds from the nodes if it is elected. Everything it held (UCX,
    // sockets) was closed by the reset; close_range covers anything left.
    GRANARY_LOG_INFO << "HA: restarting as a fresh standby";
    std::vector<char*> exec_argv;
    for (std::string& a : args) exec_argv.push_back(a.data());
    exec_argv.push_back(nullptr);
    close_range(3, ~0U, 0);
    execv("/proc/self/exe", exec_argv.data());
    fprintf(stderr, "granary_master: restarting failed: %s\n", strerror(errno));
    return 1;
  }
  return 0;
}
