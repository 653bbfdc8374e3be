// The gate in front of httplib (common/http_server.h), in process with short limits: whole-
// request deadlines, the connection bound, the /health lane, 405/411/413/415 and Expect.
#include "common/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "tests/raw_http.h"

namespace granary {
namespace {

using testing::HttpBodyOf;
using testing::HttpStatusOf;
using testing::RawHttp;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(common::HttpServerOptions o = {}) {
    o.metrics = &metrics_;
    o.request_deadline = absl::Milliseconds(500);
    server_ = std::make_unique<common::HttpServer>(o);
    server_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
    server_->Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      release_.WaitForNotification();
      res.set_content("slow", "text/plain");
    });
    server_->Put("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "application/json");
    });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0).ok());
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    server_.reset();
  }
  std::string Exchange(const std::string& request, double timeout_sec = 3) {
    RawHttp r(server_->port());
    EXPECT_TRUE(r.ok());
    return r.Exchange(request, timeout_sec);
  }
  double Refused(const std::string& reason) {
    const std::string line =
        absl::StrCat("granary_http_connections_refused_total{reason=\"", reason, "\"} ");
    const std::string text = metrics_.Render();
    const size_t at = text.find(line);
    return at == std::string::npos ? -1 : std::stod(text.substr(at + line.size()));
  }

  common::MetricsRegistry metrics_;
  common::Notification release_;
  std::unique_ptr<common::HttpServer> server_;
};

TEST_F(HttpServerTest, ATricklingRequestGets408AtTheWholeRequestDeadline) {
  Start();
  RawHttp slow(server_->port());
  const auto start = Clock::now();
  // A byte every 50 ms: each read is prompt, the request never completes.
  const std::string head = "GET /health HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa";
  for (char c : head) {
    if (!slow.Send(std::string(1, c))) break;
    EXPECT_EQ(HttpStatusOf(Exchange("GET /health HTTP/1.1\r\n\r\n")), 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (SecondsSince(start) > 1) break;
  }
  const std::string reply = slow.ReadAll(2);
  EXPECT_EQ(HttpStatusOf(reply), 408) << reply;
  EXPECT_LT(SecondsSince(start), 1.5);
  EXPECT_EQ(Refused("deadline"), 1);
}

TEST_F(HttpServerTest, HealthIsAnsweredWhileEveryWorkerIsBusy) {
  common::HttpServerOptions o;
  o.workers = 2;
  Start(o);
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i) {
    busy.emplace_back(
        [this] { EXPECT_EQ(HttpStatusOf(Exchange("GET /slow HTTP/1.1\r\n\r\n")), 200); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  EXPECT_EQ(HttpBodyOf(Exchange("GET /health HTTP/1.1\r\n\r\n")), "ok");
  EXPECT_LT(SecondsSince(start), 0.5);
  release_.Notify();
  for (auto& t : busy) t.join();
}

TEST_F(HttpServerTest, ANewConnectionBeyondTheLimitClosesTheOldestIdleOne) {
  common::HttpServerOptions o;
  o.max_connections = 4;
  Start(o);
  std::vector<std::unique_ptr<RawHttp>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<RawHttp>(server_->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(HttpStatusOf(Exchange("GET /health HTTP/1.1\r\n\r\n")), 200);
  EXPECT_EQ(idle[0]->ReadAll(0.5), "");  // closed, nothing sent
  EXPECT_GE(Refused("limit"), 1);
}

TEST_F(HttpServerTest, RefusesWrongMethodsMissingLengthsLargeBodiesAndOtherMediaTypes) {
  common::HttpServerOptions o;
  o.max_body_bytes = 1000;
  Start(o);
  std::string r = Exchange("DELETE /echo HTTP/1.1\r\n\r\n");
  EXPECT_EQ(HttpStatusOf(r), 405) << r;
  EXPECT_TRUE(absl::StrContains(r, "\r\nAllow: PUT\r\n")) << r;
  EXPECT_TRUE(absl::StrContains(r, "METHOD_NOT_ALLOWED")) << r;
  r = Exchange("PUT /echo HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{}");
  EXPECT_EQ(HttpStatusOf(r), 411) << r;
  r = Exchange(
      "PUT /echo HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1001\r\n\r\n");
  EXPECT_EQ(HttpStatusOf(r), 413) << r;
  r = Exchange("PUT /echo HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(HttpStatusOf(r), 415) << r;
  r = Exchange(
      "PUT /echo HTTP/1.1\r\nContent-Type: Application/JSON; charset=utf-8\r\n"
      "Content-Length: 2\r\n\r\n{}");
  EXPECT_EQ(HttpStatusOf(r), 200) << r;
  EXPECT_EQ(HttpBodyOf(r), "{}");
  EXPECT_TRUE(absl::StrContains(r, "Connection: close")) << r;
  EXPECT_EQ(Refused("no_length"), 1);
  EXPECT_EQ(Refused("body_too_large"), 1);
}

TEST_F(HttpServerTest, ExpectContinueIsAnsweredOnceAndTheBodyServed) {
  Start();
  RawHttp r(server_->port());
  ASSERT_TRUE(
      r.Send("PUT /echo HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 7\r\n"
             "Expect: 100-continue\r\n\r\n"));
  std::string got = r.ReadAll(0.3);
  EXPECT_EQ(got, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(r.Send("[1,2,3]"));
  got = r.ReadAll(2);
  EXPECT_EQ(HttpStatusOf(got), 200) << got;
  EXPECT_EQ(HttpBodyOf(got), "[1,2,3]");
  EXPECT_FALSE(absl::StrContains(got, "100 Continue")) << got;
}

TEST_F(HttpServerTest, AnOrdinaryClientWorks) {
  Start();
  httplib::Client c("127.0.0.1", server_->port());
  for (int i = 0; i < 3; ++i) {  // reconnects after each Connection: close
    auto res = c.Put("/echo", "{\"a\":1}", "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, "{\"a\":1}");
  }
  auto res = c.Get("/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

}  // namespace
}  // namespace granary
