// The CLI's admin helpers without a master: where the admin API is taken to be, the token file,
// the tables built from the API's JSON, and what a call to an address nobody answers says.
#include "cli/admin.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace granary::cli {
namespace {

using json = nlohmann::json;

std::string TempFile(const std::string& content) {
  char tmpl[] = "/tmp/granary_cli_admin_XXXXXX";
  int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << content;
  return tmpl;
}

TEST(ResolveAdminTargetTest, DefaultsToTheMastersHostAndPort9003) {
  auto t = ResolveAdminTarget("", "10.1.2.3:50051", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->host, "10.1.2.3");
  EXPECT_EQ(t->port, 9003);
  EXPECT_EQ(t->token, "");
  t = ResolveAdminTarget("admin.example:8080", "10.1.2.3:50051", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->host, "admin.example");
  EXPECT_EQ(t->port, 8080);
}

TEST(ResolveAdminTargetTest, BadValuesAreNamed) {
  auto t = ResolveAdminTarget("nonsense", "127.0.0.1:50051", "");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_NE(t.status().message().find("'nonsense'"), std::string::npos) << t.status();
  t = ResolveAdminTarget("127.0.0.1:0", "127.0.0.1:50051", "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("port 0"), std::string::npos) << t.status();
  t = ResolveAdminTarget("", "no-port", "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'no-port'"), std::string::npos) << t.status();
  t = ResolveAdminTarget("127.0.0.1:9003", "", "/nonexistent/token");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/token"), std::string::npos) << t.status();
  const std::string empty = TempFile(" \n");
  t = ResolveAdminTarget("127.0.0.1:9003", "", empty);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("is empty"), std::string::npos) << t.status();
  unlink(empty.c_str());
}

TEST(ResolveAdminTargetTest, TheTokenFileLosesItsFinalNewline) {
  const std::string path = TempFile("s3cret\n");
  auto t = ResolveAdminTarget("127.0.0.1:9003", "", path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token, "s3cret");
  unlink(path.c_str());
}

TEST(FormatTest, TenantTableShowsSizesInUnitsAndTheFlags) {
  json snaps = json::array({{{"tenant_id", "tenant-a"},
                             {"requested_quota_bytes", 64ull << 20},
                             {"effective_quota_bytes", 32ull << 20},
                             {"charged_bytes", 1536},
                             {"inflight_bytes", 0},
                             {"entries", 7},
                             {"max_entries", 100},
                             {"admission_closed", false},
                             {"over_quota", true},
                             {"has_explicit_policy", true},
                             {"has_token", true}},
                            {{"tenant_id", "default"},
                             {"requested_quota_bytes", 0},
                             {"effective_quota_bytes", 0},
                             {"charged_bytes", 0},
                             {"inflight_bytes", 4096},
                             {"entries", 0},
                             {"max_entries", nullptr},
                             {"admission_closed", true},
                             {"over_quota", false},
                             {"has_explicit_policy", false},
                             {"has_token", false}}});
  const std::string table = FormatTenantTable(snaps);
  EXPECT_EQ(table.rfind("TENANT", 0), 0u) << table;
  EXPECT_NE(table.find("64 MB"), std::string::npos) << table;
  EXPECT_NE(table.find("32 MB"), std::string::npos) << table;
  EXPECT_NE(table.find("1.50 KB"), std::string::npos) << table;
  EXPECT_NE(table.find("over-quota,policy,token"), std::string::npos) << table;
  EXPECT_NE(table.find("closed"), std::string::npos) << table;
  // Three lines, and the columns line up: each row's second column starts where the header's
  // does.
  size_t lines = 0, col = std::string::npos;
  for (size_t start = 0; start < table.size();) {
    size_t end = table.find('\n', start);
    std::string line = table.substr(start, end - start);
    size_t c = line.find_first_not_of(' ', line.find(' '));
    if (col == std::string::npos) col = c;
    EXPECT_EQ(c, col) << table;
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 3u) << table;
}

TEST(FormatTest, NodeTableSumsEachNodesSegments) {
  json segs = json::array({{{"segment_id", 1},
                            {"name", "host0"},
                            {"node_id", "n1"},
                            {"node_address", "127.0.0.1:4000"},
                            {"tier", "host"},
                            {"pool", ""},
                            {"size_bytes", 64ull << 20},
                            {"used_bytes", 16ull << 20}},
                           {{"segment_id", 2},
                            {"name", "host1"},
                            {"node_id", "n1"},
                            {"node_address", "127.0.0.1:4000"},
                            {"tier", "host"},
                            {"pool", ""},
                            {"size_bytes", 64ull << 20},
                            {"used_bytes", 0}},
                           {{"segment_id", 3},
                            {"name", "host0"},
                            {"node_id", "n2"},
                            {"node_address", "127.0.0.1:4001"},
                            {"tier", "host"},
                            {"pool", "tenant-a"},
                            {"size_bytes", 1ull << 30},
                            {"used_bytes", 1ull << 29},
                            {"nic", "mlx5_1:1"},
                            {"numa_node", 1},
                            {"gpu", 2}}});
  const std::string table = FormatNodeTable(segs);
  EXPECT_NE(table.find("n1"), std::string::npos) << table;
  EXPECT_NE(table.find("128 MB"), std::string::npos) << table;  // two segments summed
  EXPECT_NE(table.find("12.5%"), std::string::npos) << table;
  EXPECT_NE(table.find("shared"), std::string::npos) << table;
  EXPECT_NE(table.find("tenant-a"), std::string::npos) << table;
  EXPECT_NE(table.find("50.0%"), std::string::npos) << table;
  // n1's segments carry no topology (an older master, or UCX's choice); n2's NIC and node.
  EXPECT_NE(table.find("NIC"), std::string::npos) << table;
  EXPECT_NE(table.find("shared    ucx       -"), std::string::npos) << table;
  EXPECT_NE(table.find("tenant-a  mlx5_1:1  1"), std::string::npos) << table;
}

TEST(AdminCallTest, NobodyListeningIsUnavailableAndNamesTheAddress) {
  // A port that was free a moment ago.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t port = ntohs(a.sin_port);
  close(s);
  AdminTarget t{"127.0.0.1", port, ""};
  auto r = AdminCall(t, "GET", "/health");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos)
      << r.status();
  EXPECT_TRUE(absl::IsInvalidArgument(AdminCall(t, "POST", "/x").status()));
}

}  // namespace
}  // namespace granary::cli
