// Hostile clients against a real master's admin HTTP server (docs/security.md, "Admin HTTP"):
// slow, idle, oversized and malformed requests are answered or cut by the gate in front of the
// handlers (common/http_server.h) without delaying /health, and text that is not UTF-8 is
// refused at the door or escaped on the way out, so no listing and no scrape fails.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"
#include "tests/integration/cluster.h"
#include "tests/raw_http.h"

namespace granary::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string MessageOf(const std::string& response) {
  const json j = json::parse(HttpBodyOf(response), nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
}

int OpenFds(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

// Whether /metrics is exposition text a parser takes: valid UTF-8, and every sample line
// `name{label="value",...} number` with only \\, \" and \n escaped in values.
::testing::AssertionResult IsValidExposition(const std::string& text) {
  if (!common::IsValidUtf8(text)) {
    return ::testing::AssertionFailure()
           << "not UTF-8 at byte " << common::FirstInvalidUtf8Byte(text);
  }
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    size_t i = line.find_first_of("{ ");
    if (i == line.npos) return ::testing::AssertionFailure() << "no value: " << line;
    if (line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        if (eq == line.npos) return ::testing::AssertionFailure() << "bad label: " << line;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            if (i >= line.size() || (line[i] != '\\' && line[i] != '"' && line[i] != 'n')) {
              return ::testing::AssertionFailure() << "bad escape: " << line;
            }
          }
        }
        ++i;  // the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    double v = 0;
    if (i >= line.size() || line[i] != ' ' || !absl::SimpleAtod(line.substr(i + 1), &v)) {
      return ::testing::AssertionFailure() << "bad sample: " << line;
    }
  }
  return ::testing::AssertionSuccess();
}

class AdminHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_hostile_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    policy_ = dir_ + "/policy.yaml";
    std::ofstream(policy_) << "version: 1\ntenants:\n  - name: tenant-a\n    quota: 32MB\n";
    Cluster::Options o;
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_type=file",
                      "--tenant_quota_connector_uri=" + policy_};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    port_ = cluster_->master_http_port();
  }
  void TearDown() override {
    if (cluster_) {
      EXPECT_TRUE(cluster_->master()->Running());
      if (HasFailure()) cluster_->DumpLogs();
    }
    cluster_.reset();
    ASSERT_EQ(::system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }

  // Sends one raw request and returns the whole response.
  std::string Exchange(const std::string& request, double timeout_sec = 5) {
    RawHttp r(port_);
    EXPECT_TRUE(r.ok());
    return r.Exchange(request, timeout_sec);
  }
  static std::string Put(const std::string& target, const std::string& body,
                         const std::string& content_type = "application/json") {
    return absl::StrCat("PUT ", target, " HTTP/1.1\r\nHost: m\r\n",
                        content_type.empty() ? "" : "Content-Type: " + content_type + "\r\n",
                        "Content-Length: ", body.size(), "\r\n\r\n", body);
  }
  // GET /health: the time it took (seconds), or a large number when it failed.
  double TimedHealth() {
    const auto start = Clock::now();
    auto r = HttpGet(port_, "/health");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? SecondsSince(start) : 1e9;
  }
  double Refused(const std::string& reason) {
    auto v = ScrapeMetric(
        port_, absl::StrCat("granary_http_connections_refused_total{reason=\"", reason, "\"}"));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
  // Waits until the master holds no more descriptors than `baseline`.
  ::testing::AssertionResult FdsBackTo(int baseline) {
    const auto start = Clock::now();
    int now = OpenFds(cluster_->master()->pid());
    while (now > baseline && SecondsSince(start) < 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = OpenFds(cluster_->master()->pid());
    }
    if (now <= baseline) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << now << " descriptors, baseline " << baseline;
  }

  std::string dir_, policy_;
  std::unique_ptr<Cluster> cluster_;
  uint16_t port_ = 0;
};

TEST_F(AdminHttpTest, SlowAndIdleConnectionsDoNotDelayHealth) {
  ASSERT_LT(TimedHealth(), 1.0);
  const int baseline = OpenFds(cluster_->master()->pid());
  ASSERT_GT(baseline, 0);

  // Eight peers trickle a request's head a byte every 100 ms (httplib alone gave each a thread
  // of its 8 for as long as they kept it up), and 200 more connect and send nothing.
  std::vector<std::unique_ptr<RawHttp>> slow, idle;
  for (int i = 0; i < 8; ++i) slow.push_back(std::make_unique<RawHttp>(port_));
  for (int i = 0; i < 200; ++i) idle.push_back(std::make_unique<RawHttp>(port_));
  for (const auto& r : slow) ASSERT_TRUE(r->ok());
  for (const auto& r : idle) ASSERT_TRUE(r->ok());
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "GET /health HTTP/1.1\r\nHost: m\r\nX-Slow: ";
    for (size_t i = 0; !stop.load(); ++i) {
      for (const auto& r : slow) r->Send(std::string(1, head[std::min(i, head.size() - 1)]));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) {
    EXPECT_LT(TimedHealth(), 1.0) << "try " << i;
    auto m = HttpGet(port_, "/metrics");
    EXPECT_TRUE(m.ok()) << m.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The whole-request deadline (5 s from accept) ends the trickling ones with 408, however
  // steadily they send.
  for (const auto& r : slow) {
    const std::string reply = r->ReadAll(std::max(0.5, 7.5 - SecondsSince(start)));
    EXPECT_EQ(HttpStatusOf(reply), 408) << reply;
  }
  stop = true;
  trickle.join();
  EXPECT_LT(SecondsSince(start), 8.0);
  EXPECT_GE(Refused("deadline"), 8);
  slow.clear();
  idle.clear();
  EXPECT_TRUE(FdsBackTo(baseline));
  EXPECT_LT(TimedHealth(), 1.0);
}

TEST_F(AdminHttpTest, MoreConnectionsThanTheLimitCannotLockOutANewOne) {
  const int baseline = OpenFds(cluster_->master()->pid());
  std::vector<std::unique_ptr<RawHttp>> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<RawHttp>(port_));
  EXPECT_LT(TimedHealth(), 1.0);
  EXPECT_GE(Refused("limit"), 300 - 256);
  idle.clear();
  EXPECT_TRUE(FdsBackTo(baseline));
}

TEST_F(AdminHttpTest, BadContentLengthsAreAnsweredAtOnce) {
  struct Case {
    std::string head;
    int status;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {"PUT /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\nContent-Length: "
       "100000000000000000000\r\nContent-Type: application/json\r\n\r\n",
       413, "100000000000000000000"},
      {"PUT /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "'-1'"},
      {"PUT /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: "
       "2\r\n\r\n",
       400, "twice"},
      {"PUT /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
       411, "Content-Length"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411,
       "Transfer-Encoding"},
      {"GET /health HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n", 431, "headers"},
      {"nonsense\r\n\r\n", 400, "request line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.head.substr(0, 80));
    const auto start = Clock::now();
    const std::string reply = Exchange(c.head);
    EXPECT_LT(SecondsSince(start), 1.0);
    EXPECT_EQ(HttpStatusOf(reply), c.status) << reply;
    EXPECT_TRUE(absl::StrContains(MessageOf(reply), c.mentions)) << reply;
  }
  EXPECT_LT(TimedHealth(), 1.0);
}

TEST_F(AdminHttpTest, AFiftyMegabyteBodyIsRefusedWithoutBeingRead) {
  const size_t kBody = 50u << 20;
  RawHttp r(port_);
  ASSERT_TRUE(r.ok());
  const auto start = Clock::now();
  ASSERT_TRUE(r.Send(absl::StrCat("PUT /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\n",
                                  "Content-Type: application/json\r\nContent-Length: ", kBody,
                                  "\r\n\r\n")));
  const std::string reply = r.ReadAll(2);
  EXPECT_EQ(HttpStatusOf(reply), 413) << reply;
  EXPECT_LT(SecondsSince(start), 2.5);
  // The master stops reading soon after: the rest of the body cannot be sent.
  const std::string chunk(1 << 20, '{');
  size_t sent = 0;
  timeval tv{2, 0};
  ::setsockopt(r.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  while (sent < kBody && r.Send(chunk)) sent += chunk.size();
  EXPECT_LT(sent, kBody / 2);
  EXPECT_GE(Refused("body_too_large"), 1);
}

TEST_F(AdminHttpTest, WrongMethodIs405AndABodyThatIsNotJsonIs415) {
  std::string reply = Exchange(
      "POST /api/v1/tenant_quotas?tenant_id=t HTTP/1.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}");
  EXPECT_EQ(HttpStatusOf(reply), 405) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "\r\nAllow: DELETE, GET, PUT, HEAD\r\n")) << reply;
  reply = Exchange("PATCH /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(HttpStatusOf(reply), 405) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "\r\nAllow: GET, HEAD\r\n")) << reply;
  reply = Exchange("GET /no/such/path HTTP/1.1\r\n\r\n");
  EXPECT_EQ(HttpStatusOf(reply), 404) << reply;

  const std::string body = R"({"requested_quota_bytes": 1048576})";
  for (const std::string& type : {std::string("text/plain"), std::string()}) {
    reply = Exchange(Put("/api/v1/tenant_quotas?tenant_id=t", body, type));
    EXPECT_EQ(HttpStatusOf(reply), 415) << reply;
  }
  reply =
      Exchange(Put("/api/v1/tenant_quotas?tenant_id=t", body, "application/json; charset=utf-8"));
  EXPECT_EQ(HttpStatusOf(reply), 200) << reply;
}

TEST_F(AdminHttpTest, BodiesAreParsedStrictly) {
  struct Case {
    std::string body;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {R"({"requested_quota_bytes": 1024, "requested_quota_bytes": 2048})",
       "duplicate key 'requested_quota_bytes'"},
      {R"({"requested_quota_bytes": 18446744073709551616})", "18446744073709551616"},
      {"{\"requested_quota_bytes\": 1024, \"default_tier\": \"\xff\"}", "not JSON"},
      {std::string(10000, '[') + std::string(10000, ']'), "nested deeper"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 80));
    const std::string reply = Exchange(Put("/api/v1/tenant_quotas?tenant_id=t", c.body));
    EXPECT_EQ(HttpStatusOf(reply), 400) << reply;
    EXPECT_TRUE(absl::StrContains(MessageOf(reply), c.mentions)) << reply;
    EXPECT_FALSE(absl::StrContains(reply, "e+19")) << reply;
  }
  auto list = HttpGet(port_, "/api/v1/tenant_quotas?tenant_id=t");
  EXPECT_FALSE(list.ok());  // never created
}

TEST_F(AdminHttpTest, ATenantIdThatIsNotUtf8IsRefusedAndNothingIsCreated) {
  const std::string reply =
      Exchange(Put("/api/v1/tenant_quotas?tenant_id=a%ffb", R"({"requested_quota_bytes": 1024})"));
  EXPECT_EQ(HttpStatusOf(reply), 400) << reply;
  EXPECT_EQ(json::parse(HttpBodyOf(reply))["error"]["code"], "INVALID_TENANT_ID") << reply;
  EXPECT_TRUE(absl::StrContains(MessageOf(reply), "a\\xffb")) << reply;
  EXPECT_TRUE(absl::StrContains(MessageOf(reply), "UTF-8")) << reply;

  auto list = HttpGet(port_, "/api/v1/tenant_quotas");
  ASSERT_TRUE(list.ok()) << list.status();
  const json j = json::parse(*list);
  ASSERT_EQ(j["data"].size(), 1u) << *list;  // tenant-a only
  EXPECT_EQ(j["data"][0]["tenant_id"], "tenant-a");
  std::ifstream in(policy_);
  const std::string file((std::istreambuf_iterator<char>(in)), {});
  EXPECT_FALSE(absl::StrContains(file, "\xff")) << file;
  auto metrics = HttpGet(port_, "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_TRUE(IsValidExposition(*metrics));
}

TEST_F(AdminHttpTest, AKeyThatIsNotUtf8KeepsListingsAndMetricsValid) {
  auto client = cluster_->NewClient("tenant-a");
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string key = "k\xff\\x";  // a byte outside UTF-8, and a backslash
  ASSERT_TRUE((*client)->Put(key, MakeValue(key, 1, 4096)).ok());
  ASSERT_TRUE((*client)->Put("plain", MakeValue("plain", 1, 4096)).ok());

  auto objects = HttpGet(port_, "/api/v1/objects?tenant_id=tenant-a");
  ASSERT_TRUE(objects.ok()) << objects.status();
  const json j = json::parse(*objects);
  ASSERT_EQ(j["data"].size(), 2u) << *objects;
  bool found = false;
  for (const json& o : j["data"]) {
    if (o["key"] == "plain") {
      EXPECT_FALSE(o.contains("key_hex")) << o;
      continue;
    }
    found = true;
    EXPECT_EQ(o["key"], "k\\xff\\\\x") << o;   // escaped, the backslash doubled
    EXPECT_EQ(o["key_hex"], "6bff5c78") << o;  // exact
  }
  EXPECT_TRUE(found) << *objects;
  auto quotas = HttpGet(port_, "/api/v1/tenant_quotas");
  EXPECT_TRUE(quotas.ok()) << quotas.status();
  auto metrics = HttpGet(port_, "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_TRUE(IsValidExposition(*metrics));
}

}  // namespace
}  // namespace granary::testing
