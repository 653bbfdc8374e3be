#pragma once

// Small HTTP helpers for tests that talk to a master's admin API on 127.0.0.1.

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace granary::testing {

struct Reply {
  int status = 0;  // 0: no answer
  nlohmann::json body;
};

// GET, PUT (JSON body) or DELETE on 127.0.0.1:port. A body that is not JSON comes back as a
// JSON string.
inline Reply Request(uint16_t port, const std::string& method, const std::string& path,
                     const std::string& body = "") {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(2, 0);
  http.set_read_timeout(10, 0);
  httplib::Result res = method == "PUT"      ? http.Put(path, body, "application/json")
                        : method == "DELETE" ? http.Delete(path)
                                             : http.Get(path);
  Reply r;
  if (!res) return r;
  r.status = res->status;
  r.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (r.body.is_discarded()) r.body = nlohmann::json(res->body);
  return r;
}

// Polls `pred` every 20 ms; the milliseconds it took, or -1 after `timeout`.
inline int64_t WaitMs(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    if (pred()) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
          .count();
    }
    if (std::chrono::steady_clock::now() - t0 > timeout) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace granary::testing
