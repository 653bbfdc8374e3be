#include "common/etcd/etcd_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace granary::etcd {
namespace {

using nlohmann::json;

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

void SetTimeouts(httplib::Client& client, int connect_ms, int read_ms) {
  client.set_connection_timeout(connect_ms / 1000, (connect_ms % 1000) * 1000);
  client.set_read_timeout(read_ms / 1000, (read_ms % 1000) * 1000);
  client.set_write_timeout(connect_ms / 1000, (connect_ms % 1000) * 1000);
}

// int64 fields come as JSON strings; an absent field is 0. False when present but not a number.
bool GetI64(const json& j, const char* field, int64_t* out) {
  *out = 0;
  if (!j.is_object()) return false;
  auto it = j.find(field);
  if (it == j.end()) return true;
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  return it->is_string() && absl::SimpleAtoi(it->get<std::string>(), out);
}

bool GetBytes(const json& j, const char* field, std::string* out) {
  out->clear();
  auto it = j.find(field);
  if (it == j.end()) return true;
  return it->is_string() && absl::Base64Unescape(it->get<std::string>(), out);
}

absl::Status Malformed(absl::string_view what, absl::string_view why) {
  return absl::InternalError(absl::StrCat("malformed etcd reply to ", what, ": ", why));
}

absl::StatusOr<KeyValue> ParseKv(const json& j) {
  KeyValue kv;
  if (!j.is_object() || !GetBytes(j, "key", &kv.key) || !GetBytes(j, "value", &kv.value) ||
      !GetI64(j, "create_revision", &kv.create_revision) ||
      !GetI64(j, "mod_revision", &kv.mod_revision) || !GetI64(j, "version", &kv.version) ||
      !GetI64(j, "lease", &kv.lease)) {
    return Malformed("a key", "bad key-value");
  }
  return kv;
}

absl::StatusOr<json> ParseObject(const std::string& text, absl::string_view what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Malformed(what, "not a JSON object");
  return j;
}

int64_t HeaderRevision(const json& reply) {
  int64_t rev = 0;
  if (auto h = reply.find("header"); h != reply.end()) GetI64(*h, "revision", &rev);
  return rev;
}

absl::StatusOr<RangeResult> ParseRange(const json& reply, int64_t revision) {
  RangeResult r;
  r.revision = revision;
  if (auto kvs = reply.find("kvs"); kvs != reply.end()) {
    if (!kvs->is_array()) return Malformed("range", "'kvs' is not an array");
    for (const json& e : *kvs) {
      GRANARY_ASSIGN_OR_RETURN(KeyValue kv, ParseKv(e));
      r.kvs.push_back(std::move(kv));
    }
  }
  return r;
}

std::string I64(int64_t v) { return std::to_string(v); }

json CompareJson(const Compare& c) {
  static constexpr const char* kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json j = {{"key", absl::Base64Escape(c.key)}, {"result", kResults[static_cast<int>(c.result)]}};
  switch (c.target) {
    case Compare::Target::kCreate:
      j["target"] = "CREATE";
      j["create_revision"] = I64(c.revision);
      break;
    case Compare::Target::kMod:
      j["target"] = "MOD";
      j["mod_revision"] = I64(c.revision);
      break;
    case Compare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = I64(c.revision);
      break;
    case Compare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = absl::Base64Escape(c.value);
      break;
  }
  return j;
}

json OpJson(const Op& op) {
  json key = {{"key", absl::Base64Escape(op.key)}};
  switch (op.type) {
    case Op::Type::kPut:
      key["value"] = absl::Base64Escape(op.value);
      if (op.lease != 0) key["lease"] = I64(op.lease);
      return {{"request_put", key}};
    case Op::Type::kDelete:
      return {{"request_delete_range", key}};
    case Op::Type::kRange:
      return {{"request_range", key}};
  }
  return json::object();
}

}  // namespace

absl::StatusOr<std::vector<Endpoint>> ParseEndpoints(absl::string_view list) {
  std::vector<Endpoint> parsed;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid etcd endpoints '", list, "': empty entry; expected host:port[,host:port...]"));
    }
    GRANARY_ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(entry));
    parsed.push_back(std::move(ep));
  }
  return parsed;
}

void WatchCancel::Cancel() {
  cancelled_.store(true);
  granary::common::MutexLock lock(&mu_);
  // httplib's stop() shuts the socket down: a read blocked in the watch fails at once.
  if (client_ != nullptr) client_->stop();
}

bool WatchCancel::Attach(httplib::Client* client) {
  granary::common::MutexLock lock(&mu_);
  client_ = client;
  return client == nullptr || !cancelled_.load();
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(absl::string_view endpoints,
                                                               int timeout_ms) {
  GRANARY_ASSIGN_OR_RETURN(std::vector<Endpoint> parsed, ParseEndpoints(endpoints));
  if (timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid etcd timeout ", timeout_ms, " ms: must be positive"));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(parsed), timeout_ms));
}

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, int timeout_ms)
    : endpoints_(std::move(endpoints)),
      timeout_ms_(timeout_ms),
      description_(absl::StrCat(
          "etcd:", absl::StrJoin(endpoints_, ",", [](std::string* out, const Endpoint& e) {
            out->append(e.text);
          }))) {}

bool EtcdClient::OnEndpoints(int read_timeout_ms, const Attempt& attempt) {
  const size_t n = endpoints_.size();
  const size_t first = preferred_.load(std::memory_order_relaxed) % n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    httplib::Client client(endpoints_[i].host, endpoints_[i].port);
    SetTimeouts(client, timeout_ms_, read_timeout_ms);
    if (attempt(endpoints_[i], client)) {
      preferred_.store(i, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  std::vector<std::string> failures;
  absl::StatusOr<std::string> result;
  auto attempt = [&](const Endpoint& ep, httplib::Client& client) {
    httplib::Result res = client.Post(path, body, "application/json");
    if (!res) {
      failures.push_back(absl::StrCat(ep.text, ": ", httplib::to_string(res.error())));
      return false;
    }
    if (res->status == 200) {
      result = std::move(res->body);
      return true;
    }
    // gRPC gateway errors: {"error": "...", "code": <grpc code>, "message": "..."}.
    json reply = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
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
      return false;
    }
    absl::StatusCode status_code =
        code > 0 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kInternal;
    result = absl::Status(status_code,
                          absl::StrCat(description_, ": etcd refused ", path, " at ", what));
    return true;
  };
  if (OnEndpoints(timeout_ms_, attempt)) return result;
  return absl::UnavailableError(absl::StrCat(description_, ": no etcd endpoint answered ", path,
                                             " (", absl::StrJoin(failures, "; "), ")"));
}

absl::StatusOr<LeaseGrant> EtcdClient::LeaseGrantTtl(int64_t ttl_sec) {
  GRANARY_ASSIGN_OR_RETURN(std::string text,
                           Post("/v3/lease/grant", json{{"TTL", I64(ttl_sec)}}.dump()));
  GRANARY_ASSIGN_OR_RETURN(json reply, ParseObject(text, "lease grant"));
  LeaseGrant g;
  if (!GetI64(reply, "ID", &g.id) || !GetI64(reply, "TTL", &g.ttl_sec) || g.id == 0) {
    return Malformed("lease grant", text.substr(0, 200));
  }
  return g;
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  GRANARY_ASSIGN_OR_RETURN(std::string text,
                           Post("/v3/lease/keepalive", json{{"ID", I64(id)}}.dump()));
  GRANARY_ASSIGN_OR_RETURN(json reply, ParseObject(text, "lease keepalive"));
  // {"result":{"header":{...},"ID":"...","TTL":"5"}}; an expired lease: "TTL":"-1" (or none).
  auto result = reply.find("result");
  if (result == reply.end() || !result->is_object()) {
    return Malformed("lease keepalive", "no 'result'");
  }
  int64_t ttl = 0;
  if (!GetI64(*result, "TTL", &ttl)) return Malformed("lease keepalive", "bad TTL");
  if (!result->contains("TTL")) ttl = -1;
  return ttl;
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  return Post("/v3/lease/revoke", json{{"ID", I64(id)}}.dump()).status();
}

absl::StatusOr<RangeResult> EtcdClient::Range(const std::string& key) {
  GRANARY_ASSIGN_OR_RETURN(std::string text,
                           Post("/v3/kv/range", json{{"key", absl::Base64Escape(key)}}.dump()));
  GRANARY_ASSIGN_OR_RETURN(json reply, ParseObject(text, "range"));
  return ParseRange(reply, HeaderRevision(reply));
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  json req = {{"key", absl::Base64Escape(key)}, {"value", absl::Base64Escape(value)}};
  if (lease != 0) req["lease"] = I64(lease);
  GRANARY_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/put", req.dump()));
  GRANARY_ASSIGN_OR_RETURN(json reply, ParseObject(text, "put"));
  return HeaderRevision(reply);
}

absl::StatusOr<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compares,
                                          const std::vector<Op>& success,
                                          const std::vector<Op>& failure) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& c : compares) req["compare"].push_back(CompareJson(c));
  for (const Op& op : success) req["success"].push_back(OpJson(op));
  for (const Op& op : failure) req["failure"].push_back(OpJson(op));
  GRANARY_ASSIGN_OR_RETURN(std::string text, Post("/v3/kv/txn", req.dump()));
  GRANARY_ASSIGN_OR_RETURN(json reply, ParseObject(text, "txn"));
  TxnResult r;
  r.revision = HeaderRevision(reply);
  // The gateway leaves false out: no "succeeded" means the compare failed.
  if (auto s = reply.find("succeeded"); s != reply.end()) {
    if (!s->is_boolean()) return Malformed("txn", "'succeeded' is not a boolean");
    r.succeeded = s->get<bool>();
  }
  if (auto responses = reply.find("responses"); responses != reply.end()) {
    if (!responses->is_array()) return Malformed("txn", "'responses' is not an array");
    for (const json& resp : *responses) {
      auto range = resp.find("response_range");
      if (range == resp.end()) continue;
      GRANARY_ASSIGN_OR_RETURN(RangeResult rr, ParseRange(*range, r.revision));
      r.ranges.push_back(std::move(rr));
    }
  }
  return r;
}

absl::Status EtcdClient::Watch(
    const std::string& key, int64_t start_revision, int read_timeout_ms,
    const std::function<bool(int64_t revision, const std::vector<WatchEvent>&)>& on_events,
    WatchCancel* cancel, int64_t* next_revision) {
  *next_revision = start_revision;
  json create = {{"key", absl::Base64Escape(key)}};
  if (start_revision > 0) create["start_revision"] = I64(start_revision);
  const std::string body = json{{"create_request", create}}.dump();
  std::vector<std::string> failures;
  absl::Status result;
  auto attempt = [&](const Endpoint& ep, httplib::Client& client) {
    if (cancel != nullptr && !cancel->Attach(&client)) return true;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = body;
    std::string buf;
    bool got_bytes = false;
    bool stopped = false;
    absl::Status parse_error;
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      got_bytes = true;
      buf.append(data, len);
      for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1)) {
        json line = json::parse(buf.substr(0, nl), nullptr, /*allow_exceptions=*/false);
        auto result = line.is_object() ? line.find("result") : line.end();
        if (result == line.end() || !result->is_object()) {
          parse_error = Malformed("watch", buf.substr(0, std::min<size_t>(nl, 200)));
          return false;
        }
        int64_t compact = 0;
        GetI64(*result, "compact_revision", &compact);
        if (compact > 0) {
          parse_error = absl::OutOfRangeError(absl::StrCat(description_, ": watch of '", key,
                                                           "' from revision ", *next_revision,
                                                           ": compacted up to ", compact));
          return false;
        }
        std::vector<WatchEvent> events;
        if (auto evs = result->find("events"); evs != result->end() && evs->is_array()) {
          for (const json& e : *evs) {
            WatchEvent ev;
            auto type = e.find("type");
            if (type != e.end() && ((type->is_string() && type->get<std::string>() == "DELETE") ||
                                    (type->is_number_integer() && type->get<int>() == 1))) {
              ev.type = WatchEvent::Type::kDelete;
            }
            auto kv = e.find("kv");
            if (kv == e.end()) continue;
            absl::StatusOr<KeyValue> parsed = ParseKv(*kv);
            if (!parsed.ok()) {
              parse_error = parsed.status();
              return false;
            }
            ev.kv = *std::move(parsed);
            *next_revision = std::max(*next_revision, ev.kv.mod_revision + 1);
            events.push_back(std::move(ev));
          }
        }
        if (!on_events(HeaderRevision(*result), events)) {
          stopped = true;
          return false;
        }
      }
      return cancel == nullptr || !cancel->cancelled();
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    client.send(req, res, err);
    if (cancel != nullptr) cancel->Attach(nullptr);
    result = parse_error;
    // Stopped, cancelled, or the stream ended or timed out after it was set up (re-arm).
    if (!parse_error.ok() || stopped || got_bytes || (cancel != nullptr && cancel->cancelled())) {
      return true;
    }
    failures.push_back(absl::StrCat(ep.text, ": ",
                                    err == httplib::Error::Success
                                        ? absl::StrCat("HTTP ", res.status)
                                        : httplib::to_string(err)));
    return false;
  };
  if (OnEndpoints(read_timeout_ms, attempt)) return result;
  return absl::UnavailableError(absl::StrCat(description_, ": no etcd endpoint accepted a watch (",
                                             absl::StrJoin(failures, "; "), ")"));
}

}  // namespace granary::etcd
