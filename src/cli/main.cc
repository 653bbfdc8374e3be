// granary: command-line client. Exit status: 0 success, 1 not found or refused, 2 bad usage or
// the master cannot be reached.
#include <gflags/gflags.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/admin.h"
#include "cli/commands.h"
#include "cli/transfer.h"
#include "client/client_impl.h"
#include "common/etcd/etcd_client.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "granary/client.h"
#include "transport/topology.h"

DEFINE_string(master, "",
              "Master address host:port, or etcd://h1:2379;h2:2379 to follow the active master "
              "(default: config file, GRANARY_MASTER, or 127.0.0.1:50051)");
DEFINE_string(cluster_id, "",
              "With an etcd:// --master: the HA cluster (default: config file, "
              "GRANARY_CLUSTER_ID, or granary_cluster)");
DEFINE_string(tenant_id, "",
              "Tenant to act as (default: config file, GRANARY_TENANT_ID, or "
              "'default')");
DEFINE_string(tenant_token_file, "",
              "File holding the tenant's client token (default: config file tenant_token, or "
              "GRANARY_TENANT_TOKEN). A file, not a flag value, so the token stays out of ps");
DEFINE_string(config, "", "Client JSON config file (default: GRANARY_CONFIG_PATH)");
DEFINE_int32(replica_num, 0, "Replicas for put (default: config, or 1)");
DEFINE_string(size, "",
              "put: the value's exact size (e.g. 2GB). Needed to put more than 4 MB from stdin "
              "or a pipe: the master is asked for room for it before the input is read");
DEFINE_string(tier, "",
              "put: the tier the replicas go on: host, gpu, any (GPU while it has room, else "
              "host) or disk (the nodes' --disk_path tiers); empty = the tenant's default_tier");
DEFINE_uint32(limit, 1000, "Most keys ls prints");
DEFINE_string(model, "", "kvkey/lookup: model name");
DEFINE_string(hash_scheme, "", "kvkey/lookup: prefix hash scheme (e.g. sha256)");
DEFINE_string(adapter_id, "", "kvkey/lookup: LoRA adapter id (empty = none)");
DEFINE_bool(lease, false, "lookup: lease the present blocks");
DEFINE_bool(force, false,
            "rm: remove even a key a read lease holds (its reader then gets NOT_FOUND, never "
            "wrong bytes); a put in progress is refused all the same");
DEFINE_string(to, "", "copy/move: the destination node (node id or host:port from 'segments')");
DEFINE_string(log_level, "warning", "debug|info|warning|error");
DEFINE_string(admin, "",
              "Admin API HOST:PORT for tenants, nodes and health (default: the master's host "
              "and port 9003)");
DEFINE_string(admin_token_file, "",
              "File holding the admin bearer token (the master's --admin_token_file), for "
              "tenants set and tenants rm");
DEFINE_string(quota, "", "tenants set: the tenant's requested byte quota (e.g. 64GB)");
DEFINE_string(max_entries, "",
              "tenants set: the most entries the tenant may hold (its oldest are evicted "
              "beyond it); empty = no entry limit");
DEFINE_string(pool_spill, "",
              "tenants set: true lets a pooled tenant's puts spill to shared segments when its "
              "pool is full, false keeps them in the pool; empty = unchanged");
DEFINE_string(default_tier, "",
              "tenants set: where the tenant's puts go when a client names no tier: host, gpu "
              "or any (GPU while it has room, else host); empty = unchanged");
DEFINE_string(sysfs_root, "/sys", "topology: where the host's topology is read (tests)");
DEFINE_bool(deep, false, "health: also probe a node through the master (one round trip)");

namespace {

using granary::cli::Fail;
using granary::cli::kOk;
using granary::cli::kRefused;
using granary::cli::kUsage;
using granary::cli::Usage;

const char* kUsageText =
    "granary [--master=HOST:PORT] [--tenant_id=T] [--tenant_token_file=FILE] [--config=FILE] "
    "COMMAND ...\n"
    "  put KEY [FILE|-]    store FILE (or stdin) under KEY ([--tier=host|gpu|any]); more than\n"
    "                      4 MB from stdin or a pipe needs --size=SIZE\n"
    "  get KEY [FILE|-]    write KEY's value to FILE (or stdout)\n"
    "  rm KEY...           remove keys\n"
    "  exists KEY          exit 0 if KEY exists, 1 if not\n"
    "  stat KEY            size, replicas and age of KEY\n"
    "  ls [PREFIX]         list this tenant's keys\n"
    "  segments            list mounted segments\n"
    "  copy KEY --to NODE  add a replica of KEY on NODE (node id or host:port)\n"
    "  move KEY --to NODE  move a replica of KEY to NODE\n"
    "  kvkey encode HASH   print the structured key (--model, --hash_scheme, [--adapter_id])\n"
    "  kvkey decode KEY    print a structured key's fields\n"
    "  lookup HASH...      how many leading blocks of the chain are present (--model, ...)\n"
    "  topology            this host's GPUs, RDMA NICs, NUMA nodes and the NIC each GPU uses\n"
    "admin commands, over the admin API (--admin=HOST:PORT, --admin_token_file=FILE; with an\n"
    "etcd:// --master and no --admin, the active master's, as its master_view names it):\n"
    "  tenants             every tenant's quota, charge, in-flight bytes and entries\n"
    "  tenants set T --quota=SIZE [--max_entries=N] [--pool_spill=true|false]\n"
    "              [--default_tier=host|gpu|any]     create or change tenant T's quota\n"
    "  tenants rm T        delete tenant T (it must hold no objects)\n"
    "  nodes               nodes with their segments, tier, pool, NIC, NUMA node and usage\n"
    "  health              the master's status and role ([--deep]: probe a node too)\n";

absl::StatusOr<granary::ClientOptions> LoadOptions() {
  absl::StatusOr<granary::ClientOptions> o =
      FLAGS_config.empty() ? granary::ClientOptions::FromEnvironment()
                           : granary::ClientOptions::FromJsonFile(FLAGS_config);
  if (!o.ok()) return o;
  o->log_level = granary::common::GetLogLevel();  // --log_level, for the library's lines too
  if (!FLAGS_master.empty()) o->master_server_address = FLAGS_master;
  if (!FLAGS_cluster_id.empty()) o->cluster_id = FLAGS_cluster_id;
  if (!FLAGS_tenant_id.empty()) o->tenant_id = FLAGS_tenant_id;
  if (!FLAGS_tenant_token_file.empty()) {
    // A token is at most 256 bytes (the client refuses more), with whitespace around it.
    auto token = granary::cli::ReadSmallFile(FLAGS_tenant_token_file, 4096);
    if (!token.ok()) return token.status();
    // Like --admin_token_file on the master: surrounding whitespace (the final newline) is
    // not part of the token.
    o->tenant_token = std::string(absl::StripAsciiWhitespace(*token));
    if (o->tenant_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tenant_token_file '", FLAGS_tenant_token_file, "' is empty"));
    }
  }
  if (FLAGS_replica_num != 0) o->replica_num = FLAGS_replica_num;
  absl::Status st = o->Validate();
  if (!st.ok()) return st;
  return o;
}

// The argument counts each command takes; kOk when they fit, else the usage error's code.
int CheckArgs(const std::string& cmd, const std::vector<std::string>& args) {
  static const std::vector<std::string> kCommands = {
      "put",  "get",   "rm",     "exists",  "stat",  "ls",     "segments", "copy",
      "move", "kvkey", "lookup", "tenants", "nodes", "health", "topology"};
  if (std::find(kCommands.begin(), kCommands.end(), cmd) == kCommands.end()) {
    return Usage("unknown command '" + cmd + "'");
  }
  auto need = [&](size_t lo, size_t hi) { return args.size() >= lo && args.size() <= hi; };
  if ((cmd == "put" || cmd == "get") && !need(1, 2)) return Usage(cmd + " takes KEY [FILE|-]");
  if ((cmd == "exists" || cmd == "stat") && !need(1, 1)) return Usage(cmd + " takes one KEY");
  if (cmd == "rm" && args.empty()) return Usage("rm takes one or more KEYs");
  if (cmd == "ls" && !need(0, 1)) return Usage("ls takes at most one PREFIX");
  if (cmd == "segments" && !args.empty()) return Usage("segments takes no arguments");
  if ((cmd == "copy" || cmd == "move") && (!need(1, 1) || FLAGS_to.empty())) {
    return Usage(cmd + " takes one KEY and --to=NODE");
  }
  if (cmd == "kvkey" && (args.size() != 2 || (args[0] != "encode" && args[0] != "decode"))) {
    return Usage("kvkey takes 'encode HASH' or 'decode KEY'");
  }
  if (cmd == "lookup" && (args.empty() || FLAGS_model.empty() || FLAGS_hash_scheme.empty())) {
    return Usage("lookup takes HASH... with --model and --hash_scheme");
  }
  if ((cmd == "nodes" || cmd == "health" || cmd == "topology") && !args.empty()) {
    return Usage(cmd + " takes no arguments");
  }
  if (cmd == "tenants" && !args.empty() &&
      !(args.size() == 2 && (args[0] == "set" || args[0] == "rm"))) {
    return Usage("tenants takes no arguments, 'set TENANT --quota=SIZE' or 'rm TENANT'");
  }
  if (cmd == "tenants" && !args.empty() && args[0] == "set" && FLAGS_quota.empty()) {
    return Usage("tenants set takes --quota=SIZE");
  }
  if (cmd != "put" && !FLAGS_tier.empty()) return Usage("--tier goes with put");
  if (cmd != "put" && !FLAGS_size.empty()) return Usage("--size goes with put");
  if (cmd == "tenants" && (args.empty() || args[0] != "set") &&
      (!FLAGS_quota.empty() || !FLAGS_max_entries.empty() || !FLAGS_pool_spill.empty() ||
       !FLAGS_default_tier.empty())) {
    return Usage("--quota, --max_entries, --pool_spill and --default_tier go with 'tenants set'");
  }
  return kOk;
}

// tenants set: --quota and --max_entries parsed; nullopt (after the usage message) when bad.
std::optional<granary::cli::TenantSetting> ParseTenantSetting(int* rc) {
  granary::cli::TenantSetting t;
  auto quota = granary::common::ParseSize(FLAGS_quota);
  if (!quota.ok()) {
    *rc = Usage(absl::StrCat("--quota '", FLAGS_quota, "': ", quota.status().message()));
    return std::nullopt;
  }
  t.quota_bytes = *quota;
  if (!FLAGS_max_entries.empty()) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(FLAGS_max_entries, &n)) {
      *rc = Usage(
          absl::StrCat("--max_entries '", FLAGS_max_entries, "' is not a whole number of entries"));
      return std::nullopt;
    }
    t.max_entries = n;
  }
  if (FLAGS_pool_spill == "true" || FLAGS_pool_spill == "false") {
    t.pool_spill = FLAGS_pool_spill == "true";
  } else if (!FLAGS_pool_spill.empty()) {
    *rc = Usage(absl::StrCat("--pool_spill '", FLAGS_pool_spill, "' is not true or false"));
    return std::nullopt;
  }
  if (!FLAGS_default_tier.empty()) {
    absl::StatusOr<granary::common::TierPreference> tier =
        granary::common::ParseTierPreference(FLAGS_default_tier);
    if (!tier.ok()) {
      *rc = Usage(absl::StrCat("--default_tier: ", tier.status().message()));
      return std::nullopt;
    }
    t.default_tier = FLAGS_default_tier;
  }
  return t;
}

// The admin address ("HOST:PORT") of the master that leads the etcd:// cluster `master` names.
absl::StatusOr<std::string> AdminOfActiveMaster(const std::string& master,
                                                const std::string& cluster_id) {
  GRANARY_RETURN_IF_ERROR(granary::etcd::ValidateMasterAddress("--master", master, cluster_id));
  GRANARY_ASSIGN_OR_RETURN(
      std::unique_ptr<granary::etcd::EtcdClient> etcd,
      granary::etcd::EtcdClient::Create(*granary::etcd::EndpointsOfMasterAddress(master), 3000));
  GRANARY_ASSIGN_OR_RETURN(granary::etcd::MasterView view,
                           granary::etcd::ReadMasterView(etcd.get(), cluster_id));
  if (view.admin.empty()) {
    return absl::UnavailableError(
        absl::StrCat(granary::etcd::MasterViewKey(cluster_id),
                     " names no admin address (a master older than this CLI?): give --admin"));
  }
  return view.admin;
}

// tenants, nodes, health: the admin API, no master session.
int RunAdminCommand(const std::string& cmd, const std::vector<std::string>& args) {
  std::optional<granary::cli::TenantSetting> setting;
  if (cmd == "tenants" && !args.empty() && args[0] == "set") {
    int rc = kOk;
    setting = ParseTenantSetting(&rc);
    if (!setting.has_value()) return rc;
  }
  std::string master = FLAGS_master, cluster_id = FLAGS_cluster_id;
  if (FLAGS_admin.empty() && (master.empty() || cluster_id.empty())) {
    // The master address (and cluster) from the config or the environment.
    auto options = LoadOptions();
    if (!options.ok()) return Usage(std::string(options.status().message()));
    master = options->master_server_address;
    cluster_id = options->cluster_id;
  }
  std::string admin = FLAGS_admin;
  if (admin.empty() && granary::etcd::EndpointsOfMasterAddress(master).has_value()) {
    // HA: the active master's admin API, as its master_view names it.
    auto view = AdminOfActiveMaster(master, cluster_id);
    if (!view.ok()) {
      std::cerr << "granary: " << view.status().message() << "\n";
      return granary::cli::kUsage;  // as when the admin API cannot be reached
    }
    admin = *view;
  }
  auto target = granary::cli::ResolveAdminTarget(admin, master, FLAGS_admin_token_file);
  if (!target.ok()) return Usage(std::string(target.status().message()));
  if (cmd == "tenants") return granary::cli::RunTenants(*target, args, setting);
  if (cmd == "nodes") return granary::cli::RunNodes(*target);
  return granary::cli::RunHealth(*target, FLAGS_deep);
}

std::optional<std::string> AdapterFlag() {
  if (FLAGS_adapter_id.empty()) return std::nullopt;
  return FLAGS_adapter_id;
}

// kvkey encode HASH | decode KEY: pure, needs no master.
int RunKvKey(const std::vector<std::string>& args) {
  if (args[0] == "encode") {
    granary::KvKey k{FLAGS_model, FLAGS_hash_scheme, AdapterFlag(), args[1]};
    if (absl::Status st = granary::ValidateKvKey(k); !st.ok()) {
      return Usage(std::string(st.message()));
    }
    std::cout << granary::EncodeKvKey(k) << "\n";
    return kOk;
  }
  auto k = granary::DecodeKvKey(args[1]);
  if (!k.ok()) return Fail("kvkey decode", k.status());
  std::cout << "model: " << k->model << "\nhash_scheme: " << k->hash_scheme
            << "\nadapter_id: " << (k->adapter_id ? *k->adapter_id : "(none)")
            << "\nprefix_hash: " << k->prefix_hash << "\n";
  return kOk;
}

// topology: this host's matrix (transport/topology.h), read from --sysfs_root; no master.
int RunTopology() {
  auto t = granary::transport::Topology::Read(FLAGS_sysfs_root);
  if (!t.ok()) return Usage(std::string(t.status().message()));
  std::cout << t->Report();
  return kOk;
}

}  // namespace

namespace granary::cli {

int Usage(const std::string& why) {
  std::cerr << "granary: " << why << "\n\n" << kUsageText;
  return kUsage;
}

// Exit status for a failed operation: unreachable master is 2, everything else 1.
int Fail(const std::string& what, const absl::Status& st) {
  std::cerr << "granary: " << what << ": "
            << st.ToString(absl::StatusToStringMode::kWithNoExtraData) << "\n";
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ? kUsage : kRefused;
}

}  // namespace granary::cli

namespace {

// A CLI process makes one call and exits, so it asks UCX for small shared-memory receive pools.
// By default each of the two shared-memory transports (sysv and posix) allocates and zeroes
// 512 receive buffers of 8 KiB when the worker is created, 8.4 MB in all, while one put or get
// receives a few messages: measured on the 2-core VM, a cold put then took 2,065 page faults
// and 28-34 ms of CPU, with 128 buffers (one allocation of 1 MB per transport, which covers
// what the worker posts at creation) 1,300 and 22-24 ms. The pools still grow on demand. Set
// in the environment before any thread exists (setenv is not thread-safe), and only where the
// user set nothing: UCX_SYSV_RX_BUFS_GROW and UCX_POSIX_RX_BUFS_GROW win. Long-running clients
// (the library, Python) keep UCX's defaults.
void UseSmallUcxReceivePools() {
  setenv("UCX_SYSV_RX_BUFS_GROW", "128", /*overwrite=*/0);
  setenv("UCX_POSIX_RX_BUFS_GROW", "128", /*overwrite=*/0);
}

}  // namespace

int main(int argc, char** argv) {
  UseSmallUcxReceivePools();
  gflags::SetUsageMessage(kUsageText);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  granary::common::ConfigureMutexDeadlockDetection();
  granary::LogLevel level;
  if (!granary::common::ParseLogLevel(FLAGS_log_level, &level)) {
    return Usage("--log_level '" + FLAGS_log_level + "' is not one of debug|info|warning|error");
  }
  granary::common::SetLogLevel(level);
  if (argc < 2) return Usage("no command given");
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (int rc = CheckArgs(cmd, args); rc != kOk) return rc;
  if (cmd == "kvkey") return RunKvKey(args);
  if (cmd == "topology") return RunTopology();
  if (cmd == "tenants" || cmd == "nodes" || cmd == "health") return RunAdminCommand(cmd, args);

  auto options = LoadOptions();
  if (!options.ok()) return Usage(std::string(options.status().message()));
  // The implementation itself: put asks the master for room (PutStart) before reading.
  auto client = granary::client::ClientImpl::Create(*options);
  if (!client.ok()) return Fail("connecting to " + options->master_server_address, client.status());
  const granary::cli::CommandFlags flags{.tier = FLAGS_tier,
                                         .size = FLAGS_size,
                                         .force = FLAGS_force,
                                         .limit = FLAGS_limit,
                                         .model = FLAGS_model,
                                         .hash_scheme = FLAGS_hash_scheme,
                                         .adapter_id = AdapterFlag(),
                                         .lease = FLAGS_lease,
                                         .to = FLAGS_to};
  return granary::cli::RunCommand(**client, cmd, args, flags);
}
