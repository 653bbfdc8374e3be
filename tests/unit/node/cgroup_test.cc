// NodeCgroup against fake cgroupfs trees (plain directories and files under a temp dir, with
// fake /proc/self/mounts and /proc/self/cgroup): detection of v1 and v2, the writes Enter makes
// in each, the figures Read parses, the limit check's message, and every refusal. The real v1
// hierarchy is exercised by tests/integration/cgroup_test.cc.
#include "node/cgroup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/metrics.h"

namespace granary::node {
namespace {

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_cgroup_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    paths_.mounts = root_ + "/mounts";
    paths_.self_cgroup = root_ + "/self_cgroup";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Write(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string Read(const std::string& rel) {
    std::ifstream in(root_ + "/" + rel);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // A v2 host whose node runs in /svc, with the memory controller available there.
  void FakeV2(const std::string& controllers = "cpu io memory pids") {
    Write("mounts", "cgroup2 " + root_ + "/unified cgroup2 rw,nosuid 0 0\n");
    Write("self_cgroup", "0::/svc\n");
    Write("unified/cgroup.controllers", controllers + "\n");
    Write("unified/svc/cgroup.controllers", controllers + "\n");
    Write("unified/svc/cgroup.subtree_control", "");
    Write("unified/svc/memory.max", "max\n");
  }
  // A hybrid v1 host (memory on v1, an empty cgroup2 beside it), the node in /.
  void FakeV1() {
    Write("mounts", "tmpfs /sys/fs/cgroup tmpfs ro 0 0\ncgroup2 " + root_ +
                        "/unified cgroup2 rw 0 0\ncgroup " + root_ +
                        "/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n");
    Write("self_cgroup", "9:name=systemd:/\n5:memory:/\n0::/\n");
    Write("unified/cgroup.controllers", "hugetlb\n");
    Write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  }

  std::string root_;
  CgroupPaths paths_;
};

TEST_F(CgroupTest, DetectsV1OnAHybridHostAndV2OnAUnifiedOne) {
  FakeV1();
  auto l = DetectCgroupLayout(paths_);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->version, CgroupVersion::kV1);
  EXPECT_EQ(l->mount, root_ + "/memory");
  EXPECT_EQ(l->own, "/");
  FakeV2();
  l = DetectCgroupLayout(paths_);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->version, CgroupVersion::kV2);
  EXPECT_EQ(l->mount, root_ + "/unified");
  EXPECT_EQ(l->own, "/svc");
}

TEST_F(CgroupTest, NoMemoryControllerIsRefusedNamingWhatThereIs) {
  FakeV2("hugetlb");
  auto l = DetectCgroupLayout(paths_);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(l.status()));
  EXPECT_NE(l.status().message().find("'hugetlb'"), std::string::npos) << l.status();
  Write("mounts", "proc /proc proc rw 0 0\n");
  EXPECT_FALSE(DetectCgroupLayout(paths_).ok());
}

TEST_F(CgroupTest, BadNamesAreRefusedByName) {
  for (const char* bad : {"", ".", "..", "a/b", "../up", "sp ace", "x\n"}) {
    absl::Status st = ValidateCgroupName(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << bad;
    EXPECT_NE(st.message().find(std::string("'") + bad + "'"), std::string::npos) << st;
  }
  EXPECT_TRUE(ValidateCgroupName("granary-node.tenant_a").ok());
}

TEST_F(CgroupTest, EnterOnV2MovesInEnablesMemoryAndSetsTheLimit) {
  FakeV2();
  auto cg = NodeCgroup::Enter(paths_, "node-a", 256ull << 20, 4242);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ((*cg)->dir(), root_ + "/unified/svc/node-a");
  EXPECT_EQ(Read("unified/svc/node-a/cgroup.procs"), "4242");
  EXPECT_EQ(Read("unified/svc/cgroup.subtree_control"), "+memory");
  EXPECT_EQ(Read("unified/svc/node-a/memory.max"), "268435456");
  // Figures: the fake kernel's files.
  Write("unified/svc/memory.max", "134217728\n");  // the parent binds tighter
  Write("unified/svc/node-a/memory.current", "1048576\n");
  Write("unified/svc/node-a/memory.peak", "2097152\n");
  Write("unified/svc/node-a/memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n");
  auto f = (*cg)->Read();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->limit, 256ull << 20);
  EXPECT_EQ(f->effective_limit, 128ull << 20);
  EXPECT_EQ(f->binding, "/svc");
  EXPECT_EQ(f->usage, 1u << 20);
  EXPECT_EQ(f->peak, 2u << 20);
  EXPECT_EQ(f->limit_hits, 7u);
  EXPECT_EQ(f->oom, 2u);
  EXPECT_EQ(f->oom_kill, 1u);
  // 100 MB + 64 MB + 1 MB > 128 MB: every number and the binding cgroup are named.
  absl::Status st = (*cg)->CheckRoom(100ull << 20, 64ull << 20);
  ASSERT_TRUE(absl::IsFailedPrecondition(st)) << st;
  for (const char* part : {"100 MB", "64 MB", "1 MB", "165 MB", "128 MB", "/svc"}) {
    EXPECT_NE(st.message().find(part), std::string::npos) << part << ": " << st;
  }
  EXPECT_TRUE((*cg)->CheckRoom(32ull << 20, 64ull << 20).ok());
  // Charged: the usage must have grown by about the segments.
  EXPECT_FALSE((*cg)->CheckCharged(0, 1u << 20).has_value());
  auto warning = (*cg)->CheckCharged(0, 64ull << 20);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("1 MB"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("64 MB"), std::string::npos) << *warning;
  // The metrics read the same files.
  common::MetricsRegistry m;
  ExportCgroupMetrics(cg->get(), &m);
  const std::string text = m.Render();
  EXPECT_NE(text.find("granary_node_cgroup_effective_limit_bytes{cgroup=\"" + root_ +
                      "/unified/svc/node-a\",version=\"v2\"} 134217728"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("granary_node_cgroup_oom_kill_total"), std::string::npos) << text;
  // v2 leaves the (now empty) cgroup for the next start.
  (*cg)->Leave();
  EXPECT_TRUE(std::filesystem::exists(root_ + "/unified/svc/node-a"));
}

TEST_F(CgroupTest, EnterOnV1SetsTheLimitAndReadsTheV1Files) {
  FakeV1();
  auto cg = NodeCgroup::Enter(paths_, "node-b", 64ull << 20, 77);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(Read("memory/node-b/memory.limit_in_bytes"), "67108864");
  EXPECT_EQ(Read("memory/node-b/cgroup.procs"), "77");
  Write("memory/node-b/memory.usage_in_bytes", "4096\n");
  Write("memory/node-b/memory.max_usage_in_bytes", "8192\n");
  Write("memory/node-b/memory.failcnt", "3\n");
  Write("memory/node-b/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  Write("memory/node-b/memory.stat", "cache 0\nhierarchical_memory_limit 33554432\n");
  auto f = (*cg)->Read();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->limit, 64ull << 20);
  EXPECT_EQ(f->effective_limit, 32ull << 20);  // an ancestor's, from memory.stat
  EXPECT_EQ(f->usage, 4096u);
  EXPECT_EQ(f->peak, 8192u);
  EXPECT_EQ(f->limit_hits, 3u);
  EXPECT_EQ(f->oom_kill, 2u);
}

TEST_F(CgroupTest, ACgroupInUseIsRefusedAnEmptyOneReused) {
  FakeV2();
  Write("unified/svc/taken/cgroup.procs", "999\n1000\n");
  auto cg = NodeCgroup::Enter(paths_, "taken", 64ull << 20, 4242);
  ASSERT_FALSE(cg.ok());
  EXPECT_NE(cg.status().message().find("in use by process 999 and 1 more"), std::string::npos)
      << cg.status();
  Write("unified/svc/empty/cgroup.procs", "");
  Write("unified/svc/empty/memory.current", "5242880\n");
  cg = NodeCgroup::Enter(paths_, "empty", 64ull << 20, 4242);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(Read("unified/svc/empty/cgroup.procs"), "4242");
}

TEST_F(CgroupTest, AnUnwritableTreeSaysWhatToDo) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes read-only directories";
  FakeV1();
  chmod((root_ + "/memory").c_str(), 0555);
  auto cg = NodeCgroup::Enter(paths_, "node-c", 64ull << 20, 1);
  ASSERT_FALSE(cg.ok());
  EXPECT_NE(cg.status().message().find("only root may create memory cgroups"), std::string::npos)
      << cg.status();
}

}  // namespace
}  // namespace granary::node
