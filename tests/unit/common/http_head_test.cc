// The checks the HTTP gate makes on a request's head (common/http_head.h).
#include "common/http_head.h"

#include <gtest/gtest.h>

#include <string>

namespace granary::http {
namespace {

constexpr uint64_t kLimit = 4 << 20;

TEST(HttpHeadTest, FindsTheEndOfTheHeadAcrossReads) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
  EXPECT_EQ(FindHeadEnd(head.substr(0, 10)), 0u);
  EXPECT_EQ(FindHeadEnd(head.substr(0, 26), 25), 0u);
  EXPECT_EQ(FindHeadEnd(head.substr(0, 27), 26), 27u);  // "\r\n\r" then "\n"
  EXPECT_EQ(FindHeadEnd(head, 0), 27u);
}

TEST(HttpHeadTest, AcceptsARequestAndReadsItsLength) {
  HeadCheck c = CheckHead(
      "PUT /api?x=1 HTTP/1.1\r\ncontent-length:  42 \r\nContent-Type: application/json\r\n\r\n",
      kLimit);
  EXPECT_EQ(c.status, 0) << c.message;
  EXPECT_EQ(c.method, "PUT");
  EXPECT_EQ(c.target, "/api?x=1");
  EXPECT_EQ(c.body_bytes, 42u);
  c = CheckHead("GET /health HTTP/1.1\r\n\r\n", kLimit);
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.body_bytes, 0u);
}

TEST(HttpHeadTest, RefusesBadLengthsWithTheValue) {
  struct Case {
    std::string head;
    int status;
    std::string reason;
    std::string mentions;
  };
  const Case cases[] = {
      {"PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "bad_length", "'-1'"},
      {"PUT / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400, "bad_length", "'1e3'"},
      {"PUT / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400, "bad_length", "''"},
      {"PUT / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "bad_length",
       "twice"},
      {"PUT / HTTP/1.1\r\nContent-Length: 100000000000000000000\r\n\r\n", 413, "body_too_large",
       "100000000000000000000"},
      {"PUT / HTTP/1.1\r\nContent-Length: 4194305\r\n\r\n", 413, "body_too_large", "4194304"},
      {"PUT / HTTP/1.1\r\n\r\n", 411, "no_length", "PUT needs a Content-Length"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "no_length",
       "Transfer-Encoding"},
      {"GARBAGE\r\n\r\n", 400, "bad_request", "GARBAGE"},
      {"GET  HTTP/1.1\r\n\r\n", 400, "bad_request", "request line"},
      {"GET / SPDY\r\n\r\n", 400, "bad_request", "request line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.head);
    const HeadCheck h = CheckHead(c.head, kLimit);
    EXPECT_EQ(h.status, c.status);
    EXPECT_EQ(h.reason, c.reason);
    EXPECT_NE(h.message.find(c.mentions), std::string::npos) << h.message;
  }
  // The limit itself is fine; the same length twice too.
  EXPECT_EQ(CheckHead("PUT / HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n", kLimit).status, 0);
  EXPECT_EQ(
      CheckHead("PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", kLimit).status,
      0);
}

TEST(HttpHeadTest, MarksTheExpectLine) {
  const std::string head =
      "PUT / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\nHost: x\r\n\r\n";
  const HeadCheck c = CheckHead(head, kLimit);
  ASSERT_EQ(c.status, 0);
  EXPECT_EQ(head.substr(c.expect_begin, c.expect_end - c.expect_begin), "Expect: 100-continue\r\n");
}

}  // namespace
}  // namespace granary::http
