// The granary CLI against a real master and node: 64 MiB round trip between separate processes,
// exit statuses (0 ok, 1 not found/refused, 2 usage/unreachable) and messages.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Cluster::Options o;
    o.node_segment_size = "160MB";
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  // Runs `granary ARGS...`; returns the exit status, output in out_.
  int Run(std::vector<std::string> args, bool with_master = true) {
    std::vector<std::string> argv = {BinDir() + "/granary"};
    if (with_master) argv.push_back("--master=" + cluster_->master_address());
    for (auto& a : args) argv.push_back(a);
    std::string log = absl::StrCat(cluster_->dir(), "/cli", seq_++, ".log");
    auto p = Process::Start(argv, {}, log);
    EXPECT_TRUE(p.ok());
    int rc = (*p)->Wait();
    out_ = (*p)->Log();
    return rc;
  }
  std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::unique_ptr<Cluster> cluster_;
  std::string out_;
  int seq_ = 0;
};

TEST_F(CliTest, PutAndGetOf64MiBFileRoundTripsByteExact) {
  std::string in = cluster_->dir() + "/in.bin", out = cluster_->dir() + "/out.bin";
  std::string data = MakeValue("file", 1, 64 << 20);
  std::ofstream(in, std::ios::binary).write(data.data(), data.size());
  ASSERT_EQ(Run({"put", "model/layer0", in}), 0) << out_;
  EXPECT_NE(out_.find("GB/s"), std::string::npos) << out_;
  ASSERT_EQ(Run({"get", "model/layer0", out}), 0) << out_;
  EXPECT_TRUE(ReadFile(out) == data);
  ASSERT_EQ(Run({"stat", "model/layer0"}), 0) << out_;
  EXPECT_NE(out_.find("size: 67108864"), std::string::npos) << out_;
  ASSERT_EQ(Run({"ls", "model/"}), 0) << out_;
  EXPECT_NE(out_.find("model/layer0"), std::string::npos) << out_;
  ASSERT_EQ(Run({"segments"}), 0) << out_;
  EXPECT_NE(out_.find("host0"), std::string::npos) << out_;
  EXPECT_EQ(Run({"exists", "model/layer0"}), 0) << out_;
  EXPECT_EQ(Run({"rm", "model/layer0"}), 0) << out_;
  EXPECT_EQ(Run({"exists", "model/layer0"}), 1) << out_;
}

TEST_F(CliTest, ExitStatusesAndMessagesNameWhatFailed) {
  EXPECT_EQ(Run({"get", "nope", cluster_->dir() + "/x"}), 1);
  EXPECT_NE(out_.find("NOT_FOUND"), std::string::npos) << out_;
  EXPECT_NE(out_.find("nope"), std::string::npos) << out_;
  EXPECT_EQ(Run({"rm", "nope"}), 1);
  EXPECT_EQ(Run({"put", "k", "/nonexistent/file"}), 2);
  EXPECT_NE(out_.find("/nonexistent/file"), std::string::npos) << out_;
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_NE(out_.find("unknown command 'frobnicate'"), std::string::npos) << out_;
  EXPECT_EQ(Run({"get"}), 2);
  EXPECT_EQ(Run({"--tenant_id=_probe", "ls"}), 1);
  EXPECT_NE(out_.find("reserved"), std::string::npos) << out_;
  uint16_t dead = FreePort();
  EXPECT_EQ(Run({absl::StrCat("--master=127.0.0.1:", dead), "ls"}, /*with_master=*/false), 2);
  EXPECT_NE(out_.find(absl::StrCat("127.0.0.1:", dead)), std::string::npos) << out_;
  EXPECT_EQ(Run({"--master=nonsense", "ls"}, false), 2);
  EXPECT_NE(out_.find("'nonsense'"), std::string::npos) << out_;
}

TEST_F(CliTest, TenantsDoNotSeeEachOthersKeys) {
  std::string a = cluster_->dir() + "/a.bin";
  std::ofstream(a) << "from tenant a";
  ASSERT_EQ(Run({"--tenant_id=tenant-a", "put", "shared-name", a}), 0) << out_;
  EXPECT_EQ(Run({"--tenant_id=tenant-b", "get", "shared-name", cluster_->dir() + "/b.out"}), 1);
  ASSERT_EQ(Run({"--tenant_id=tenant-a", "get", "shared-name", cluster_->dir() + "/a.out"}), 0);
  EXPECT_EQ(ReadFile(cluster_->dir() + "/a.out"), "from tenant a");
}

}  // namespace
}  // namespace granary::testing
