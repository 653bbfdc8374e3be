// End-to-end tests on a real master and real nodes (separate processes) on loopback, over UCX's
// default transports (shared memory) and over UCX_TLS=tcp (store_fixture.h): values byte-exact
// at every size, large same-host batches, idle CPU, a lost replica node, killed and stalled
// writers, a full store, and eight concurrent clients. What a node moves for whom, and when it
// gives up, is node_transfer_test's.
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
#include "tests/integration/store_fixture.h"

namespace granary::testing {
namespace {

using std::chrono::milliseconds;

class StoreTest : public StoreFixture {
 protected:
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

INSTANTIATE_TEST_SUITE_P(Transports, StoreTest, ::testing::Values("default", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace granary::testing
