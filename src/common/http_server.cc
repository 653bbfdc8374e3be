#include "common/http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"

namespace granary {

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

absl::Status HttpServer::Start(const std::string& host, uint16_t port) {
  int bound = port == 0 ? server_->bind_to_any_port(host.c_str())
                        : (server_->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind an HTTP server to ", host, ":", port,
                                               " (in use, or not a local address)"));
  }
  port_ = static_cast<uint16_t>(bound);
  thread_ = std::thread([s = server_.get()] { s->listen_after_bind(); });
  return absl::OkStatus();
}

}  // namespace granary
