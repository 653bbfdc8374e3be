// End-to-end tests on a real master and real nodes (separate processes) on loopback, over UCX's
// default transports (shared memory) and over UCX_TLS=tcp.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/util.h"
#include "proto/alloc_header.h"
#include "tests/integration/cluster.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::testing {
namespace {

using std::chrono::milliseconds;

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      setenv("UCX_TLS", "tcp", 1);
      env_ = {"UCX_TLS=tcp"};
    } else {
      unsetenv("UCX_TLS");
    }
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    unsetenv("UCX_TLS");
  }
  void StartCluster(Cluster::Options o) {
    o.env = env_;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  std::unique_ptr<Client> NewClient(int replica_num = 1, const std::string& tenant = "default") {
    ClientOptions o = cluster_->ClientOpts(tenant);
    o.replica_num = replica_num;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  double Metric(const std::string& sample) {
    auto v = cluster_->Metric(sample);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }

  // Starts a writer process that holds an 8 MiB allocation between PutStart and PutEnd, sends
  // it `sig`, and returns the milliseconds until the master freed the space, or -1 if that took
  // longer than 2 x client_ttl.
  int64_t FreeAfterSignal(int sig) {
    const std::string used = "granary_master_used_bytes{tier=\"host\"}";
    EXPECT_EQ(Metric(used), 0);
    auto writer = Process::Start({BinDir() + "/put_start_hang", cluster_->master_address(),
                                  "default", "doomed", std::to_string(8 << 20)},
                                 env_, cluster_->dir() + "/writer.log");
    EXPECT_TRUE(writer.ok());
    if (!writer.ok()) return -1;
    bool started = false;
    for (int i = 0; i < 200 && !started; ++i) {
      started = (*writer)->Log().find("STARTED") != std::string::npos;
      std::this_thread::sleep_for(milliseconds(25));
    }
    EXPECT_TRUE(started) << (*writer)->Log();
    EXPECT_GE(Metric(used), 8 << 20);
    EXPECT_EQ(Metric("granary_master_objects_processing"), 1);
    auto t0 = std::chrono::steady_clock::now();
    (*writer)->Kill(sig);
    int64_t ms = -1;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)) {
      if (Metric(used) == 0) {
        ms =
            std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_EQ(Metric("granary_master_objects_processing"), ms >= 0 ? 0 : 1);
    (*writer)->Kill(SIGKILL);
    (*writer)->Wait();
    return ms;
  }

  std::vector<std::string> env_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_P(StoreTest, PutGetIsByteExactAt1KiB1MiBAnd64MiB) {
  Cluster::Options o;
  o.nodes = 2;
  o.node_segment_size = "160MB";
  StartCluster(o);
  auto c = NewClient();
  ASSERT_NE(c, nullptr);
  for (size_t size : {size_t{1} << 10, size_t{1} << 20, size_t{64} << 20}) {
    std::string key = absl::StrCat("value-", size);
    std::string v = MakeValue(key, 1, size);
    ASSERT_TRUE(c->Put(key, v).ok()) << key;
    auto got = c->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), size);
    EXPECT_TRUE(*got == v) << "bytes differ for " << key;
    // Zero-copy read into a registered buffer.
    std::string buf(size, '\0');
    ASSERT_TRUE(c->RegisterBuffer(buf.data(), buf.size()).ok());
    auto n = c->GetInto(key, buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, size);
    EXPECT_TRUE(buf == v);
    ASSERT_TRUE(c->UnregisterBuffer(buf.data()).ok());
  }
  // The data endpoints' transport is counted: shared memory by default, tcp when forced.
  std::string metrics = c->MetricsText();
  EXPECT_NE(metrics.find(GetParam() == "tcp" ? "rma=\"tcp\"" : "rma=\"cma\""), std::string::npos)
      << metrics;
  // Over tcp the reads into registered buffers of 1 MiB and 64 MiB were pushed by the node (each
  // after a put had connected the client to that node), and both reads of 1 KiB came back in
  // Read replies; never on shared memory.
  EXPECT_NE(metrics.find(GetParam() == "tcp" ? "granary_client_pushed_reads_total 2\n"
                                             : "granary_client_pushed_reads_total 0\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(absl::StrCat("granary_client_inline_values_total{op=\"read\"} ",
                                      GetParam() == "tcp" ? 2 : 0, "\n")),
            std::string::npos)
      << metrics;
  // A buffer too small is refused without writing.
  std::string small(10, 'x');
  auto n = c->GetInto("value-1024", small.data(), small.size());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(small, std::string(10, 'x'));
  // Batch of 32 small values.
  std::vector<std::string> keys, values;
  std::vector<absl::string_view> views;
  for (int i = 0; i < 32; ++i) {
    keys.push_back(absl::StrCat("batch-", i));
    values.push_back(MakeValue(keys.back(), 7, 4096));
  }
  for (auto& v : values) views.push_back(v);
  for (const auto& st : c->BatchPut(keys, views)) EXPECT_TRUE(st.ok()) << st;
  auto got = c->BatchGet(keys);
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_TRUE(*got[i] == values[i]) << keys[i];
  }
  // Over tcp the batch went to the node in one Write and came back in one Read (32 values
  // each way), into registered memory as well as into memory that is not.
  std::string regs(32 * 4096, '\0');
  ASSERT_TRUE(c->RegisterBuffer(regs.data(), regs.size()).ok());
  std::vector<void*> into;
  std::vector<size_t> caps(32, 4096);
  for (int i = 0; i < 32; ++i) into.push_back(regs.data() + i * 4096);
  auto sizes = c->BatchGetInto(keys, into, caps);
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(sizes[i].ok()) << sizes[i].status();
    EXPECT_TRUE(regs.substr(i * 4096, 4096) == values[i]) << keys[i];
  }
  ASSERT_TRUE(c->UnregisterBuffer(regs.data()).ok());
  metrics = c->MetricsText();
  const bool tcp = GetParam() == "tcp";
  EXPECT_NE(metrics.find(absl::StrCat("granary_client_inline_values_total{op=\"read\"} ",
                                      tcp ? 66 : 0, "\n")),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(absl::StrCat("granary_client_inline_values_total{op=\"write\"} ",
                                      tcp ? 32 : 0, "\n")),
            std::string::npos)
      << metrics;
  // Errors say what happened.
  EXPECT_EQ(c->Get("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->Put("value-1024", "again").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(c->Put("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put("empty", "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(*c->Exist("batch-3"));
  EXPECT_TRUE(c->Remove("batch-3").ok());
  EXPECT_FALSE(*c->Exist("batch-3"));
  EXPECT_EQ(c->Remove("batch-3").code(), absl::StatusCode::kNotFound);
}

// A batch of at least 1 MiB through same-host shared memory is copied in 256 KiB parts by the
// caller and the client's copy threads together (ClientOptions::copy_threads); values of odd
// sizes straddle the parts. Every byte lands where it belongs with and without copy threads.
TEST_P(StoreTest, LargeSameHostBatchesCopiedWithCopyThreadsAreByteExact) {
  Cluster::Options o;
  o.node_segment_size = "64MB";
  StartCluster(o);
  for (int threads : {0, 3}) {
    SCOPED_TRACE(absl::StrCat("copy_threads=", threads));
    ClientOptions co = cluster_->ClientOpts();
    co.copy_threads = threads;
    auto c = Client::Create(co);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<std::string> keys, values;
    std::vector<absl::string_view> views;
    size_t total = 0;
    for (int i = 0; i < 24; ++i) {
      keys.push_back(absl::StrCat("big-", threads, "-", i));
      values.push_back(MakeValue(keys.back(), threads + 1, (96 << 10) + 4099 * i + 1));
      total += values.back().size();
    }
    ASSERT_GT(total, size_t{1} << 20);
    for (auto& v : values) views.push_back(v);
    // Twice: the first batch connects the client to the node (UCX copies it), later ones find
    // the segment mapped.
    for (const auto& st : (*c)->BatchPut(keys, views)) ASSERT_TRUE(st.ok()) << st;
    auto got = (*c)->BatchGet(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      EXPECT_TRUE(*got[i] == values[i]) << keys[i];
    }
    std::vector<std::string> keys2 = keys;
    for (auto& k : keys2) k += "-again";
    for (const auto& st : (*c)->BatchPut(keys2, views)) ASSERT_TRUE(st.ok()) << st;
    std::string regs(total, '\0');
    ASSERT_TRUE((*c)->RegisterBuffer(regs.data(), regs.size()).ok());
    std::vector<void*> into;
    std::vector<size_t> caps;
    size_t off = 0;
    for (const auto& v : values) {
      into.push_back(regs.data() + off);
      caps.push_back(v.size());
      off += v.size();
    }
    auto sizes = (*c)->BatchGetInto(keys2, into, caps);
    off = 0;
    for (size_t i = 0; i < keys2.size(); ++i) {
      ASSERT_TRUE(sizes[i].ok()) << sizes[i].status();
      EXPECT_EQ(*sizes[i], values[i].size());
      EXPECT_TRUE(regs.compare(off, values[i].size(), values[i]) == 0) << keys2[i];
      off += values[i].size();
    }
    ASSERT_TRUE((*c)->UnregisterBuffer(regs.data()).ok());
    // Shared with the copy threads: on shared memory, the batches after the first (a put, a
    // get, a get into registered memory); never without copy threads, nor over tcp.
    const std::string metrics = (*c)->MetricsText();
    const std::string name = "\ngranary_client_shared_copy_batches_total ";
    const size_t at = metrics.find(name);
    if (threads == 0) {
      EXPECT_EQ(at, std::string::npos) << metrics;
    } else {
      ASSERT_NE(at, std::string::npos) << metrics;
      const double shared = std::stod(metrics.substr(at + name.size()));
      if (GetParam() == "tcp") {
        EXPECT_EQ(shared, 0) << metrics;
      } else {
        EXPECT_GE(shared, 3) << metrics;
      }
    }
  }
}

// CPU time (user + system) of a process so far, in ms, from /proc/<pid>/stat (clock ticks).
int64_t CpuMs(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(f, line);
  // Fields after the command name (which may hold spaces) start after its ')'.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1000 / sysconf(_SC_CLK_TCK);
}

// Once the work is done, a client (its progress thread, its copy threads), the master and the
// node go to sleep: their spinning and polling stop, and idle they use no measurable CPU.
TEST_P(StoreTest, IdleClientMasterAndNodeUseNoMeasurableCpu) {
  Cluster::Options o;
  o.node_segment_size = "64MB";
  StartCluster(o);
  auto c = NewClient();
  ASSERT_NE(c, nullptr);
  // Every thread works first: small and large batches (the copy threads), single calls.
  std::vector<std::string> keys, values;
  std::vector<absl::string_view> views;
  for (int i = 0; i < 32; ++i) {
    keys.push_back(absl::StrCat("idle-", i));
    values.push_back(MakeValue(keys.back(), 1, i < 16 ? 4096 : 128 << 10));
  }
  for (auto& v : values) views.push_back(v);
  for (int round = 0; round < 3; ++round) {
    for (const auto& st : c->BatchPut(keys, views)) ASSERT_TRUE(st.ok()) << st;
    for (const auto& got : c->BatchGet(keys)) ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(c->Get(keys[0]).ok());
    for (const auto& st : c->BatchRemove(keys)) ASSERT_TRUE(st.ok()) << st;
  }
  std::this_thread::sleep_for(milliseconds(500));  // spin phases end within microseconds
  const pid_t self = getpid(), master = cluster_->master()->pid(), node = cluster_->node(0)->pid();
  const int64_t c0 = CpuMs(self), m0 = CpuMs(master), n0 = CpuMs(node);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t client_ms = CpuMs(self) - c0, master_ms = CpuMs(master) - m0,
                node_ms = CpuMs(node) - n0;
  // 2% of a core: a process still spinning or polling would take 30-100%. (A sanitizer's own
  // background thread fits in it.)
  const double bound = 0.02 * wall_ms;
  EXPECT_LE(client_ms, bound) << "client (this process) used " << client_ms << " ms of CPU in "
                              << wall_ms << " ms idle";
  EXPECT_LE(master_ms, bound) << "master used " << master_ms << " ms of CPU in " << wall_ms
                              << " ms idle";
  EXPECT_LE(node_ms, bound) << "node used " << node_ms << " ms of CPU in " << wall_ms << " ms idle";
  std::cerr << "idle " << wall_ms << " ms: client " << client_ms << " ms, master " << master_ms
            << " ms, node " << node_ms << " ms of CPU\n";
}

TEST_P(StoreTest, EveryReadSucceedsAfterKillingOneOfTwoReplicaNodes) {
  Cluster::Options o;
  o.nodes = 2;
  o.node_segment_size = "64MB";
  StartCluster(o);
  auto c = NewClient(/*replica_num=*/2);
  ASSERT_NE(c, nullptr);
  constexpr int kObjects = 40;
  for (int i = 0; i < kObjects; ++i) {
    std::string k = absl::StrCat("r2-", i);
    ASSERT_TRUE(c->Put(k, MakeValue(k, 1, 64 << 10)).ok()) << k;
    auto s = c->Stat(k);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->replicas, 2u);
  }
  cluster_->node(0)->Kill(SIGKILL);
  cluster_->node(0)->Wait();
  // Read at once (the master may not know yet) and again after it noticed.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kObjects; ++i) {
      std::string k = absl::StrCat("r2-", i);
      auto v = c->Get(k);
      ASSERT_TRUE(v.ok()) << "round " << round << " " << k << ": " << v.status();
      EXPECT_TRUE(*v == MakeValue(k, 1, 64 << 10)) << k;
    }
    ASSERT_TRUE(cluster_->WaitForSegments(1).ok());
  }
  auto s = c->Stat("r2-0");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->replicas, 1u);
}

// Starts a writer process that holds an 8 MiB allocation, hits it with `sig`, and returns how
// long the master took to free the space (or -1 if it did not within 2 x client_ttl).
TEST_P(StoreTest, KilledWriterSpaceIsFreeWithinTwoClientTtl) {
  Cluster::Options o;
  o.client_ttl_sec = 2;
  StartCluster(o);
  int64_t ms = FreeAfterSignal(SIGKILL);
  EXPECT_GE(ms, 0) << "space still held 2 x client_ttl after kill -9 of the writer";
  std::cerr << "[ measured ] writer kill -9 to space free: " << ms << " ms (client_ttl 2000 ms)\n";
}

TEST_P(StoreTest, StalledWriterSpaceIsFreeWithinTwoClientTtl) {
  // SIGSTOP: the connection stays open, only the heartbeats stop.
  Cluster::Options o;
  o.client_ttl_sec = 2;
  StartCluster(o);
  int64_t ms = FreeAfterSignal(SIGSTOP);
  EXPECT_GE(ms, 0) << "space still held 2 x client_ttl after the writer stalled";
  EXPECT_GE(ms, 1000) << "freed before client_ttl could have passed";
  std::cerr << "[ measured ] writer SIGSTOP to space free: " << ms << " ms (client_ttl 2000 ms)\n";
}

TEST_P(StoreTest, EvictionKeepsAFullStoreWritableAndSparesLeasedObjects) {
  Cluster::Options o;
  o.node_segment_size = "32MB";
  o.lease_ttl_ms = 60'000;
  StartCluster(o);
  ClientOptions co = cluster_->ClientOpts();
  auto raw = client::ClientImpl::Create(co);
  ASSERT_TRUE(raw.ok()) << raw.status();
  client::ClientImpl& c = **raw;
  const std::string leased_value = MakeValue("leased", 1, 1 << 20);
  ASSERT_TRUE(c.Put("leased", leased_value).ok());
  // Take a read lease and never release it (no GetEnd), as a slow reader would.
  auto lease = c.Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                          proto::GetRequest{{"leased"}});
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(lease->results[0].status.ToStatus().ok());
  // Write three times the capacity.
  for (int i = 0; i < 96; ++i) {
    std::string k = absl::StrCat("fill-", i);
    absl::Status st = c.Put(k, MakeValue(k, 1, 1 << 20));
    ASSERT_TRUE(st.ok()) << k << ": " << st;
  }
  EXPECT_GT(Metric("granary_master_evicted_objects_total"), 0);
  auto v = c.Get("leased");
  ASSERT_TRUE(v.ok()) << "leased object was evicted: " << v.status();
  EXPECT_TRUE(*v == leased_value);
  // The most recent writes are still there.
  auto last = c.Get("fill-95");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(*last == MakeValue("fill-95", 1, 1 << 20));
}

TEST_P(StoreTest, EightConcurrentClientsThousandMixedOpsNoErrorNoWrongByte) {
  Cluster::Options o;
  o.nodes = 2;
  o.node_segment_size = "64MB";
  StartCluster(o);
  constexpr int kClients = 8, kOps = 1000, kKeys = 24;
  std::atomic<int> errors{0};
  std::atomic<int> ops_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = NewClient();
      if (c == nullptr) {
        errors += kOps;
        return;
      }
      // Odd clients read into a registered buffer (over tcp: values up to 16 KiB inline in a
      // Read reply, larger ones pushed by the node).
      std::string reg(96 << 10, '\0');
      if (t % 2 == 1 && !c->RegisterBuffer(reg.data(), reg.size()).ok()) {
        errors += kOps;
        return;
      }
      std::mt19937 rng(1234 + t);
      std::vector<uint64_t> version(kKeys, 0);  // 0 = absent
      std::vector<size_t> sizes(kKeys, 0);
      uint64_t next_version = 1;
      auto fail = [&](const std::string& what) {
        if (errors.fetch_add(1) < 10) ADD_FAILURE() << "client " << t << ": " << what;
      };
      for (int i = 0; i < kOps; ++i) {
        int k = rng() % kKeys;
        std::string key = absl::StrCat("c", t, "-k", k);
        int op = rng() % 4;
        if (version[k] == 0 && op != 3) {
          size_t size = 1 + rng() % (96 << 10);
          uint64_t ver = next_version++;
          absl::Status st = c->Put(key, MakeValue(key, ver, size));
          if (!st.ok()) fail(absl::StrCat("put ", key, ": ", st.ToString()));
          version[k] = ver;
          sizes[k] = size;
        } else if (op == 0 && t % 2 == 1) {
          auto n = c->GetInto(key, reg.data(), reg.size());
          if (version[k] == 0) {
            if (n.status().code() != absl::StatusCode::kNotFound) fail("get of absent key");
          } else if (!n.ok()) {
            fail(absl::StrCat("get into ", key, ": ", n.status().ToString()));
          } else if (*n != sizes[k] ||
                     reg.compare(0, *n, MakeValue(key, version[k], sizes[k])) != 0) {
            fail(absl::StrCat("WRONG BYTES for ", key, " (registered buffer)"));
          }
        } else if (op == 0 || op == 1) {
          auto v = c->Get(key);
          if (version[k] == 0) {
            if (v.status().code() != absl::StatusCode::kNotFound) fail("get of absent key");
          } else if (!v.ok()) {
            fail(absl::StrCat("get ", key, ": ", v.status().ToString()));
          } else if (*v != MakeValue(key, version[k], sizes[k])) {
            fail(absl::StrCat("WRONG BYTES for ", key));
          }
        } else if (op == 2) {
          auto e = c->Exist(key);
          if (!e.ok() || *e != (version[k] != 0)) fail(absl::StrCat("exist ", key));
        } else {
          absl::Status st = c->Remove(key);
          if (version[k] == 0 ? st.code() != absl::StatusCode::kNotFound : !st.ok()) {
            fail(absl::StrCat("remove ", key, ": ", st.ToString()));
          }
          version[k] = 0;
        }
        ++ops_done;
      }
      const std::string metrics = c->MetricsText();
      const bool no_inline =
          metrics.find("granary_client_inline_values_total{op=\"read\"} 0\n") !=
              std::string::npos &&
          metrics.find("granary_client_inline_values_total{op=\"write\"} 0\n") != std::string::npos;
      if (no_inline != (GetParam() == "default")) fail("inline reads and writes: tcp only, always");
      if (t % 2 == 1) {
        const bool none =
            metrics.find("granary_client_pushed_reads_total 0\n") != std::string::npos;
        if (none != (GetParam() == "default")) fail("pushed reads: tcp only, and there always");
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(ops_done.load(), kClients * kOps);
}

// One value stored through a client, and where the master placed it.
struct Located {
  std::string key, value;
  uint64_t at = 0;  // its allocation header in the node's segment; the value follows
  uint64_t generation = 0;
  proto::SegmentInfo seg;  // the node's segment
};
void StoreAndLocate(client::ClientImpl& c, const std::string& key, Located* out) {
  out->key = key;
  out->value = MakeValue(key, 3, 4096);
  ASSERT_TRUE(c.Put(key, out->value).ok());
  auto got =
      c.Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, proto::GetRequest{{key}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->results.size(), 1u);
  ASSERT_EQ(got->results[0].replicas.size(), 1u);
  out->at = got->results[0].replicas[0].address;
  out->generation = got->results[0].generation;
  auto segs = c.Call<proto::SegmentsRequest, proto::SegmentsReply>(proto::MsgType::kSegments, {});
  ASSERT_TRUE(segs.ok() && segs->segments.size() == 1) << segs.status();
  out->seg = segs->segments[0];
}

// A client of its own that sends raw Push requests: one worker for its connection to the node,
// another (`dest`) whose address the node writes through into `buf`, registered on their
// context, so a test can stall the destination while the connection still answers.
class RawPusher {
 public:
  void Connect(const std::string& node_address) {
    auto ctx = transport::Context::Create("push_test");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    for (auto* w : {&worker_, &dest_}) {
      auto created = transport::Worker::Create(ctx_.get(), "push_test");
      ASSERT_TRUE(created.ok()) << created.status();
      *w = std::move(*created);
    }
    auto region = transport::MemoryRegion::Create(ctx_.get(), buf.data(), buf.size());
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = std::move(*region);
    auto rkey = region_->PackRkey();
    auto waddr = dest_->Address();
    ASSERT_TRUE(rkey.ok() && waddr.ok());
    auto rpc = transport::RpcClient::Create(worker_.get(), node_address);
    ASSERT_TRUE(rpc.ok()) << rpc.status();
    rpc_ = std::move(*rpc);
    req_.dest.segment_id = 1;
    req_.dest.node_address = "client/push-test";
    req_.dest.base = base();
    req_.dest.size = buf.size();
    req_.dest.rkey = *rkey;
    req_.dest.worker_address = *waddr;
    req_.dest.host_id = transport::LocalHostId();
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(buf.data()); }
  // The buffer, once every write the node made into it is visible to this thread: the writes
  // land on the destination worker's thread (UCX's put handler), so a closure run there after
  // them orders them before the caller's reads. Not while the destination is stalled.
  std::string& Buffer() {
    dest_->Run([] {});
    return buf;
  }
  void Clear() { Buffer().assign(buf.size(), '\0'); }
  absl::StatusOr<proto::PushReply> Push(uint64_t src, uint64_t dst, uint64_t len,
                                        std::vector<uint64_t> headers,
                                        uint32_t timeout_ms = 10'000) {
    // This thread's earlier reads and writes of buf before the node's writes (which land on the
    // destination's thread), for TSan; a stalled destination cannot run the closure.
    if (!resume_) dest_->Run([] {});
    req_.entries = {{src, dst, len}};
    req_.headers = std::move(headers);
    req_.timeout_ms = timeout_ms;
    return rpc_->Invoke<proto::PushRequest, proto::PushReply>(proto::MsgType::kPush, req_,
                                                              absl::Seconds(20));
  }
  // Blocks the destination worker's progress thread (a client process that stopped, or whose
  // link lost every packet) until Resume(); returns once it is blocked.
  void Stall() {
    resume_ = std::make_shared<std::promise<void>>();
    auto stalled = std::make_shared<std::promise<void>>();
    auto is_stalled = stalled->get_future();
    dest_->Post([stalled, done = resume_->get_future().share()] {
      stalled->set_value();
      done.wait();
    });
    is_stalled.wait();
  }
  void Resume() {
    resume_->set_value();
    resume_.reset();
  }

  std::string buf = std::string(8192, '\0');

 private:
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::Worker> dest_;
  std::unique_ptr<transport::MemoryRegion> region_;
  std::unique_ptr<transport::RpcClient> rpc_;
  proto::PushRequest req_;
  std::shared_ptr<std::promise<void>> resume_;  // set while the destination is stalled
};

// A node pushes only from its own segments into the buffer the client named (proto::Push):
// anything else is refused with the address in the message, and what is stored stays intact.
TEST_P(StoreTest, NodeRefusesPushOutsideItsSegmentsOrTheClientsBuffer) {
  StartCluster(Cluster::Options{});
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  client::ClientImpl& c = **created;
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(c, "kept", &v));
  RawPusher p;
  ASSERT_NO_FATAL_FAILURE(p.Connect(v.seg.node_address));
  const uint64_t base = p.base();
  auto refused = [](const absl::StatusOr<proto::PushReply>& r, const std::string& what) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  };
  const uint64_t seg_end = v.seg.base + v.seg.size;
  refused(p.Push(seg_end - 100, base, 4096, {}), absl::StrCat("from address ", seg_end - 100));
  refused(p.Push(v.at, base + p.buf.size() - 10, 4096, {}),
          absl::StrCat("to address ", base + p.buf.size() - 10));
  refused(p.Push(v.at, base, 64, {seg_end}), absl::StrCat("header at address ", seg_end));
  refused(p.Push(v.at, base, 64, {}, 0), "push timeout_ms 0 is not in 1..3600000");
  EXPECT_TRUE(p.Buffer() == std::string(8192, '\0'));  // nothing written by a refused push

  // A good one writes the value in place and returns the header that vouches for it.
  auto ok = p.Push(v.at + proto::kAllocHeaderSize, base + 100, v.value.size(), {v.at});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(p.Buffer().substr(100, v.value.size()) == v.value);
  ASSERT_EQ(ok->headers.size(), proto::kAllocHeaderSize);
  proto::AllocHeader h;
  std::memcpy(&h, ok->headers.data(), sizeof(h));
  EXPECT_TRUE(proto::CheckAllocHeader(h, v.generation, HashBytes("kept"), v.value.size()).ok());
  auto again = c.Get("kept");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, v.value);
}

// Read and Write (small values over tcp): a node copies only whole allocations inside its own
// host segments, refuses anything else naming the address and leaves what is stored intact;
// a good Write is what PutEnd then commits.
TEST_P(StoreTest, NodeReadsAndWritesInlineOnlyInsideItsSegments) {
  StartCluster(Cluster::Options{});
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  client::ClientImpl& c = **created;
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(c, "kept", &v));
  auto ctx = transport::Context::Create("inline_test");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto worker = transport::Worker::Create(ctx->get(), "inline_test");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto rpc = transport::RpcClient::Create(worker->get(), v.seg.node_address);
  ASSERT_TRUE(rpc.ok()) << rpc.status();
  auto read = [&](std::vector<proto::InlineEntry> entries) {
    return (*rpc)->Invoke<proto::ReadRequest, proto::ReadReply>(
        proto::MsgType::kRead, proto::ReadRequest{std::move(entries)}, absl::Seconds(10));
  };
  auto write = [&](std::vector<proto::InlineEntry> entries, std::string data) {
    return (*rpc)->Invoke<proto::WriteRequest, proto::StatusReply>(
        proto::MsgType::kWrite, proto::WriteRequest{std::move(entries), std::move(data)},
        absl::Seconds(10));
  };
  auto refused = [](const absl::Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  const uint64_t seg_end = v.seg.base + v.seg.size;
  refused(read({{seg_end - 100, 4096}}).status(), absl::StrCat("at address ", seg_end - 100));
  const std::string junk(proto::kAllocHeaderSize + 4096, 'J');
  refused(write({{seg_end - 100, 4096}}, junk).status(),
          absl::StrCat("at address ", seg_end - 100));
  refused(write({{v.at, 4096}}, junk.substr(1)).status(), "bytes of data, but its 1 entries need");
  auto kept = c.Get("kept");  // no refused write changed a byte
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, v.value);

  // A good read: the value, then the header that vouches for it.
  auto got = read({{v.at, v.value.size()}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->data.size(), v.value.size() + proto::kAllocHeaderSize);
  EXPECT_TRUE(got->data.substr(0, v.value.size()) == v.value);
  proto::AllocHeader h;
  std::memcpy(&h, got->data.data() + v.value.size(), sizeof(h));
  EXPECT_TRUE(proto::CheckAllocHeader(h, v.generation, HashBytes("kept"), v.value.size()).ok());

  // A good write into a place PutStart gave, committed by PutEnd, reads back byte-exact.
  const std::string value = MakeValue("written", 5, 1000);
  auto started = c.PutStart({"written"}, {value.size()});
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(started->results[0].status.ToStatus().ok());
  proto::AllocHeader wh;
  wh.generation = started->results[0].generation;
  wh.key_hash = HashBytes("written");
  wh.value_length = value.size();
  std::string data(reinterpret_cast<const char*>(&wh), sizeof(wh));
  data += value;
  ASSERT_TRUE(write({{started->results[0].replicas[0].address, value.size()}}, data).ok());
  auto ended = c.Call<proto::KeyGenRequest, proto::BatchStatusReply>(
      proto::MsgType::kPutEnd,
      proto::KeyGenRequest{{{"written", started->results[0].generation, 0}}});
  ASSERT_TRUE(ended.ok()) << ended.status();
  auto back = c.Get("written");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, value);
  (*rpc).reset();
}

// A node that stops answering in the middle of a Read: the read fails at transfer_timeout_ms
// naming the node, and the reply that comes once the node runs again lands nowhere (the
// caller's buffer keeps what it held).
TEST_P(StoreTest, AReadFromAStalledNodeTimesOutAndItsLateReplyLandsNowhere) {
  if (GetParam() != "tcp") GTEST_SKIP() << "Read is the path to nodes reached over tcp alone";
  StartCluster(Cluster::Options{});
  ClientOptions o = cluster_->ClientOpts("default");
  o.transfer_timeout_ms = 500;
  o.get_retries = 0;
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string v = MakeValue("stalled", 1, 4096);
  ASSERT_TRUE((*c)->Put("warm", v).ok());  // connects to the node: it is known as tcp-only
  ASSERT_TRUE((*c)->Put("stalled", v).ok());
  std::string buf(4096, 'x');
  cluster_->node(0)->Kill(SIGSTOP);
  ASSERT_TRUE(cluster_->node(0)->WaitStopped());
  auto n = (*c)->GetInto("stalled", buf.data(), buf.size());
  cluster_->node(0)->Kill(SIGCONT);
  EXPECT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("did not answer within"), std::string::npos) << n.status();
  std::this_thread::sleep_for(milliseconds(500));  // the node answers the old Read meanwhile
  EXPECT_EQ(buf, std::string(4096, 'x'));
  auto again = (*c)->GetInto("stalled", buf.data(), buf.size());  // and serves the next one
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(buf, v);
  EXPECT_NE((*c)->MetricsText().find("granary_client_inline_values_total{op=\"read\"} 1\n"),
            std::string::npos);
}

// A node that cannot reach a client for a Push (its process stopped, its link cut) gives up at
// the request's timeout_ms: it closes its endpoint to the client, answers DEADLINE_EXCEEDED,
// and holds the client off, so the next push fails at once instead of waiting out another
// timeout; both are counted. Once the back-off has passed it serves the client again. Over tcp
// only: on shared memory the node's write is a cma copy that needs nothing of the client.
TEST_P(StoreTest, NodeGivesUpOnAStalledClientsPushHoldsItOffAndServesItAgain) {
  if (GetParam() != "tcp") {
    GTEST_SKIP() << "over shared memory a push is a cma copy, which a stalled client's worker "
                    "cannot hold up";
  }
  const uint16_t node_http = FreePort();
  Cluster::Options o;
  o.node_flags = {absl::StrCat("--metrics_port=", node_http), "--metrics_host=127.0.0.1"};
  StartCluster(o);
  auto created = client::ClientImpl::Create(cluster_->ClientOpts("default"));
  ASSERT_TRUE(created.ok()) << created.status();
  Located v;
  ASSERT_NO_FATAL_FAILURE(StoreAndLocate(**created, "held", &v));
  RawPusher p;
  ASSERT_NO_FATAL_FAILURE(p.Connect(v.seg.node_address));
  const uint64_t src = v.at + proto::kAllocHeaderSize;

  p.Stall();
  const auto start = std::chrono::steady_clock::now();
  auto timed_out = p.Push(src, p.base(), v.value.size(), {v.at}, 500);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded) << timed_out.status();
  EXPECT_NE(timed_out.status().message().find(
                "push to client/push-test did not finish within 500 ms: the node closed its "
                "endpoint to it and holds it off"),
            std::string::npos)
      << timed_out.status();
  EXPECT_GE(waited, milliseconds(500));
  EXPECT_LT(waited, milliseconds(10'000));  // answered, not left to the caller's deadline
  // Held off: refused at once, counted.
  auto refused = p.Push(src, p.base(), v.value.size(), {v.at}, 500);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("client/push-test is unreachable"), std::string::npos)
      << refused.status();
  auto timeouts = ScrapeMetric(node_http, "granary_node_transfer_timeouts_total{kind=\"push\"}");
  ASSERT_TRUE(timeouts.ok()) << timeouts.status();
  EXPECT_EQ(*timeouts, 1);
  auto refusals = ScrapeMetric(node_http, "granary_node_peer_refusals_total");
  ASSERT_TRUE(refusals.ok()) << refusals.status();
  EXPECT_EQ(*refusals, 1);

  // The client comes back. Closing the endpoint stopped what the node had not sent yet, but
  // over tcp the bytes already in the sockets' buffers still land once the client's worker
  // runs again (seen here: the whole value): a close cannot recall them. What lands is the
  // requested value in the requested range and nothing else. Once the back-off (at most
  // kUnreachableInitialMs after a first timeout) has passed, the client is served again.
  p.Resume();
  std::this_thread::sleep_for(milliseconds(transport::RmaEngine::kUnreachableInitialMs + 100));
  const std::string landed = p.Buffer();
  const std::string zeros(landed.size() - v.value.size(), '\0');
  EXPECT_TRUE(landed.substr(v.value.size()) == zeros) << "bytes outside the pushed range";
  const std::string head = landed.substr(0, v.value.size());
  EXPECT_TRUE(head == v.value || head == std::string(v.value.size(), '\0'))
      << "the abandoned push left bytes that are neither the value nor untouched";
  p.Clear();
  auto ok = p.Push(src, p.base(), v.value.size(), {v.at});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(p.Buffer().substr(0, v.value.size()) == v.value);
}

INSTANTIATE_TEST_SUITE_P(Transports, StoreTest, ::testing::Values("default", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace granary::testing
