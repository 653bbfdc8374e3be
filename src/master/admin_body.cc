#include "master/admin_body.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace granary::master {

namespace {

using nlohmann::json;

constexpr size_t kMaxDepth = 32;  // admin bodies are flat; this only stops a nesting bomb

// Builds the document from nlohmann's SAX events (json::sax_parse) so that it can refuse what
// json::parse lets through: a key given twice in one object (json::parse keeps the last), an
// integer outside 64 bits (json::parse turns it into a double, shown as 1.8446744073709552e+19),
// and nesting deeper than kMaxDepth. The first refusal is kept in error(). Owned by one parse;
// not thread-safe. Cost: one json node per value, one std::set of keys per open object.
class StrictBuilder {
 public:
  explicit StrictBuilder(json* root) : root_(root) {}
  const std::string& error() const { return error_; }

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool b) { return Put(b) != nullptr; }
  bool number_integer(json::number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (text.find_first_of(".eE") == std::string::npos) {
      return Fail(absl::StrCat(Field(), "the integer ", text, " does not fit in 64 bits"));
    }
    return Put(v) != nullptr;
  }
  bool string(json::string_t& s) { return Put(std::move(s)) != nullptr; }
  bool binary(json::binary_t&) { return Fail("binary values are not JSON"); }
  bool start_object(size_t) { return Open(json::object()); }
  bool start_array(size_t) { return Open(json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second) {
      return Fail(absl::StrCat("duplicate key '", common::EscapeInvalidUtf8(k), "'"));
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t, const std::string&, const json::exception& e) {
    // e.what() quotes the offending bytes, which need not be UTF-8.
    return Fail(absl::StrCat("body is not JSON: ", common::EscapeInvalidUtf8(e.what())));
  }

 private:
  bool Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  std::string Field() const {
    return open_.size() == 1 && open_[0]->is_object() ? absl::StrCat(key_, ": ") : "";
  }
  // Places a value where the document is (the root, the current key, or the end of an array)
  // and returns it. An open container never moves: its parent gets nothing new until it closes.
  json* Put(json v) {
    if (open_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    json& parent = *open_.back();
    if (parent.is_object()) {
      json& slot = parent[key_];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool Open(json container) {
    if (open_.size() >= kMaxDepth) return Fail(absl::StrCat("nested deeper than ", kMaxDepth));
    json* at = Put(std::move(container));
    open_.push_back(at);
    keys_.emplace_back();
    return true;
  }
  bool Close() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }

  json* root_;
  std::vector<json*> open_;                  // the containers not yet closed, outermost first
  std::vector<std::set<std::string>> keys_;  // per open container: the keys seen so far
  std::string key_;                          // the key of the value to come
  std::string error_;
};

// json::parse, strictly (StrictBuilder); INVALID_ARGUMENT naming what was refused.
absl::StatusOr<json> ParseJsonStrictly(const std::string& body) {
  json root;
  StrictBuilder builder(&root);
  bool ok = false;
  try {
    ok = json::sax_parse(body, &builder);
  } catch (const json::exception& e) {  // sax_parse reports through parse_error; kept as a net
    return absl::InvalidArgumentError(
        absl::StrCat("body is not JSON: ", common::EscapeInvalidUtf8(e.what())));
  }
  if (!ok) {
    return absl::InvalidArgumentError(builder.error().empty() ? "body is not JSON"
                                                              : builder.error());
  }
  return root;
}

// The value as the message shows it: JSON text, never throwing on bytes outside UTF-8.
std::string Shown(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

// Reads {"requested_quota_bytes": N, "max_entries": M?, "pool_spill": B?, "default_tier": T?};
// names the bad field.
absl::StatusOr<QuotaBody> ParseQuotaBody(const std::string& body) {
  QuotaBody out;
  absl::StatusOr<json> parsed = ParseJsonStrictly(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "requested_quota_bytes" && it.key() != "max_entries" &&
        it.key() != "pool_spill" && it.key() != "default_tier") {
      return absl::InvalidArgumentError(absl::StrCat("unknown field '",
                                                     common::EscapeInvalidUtf8(it.key()),
                                                     "' (expected requested_quota_bytes, "
                                                     "max_entries, pool_spill, default_tier)"));
    }
  }
  auto positive = [](const json& v, const char* name, uint64_t* out) -> absl::Status {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be an integer, got ", Shown(v)));
    }
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u == 0 || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(name, " ", u, " is outside 1..2^63-1"));
      }
      *out = u;
      return absl::OkStatus();
    }
    int64_t i = v.get<int64_t>();
    if (i <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " ", i, " must be >= 1"));
    *out = static_cast<uint64_t>(i);
    return absl::OkStatus();
  };
  if (!j.contains("requested_quota_bytes")) {
    return absl::InvalidArgumentError("requested_quota_bytes is required");
  }
  if (absl::Status st = positive(j["requested_quota_bytes"], "requested_quota_bytes", &out.quota);
      !st.ok()) {
    return st;
  }
  if (j.contains("max_entries") && !j["max_entries"].is_null()) {
    uint64_t m = 0;
    if (absl::Status st = positive(j["max_entries"], "max_entries", &m); !st.ok()) return st;
    out.max_entries = m;
  }
  if (j.contains("pool_spill")) {
    const json& v = j["pool_spill"];
    if (!v.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool_spill must be true or false, got ", Shown(v)));
    }
    out.pool_spill = v.get<bool>();
  }
  if (j.contains("default_tier")) {
    const json& v = j["default_tier"];
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("default_tier must be \"host\", \"gpu\" or \"any\", got ", Shown(v)));
    }
    absl::StatusOr<common::TierPreference> t = common::ParseTierPreference(v.get<std::string>());
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("default_tier: ", t.status().message()));
    out.default_tier = *t;
  }
  return out;
}

}  // namespace granary::master
