// granary_failover_probe: the client side of bench/failover.sh.
//
//   --mode=probe   single 4 KiB puts in a loop (a fresh key each); whenever a put succeeds after
//                  no success for --gap_ms or more, prints one JSON line
//                  {"event":"resumed","gap_ms":G,"resumed_wall_ms":T} (T: wall clock, ms, so
//                  the script can subtract the moment it killed the leader). Runs until SIGTERM.
//   --mode=fill    puts --objects values of --value_size bytes (keys fill/<i>) in batches of
//                  --batch; prints {"event":"filled","objects":N,"seconds":S}.
//   --mode=verify  reads every fill/<i> back in batches, over and over until all of them are
//                  byte-exact or --timeout_sec passes; prints {"event":"verified","ok":N,
//                  "missing":M,"wrong":W,"ready_wall_ms":T}. Exit 0 only when all are ok.
//
// Values are deterministic per key, so a read is checked without keeping them.
#include <gflags/gflags.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "granary/client.h"

DEFINE_string(master, "127.0.0.1:50051", "Master host:port, or etcd://h1:2379;h2:2379");
DEFINE_string(cluster_id, "granary_cluster", "With an etcd:// master: the HA cluster");
DEFINE_string(mode, "probe", "probe | fill | verify");
DEFINE_int64(objects, 1'000'000, "fill/verify: objects");
DEFINE_int64(value_size, 64, "fill/verify: bytes per value");
DEFINE_int32(batch, 256, "fill/verify: keys per batch call");
DEFINE_int64(gap_ms, 200, "probe: a success after at least this long without one is reported");
DEFINE_int64(rpc_timeout_ms, 30'000, "Client rpc_timeout_ms (a call waits this long for a master)");
DEFINE_double(timeout_sec, 120, "verify: give up after this long");

namespace {

std::atomic<bool> g_stop{false};

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Deterministic bytes of `size` for `key` (an FNV-seeded xorshift).
std::string ValueOf(const std::string& key, size_t size) {
  uint64_t x = 1469598103934665603ull;
  for (char c : key) x = (x ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string v(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<char>(x);
  }
  return v;
}

std::string FillKey(int64_t i) { return absl::StrCat("fill/", i); }

int Probe(granary::Client* client) {
  const std::string value = ValueOf("probe", 4096);
  auto last_ok = std::chrono::steady_clock::now();
  for (int64_t n = 0; !g_stop.load(); ++n) {
    absl::Status st = client->Put(absl::StrCat("probe/", WallMs(), "/", n), value);
    const auto now = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const int64_t gap =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_ok).count();
    if (gap >= FLAGS_gap_ms) {
      std::printf("{\"event\":\"resumed\",\"gap_ms\":%lld,\"resumed_wall_ms\":%lld}\n",
                  static_cast<long long>(gap), static_cast<long long>(WallMs()));
      std::fflush(stdout);
    }
    last_ok = now;
  }
  return 0;
}

int Fill(granary::Client* client) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < FLAGS_objects; i += FLAGS_batch) {
    std::vector<std::string> keys, values;
    for (int64_t k = i; k < std::min<int64_t>(FLAGS_objects, i + FLAGS_batch); ++k) {
      keys.push_back(FillKey(k));
      values.push_back(ValueOf(keys.back(), FLAGS_value_size));
    }
    std::vector<absl::string_view> views(values.begin(), values.end());
    std::vector<absl::Status> st = client->BatchPut(keys, views);
    for (size_t k = 0; k < st.size(); ++k) {
      if (!st[k].ok()) {
        std::fprintf(stderr, "put %s: %s\n", keys[k].c_str(), st[k].ToString().c_str());
        return 1;
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"event\":\"filled\",\"objects\":%lld,\"seconds\":%.3f}\n",
              static_cast<long long>(FLAGS_objects), s);
  return 0;
}

int Verify(granary::Client* client) {
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout_sec * 1000));
  int64_t ok = 0, missing = 0, wrong = 0;
  std::vector<bool> done(FLAGS_objects, false);
  do {
    missing = 0;
    for (int64_t i = 0; i < FLAGS_objects; i += FLAGS_batch) {
      std::vector<std::string> keys;
      std::vector<int64_t> index;
      for (int64_t k = i; k < std::min<int64_t>(FLAGS_objects, i + FLAGS_batch); ++k) {
        if (done[k]) continue;
        keys.push_back(FillKey(k));
        index.push_back(k);
      }
      if (keys.empty()) continue;
      std::vector<absl::StatusOr<std::string>> got = client->BatchGet(keys);
      for (size_t k = 0; k < got.size(); ++k) {
        if (!got[k].ok()) {
          ++missing;
        } else if (*got[k] != ValueOf(keys[k], FLAGS_value_size)) {
          ++wrong;
          done[index[k]] = true;
        } else {
          ++ok;
          done[index[k]] = true;
        }
      }
    }
    if (missing == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() < give_up);
  std::printf(
      "{\"event\":\"verified\",\"ok\":%lld,\"missing\":%lld,\"wrong\":%lld,"
      "\"ready_wall_ms\":%lld}\n",
      static_cast<long long>(ok), static_cast<long long>(missing), static_cast<long long>(wrong),
      static_cast<long long>(WallMs()));
  return missing == 0 && wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("bench/failover.sh's client: --mode=probe|fill|verify");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  signal(SIGTERM, [](int) { g_stop.store(true); });
  signal(SIGINT, [](int) { g_stop.store(true); });
  if (FLAGS_mode != "probe" && FLAGS_mode != "fill" && FLAGS_mode != "verify") {
    std::fprintf(stderr, "--mode '%s' is not probe, fill or verify\n", FLAGS_mode.c_str());
    return 2;
  }
  if (FLAGS_objects <= 0 || FLAGS_batch <= 0 || FLAGS_value_size <= 0) {
    std::fprintf(stderr, "--objects, --batch and --value_size must be positive\n");
    return 2;
  }
  granary::ClientOptions o;
  o.master_server_address = FLAGS_master;
  o.cluster_id = FLAGS_cluster_id;
  o.tenant_id = "failover";
  o.rpc_timeout_ms = FLAGS_rpc_timeout_ms;
  o.log_level = granary::LogLevel::kError;
  auto client = granary::Client::Create(o);
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  if (FLAGS_mode == "probe") return Probe(client->get());
  if (FLAGS_mode == "fill") return Fill(client->get());
  return Verify(client->get());
}
