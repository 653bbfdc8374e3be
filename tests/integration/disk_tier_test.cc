// The disk tier end to end: real granary_master and granary_node processes, the node with
// --disk_path on a directory of this machine's file system (and one on /dev/shm, a tmpfs, which
// refuses O_DIRECT), clients over tcp and over shared memory.
// - Puts with PutOptions::tier = kDisk land on the disk tier only, and read back byte-exact,
//   from 1 byte to 16 MiB, single and batched.
// - A value whose bytes are corrupted in the tier's file is never served: the read fails with
//   DATA_LOSS and the node counts a checksum failure.
// - A full tier evicts its oldest objects to make room, as memory does.
// - Bad flags (a missing directory, a size that is no whole number of blocks, or over the free
//   space, a size without a path) are refused at start, naming the value.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

// A value of `n` bytes that differs per key and per byte.
std::string Value(size_t n, int seed) {
  std::string v(n, '\0');
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<char>(x >> 24);
  }
  return v;
}

// A scratch directory under `root`, removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& root) {
    std::string tmpl = root + "/granary_disk_XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Tls {
  const char* name;
  const char* ucx_tls;  // empty: UCX's own choice (shared memory on one host)
  const char* root;     // where the tier's directory is made
};

class DiskTierTest : public ::testing::TestWithParam<Tls> {
 protected:
  // A master and one node with a host segment and a disk tier of `disk_size` in dir_.
  void StartCluster(const std::string& disk_size = "64MB") {
    ASSERT_FALSE(dir_.path().empty()) << "no directory under " << GetParam().root;
    node_http_ = FreePort();
    Cluster::Options o;
    o.node_segment_size = "16MB";
    if (*GetParam().ucx_tls != '\0') o.env.push_back(absl::StrCat("UCX_TLS=", GetParam().ucx_tls));
    o.node_flags = {"--disk_path=" + dir_.path(), "--disk_size=" + disk_size,
                    absl::StrCat("--metrics_port=", node_http_), "--metrics_host=127.0.0.1"};
    o.segments_per_node = 2;
    if (*GetParam().ucx_tls != '\0') setenv("UCX_TLS", GetParam().ucx_tls, 1);
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto client = cluster_->NewClient("t1");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  void TearDown() override {
    client_.reset();
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    unsetenv("UCX_TLS");
  }
  double NodeMetric(const std::string& sample) {
    absl::StatusOr<double> v = ScrapeMetric(node_http_, sample);
    EXPECT_TRUE(v.ok()) << sample << ": " << v.status();
    return v.ok() ? *v : -1;
  }
  static PutOptions OnDisk() {
    PutOptions o;
    o.tier = StorageTier::kDisk;
    return o;
  }

  ScratchDir dir_{GetParam().root};
  uint16_t node_http_ = 0;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_P(DiskTierTest, PutsOnTheDiskTierReadBackByteExact) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::vector<size_t> sizes = {1, 63, 4095, 4096, 4097, 65536 + 3, 1 << 20, (16 << 20) + 1};
  std::vector<std::string> keys, values;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back(absl::StrCat("disk/", i));
    values.push_back(Value(sizes[i], static_cast<int>(i)));
  }
  std::vector<absl::string_view> views(values.begin(), values.end());
  std::vector<absl::Status> put = client_->BatchPutWith(keys, views, OnDisk());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(put[i].ok()) << keys[i] << ": " << put[i];
  // Every replica is on the disk tier; the host segment holds none.
  auto segments = client_->Segments();
  ASSERT_TRUE(segments.ok()) << segments.status();
  uint64_t disk_used = 0, host_used = 0;
  for (const auto& s : *segments) (s.tier == "disk" ? disk_used : host_used) += s.used;
  EXPECT_GT(disk_used, 0u);
  EXPECT_EQ(host_used, 0u);
  // Read back, batched and one by one, into fresh strings and into caller buffers.
  std::vector<absl::StatusOr<std::string>> got = client_->BatchGet(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status();
    EXPECT_TRUE(*got[i] == values[i]) << keys[i] << " differs";
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string buf(values[i].size() + 10, '\0');
    absl::StatusOr<size_t> n = client_->GetInto(keys[i], buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << keys[i] << ": " << n.status();
    ASSERT_EQ(*n, values[i].size());
    EXPECT_EQ(buf.substr(0, *n), values[i]) << keys[i];
  }
  EXPECT_EQ(NodeMetric("granary_node_disk_values_total{op=\"write\"}"), keys.size());
  EXPECT_EQ(NodeMetric("granary_node_disk_values_total{op=\"read\"}"), 2 * keys.size());
  EXPECT_EQ(NodeMetric("granary_node_disk_checksum_failures_total"), 0);
  // Removed objects give their space back.
  for (const auto& k : keys) EXPECT_TRUE(client_->Remove(k).ok()) << k;
  segments = client_->Segments();
  ASSERT_TRUE(segments.ok());
  for (const auto& s : *segments) EXPECT_EQ(s.used, 0u) << s.name;
}

// Batches of several MiB, whose answers come after the node's disk I/O, each answered well
// within the write window. (bench/disk_tier.sh saw such answers over shared memory sleep in the
// client until the window closed; this test did not reproduce that here, so it checks the
// batches, not that fix.)
TEST_P(DiskTierTest, BatchesOfSeveralMiBAnswerInTime) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  for (int round = 0; round < 6; ++round) {
    std::vector<std::string> keys, values;
    for (int i = 0; i < 8; ++i) {
      keys.push_back(absl::StrCat("batch/", round, "/", i));
      values.push_back(Value(1 << 20, round * 8 + i));
    }
    std::vector<absl::string_view> views(values.begin(), values.end());
    for (const absl::Status& st : client_->BatchPutWith(keys, views, OnDisk())) {
      ASSERT_TRUE(st.ok()) << "round " << round << ": " << st;
    }
    std::vector<absl::StatusOr<std::string>> got = client_->BatchGet(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status();
      EXPECT_TRUE(*got[i] == values[i]) << keys[i];
    }
  }
}

// kill -9 of the node, and the same command again: the node finds its tier file, replays the
// journal beside it, checks each record's preamble and reports them; the master restores every
// object of both tenants with its charge, and they read back byte-exact.
TEST_P(DiskTierTest, ANodeKilledAndStartedAgainKeepsItsDiskObjects) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  auto other = cluster_->NewClient("t2");
  ASSERT_TRUE(other.ok()) << other.status();
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(absl::StrCat("keep/", i));
    values.push_back(Value(1 + i * 7919, i));
  }
  std::vector<absl::string_view> views(values.begin(), values.end());
  for (const absl::Status& st : client_->BatchPutWith(keys, views, OnDisk()))
    ASSERT_TRUE(st.ok()) << st;
  for (const absl::Status& st : (*other)->BatchPutWith(keys, views, OnDisk()))
    ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(client_->Remove(keys[0]).ok());  // a freed record must not come back
  auto before = client_->Segments();
  ASSERT_TRUE(before.ok());
  uint64_t disk_used = 0;
  for (const auto& seg : *before) disk_used += seg.tier == "disk" ? seg.used : 0;
  ASSERT_GT(disk_used, 0u);

  // The node learns commits and frees from the master's inventory sync: wait until its
  // inventory (and so its journal) has all 79 (what it has not journaled at a crash is lost).
  for (int i = 0; i < 100 && NodeMetric("granary_node_inventory_entries") != 79; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(NodeMetric("granary_node_inventory_entries"), 79);
  cluster_->node(0)->Kill(SIGKILL);
  cluster_->node(0)->Wait();
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2).ok());
  // Retry until the report is in (the master restores while the node reports).
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (client_->Get(keys[1]).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    for (Client* c : {client_.get(), other->get()}) {
      absl::StatusOr<std::string> got = c->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
      EXPECT_TRUE(*got == values[i]) << keys[i];
    }
  }
  EXPECT_EQ(client_->Get(keys[0]).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::string> t2_first = (*other)->Get(keys[0]);
  ASSERT_TRUE(t2_first.ok()) << t2_first.status();
  auto after = client_->Segments();
  ASSERT_TRUE(after.ok());
  uint64_t disk_used_after = 0;
  for (const auto& seg : *after) disk_used_after += seg.tier == "disk" ? seg.used : 0;
  EXPECT_EQ(disk_used_after, disk_used);
  // Once the master frees the space nobody reported (a quarantine of 2 x client_ttl and a
  // margin), new puts land beside the survivors without overwriting any.
  for (int i = 0; i < 150; ++i) {
    absl::StatusOr<double> q = cluster_->Metric("granary_master_quarantined_bytes");
    if (q.ok() && *q == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  absl::Status put = client_->BatchPutWith({"after"}, {Value(50000, 99)}, OnDisk())[0];
  ASSERT_TRUE(put.ok()) << put;
  absl::StatusOr<std::string> fresh = client_->Get("after");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, Value(50000, 99));
  for (size_t i = 1; i < keys.size(); ++i) {
    absl::StatusOr<std::string> got = client_->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    EXPECT_TRUE(*got == values[i]) << keys[i];
  }
}

TEST_P(DiskTierTest, CorruptBytesInTheTierFileAreNeverServed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string value = Value(100000, 7);
  ASSERT_TRUE(client_->BatchPutWith({"victim"}, {value}, OnDisk())[0].ok());
  ASSERT_TRUE(client_->BatchPutWith({"bystander"}, {Value(5000, 8)}, OnDisk())[0].ok());
  // Flip one byte in the middle of the value where it lies in the file.
  const std::string file = dir_.path() + "/granary-tier.dat";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << file;
  std::string contents((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = contents.find(value.substr(0, 64));
  ASSERT_NE(at, std::string::npos) << "the value is not in " << file;
  f.seekp(static_cast<std::streamoff>(at + 50000));
  f.put(static_cast<char>(value[50000] ^ 0x5a));
  f.close();
  absl::StatusOr<std::string> got = client_->Get("victim");
  ASSERT_FALSE(got.ok()) << "corrupt bytes were served";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status();
  EXPECT_GE(NodeMetric("granary_node_disk_checksum_failures_total"), 1);
  // Another object on the same tier is untouched, read alone or in one batch with the victim
  // (whose failure fails its own read only).
  absl::StatusOr<std::string> other = client_->Get("bystander");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, Value(5000, 8));
  std::vector<absl::StatusOr<std::string>> both = client_->BatchGet({"victim", "bystander"});
  EXPECT_EQ(both[0].status().code(), absl::StatusCode::kDataLoss) << both[0].status();
  ASSERT_TRUE(both[1].ok()) << both[1].status();
  EXPECT_EQ(*both[1], Value(5000, 8));
}

TEST_P(DiskTierTest, AFullTierEvictsItsOldestObjects) {
  ASSERT_NO_FATAL_FAILURE(StartCluster("2MB"));
  // Each record is a block of preamble and 256 KiB of value: seven fit in 2 MiB, not forty.
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(absl::StrCat("fill/", i));
    absl::Status st = client_->BatchPutWith({keys.back()}, {Value(256 << 10, i)}, OnDisk())[0];
    ASSERT_TRUE(st.ok()) << keys.back() << ": " << st;
  }
  absl::StatusOr<std::string> newest = client_->Get(keys.back());
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(*newest, Value(256 << 10, 39));
  EXPECT_EQ(client_->Get(keys.front()).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<double> evicted =
      cluster_->Metric("granary_master_tier_evicted_objects_total{tier=\"disk\"}");
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_GE(*evicted, 33);
}

TEST_P(DiskTierTest, AValueOverOneMessageIsRefusedNamingItsSize) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string big((64u << 20) - 100, 'x');
  absl::Status st = client_->BatchPutWith({"big"}, {big}, OnDisk())[0];
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(absl::StrCat(big.size())), std::string::npos) << st;
  EXPECT_EQ(client_->Get("big").status().code(), absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Transports, DiskTierTest,
                         ::testing::Values(Tls{"tcp", "tcp", "/tmp"}, Tls{"shm", "", "/tmp"},
                                           Tls{"tmpfs", "tcp", "/dev/shm"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A node whose disk flags are wrong exits at once with a message naming the value.
std::string RefusedStart(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinDir() + "/granary_node", "--master=127.0.0.1:1",
                                   "--host_segment_size=8MB", "--metrics_port=0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ScratchDir logs("/tmp");
  auto p = Process::Start(argv, {}, logs.path() + "/node.log");
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  const int rc = (*p)->Wait();
  EXPECT_NE(rc, 0) << "granary_node started with " << absl::StrJoin(flags, " ");
  return (*p)->Log();
}

TEST(DiskTierFlags, BadPathsAndSizesAreRefusedNamingThem) {
  ScratchDir dir("/tmp");
  ASSERT_FALSE(dir.path().empty());
  const std::string missing = dir.path() + "/no/such/dir";
  EXPECT_NE(RefusedStart({"--disk_path=" + missing, "--disk_size=8MB"}).find(missing),
            std::string::npos);
  std::string log = RefusedStart({"--disk_path=" + dir.path(), "--disk_size=8195"});
  EXPECT_NE(log.find("8195"), std::string::npos) << log;
  log = RefusedStart({"--disk_path=" + dir.path(), "--disk_size=100TB"});
  EXPECT_NE(log.find("free"), std::string::npos) << log;
  log = RefusedStart({"--disk_size=8MB"});
  EXPECT_NE(log.find("--disk_size without --disk_path"), std::string::npos) << log;
  log = RefusedStart({"--disk_path=" + dir.path(), "--disk_size=8MB", "--disk_queue_depth=0"});
  EXPECT_NE(log.find("--disk_queue_depth=0"), std::string::npos) << log;
  log = RefusedStart({"--disk_path=" + dir.path() + "," + dir.path(), "--disk_size=8MB"});
  EXPECT_NE(log.find("given twice"), std::string::npos) << log;
}

// A tier file belongs to one node at a time (a lock), and a file of another size is refused
// rather than read as records or cut.
TEST(DiskTierFlags, ATierFileInUseOrOfAnotherSizeIsRefused) {
  ScratchDir dir("/tmp");
  ASSERT_FALSE(dir.path().empty());
  const std::vector<std::string> argv = {BinDir() + "/granary_node",  "--master=127.0.0.1:1",
                                         "--host_segment_size=8MB",   "--metrics_port=0",
                                         "--disk_path=" + dir.path(), "--disk_size=8MB"};
  auto first = Process::Start(argv, {}, dir.path() + "/first.log");
  ASSERT_TRUE(first.ok()) << first.status();
  // The first node holds the file once it has logged the tier (it keeps retrying the master).
  for (int i = 0; i < 100 && (*first)->Log().find("disk tier disk0") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE((*first)->Log().find("disk tier disk0"), std::string::npos) << (*first)->Log();
  std::string log = RefusedStart({"--disk_path=" + dir.path(), "--disk_size=8MB"});
  EXPECT_NE(log.find("is in use by another process"), std::string::npos) << log;
  (*first)->Kill(SIGKILL);
  (*first)->Wait();
  log = RefusedStart({"--disk_path=" + dir.path(), "--disk_size=16MB"});
  EXPECT_NE(log.find("holds 8388608 bytes, but --disk_size asks for 16777216"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace granary::testing
