// The dashboard route (src/master/dashboard.h): GET / serves the embedded page byte for byte as
// it is in the source tree (the build regenerated the embedding), as HTML that no cache keeps,
// under a Content-Security-Policy that allows nothing from elsewhere. What the page does in a
// browser is tested by tests/browser/.
#include "master/dashboard.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <iterator>
#include <string>

#include "common/http_server.h"

namespace granary::master {
namespace {

std::string SourcePage() {
  std::ifstream in(GRANARY_DASHBOARD_HTML);
  EXPECT_TRUE(in.good()) << GRANARY_DASHBOARD_HTML;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Dashboard, RootServesTheEmbeddedPageUncachedUnderAStrictPolicy) {
  common::HttpServer http;
  AddDashboardRoutes(http);
  ASSERT_TRUE(http.Start("127.0.0.1", 0).ok());
  httplib::Client client("127.0.0.1", http.port());
  auto res = client.Get("/");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(res->body, SourcePage());
  EXPECT_EQ(DashboardHtml(), SourcePage());

  const std::string csp = res->get_header_value("Content-Security-Policy");
  EXPECT_EQ(csp, DashboardContentSecurityPolicy());
  EXPECT_EQ(csp.rfind("default-src 'none'; script-src 'sha256-", 0), 0u) << csp;
  EXPECT_NE(csp.find("; style-src 'sha256-"), std::string::npos) << csp;
  EXPECT_NE(csp.find("; connect-src 'self';"), std::string::npos) << csp;
  // Nothing inline beyond the two hashed elements, and no remote origin at all.
  for (const char* banned : {"unsafe-inline", "unsafe-eval", "http:", "https:", "*"}) {
    EXPECT_EQ(csp.find(banned), std::string::npos) << banned << " in " << csp;
  }
  // The page itself names no remote resource.
  for (const char* banned : {"http://", "https://", "src=", "@import"}) {
    EXPECT_EQ(res->body.find(banned), std::string::npos) << banned;
  }

  // Only GET /: the page is not a catch-all.
  auto other = client.Get("/dashboard.html");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

}  // namespace
}  // namespace granary::master
