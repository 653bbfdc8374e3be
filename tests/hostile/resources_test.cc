// Sizes a caller gives, against real processes (docs/bad_input.md, "Resources"): a node segment
// larger than the machine is refused before anything is allocated; the CLI asks the master for
// room before it reads more than a chunk of stdin; requested quotas above the cluster's
// capacity do not scale other tenants down to nothing; keys in error messages are escaped.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

constexpr uint64_t kMaxQuota = 9223372036854775807ull;  // 2^63-1, the largest request accepted

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Regular files in /dev/shm and their sizes.
std::map<std::string, uint64_t> ShmFiles() {
  std::map<std::string, uint64_t> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    struct stat st;
    const std::string path = absl::StrCat("/dev/shm/", e->d_name);
    if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      out[path] = static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  closedir(d);
  return out;
}

// Files in /dev/shm that `after` has and `before` had not, holding more than 1 MiB.
std::vector<std::string> NewLargeShmFiles(const std::map<std::string, uint64_t>& before,
                                          const std::map<std::string, uint64_t>& after) {
  std::vector<std::string> out;
  for (const auto& [path, bytes] : after) {
    if (!before.contains(path) && bytes > (1u << 20)) out.push_back(path);
  }
  return out;
}

// What one run of the CLI with a pipe as its stdin did.
struct PipedRun {
  int rc = -1;
  uint64_t written = 0;      // bytes the writer got into the pipe before the CLI closed it
  uint64_t peak_rss_kb = 0;  // the CLI's peak resident set
  std::string output;        // its stdout and stderr
};

// Runs `granary ARGS...` with a pipe as stdin and writes up to `offer` bytes of zeros into it
// (SIGPIPE ignored): a CLI that stops reading and exits stops the writer with EPIPE.
PipedRun RunWithPipedStdin(const std::vector<std::string>& args, uint64_t offer,
                           const std::string& log) {
  PipedRun r;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return r;
  std::vector<std::string> argv = {BinDir() + "/granary"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(p[0], 0);
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(out, 2);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(p[0]);
  signal(SIGPIPE, SIG_IGN);
  static const std::string kChunk(64 << 10, '\0');
  while (r.written < offer) {
    const ssize_t n =
        write(p[1], kChunk.data(), std::min<uint64_t>(kChunk.size(), offer - r.written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EPIPE: the CLI closed its stdin (exited)
    r.written += static_cast<uint64_t>(n);
  }
  close(p[1]);
  int status = 0;
  rusage usage = {};
  wait4(pid, &status, 0, &usage);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_rss_kb = static_cast<uint64_t>(usage.ru_maxrss);
  r.output = ReadFile(log);
  return r;
}

// A master with quota on (tenant "small" 1 MiB, "room" 16 MiB, and two that ask for 2^63-1
// bytes: a typo such as "8EB" that the policy accepts) and one node of 64 MiB.
class ResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_hostile_res_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/q.yaml") << "version: 1\ntenants:\n"
                                    << "  - name: small\n    quota: 1MB\n"
                                    << "  - name: room\n    quota: 16MB\n"
                                    << "  - name: huge1\n    quota: " << kMaxQuota << "\n"
                                    << "  - name: huge2\n    quota: " << kMaxQuota << "\n";
    Cluster::Options o;
    o.node_segment_size = "64MB";
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + dir_ + "/q.yaml"};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  std::string Log() { return absl::StrCat(cluster_->dir(), "/cli", seq_++, ".log"); }
  // `granary --master=... ARGS...` with stdin from /dev/null; the exit status, output in out_.
  int Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/granary",
                                     "--master=" + cluster_->master_address()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = Process::Start(argv, {}, Log());
    EXPECT_TRUE(p.ok());
    const int rc = (*p)->Wait();
    out_ = (*p)->Log();
    return rc;
  }
  PipedRun Piped(const std::string& tenant, std::vector<std::string> args, uint64_t offer) {
    args.insert(args.begin(), {"--master=" + cluster_->master_address(), "--tenant_id=" + tenant});
    return RunWithPipedStdin(args, offer, Log());
  }
  // The tenant's effective quota, from the admin API.
  uint64_t EffectiveQuota(const std::string& tenant) {
    auto body = HttpGet(cluster_->master_http_port(), "/api/v1/tenant_quotas");
    EXPECT_TRUE(body.ok()) << body.status();
    if (!body.ok()) return 0;
    const nlohmann::json j = nlohmann::json::parse(*body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) {
      ADD_FAILURE() << "not a tenant list: " << *body;
      return 0;
    }
    for (const auto& t : j["data"]) {
      if (t.value("tenant_id", "") == tenant) return t.value("effective_quota_bytes", 0ull);
    }
    ADD_FAILURE() << "no tenant " << tenant << " in " << *body;
    return 0;
  }
  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
  std::string out_;
  int seq_ = 0;
};

// A node asked for a segment of 2^63-1 bytes refuses to start, naming the size and the
// machine's memory, before UCX or mmap allocate anything: no file appears in /dev/shm.
TEST_F(ResourcesTest, ANodeSegmentLargerThanTheMachineIsRefusedBeforeAnyAllocation) {
  const auto before = ShmFiles();
  const auto t0 = std::chrono::steady_clock::now();
  auto node = Process::Start(
      {BinDir() + "/granary_node", "--master=" + cluster_->master_address(),
       "--host_segment_size=8388607TB", "--metrics_port=0", "--local_hostname=127.0.0.1"},
      {}, absl::StrCat(cluster_->dir(), "/huge_node.log"));
  ASSERT_TRUE(node.ok());
  const int rc = (*node)->Wait();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = (*node)->Log();
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("host segment host0 of 9223370937343148032 bytes"), std::string::npos) << log;
  EXPECT_NE(log.find("larger than this machine's physical memory"), std::string::npos) << log;
  EXPECT_LT(secs, 20) << "refused at once, not after filling memory";
  EXPECT_TRUE(NewLargeShmFiles(before, ShmFiles()).empty());
  // The master and the cluster's own node are untouched.
  EXPECT_TRUE(cluster_->master()->Running());
  EXPECT_TRUE(cluster_->node(0)->Running());
}

// 1 GiB on stdin against a 1 MiB quota: without --size the CLI reads one chunk (4 MiB) and
// refuses, asking for --size; with --size=1GB the master refuses before the CLI reads a byte.
// Either way the writer gets a few MiB into the pipe at most, and the CLI's memory stays small.
TEST_F(ResourcesTest, TheCliRefusesAGigabyteOfStdinAgainstAMegabyteQuotaWithoutReadingIt) {
  constexpr uint64_t kOffer = 1ull << 30;
  PipedRun unsized = Piped("small", {"put", "big", "-"}, kOffer);
  EXPECT_EQ(unsized.rc, 2) << unsized.output;
  EXPECT_NE(unsized.output.find("stdin holds more than 4 MB: give --size=SIZE"), std::string::npos)
      << unsized.output;
  EXPECT_LT(unsized.written, 8ull << 20) << "the CLI read on past its chunk";
  EXPECT_LT(unsized.peak_rss_kb, 256u << 10) << unsized.output;

  PipedRun sized = Piped("small", {"--size=1GB", "put", "big", "-"}, kOffer);
  EXPECT_EQ(sized.rc, 1) << sized.output;
  EXPECT_NE(sized.output.find("put 'big': RESOURCE_EXHAUSTED"), std::string::npos) << sized.output;
  EXPECT_LT(sized.written, 4ull << 20) << "the CLI read stdin before asking the master";
  EXPECT_LT(sized.peak_rss_kb, 256u << 10) << sized.output;
  std::printf(
      "of 1 GiB offered: %llu bytes taken without --size (peak RSS %llu KiB), %llu with "
      "--size=1GB (peak RSS %llu KiB)\n",
      static_cast<unsigned long long>(unsized.written),
      static_cast<unsigned long long>(unsized.peak_rss_kb),
      static_cast<unsigned long long>(sized.written),
      static_cast<unsigned long long>(sized.peak_rss_kb));
  // Nothing of either was stored or left charged: a small put of the tenant still fits.
  EXPECT_EQ(Run({"--tenant_id=small", "exists", "big"}), 1) << out_;
  PipedRun fits = Piped("small", {"put", "fits", "-"}, 256 << 10);
  EXPECT_EQ(fits.rc, 0) << fits.output;
  EXPECT_EQ(fits.written, 256u << 10);
}

// Files the CLI reads whole are bounded: a token file or a config that is a device (or huge) is
// refused after a few KB / 1 MB, not read until memory runs out.
TEST_F(ResourcesTest, TheCliRefusesATokenFileOrConfigThatNeverEnds) {
  EXPECT_EQ(Run({"--tenant_token_file=/dev/zero", "exists", "k"}), 2) << out_;
  EXPECT_NE(out_.find("'/dev/zero' holds more than 4096 bytes"), std::string::npos) << out_;
  EXPECT_EQ(Run({"--config=/dev/zero", "exists", "k"}), 2) << out_;
  EXPECT_NE(out_.find("client config '/dev/zero' holds more than 1048576 bytes"), std::string::npos)
      << out_;
}

// Sized stdin within the quota is stored byte-exact; a --size the input does not match is
// refused (before the put), shorter or longer.
TEST_F(ResourcesTest, TheCliStreamsSizedStdinAndRefusesAWrongSize) {
  PipedRun short_input = Piped("room", {"--size=6MB", "put", "short", "-"}, 5 << 20);
  EXPECT_EQ(short_input.rc, 2) << short_input.output;
  EXPECT_NE(short_input.output.find("stdin ended after 5242880 bytes; --size says 6291456"),
            std::string::npos)
      << short_input.output;
  PipedRun long_input = Piped("room", {"--size=5MB", "put", "long", "-"}, 6 << 20);
  EXPECT_EQ(long_input.rc, 2) << long_input.output;
  EXPECT_NE(long_input.output.find("stdin holds more than the 5242880 bytes --size says"),
            std::string::npos)
      << long_input.output;
  EXPECT_EQ(Run({"--tenant_id=room", "exists", "short"}), 1) << out_;
  EXPECT_EQ(Run({"--tenant_id=room", "exists", "long"}), 1) << out_;

  PipedRun ok = Piped("room", {"--size=6MB", "put", "six", "-"}, 6 << 20);
  ASSERT_EQ(ok.rc, 0) << ok.output;
  const std::string out = cluster_->dir() + "/six.out";
  ASSERT_EQ(Run({"--tenant_id=room", "get", "six", out}), 0) << out_;
  EXPECT_EQ(ReadFile(out), std::string(6 << 20, '\0'));
}

// Two tenants asking for 2^63-1 bytes do not scale the others' effective quotas to 0: each
// request counts as the capacity, the others keep a share of theirs and can write.
TEST_F(ResourcesTest, TwoTenantsRequesting2To63DoNotStarveTheOthers) {
  const uint64_t small = EffectiveQuota("small");
  const uint64_t room = EffectiveQuota("room");
  EXPECT_GT(small, (1u << 20) / 4) << "small's effective quota";
  EXPECT_GT(room, (16u << 20) / 4) << "room's effective quota";
  const uint64_t huge = EffectiveQuota("huge1");
  EXPECT_GT(huge, 0u);
  EXPECT_LE(huge, 64u << 20);
  PipedRun put = Piped("room", {"put", "k", "-"}, 2 << 20);
  EXPECT_EQ(put.rc, 0) << put.output;
  // The master said why, naming both numbers, once per tenant.
  const std::string log = cluster_->master()->Log();
  EXPECT_NE(log.find(absl::StrCat("tenant 'huge1' requests a quota of ", kMaxQuota,
                                  " bytes, above the cluster's shared capacity")),
            std::string::npos)
      << log;
  // A third through the CLI: it says the request is above what the tenant gets, and the
  // others still get a share.
  EXPECT_EQ(Run({absl::StrCat("--admin=127.0.0.1:", cluster_->master_http_port()), "tenants", "set",
                 "huge3", "--quota=8388607TB"}),
            0)
      << out_;
  EXPECT_NE(out_.find("note: tenant 'huge3' requested 8388607 TB but its effective quota is"),
            std::string::npos)
      << out_;
  EXPECT_GT(EffectiveQuota("small"), 0u);
  EXPECT_GT(EffectiveQuota("room"), (16u << 20) / 8);
}

// Sizes are whole numbers: --quota=1.5GB is refused saying so (and what 1.5GB is in MB), not
// as an unknown unit '.5GB'.
TEST_F(ResourcesTest, AFractionalQuotaIsRefusedSayingTheNumberMustBeWhole) {
  EXPECT_EQ(Run({absl::StrCat("--admin=127.0.0.1:", cluster_->master_http_port()), "tenants", "set",
                 "t", "--quota=1.5GB"}),
            2);
  EXPECT_NE(out_.find("--quota '1.5GB': invalid size '1.5GB': the number must be whole (1.5GB = "
                      "1536MB)"),
            std::string::npos)
      << out_;
  EXPECT_EQ(out_.find("unknown unit"), std::string::npos) << out_;
}

// Keys with NUL, control bytes or bytes outside UTF-8 are escaped in every error that names
// them (as tenant ids are), from the master and from the CLI.
TEST_F(ResourcesTest, KeyErrorsEscapeNulAndControlBytes) {
  auto client = cluster_->NewClient("room");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string key("a\0b\x1b[2Jc\n", 9);
  auto stat = (*client)->Stat(key);
  ASSERT_FALSE(stat.ok());
  const std::string msg(stat.status().message());
  EXPECT_NE(msg.find("key 'a\\0b\\x1b[2Jc\\n' not found"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\0'), std::string::npos);
  EXPECT_EQ(msg.find('\x1b'), std::string::npos);
  // Bytes outside UTF-8 too: the message stays valid UTF-8, a UTF-8 key stays readable.
  auto bad_utf8 = (*client)->Stat("caf\xc3\xa9-\xff\xfe");
  ASSERT_FALSE(bad_utf8.ok());
  const std::string msg2(bad_utf8.status().message());
  EXPECT_NE(msg2.find("key 'caf\xc3\xa9-\\xff\\xfe' not found"), std::string::npos) << msg2;
  EXPECT_TRUE(common::IsValidUtf8(msg2)) << msg2;
  EXPECT_FALSE((*client)->Get(key).ok());
  EXPECT_EQ(std::string((*client)->Get(key).status().message()).find('\x1b'), std::string::npos);

  EXPECT_EQ(Run({"--tenant_id=room", "stat", "k\x1b[31m\t"}), 1) << out_;
  EXPECT_NE(out_.find("stat 'k\\x1b[31m\\t'"), std::string::npos) << out_;
  EXPECT_EQ(out_.find('\x1b'), std::string::npos) << out_;
}

}  // namespace
}  // namespace granary::testing
