#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "common/http_server.h"

namespace granary::master {

// The read-only dashboard (src/master/dashboard.html, embedded in the binary at build time):
// GET / serves the page, which reads /health, /api/v1/tenant_quotas and /api/v1/segments every
// 2 s from the same server. It needs no admin token: it only reads, and mutations stay on the
// API. Stateless; the handler only reads constants.
void AddDashboardRoutes(common::HttpServer& server);

// The page as embedded.
absl::string_view DashboardHtml();

// The Content-Security-Policy GET / sends: nothing from elsewhere (default-src 'none'), requests
// only to this server (connect-src 'self'), and only the page's own inline <style> and <script>,
// named by their SHA-256, so that markup injected through a value the APIs return could not run.
// Computed once; crashes (CHECK) when the page lacks exactly one <style> and one <script>.
const std::string& DashboardContentSecurityPolicy();

}  // namespace granary::master
