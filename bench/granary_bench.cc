// granary_bench: bandwidth and key-rate benchmarks against a running cluster.
//   granary_bench get --master=127.0.0.1:50051 --block_size=4KB,1MB --batch=32 --threads=2
// Prints one line per block size and writes JSON records with --out.
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/size.h"
#include "common/util.h"
#include "granary/client.h"

DEFINE_string(master, "127.0.0.1:50051", "Master host:port");
DEFINE_string(tenant_id, "bench", "Tenant the benchmark writes as");
DEFINE_string(block_size, "1MB", "Comma-separated value sizes (units: B, KB, MB; 1 KB = 1024 B)");
DEFINE_int32(batch, 1, "Keys per batch call");
DEFINE_int32(threads, 1, "Client threads (each with its own client and UCX worker)");
DEFINE_int32(lanes, 1, "meta: batches in flight per thread (sent together, answered together)");
DEFINE_int32(tenants, 1, "Tenants the threads spread over (bench-0, bench-1, ...)");
DEFINE_double(duration, 5, "Seconds per block size (ignored when --ops is set)");
DEFINE_int64(ops, 0, "Keys per thread per block size instead of --duration");
DEFINE_int32(replica_num, 1, "Replicas per put");
DEFINE_int32(key_bytes, 0,
             "meta: pad every key to this many bytes (engines' keys: vLLM about 120, SGLang about "
             "80); 0: as generated (about 25)");
DEFINE_string(tcp_data_between_hosts, "messages",
              "Client option: messages|one_sided, for nodes on other hosts over tcp alone");
DEFINE_int32(copy_threads, granary::ClientOptions{}.copy_threads,
             "Client option: threads sharing a large batch's same-host copies (0: none)");
DEFINE_double(warmup, 0,
              "get/put/mixed: seconds of the same loop, untimed, before the measured part");
DEFINE_string(working_set, "256MB",
              "Bytes of distinct keys per thread (get/mixed prefill; put recycles)");
DEFINE_string(tier, "",
              "get/put/mixed: the tier puts ask for (host, gpu, any, disk); empty = the "
              "tenant's default_tier");
DEFINE_string(out, "", "Write JSON records here (CSV when the name ends in .csv)");
DEFINE_string(log_level, "warning", "debug|info|warning|error");
DEFINE_string(progress, "auto",
              "A progress line once per second on stderr: auto (rewritten in place, on a "
              "terminal only), always (one line per second), never");

namespace {

struct Record {
  std::string mode;
  uint64_t block_size = 0;
  int batch = 0, threads = 0, lanes = 0;
  std::string transport;
  double gbps = 0, keys_per_s = 0, p50_us = 0, p99_us = 0;
  uint64_t errors = 0;
};

// Live totals of the run in progress, for the progress line only (relaxed: a display).
struct Progress {
  std::atomic<uint64_t> keys{0}, bytes{0}, errors{0};
  void Reset() {
    keys.store(0, std::memory_order_relaxed);
    bytes.store(0, std::memory_order_relaxed);
    errors.store(0, std::memory_order_relaxed);
  }
  void Add(uint64_t k, uint64_t b, uint64_t e) {
    keys.fetch_add(k, std::memory_order_relaxed);
    bytes.fetch_add(b, std::memory_order_relaxed);
    errors.fetch_add(e, std::memory_order_relaxed);
  }
};
Progress g_progress;

// While alive, prints once per second: "<label>: 3 s, 612,352 keys, 204,117 keys/s, 0.84 GB/s,
// 0 errors" (the rates over the last second). On a terminal (--progress=auto) it rewrites one
// line; with --progress=always it prints a line each second.
class ProgressLine {
 public:
  explicit ProgressLine(std::string label) : label_(std::move(label)) {
    g_progress.Reset();
    const bool tty = isatty(STDERR_FILENO) == 1;
    in_place_ = FLAGS_progress == "auto" && tty;
    if (FLAGS_progress == "never" || (FLAGS_progress == "auto" && !tty)) return;
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressLine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (printed_ && in_place_) fprintf(stderr, "\n");
  }

 private:
  void Loop() {
    const auto start = std::chrono::steady_clock::now();
    uint64_t last_keys = 0, last_bytes = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (int s = 1;; ++s) {
      if (cv_.wait_until(lock, start + std::chrono::seconds(s), [this] { return done_; })) return;
      uint64_t k = g_progress.keys.load(std::memory_order_relaxed);
      uint64_t b = g_progress.bytes.load(std::memory_order_relaxed);
      uint64_t e = g_progress.errors.load(std::memory_order_relaxed);
      fprintf(stderr, "%s%s: %d s, %llu keys, %llu keys/s, %.2f GB/s, %llu errors%s",
              in_place_ ? "\r" : "", label_.c_str(), s, static_cast<unsigned long long>(k),
              static_cast<unsigned long long>(k - last_keys),
              static_cast<double>(b - last_bytes) / 1e9, static_cast<unsigned long long>(e),
              in_place_ ? "\033[K" : "\n");
      fflush(stderr);
      printed_ = true;
      last_keys = k;
      last_bytes = b;
    }
  }

  std::string label_;
  bool in_place_ = false;
  bool printed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

struct ThreadResult {
  uint64_t keys = 0, bytes = 0, errors = 0;
  std::vector<double> batch_us;
};

std::string Transport() {
  const char* tls = std::getenv("UCX_TLS");
  return tls != nullptr && *tls != '\0' ? tls : "default";
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

// One thread's run at one block size. Keys live under bench/<thread>/; put recycles a working
// set (removing keys, untimed, before writing them again) so the store never fills.
void RunThread(const std::string& mode, int t, uint64_t block, ThreadResult* out,
               std::atomic<bool>* failed) {
  granary::ClientOptions o;
  o.master_server_address = FLAGS_master;
  o.tenant_id =
      FLAGS_tenants > 1 ? absl::StrCat(FLAGS_tenant_id, "-", t % FLAGS_tenants) : FLAGS_tenant_id;
  o.replica_num = FLAGS_replica_num;
  o.tcp_data_between_hosts = FLAGS_tcp_data_between_hosts;
  o.copy_threads = FLAGS_copy_threads;
  auto c = granary::Client::Create(o);
  if (!c.ok()) {
    fprintf(stderr, "granary_bench: %s\n", c.status().ToString().c_str());
    failed->store(true);
    return;
  }
  granary::Client& client = **c;
  granary::PutOptions put_options;
  if (!FLAGS_tier.empty()) put_options.tier = *granary::ParseStorageTier(FLAGS_tier);
  const int batch = FLAGS_batch;
  uint64_t ws_bytes = *granary::common::ParseSize(FLAGS_working_set);
  size_t ws_keys = std::max<size_t>(batch, ws_bytes / block / batch * batch);
  std::string buffer(static_cast<size_t>(block) * batch, 'g');
  for (size_t i = 0; i < buffer.size(); i += 4096) buffer[i] = static_cast<char>(i * 31 + t);
  (void)client.RegisterBuffer(buffer.data(), buffer.size());
  static const std::string run = granary::common::RandomId().substr(0, 8);
  auto key = [&](size_t i) { return absl::StrCat("bench/", run, "/", t, "/", block, "/", i); };
  // Prefill for reads.
  std::vector<std::string> keys(batch);
  std::vector<const void*> srcs(batch);
  std::vector<void*> dsts(batch);
  std::vector<size_t> sizes(batch, block);
  for (int j = 0; j < batch; ++j) {
    srcs[j] = buffer.data() + static_cast<size_t>(j) * block;
    dsts[j] = buffer.data() + static_cast<size_t>(j) * block;
  }
  if (mode != "put") {
    for (size_t i = 0; i < ws_keys; i += batch) {
      for (int j = 0; j < batch; ++j) keys[j] = key(i + j);
      for (const auto& st : client.BatchPutFrom(keys, srcs, sizes, put_options)) {
        if (!st.ok() && !absl::IsAlreadyExists(st)) {
          fprintf(stderr, "granary_bench: prefill: %s\n", st.ToString().c_str());
          failed->store(true);
          return;
        }
      }
    }
  }
  std::vector<bool> present(ws_keys, mode != "put");
  // --warmup: the same loop, untimed, first (a fresh process's first touches of the nodes'
  // memory and of its own buffers are not what a long-lived engine sees).
  const int64_t warm_end_us =
      granary::common::MonotonicUs() + static_cast<int64_t>(FLAGS_warmup * 1e6);
  const int64_t end_us = warm_end_us + static_cast<int64_t>(FLAGS_duration * 1e6);
  size_t cursor = 0;
  int64_t done_keys = 0;
  uint64_t round = 0;
  while (FLAGS_ops > 0 ? done_keys < FLAGS_ops : granary::common::MonotonicUs() < end_us) {
    if (failed->load()) return;
    size_t base = cursor;
    cursor = (cursor + batch) % ws_keys;
    for (int j = 0; j < batch; ++j) keys[j] = key((base + j) % ws_keys);
    bool do_put = mode == "put" || (mode == "mixed" && (round++ % 2 == 0));
    if (do_put) {
      std::vector<std::string> stale;
      for (int j = 0; j < batch; ++j) {
        if (present[(base + j) % ws_keys]) stale.push_back(keys[j]);
      }
      if (!stale.empty()) client.BatchRemove(stale);  // untimed
    }
    int64_t t0 = granary::common::MonotonicUs();
    uint64_t ok = 0;
    if (do_put) {
      auto res = client.BatchPutFrom(keys, srcs, sizes, put_options);
      for (int j = 0; j < batch; ++j) {
        present[(base + j) % ws_keys] = res[j].ok();
        ok += res[j].ok();
        if (!res[j].ok() && out->errors == 0) {
          fprintf(stderr, "granary_bench: put %s: %s\n", keys[j].c_str(),
                  res[j].ToString().c_str());
        }
      }
    } else {
      auto res = client.BatchGetInto(keys, dsts, sizes);
      for (int j = 0; j < batch; ++j) {
        ok += res[j].ok();
        if (!res[j].ok() && out->errors == 0) {
          fprintf(stderr, "granary_bench: get %s: %s\n", keys[j].c_str(),
                  res[j].status().ToString().c_str());
        }
      }
    }
    double us = static_cast<double>(granary::common::MonotonicUs() - t0);
    if (t0 < warm_end_us) continue;  // warm-up: not counted
    out->batch_us.push_back(us);
    out->keys += ok;
    out->bytes += ok * block;
    g_progress.Add(ok, ok * block, batch - ok);
    out->errors += batch - ok;
    done_keys += batch;
  }
}

// Waits for every answer of one phase of a meta wave. nullopt (after saying so) when one has
// not come within `timeout`.
template <typename Rep>
std::optional<std::vector<absl::StatusOr<Rep>>> WaitAll(
    std::vector<std::future<absl::StatusOr<Rep>>>& futures, const char* what,
    std::chrono::seconds timeout) {
  std::vector<absl::StatusOr<Rep>> out;
  out.reserve(futures.size());
  for (auto& f : futures) {
    if (f.wait_for(timeout) != std::future_status::ready) {
      fprintf(stderr, "granary_bench: %s had no answer in %lld s\n", what,
              static_cast<long long>(timeout.count()));
      return std::nullopt;
    }
    out.push_back(f.get());
  }
  return out;
}

// Metadata only: PutStart + PutEnd, then Get (+ GetEnd, sent without waiting, as the client
// does), on batches of fresh keys, no bytes moved. Run it against a node started with
// --virtual_segments. Each thread cycles through its share of the tenants, one client session per
// tenant.
void RunMetaThread(int t, uint64_t block, ThreadResult* put, ThreadResult* get,
                   std::atomic<bool>* failed) {
  const int sessions = std::max(1, FLAGS_tenants / FLAGS_threads);
  std::vector<std::unique_ptr<granary::client::ClientImpl>> clients;
  for (int i = 0; i < sessions; ++i) {
    granary::ClientOptions o;
    o.master_server_address = FLAGS_master;
    o.tenant_id = FLAGS_tenants > 1
                      ? absl::StrCat(FLAGS_tenant_id, "-", (t * sessions + i) % FLAGS_tenants)
                      : FLAGS_tenant_id;
    o.replica_num = FLAGS_replica_num;
    o.tcp_data_between_hosts = FLAGS_tcp_data_between_hosts;
    o.copy_threads = FLAGS_copy_threads;
    auto c = granary::client::ClientImpl::Create(o);
    if (!c.ok()) {
      fprintf(stderr, "granary_bench: %s\n", c.status().ToString().c_str());
      failed->store(true);
      return;
    }
    clients.push_back(std::move(*c));
  }
  static const std::string run = granary::common::RandomId().substr(0, 8);
  namespace proto = granary::proto;
  const int batch = FLAGS_batch, lanes = FLAGS_lanes;
  const auto timeout = std::chrono::seconds(30);
  std::vector<uint64_t> sizes(batch, block);
  const int64_t end_us =
      granary::common::MonotonicUs() + static_cast<int64_t>(FLAGS_duration * 1e6);
  uint64_t seq = 0;
  int64_t done = 0;
  // A wave: `lanes` batches of fresh keys go out at once on one session (PutStart for all, then
  // PutEnd for all, then Get for all); each phase waits for all of its answers.
  while (FLAGS_ops > 0 ? done < FLAGS_ops : granary::common::MonotonicUs() < end_us) {
    granary::client::ClientImpl& c = *clients[seq / (batch * lanes) % clients.size()];
    std::vector<std::vector<std::string>> keys(lanes, std::vector<std::string>(batch));
    for (auto& lane : keys) {
      for (auto& k : lane) {
        k = absl::StrCat("meta/", run, "/", t, "/", block, "/", seq++);
        if (k.size() < static_cast<size_t>(FLAGS_key_bytes)) k.resize(FLAGS_key_bytes, '.');
      }
    }
    int64_t t0 = granary::common::MonotonicUs();
    std::vector<std::future<absl::StatusOr<proto::PutStartReply>>> starts;
    for (int l = 0; l < lanes; ++l) {
      proto::PutStartRequest req;
      req.replica_num = static_cast<uint8_t>(FLAGS_replica_num);
      for (const auto& k : keys[l]) req.entries.push_back({k, block});
      starts.push_back(c.CallAsync<proto::PutStartRequest, proto::PutStartReply>(
          proto::MsgType::kPutStart, req));
    }
    auto start_replies = WaitAll(starts, "PutStart", timeout);
    if (!start_replies) {
      failed->store(true);
      return;
    }
    std::vector<proto::KeyGenRequest> commits(lanes);
    for (int l = 0; l < lanes; ++l) {
      const auto& started = (*start_replies)[l];
      if (!started.ok()) {
        if (put->errors == 0)
          fprintf(stderr, "granary_bench: PutStart: %s\n", started.status().ToString().c_str());
        continue;
      }
      for (size_t j = 0; j < started->results.size() && j < keys[l].size(); ++j) {
        const auto& r = started->results[j];
        if (r.status.code == 0) {
          commits[l].entries.push_back({keys[l][j], r.generation});
        } else if (put->errors == 0) {
          fprintf(stderr, "granary_bench: PutStart %s: %s\n", keys[l][j].c_str(),
                  r.status.message.c_str());
        }
      }
    }
    std::vector<std::future<absl::StatusOr<proto::BatchStatusReply>>> ends;
    for (int l = 0; l < lanes; ++l) {
      ends.push_back(c.CallAsync<proto::KeyGenRequest, proto::BatchStatusReply>(
          proto::MsgType::kPutEnd, commits[l]));
    }
    auto end_replies = WaitAll(ends, "PutEnd", timeout);
    if (!end_replies) {
      failed->store(true);
      return;
    }
    uint64_t ok = 0;
    for (const auto& ended : *end_replies) {
      if (ended.ok()) {
        for (const auto& r : ended->results) ok += r.code == 0;
      }
    }
    int64_t t1 = granary::common::MonotonicUs();
    put->batch_us.push_back(static_cast<double>(t1 - t0));
    put->keys += ok;
    g_progress.Add(ok, 0, static_cast<uint64_t>(batch) * lanes - ok);
    put->errors += static_cast<uint64_t>(batch) * lanes - ok;
    std::vector<std::future<absl::StatusOr<proto::GetReply>>> gets;
    for (int l = 0; l < lanes; ++l) {
      gets.push_back(c.CallAsync<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                                     proto::GetRequest{keys[l]}));
    }
    auto get_replies = WaitAll(gets, "Get", timeout);
    if (!get_replies) {
      failed->store(true);
      return;
    }
    uint64_t found = 0;
    for (int l = 0; l < lanes; ++l) {
      const auto& got = (*get_replies)[l];
      if (!got.ok()) continue;
      // The leases go back (each with its token) without waiting for the answer, as the
      // client's reads do.
      proto::KeyGenRequest release;
      for (size_t i = 0; i < got->results.size() && i < keys[l].size(); ++i) {
        const proto::GetResult& r = got->results[i];
        if (r.status.code != 0) continue;
        ++found;
        release.entries.push_back({keys[l][i], r.generation, r.lease_token});
      }
      c.ReleaseLeasesAsync(release);
    }
    int64_t t2 = granary::common::MonotonicUs();
    get->batch_us.push_back(static_cast<double>(t2 - t1));
    get->keys += found;
    g_progress.Add(found, 0, static_cast<uint64_t>(batch) * lanes - found);
    get->errors += static_cast<uint64_t>(batch) * lanes - found;
    done += static_cast<int64_t>(batch) * lanes;
  }
}

Record Summarize(const std::string& mode, uint64_t block, std::vector<ThreadResult>& results) {
  Record r;
  r.mode = mode;
  r.block_size = block;
  r.batch = FLAGS_batch;
  r.threads = FLAGS_threads;
  r.lanes = FLAGS_lanes;
  r.transport = Transport();
  std::vector<double> lat;
  for (auto& tr : results) {
    double busy_us = 0;
    for (double us : tr.batch_us) busy_us += us;
    if (busy_us > 0) {
      r.gbps += static_cast<double>(tr.bytes) / (busy_us * 1e3);
      r.keys_per_s += static_cast<double>(tr.keys) / (busy_us / 1e6);
    }
    r.errors += tr.errors;
    lat.insert(lat.end(), tr.batch_us.begin(), tr.batch_us.end());
  }
  r.p50_us = Percentile(lat, 0.5);
  r.p99_us = Percentile(lat, 0.99);
  return r;
}

std::vector<Record> RunMeta(uint64_t block) {
  std::vector<ThreadResult> put(FLAGS_threads), get(FLAGS_threads);
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  {
    ProgressLine progress(absl::StrCat("meta ", block, " B"));
    for (int t = 0; t < FLAGS_threads; ++t) {
      threads.emplace_back(RunMetaThread, t, block, &put[t], &get[t], &failed);
    }
    for (auto& th : threads) th.join();
  }
  std::vector<Record> out = {Summarize("meta-put", block, put), Summarize("meta-get", block, get)};
  if (failed.load()) {
    for (auto& r : out) r.errors = std::max<uint64_t>(r.errors, 1);
  }
  return out;
}

// The copy ceiling that get and put run into on one host: one thread memcpy'ing the same shapes
// with no store at all. get copies `block`-byte values from a --working_set-sized source (the
// node's segment) into a batch * block buffer (the client's registered buffer); put copies the
// other way. With --working_set equal to the block size it copies one cache-resident block
// again and again, as ucx_perftest does.
std::vector<Record> RunMemcpy(uint64_t block) {
  const int batch = FLAGS_batch;
  const uint64_t ws_bytes = *granary::common::ParseSize(FLAGS_working_set);
  const size_t ws_blocks = std::max<size_t>(batch, ws_bytes / block);
  std::vector<char> store(ws_blocks * block), buffer(static_cast<size_t>(batch) * block);
  // Touch every page first: the timed copies must not take page faults.
  std::fill(store.begin(), store.end(), 's');
  std::fill(buffer.begin(), buffer.end(), 'b');
  std::vector<Record> out;
  for (const char* mode : {"memcpy-get", "memcpy-put"}) {
    const bool get = std::string(mode) == "memcpy-get";
    std::vector<ThreadResult> results(1);
    ThreadResult& tr = results[0];
    ProgressLine progress(absl::StrCat(mode, " ", block, " B"));
    const int64_t end_us =
        granary::common::MonotonicUs() + static_cast<int64_t>(FLAGS_duration * 1e6);
    size_t cursor = 0;
    int64_t done_keys = 0;
    // A timed sample is at least 4 MiB of copies: a cache-resident 64 KiB copy takes about a
    // microsecond, the clock's resolution.
    const uint64_t reps =
        std::max<uint64_t>(1, (uint64_t{4} << 20) / (static_cast<uint64_t>(batch) * block));
    while (FLAGS_ops > 0 ? done_keys < FLAGS_ops : granary::common::MonotonicUs() < end_us) {
      const int64_t t0 = granary::common::MonotonicUs();
      for (uint64_t rep = 0; rep < reps; ++rep) {
        for (int j = 0; j < batch; ++j) {
          char* s = store.data() + ((cursor + j) % ws_blocks) * block;
          char* b = buffer.data() + static_cast<size_t>(j) * block;
          if (get) {
            std::memcpy(b, s, block);
          } else {
            std::memcpy(s, b, block);
          }
        }
        cursor = (cursor + batch) % ws_blocks;
      }
      const uint64_t copies = static_cast<uint64_t>(batch) * reps;
      tr.batch_us.push_back(static_cast<double>(granary::common::MonotonicUs() - t0));
      tr.keys += copies;
      tr.bytes += copies * block;
      g_progress.Add(copies, copies * block, 0);
      done_keys += static_cast<int64_t>(copies);
    }
    Record r = Summarize(mode, block, results);
    r.threads = 1;
    r.transport = "memcpy";
    out.push_back(r);
  }
  // Keep the copies from being optimized away.
  if (buffer[0] == 0 && store[0] == 0) fprintf(stderr, "\n");
  return out;
}

Record RunOne(const std::string& mode, uint64_t block) {
  std::vector<ThreadResult> results(FLAGS_threads);
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  {
    ProgressLine progress(absl::StrCat(mode, " ", block, " B"));
    for (int t = 0; t < FLAGS_threads; ++t) {
      threads.emplace_back(RunThread, mode, t, block, &results[t], &failed);
    }
    for (auto& th : threads) th.join();
  }
  Record r = Summarize(mode, block, results);
  if (failed.load()) r.errors = std::max<uint64_t>(r.errors, 1);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "granary_bench put|get|mixed|meta|memcpy [flags]\n"
      "  memcpy: the one-thread copy ceiling for get and put at the same shapes (no store)");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  granary::common::ConfigureMutexDeadlockDetection();
  granary::LogLevel level;
  if (granary::common::ParseLogLevel(FLAGS_log_level, &level)) granary::common::SetLogLevel(level);
  if (argc != 2) {
    fprintf(stderr, "granary_bench: give one mode: put, get, mixed, meta or memcpy\n");
    return 2;
  }
  std::string mode = argv[1];
  if (mode != "put" && mode != "get" && mode != "mixed" && mode != "meta" && mode != "memcpy") {
    fprintf(stderr, "granary_bench: unknown mode '%s' (put, get, mixed, meta, memcpy)\n",
            mode.c_str());
    return 2;
  }
  if (FLAGS_batch < 1 || FLAGS_threads < 1 || FLAGS_tenants < 1 || FLAGS_lanes < 1) {
    fprintf(stderr,
            "granary_bench: --batch %d, --threads %d, --tenants %d, --lanes %d: each must "
            "be >= 1\n",
            FLAGS_batch, FLAGS_threads, FLAGS_tenants, FLAGS_lanes);
    return 2;
  }
  if (FLAGS_progress != "auto" && FLAGS_progress != "always" && FLAGS_progress != "never") {
    fprintf(stderr, "granary_bench: --progress '%s' is not one of: auto, always, never\n",
            FLAGS_progress.c_str());
    return 2;
  }
  if (FLAGS_lanes > 1 && mode != "meta") {
    fprintf(stderr,
            "granary_bench: --lanes %d: more than one lane is supported in meta mode "
            "only (put, get and mixed run one batch at a time per thread)\n",
            FLAGS_lanes);
    return 2;
  }
  if (!FLAGS_tier.empty() && !granary::ParseStorageTier(FLAGS_tier).ok()) {
    fprintf(stderr, "granary_bench: --tier: %s\n",
            std::string(granary::ParseStorageTier(FLAGS_tier).status().message()).c_str());
    return 2;
  }
  if (!granary::common::ParseSize(FLAGS_working_set).ok()) {
    fprintf(stderr, "granary_bench: --working_set: %s\n",
            std::string(granary::common::ParseSize(FLAGS_working_set).status().message()).c_str());
    return 2;
  }
  std::vector<uint64_t> blocks;
  for (absl::string_view s : absl::StrSplit(FLAGS_block_size, ',')) {
    auto b = granary::common::ParsePositiveSize(s);
    if (!b.ok()) {
      fprintf(stderr, "granary_bench: --block_size: %s\n",
              std::string(b.status().message()).c_str());
      return 2;
    }
    blocks.push_back(*b);
  }
  std::vector<Record> records;
  printf("%-6s %10s %6s %8s %-10s %10s %12s %10s %10s %7s\n", "mode", "block", "batch", "threads",
         "transport", "GB/s", "keys/s", "p50_us", "p99_us", "errors");
  int rc = 0;
  for (uint64_t b : blocks) {
    std::vector<Record> rs = mode == "meta"     ? RunMeta(b)
                             : mode == "memcpy" ? RunMemcpy(b)
                                                : std::vector<Record>{RunOne(mode, b)};
    for (const Record& r : rs) {
      printf("%-6s %10s %6d %8d %-10s %10.3f %12.0f %10.1f %10.1f %7llu\n", r.mode.c_str(),
             granary::common::FormatSize(b).c_str(), r.batch, r.threads, r.transport.c_str(),
             r.gbps, r.keys_per_s, r.p50_us, r.p99_us, static_cast<unsigned long long>(r.errors));
      fflush(stdout);
      if (r.errors > 0) rc = 1;
      records.push_back(r);
    }
  }
  if (!FLAGS_out.empty()) {
    std::ofstream out(FLAGS_out);
    bool csv = FLAGS_out.size() > 4 && FLAGS_out.substr(FLAGS_out.size() - 4) == ".csv";
    if (csv) {
      out << "mode,block_size,batch,threads,lanes,transport,gbps,keys_per_s,p50_us,p99_us,errors\n";
      for (const auto& r : records) {
        out << r.mode << "," << r.block_size << "," << r.batch << "," << r.threads << "," << r.lanes
            << "," << r.transport << "," << r.gbps << "," << r.keys_per_s << "," << r.p50_us << ","
            << r.p99_us << "," << r.errors << "\n";
      }
    } else {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& r : records) {
        arr.push_back({{"mode", r.mode},
                       {"block_size", r.block_size},
                       {"batch", r.batch},
                       {"threads", r.threads},
                       {"lanes", r.lanes},
                       {"transport", r.transport},
                       {"gbps", r.gbps},
                       {"keys_per_s", r.keys_per_s},
                       {"p50_us", r.p50_us},
                       {"p99_us", r.p99_us},
                       {"errors", r.errors}});
      }
      out << arr.dump(2) << "\n";
    }
  }
  return rc;
}
