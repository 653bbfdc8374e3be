// granary: command-line client. Exit status: 0 success, 1 not found or refused, 2 bad usage or
// the master cannot be reached.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/admin.h"
#include "client/client_impl.h"
#include "common/clock.h"
#include "common/etcd/etcd_client.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/quote.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/tier_preference.h"
#include "granary/client.h"
#include "granary/error_reason.h"
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
              "put: the tier the replicas go on: host, gpu or any (GPU while it has room, else "
              "host); empty = the tenant's default_tier");
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

using granary::cli::kOk;
using granary::cli::kRefused;
using granary::cli::kUsage;

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

// A progress line on stderr for long transfers: "\r<what>: <bytes> of <total> (<rate>)",
// redrawn at most every 100 ms, and only when stderr is a terminal (never in a pipe or a log).
// Update and Done are called by one thread (the command's), Tick by the ticker thread of a
// transfer; one mutex orders their writes.
class Progress {
 public:
  Progress(std::string what, uint64_t total)
      : what_(std::move(what)), total_(total), on_(isatty(2) == 1), t0_(granary::MonotonicUs()) {}
  ~Progress() { Done(); }
  bool on() const { return on_; }
  // `done` bytes of the phase `phase` ("read", "sent", "written") are through.
  void Update(const char* phase, uint64_t done) {
    if (!on_) return;
    granary::MutexLock lock(&mu_);
    const int64_t now = granary::MonotonicUs();
    if (now - last_us_ < 100'000 && done < total_) return;
    last_us_ = now;
    const double s = static_cast<double>(std::max<int64_t>(now - t0_, 1)) / 1e6;
    std::string line = absl::StrFormat("%s: %s %s", what_, granary::FormatSize(done), phase);
    if (total_ > 0) {
      absl::StrAppendFormat(&line, " of %s (%.0f%%)", granary::FormatSize(total_),
                            100.0 * static_cast<double>(done) / static_cast<double>(total_));
    }
    absl::StrAppendFormat(&line, ", %s/s, %.1f s",
                          granary::FormatSize(static_cast<uint64_t>(static_cast<double>(done) / s)),
                          s);
    fprintf(stderr, "\r\033[K%s", line.c_str());
    drawn_ = true;
  }
  // The transfer itself is one call: while it runs, a line says how long it has taken.
  template <typename F>
  auto Around(const char* phase, F&& call) {
    if (!on_) return call();
    std::atomic<bool> finished{false};
    std::thread ticker([&] {
      while (!finished.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (finished.load()) break;
        granary::MutexLock lock(&mu_);
        const double s = static_cast<double>(granary::MonotonicUs() - t0_) / 1e6;
        fprintf(stderr, "\r\033[K%s: %s %s, %.1f s", what_.c_str(), phase,
                granary::FormatSize(total_).c_str(), s);
        drawn_ = true;
      }
    });
    auto result = call();
    finished.store(true);
    ticker.join();
    return result;
  }
  // Clears the line, so the command's own summary line follows on a clean terminal.
  void Done() {
    granary::MutexLock lock(&mu_);
    if (drawn_) fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  const std::string what_;
  const uint64_t total_;
  const bool on_;
  const int64_t t0_;
  granary::Mutex mu_;
  int64_t last_us_ ABSL_GUARDED_BY(mu_) = 0;
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads from `fd` into `data` (appending) until it holds `limit` bytes or the input ends.
absl::Status ReadUpTo(int fd, const std::string& what, size_t limit, std::string* data,
                      Progress* progress) {
  char buf[1 << 16];
  while (data->size() < limit) {
    ssize_t n = read(fd, buf, std::min(sizeof(buf), limit - data->size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("reading ", what, ": ", strerror(errno)));
    }
    if (n == 0) break;
    data->append(buf, n);
    if (progress != nullptr) progress->Update("read", data->size());
  }
  return absl::OkStatus();
}

// Reads a small file whole (the token file), refusing one that holds more than `limit` bytes
// (a device such as /dev/zero is never read to its end).
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", strerror(errno)));
  }
  std::string data;
  absl::Status st = ReadUpTo(fd, "'" + path + "'", limit + 1, &data, nullptr);
  close(fd);
  if (!st.ok()) return st;
  if (data.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' holds more than ", limit, " bytes"));
  }
  return data;
}

absl::Status WriteAll(const std::string& path, const std::string& data,
                      Progress* progress = nullptr) {
  int fd = path == "-" ? 1 : open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create '", path, "': ", strerror(errno)));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (fd != 1) close(fd);
      return absl::InternalError(absl::StrCat("writing '", path, "': ", strerror(errno)));
    }
    off += n;
    if (progress != nullptr) progress->Update("written", off);
  }
  if (fd != 1) close(fd);
  return absl::OkStatus();
}

std::string Rate(uint64_t bytes, int64_t us) {
  double gbps = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
  return absl::StrFormat("%s in %.3f ms (%.2f GB/s)", granary::FormatSize(bytes), us / 1000.0,
                         gbps);
}

absl::StatusOr<granary::ClientOptions> LoadOptions() {
  absl::StatusOr<granary::ClientOptions> o =
      FLAGS_config.empty() ? granary::ClientOptions::FromEnvironment()
                           : granary::ClientOptions::FromJsonFile(FLAGS_config);
  if (!o.ok()) return o;
  o->log_level = granary::GetLogLevel();  // --log_level, for the library's lines too
  if (!FLAGS_master.empty()) o->master_server_address = FLAGS_master;
  if (!FLAGS_cluster_id.empty()) o->cluster_id = FLAGS_cluster_id;
  if (!FLAGS_tenant_id.empty()) o->tenant_id = FLAGS_tenant_id;
  if (!FLAGS_tenant_token_file.empty()) {
    // A token is at most 256 bytes (the client refuses more), with whitespace around it.
    auto token = ReadSmallFile(FLAGS_tenant_token_file, 4096);
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
  auto quota = granary::ParseSize(FLAGS_quota);
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
    absl::StatusOr<granary::TierPreference> tier = granary::ParseTierPreference(FLAGS_default_tier);
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

// Files at least this large get a progress line on a terminal.
constexpr uint64_t kProgressBytes = 64ull << 20;

// The most put reads from stdin or a pipe before the master has been asked for room: without
// --size, an input that holds more is refused after this much.
constexpr size_t kUnsizedInputBytes = 4u << 20;

// Phase one of the put of `size` bytes under `key`: the master's answer (quota, space, a key
// that exists) before any of the value is read. The grant must be finished (FinishPut) within
// the write window or it is revoked.
absl::StatusOr<granary::client::ClientImpl::PutGrant> AskForRoom(granary::client::ClientImpl& c,
                                                                 const std::string& key,
                                                                 uint64_t size, uint32_t flags) {
  absl::StatusOr<granary::client::ClientImpl::PutGrant> grant = c.BeginPut({key}, {size}, flags);
  if (!grant.ok()) return grant.status();
  GRANARY_RETURN_IF_ERROR(grant->reply.status.ToStatus());
  GRANARY_RETURN_IF_ERROR(grant->reply.results[0].status.ToStatus());
  return grant;
}

// Gives a grant back (the input turned out not to match it).
void GiveBack(granary::client::ClientImpl& c, const std::string& key,
              const granary::client::ClientImpl::PutGrant& grant) {
  granary::proto::KeyGenRequest revoke;
  revoke.entries.push_back({key, grant.reply.results[0].generation, 0});
  (void)c.Call<granary::proto::KeyGenRequest, granary::proto::BatchStatusReply>(
      granary::proto::MsgType::kPutRevoke, revoke);
}

int RunPut(granary::client::ClientImpl& c, const std::vector<std::string>& args) {
  granary::PutOptions options;  // the tenant's default tier unless --tier names one
  std::optional<granary::TierPreference> tier_preference;
  if (!FLAGS_tier.empty()) {
    absl::StatusOr<granary::StorageTier> tier = granary::ParseStorageTier(FLAGS_tier);
    if (!tier.ok()) return Usage(absl::StrCat("--tier: ", tier.status().message()));
    options.tier = *tier;
    tier_preference = *granary::ParseTierPreference(FLAGS_tier);
  }
  std::optional<uint64_t> size_flag;
  if (!FLAGS_size.empty()) {
    absl::StatusOr<uint64_t> n = granary::ParsePositiveSize(FLAGS_size);
    if (!n.ok()) return Usage(absl::StrCat("--size: ", n.status().message()));
    size_flag = *n;
  }
  const std::string& key = args[0];
  const std::string what = "put " + granary::QuotedKey(key);
  const std::string path = args.size() > 1 ? args[1] : "-";
  const std::string input = path == "-" ? "stdin" : "'" + path + "'";
  int fd = path == "-" ? 0 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Usage(absl::StrCat("cannot open ", input, ": ", strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd != 0) close(fd);
    }
  } closer{fd};
  // The size: a regular file's own, else --size's, else unknown (stdin, a pipe, a device).
  std::optional<uint64_t> size = size_flag;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const auto file_size = static_cast<uint64_t>(st.st_size);
    if (size_flag.has_value() && *size_flag != file_size) {
      return Usage(absl::StrCat("--size ", *size_flag, " does not match ", input, ", which holds ",
                                file_size, " bytes"));
    }
    size = file_size;
  }
  std::optional<Progress> progress;
  if (size.value_or(0) >= kProgressBytes || path == "-") {
    progress.emplace("put " + granary::EscapeUnprintable(key), size.value_or(0));
  }
  std::string data;
  std::optional<granary::client::ClientImpl::PutGrant> grant;
  if (!size.has_value()) {
    // One chunk at most, then the input must have ended.
    absl::Status read =
        ReadUpTo(fd, input, kUnsizedInputBytes + 1, &data, progress ? &*progress : nullptr);
    if (!read.ok()) return Usage(std::string(read.message()));
    if (data.size() > kUnsizedInputBytes) {
      return Usage(absl::StrCat(input, " holds more than ", granary::FormatSize(kUnsizedInputBytes),
                                ": give --size=SIZE (its exact size), so that the master is asked "
                                "for room before the rest is read"));
    }
  } else {
    // More than a chunk: the master is asked first (phase one of the put), so a refusal comes
    // before any of the input is read, and the bytes read go into that grant.
    if (*size > kUnsizedInputBytes) {
      auto g = AskForRoom(c, key, *size, granary::proto::PutTierFlags(tier_preference));
      if (!g.ok()) return Fail(what, g.status());
      grant = std::move(*g);
    }
    data.reserve(*size);
    absl::Status read = ReadUpTo(fd, input, *size, &data, progress ? &*progress : nullptr);
    std::string extra;
    if (read.ok() && data.size() == *size) read = ReadUpTo(fd, input, 1, &extra, nullptr);
    std::string bad;
    if (!read.ok()) {
      bad = std::string(read.message());
    } else if (data.size() < *size) {
      bad = absl::StrCat(input, " ended after ", data.size(), " bytes; --size says ", *size);
    } else if (!extra.empty()) {
      bad = absl::StrCat(input, " holds more than the ", *size, " bytes --size says");
    }
    if (!bad.empty()) {
      if (grant.has_value()) GiveBack(c, key, *grant);
      return Usage(bad);
    }
  }
  int64_t t0 = granary::MonotonicUs();
  auto put = [&] {
    if (grant.has_value()) {
      absl::Status st = c.FinishPut({key}, {data.data()}, {data.size()}, *grant)[0];
      // The write window passed while the input was read (a slow pipe), or the master
      // changed: the grant is gone, and the bytes are here now; a put of its own, once.
      if (!absl::IsUnavailable(st)) return st;
    }
    return c.BatchPutWith({key}, {data}, options)[0];
  };
  absl::Status put_status =
      progress && data.size() >= kProgressBytes ? progress->Around("sending", put) : put();
  int64_t us = granary::MonotonicUs() - t0;
  if (progress) progress->Done();
  if (!put_status.ok()) return Fail(what, put_status);
  std::cerr << "put " << granary::EscapeUnprintable(key) << ": " << Rate(data.size(), us) << "\n";
  return kOk;
}

int RunGet(granary::Client& c, const std::vector<std::string>& args) {
  // On a terminal, the size first (one metadata call), so that a large value gets its
  // progress line; elsewhere no line is drawn, and the call is not made.
  std::optional<Progress> progress;
  if (isatty(2) == 1) {
    auto info = c.Stat(args[0]);
    if (info.ok() && info->size >= kProgressBytes) {
      progress.emplace("get " + granary::EscapeUnprintable(args[0]), info->size);
    }
  }
  int64_t t0 = granary::MonotonicUs();
  auto v =
      progress ? progress->Around("receiving", [&] { return c.Get(args[0]); }) : c.Get(args[0]);
  int64_t us = granary::MonotonicUs() - t0;
  if (!v.ok()) return Fail("get " + granary::QuotedKey(args[0]), v.status());
  absl::Status st = WriteAll(args.size() > 1 ? args[1] : "-", *v, progress ? &*progress : nullptr);
  if (progress) progress->Done();
  if (!st.ok()) return Fail("get " + granary::QuotedKey(args[0]), st);
  std::cerr << "get " << granary::EscapeUnprintable(args[0]) << ": " << Rate(v->size(), us) << "\n";
  return kOk;
}

int RunRemove(granary::Client& c, const std::vector<std::string>& args) {
  auto results = c.BatchRemove(args, FLAGS_force);
  int rc = kOk;
  for (size_t i = 0; i < args.size(); ++i) {
    if (results[i].ok()) continue;
    rc = std::max(rc, Fail("rm " + granary::QuotedKey(args[i]), results[i]));
    if (granary::ErrorReasonOf(results[i]) == granary::ErrorReason::kHasLease) {
      std::cerr << "granary: (HAS_LEASE: rm --force removes it anyway; its reader then gets "
                   "NOT_FOUND, never wrong bytes)\n";
    }
  }
  return rc;
}

int RunExists(granary::Client& c, const std::vector<std::string>& args) {
  auto e = c.Exist(args[0]);
  if (!e.ok()) return Fail("exists " + granary::QuotedKey(args[0]), e.status());
  std::cout << args[0] << (*e ? " exists" : " does not exist") << "\n";
  return *e ? kOk : kRefused;
}

int RunStat(granary::Client& c, const std::vector<std::string>& args) {
  auto s = c.Stat(args[0]);
  if (!s.ok()) return Fail("stat " + granary::QuotedKey(args[0]), s.status());
  std::cout << "key: " << s->key << "\nsize: " << s->size << " (" << granary::FormatSize(s->size)
            << ")\nstate: " << (s->complete ? "complete" : "processing")
            << "\nreplicas: " << s->replicas << "\ngeneration: " << s->generation
            << "\nage_ms: " << s->age_ms << "\n";
  return kOk;
}

int RunList(granary::Client& c, const std::vector<std::string>& args) {
  auto r = c.List(args.empty() ? "" : args[0], FLAGS_limit);
  if (!r.ok()) return Fail("ls", r.status());
  for (const auto& o : r->objects) {
    std::cout << absl::StrFormat("%12d  %s  %s\n", o.size, o.complete ? "complete  " : "processing",
                                 o.key);
  }
  if (r->more) std::cerr << "(more keys: raise --limit or narrow the prefix)\n";
  return kOk;
}

int RunLookup(granary::Client& c, const std::vector<std::string>& args) {
  auto r = c.LookupPrefix(FLAGS_model, FLAGS_hash_scheme, AdapterFlag(), args, FLAGS_lease);
  if (!r.ok()) return Fail("lookup", r.status());
  std::cout << "present: " << r->present << " of " << args.size() << "\n";
  for (const auto& b : r->blocks) {
    std::cout << absl::StrFormat("%12d  %-22s %s\n", b.size, b.node_address, b.key);
  }
  return kOk;
}

int RunCopyOrMove(granary::Client& c, const std::string& cmd,
                  const std::vector<std::string>& args) {
  int64_t t0 = granary::MonotonicUs();
  absl::Status st = cmd == "copy" ? c.Copy(args[0], FLAGS_to) : c.Move(args[0], FLAGS_to);
  if (!st.ok()) return Fail(cmd + " " + granary::QuotedKey(args[0]) + " to " + FLAGS_to, st);
  std::cerr << cmd << " " << granary::EscapeUnprintable(args[0]) << " to " << FLAGS_to
            << ": done in " << (granary::MonotonicUs() - t0) / 1000.0 << " ms\n";
  return kOk;
}

int RunSegments(granary::Client& c) {
  auto r = c.Segments();
  if (!r.ok()) return Fail("segments", r.status());
  std::cout << absl::StrFormat("%-18s %-6s %-10s %-24s %12s %12s %s\n", "ID", "TIER", "NAME",
                               "NODE", "SIZE", "USED", "POOL");
  for (const auto& s : *r) {
    std::cout << absl::StrFormat("%-18d %-6s %-10s %-24s %12s %12s %s\n", s.segment_id, s.tier,
                                 s.name, s.node_address, granary::FormatSize(s.size),
                                 granary::FormatSize(s.used), s.pool.empty() ? "-" : s.pool);
  }
  return kOk;
}

// A command that talks to the master, its arguments already checked.
int RunCommand(granary::client::ClientImpl& c, const std::string& cmd,
               const std::vector<std::string>& args) {
  if (cmd == "put") return RunPut(c, args);
  if (cmd == "get") return RunGet(c, args);
  if (cmd == "rm") return RunRemove(c, args);
  if (cmd == "exists") return RunExists(c, args);
  if (cmd == "stat") return RunStat(c, args);
  if (cmd == "ls") return RunList(c, args);
  if (cmd == "lookup") return RunLookup(c, args);
  if (cmd == "copy" || cmd == "move") return RunCopyOrMove(c, cmd, args);
  if (cmd == "segments") return RunSegments(c);
  return Usage("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(kUsageText);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  granary::ConfigureMutexDeadlockDetection();
  granary::LogLevel level;
  if (!granary::ParseLogLevel(FLAGS_log_level, &level)) {
    return Usage("--log_level '" + FLAGS_log_level + "' is not one of debug|info|warning|error");
  }
  granary::SetLogLevel(level);
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
  return RunCommand(**client, cmd, args);
}
