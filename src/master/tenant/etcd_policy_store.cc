#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "httplib.h"
#include "master/tenant/policy_store.h"
#include "nlohmann/json.hpp"

namespace granary::master::tenant {
namespace {

struct Endpoint {
  std::string text;  // as the operator wrote it, for messages
  std::string host;
  int port = 0;
};

// "host:port", "[v6]:port" or "http://host:port".
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view entry) {
  Endpoint ep;
  ep.text = std::string(entry);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid etcd endpoint '", entry, "': ", why, "; expected host:port"));
  };
  absl::string_view s = entry;
  absl::ConsumePrefix(&s, "http://");
  if (s.find("://") != absl::string_view::npos) return bad("only http:// is supported");
  absl::string_view host, port;
  const bool bracketed = absl::ConsumePrefix(&s, "[");
  if (bracketed) {
    size_t close = s.find(']');
    if (close == absl::string_view::npos) return bad("unterminated '['");
    host = s.substr(0, close);
    s.remove_prefix(close + 1);
    if (!absl::ConsumePrefix(&s, ":")) return bad("missing ':port'");
    port = s;
  } else {
    size_t colon = s.rfind(':');
    if (colon == absl::string_view::npos) return bad("missing ':port'");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (host.empty()) return bad("empty host");
  for (char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '/' || c == '[' || c == ']' ||
        (c == ':' && !bracketed)) {
      return bad("bad character in host");
    }
  }
  auto is_digit = [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); };
  if (port.empty() || !absl::c_all_of(port, is_digit) || !absl::SimpleAtoi(port, &ep.port) ||
      ep.port < 1 || ep.port > 65535) {
    return bad(absl::StrCat("port '", port, "' is not a number in 1..65535"));
  }
  ep.host = std::string(host);
  return ep;
}

// The policy in etcd through its v3 JSON gateway (POST /v3/kv/range and /v3/kv/put, keys and
// values base64). Every request opens a fresh connection (Load and Save are rare: startup and
// admin writes), so there is no shared connection state. Endpoints are tried in turn, starting
// from the last one that answered; transport errors, HTTP 5xx and gRPC UNAVAILABLE or
// DEADLINE_EXCEEDED move on to the next, anything else is returned at once.
//
// Thread-safe: the only mutable state is the atomic index of the preferred endpoint. Owned by
// whoever created it (the master).
class EtcdPolicyStore final : public PolicyStore {
 public:
  EtcdPolicyStore(std::vector<Endpoint> endpoints, std::string endpoints_text, std::string key,
                  int timeout_ms)
      : endpoints_(std::move(endpoints)),
        endpoints_text_(std::move(endpoints_text)),
        key_(std::move(key)),
        timeout_ms_(timeout_ms) {}

  absl::StatusOr<Policy> Load() override {
    nlohmann::json request = {{"key", absl::Base64Escape(key_)}};
    GRANARY_ASSIGN_OR_RETURN(const nlohmann::json reply, Post("/v3/kv/range", request));
    // The gateway leaves out empty fields: no "kvs" means no such key, no "value" means "".
    auto kvs = reply.find("kvs");
    if (kvs == reply.end() || !kvs->is_array() || kvs->empty()) return Policy{};
    const nlohmann::json& kv = (*kvs)[0];
    std::string encoded, yaml;
    if (kv.is_object()) {
      if (auto value = kv.find("value"); value != kv.end()) {
        if (!value->is_string()) return Malformed("'value' is not a string");
        encoded = value->get<std::string>();
      }
    }
    if (!absl::Base64Unescape(encoded, &yaml)) return Malformed("'value' is not base64");
    absl::StatusOr<Policy> policy = ParsePolicy(yaml);
    if (!policy.ok()) {
      return absl::Status(policy.status().code(),
                          absl::StrCat(Describe(), ": ", policy.status().message()));
    }
    return policy;
  }

  absl::Status Save(const Policy& policy) override {
    std::string yaml = SerializePolicy(policy);
    // Never store what Load would refuse (a bad name, a zero quota, a duplicate).
    if (absl::StatusOr<Policy> check = ParsePolicy(yaml); !check.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("refusing to save an invalid policy: ", check.status().message()));
    }
    nlohmann::json request = {{"key", absl::Base64Escape(key_)},
                              {"value", absl::Base64Escape(yaml)}};
    return Post("/v3/kv/put", request).status();
  }

  std::string Describe() const override {
    return absl::StrCat("etcd:", endpoints_text_, "/", key_);
  }

 private:
  absl::Status Malformed(absl::string_view why) const {
    return absl::InternalError(absl::StrCat(Describe(), ": malformed etcd reply: ", why));
  }

  // Sends `body` to each endpoint in turn until one answers; returns the JSON reply.
  absl::StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body) {
    const std::string payload = body.dump();
    const size_t n = endpoints_.size();
    const size_t first = preferred_.load(std::memory_order_relaxed) % n;
    std::vector<std::string> failures;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      const Endpoint& ep = endpoints_[i];
      httplib::Client client(ep.host, ep.port);
      const time_t sec = timeout_ms_ / 1000;
      const time_t usec = (timeout_ms_ % 1000) * 1000;
      client.set_connection_timeout(sec, usec);
      client.set_read_timeout(sec, usec);
      client.set_write_timeout(sec, usec);
      httplib::Result res = client.Post(path, payload, "application/json");
      if (!res) {
        failures.push_back(absl::StrCat(ep.text, ": ", httplib::to_string(res.error())));
        continue;
      }
      nlohmann::json reply = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
      if (res->status == 200) {
        if (!reply.is_object()) {
          return absl::InternalError(absl::StrCat(Describe(), ": malformed etcd reply from ",
                                                  ep.text, " to ", path, ": not a JSON object"));
        }
        preferred_.store(i, std::memory_order_relaxed);
        return reply;
      }
      // gRPC gateway errors: {"error": "...", "code": <grpc code>, "message": "..."}.
      int code = 0;
      std::string message = res->body.substr(0, 200);
      if (reply.is_object()) {
        if (reply.contains("code") && reply["code"].is_number_integer()) {
          code = reply["code"].get<int>();
        }
        if (reply.contains("message") && reply["message"].is_string()) {
          message = reply["message"].get<std::string>();
        }
      }
      std::string what = absl::StrCat(ep.text, ": HTTP ", res->status, ": ", message);
      const bool retry = res->status >= 500 ||
                         code == static_cast<int>(absl::StatusCode::kUnavailable) ||
                         code == static_cast<int>(absl::StatusCode::kDeadlineExceeded);
      if (retry) {
        failures.push_back(std::move(what));
        continue;
      }
      absl::StatusCode status_code = code > 0 && code <= 16 ? static_cast<absl::StatusCode>(code)
                                                            : absl::StatusCode::kInternal;
      return absl::Status(status_code,
                          absl::StrCat(Describe(), ": etcd refused ", path, " at ", what));
    }
    return absl::UnavailableError(absl::StrCat(Describe(), ": no etcd endpoint answered ", path,
                                               " (", absl::StrJoin(failures, "; "), ")"));
  }

  const std::vector<Endpoint> endpoints_;
  const std::string endpoints_text_;
  const std::string key_;
  const int timeout_ms_;
  std::atomic<size_t> preferred_{0};  // index of the endpoint that last answered
};

}  // namespace

absl::StatusOr<std::unique_ptr<PolicyStore>> NewEtcdPolicyStore(const std::string& endpoints,
                                                                const std::string& cluster_id,
                                                                int timeout_ms) {
  std::vector<Endpoint> parsed;
  for (absl::string_view entry : absl::StrSplit(endpoints, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid etcd endpoints '", endpoints,
                       "': empty entry; expected host:port[,host:port...]"));
    }
    GRANARY_ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(entry));
    parsed.push_back(std::move(ep));
  }
  if (cluster_id.empty() || cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("invalid cluster id '", cluster_id,
                                                   "': must be non-empty and contain no '/'"));
  }
  if (timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid etcd timeout ", timeout_ms, " ms: must be positive"));
  }
  std::vector<std::string> texts;
  for (const Endpoint& ep : parsed) texts.push_back(ep.text);
  return std::make_unique<EtcdPolicyStore>(
      std::move(parsed), absl::StrJoin(texts, ","),
      absl::StrCat("granary/", cluster_id, "/tenant_quota_policy"), timeout_ms);
}

}  // namespace granary::master::tenant
