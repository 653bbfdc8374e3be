#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace granary {

// A cpp-httplib server bound to host:port (0 = any free port) and served on its own thread
// (plus httplib's worker pool). Register routes through server() before Start(). Destruction
// stops it and joins the thread.
class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  httplib::Server& server() { return *server_; }
  [[nodiscard]] absl::Status Start(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

}  // namespace granary
