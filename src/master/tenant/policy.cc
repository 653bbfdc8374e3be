#include "master/tenant/policy.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace granary::master::tenant {
namespace {

constexpr size_t kMaxTenantIdBytes = 128;
constexpr uint64_t kMaxCount = std::numeric_limits<int64_t>::max();

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Shows an id in a message: control bytes and bytes outside well-formed UTF-8 as escapes,
// everything else as is (so a UTF-8 name stays readable and the message stays valid UTF-8).
std::string Printable(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = common::Utf8SequenceLength(s, i);
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\0') {
      out += "\\0";
    } else if (IsControl(c) || n == 0) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

std::string Where(const YAML::Node& node) {
  YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat(" (line ", mark.line + 1, ")");
}

const char* KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "an undefined node";
  }
}

// "<who>: field '<field>' (line N): <why>"
absl::Status FieldError(absl::string_view who, absl::string_view field, const YAML::Node& at,
                        absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": field '", field, "'", Where(at), ": ", why));
}

// Rejects keys outside `allowed` and keys given twice (yaml-cpp keeps both silently).
absl::Status CheckKeys(const YAML::Node& map, const std::set<std::string>& allowed,
                       absl::string_view who) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, Where(kv.first), ": keys must be plain words, got ", KindName(kv.first)));
    }
    const std::string& key = kv.first.Scalar();
    if (allowed.count(key) == 0) {
      std::string list;
      for (const auto& a : allowed) absl::StrAppend(&list, list.empty() ? "" : ", ", a);
      return FieldError(who, Printable(key), kv.first,
                        absl::StrCat("unknown key (allowed: ", list, ")"));
    }
    if (!seen.insert(key).second) return FieldError(who, key, kv.first, "given twice");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ParseQuota(const YAML::Node& node, absl::string_view who) {
  if (!node.IsScalar()) {
    return FieldError(who, "quota", node,
                      absl::StrCat("expected ", common::kSizeUnitsHelp, ", got ", KindName(node)));
  }
  const std::string& text = node.Scalar();
  if (text.find('.') != std::string::npos) {
    return FieldError(
        who, "quota", node,
        absl::StrCat("'", Printable(text), "' is a fraction; expected ", common::kSizeUnitsHelp));
  }
  absl::StatusOr<uint64_t> bytes = common::ParsePositiveSize(text);
  if (!bytes.ok()) return FieldError(who, "quota", node, bytes.status().message());
  return *bytes;
}

absl::StatusOr<uint64_t> ParseMaxEntries(const YAML::Node& node, absl::string_view who) {
  auto bad = [&](absl::string_view why) {
    return FieldError(who, "max_entries", node,
                      absl::StrCat(why, "; expected a positive whole number of entries (no unit) ",
                                   "at most 2^63-1"));
  };
  if (!node.IsScalar()) return bad(absl::StrCat("got ", KindName(node)));
  absl::string_view text = absl::StripAsciiWhitespace(node.Scalar());
  if (text.empty()) return bad("empty");
  if (text[0] == '-') return bad(absl::StrCat("'", Printable(text), "' is negative"));
  unsigned __int128 value = 0;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return bad(absl::StrCat("'", Printable(text), "' is not a whole number"));
    }
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > kMaxCount) return bad(absl::StrCat("'", Printable(text), "' is too large"));
  }
  if (value == 0) return bad("0 is not allowed");
  return static_cast<uint64_t>(value);
}

absl::StatusOr<std::string> ParseTokenSha256(const YAML::Node& node, absl::string_view who) {
  if (!node.IsScalar()) {
    return FieldError(who, "token_sha256", node,
                      absl::StrCat("expected 64 hex digits, got ", KindName(node)));
  }
  absl::StatusOr<std::string> hex = NormalizeTokenSha256(node.Scalar());
  if (!hex.ok()) return FieldError(who, "token_sha256", node, hex.status().message());
  return *hex;
}

// A YAML boolean: true or false (also True/TRUE/False/FALSE), nothing else: "yes", "on" and 1
// are refused rather than read as YAML 1.1 would.
absl::StatusOr<bool> ParsePoolSpill(const YAML::Node& node, absl::string_view who) {
  if (!node.IsScalar()) {
    return FieldError(who, "pool_spill", node,
                      absl::StrCat("expected true or false, got ", KindName(node)));
  }
  const std::string& text = node.Scalar();
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return FieldError(
      who, "pool_spill", node,
      absl::StrCat("'", Printable(text), "' is not a boolean; expected true or false"));
}

// host, gpu, any or disk.
absl::StatusOr<common::TierPreference> ParseDefaultTier(const YAML::Node& node,
                                                        absl::string_view who) {
  if (!node.IsScalar()) {
    return FieldError(who, "default_tier", node,
                      absl::StrCat("expected host, gpu, any or disk, got ", KindName(node)));
  }
  absl::StatusOr<common::TierPreference> t = common::ParseTierPreference(node.Scalar());
  if (!t.ok()) return FieldError(who, "default_tier", node, t.status().message());
  return *t;
}

// One entry of `tenants`. `index` is its position, used to name it when the name is bad.
absl::StatusOr<TenantPolicy> ParseTenant(const YAML::Node& node, size_t index) {
  std::string at_index = absl::StrCat("tenants[", index, "]");
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        at_index, Where(node), ": expected a map with 'name' and 'quota', got ", KindName(node)));
  }
  TenantPolicy tenant;
  const YAML::Node name = node["name"];
  if (!name) return FieldError(at_index, "name", node, "missing");
  if (!name.IsScalar()) {
    return FieldError(at_index, "name", name,
                      absl::StrCat("expected a string, got ", KindName(name)));
  }
  if (absl::Status st = ValidateTenantId(name.Scalar()); !st.ok()) {
    return FieldError(at_index, "name", name, st.message());
  }
  tenant.name = name.Scalar();
  std::string who = absl::StrCat("tenant '", Printable(tenant.name), "' (", at_index, ")");

  GRANARY_RETURN_IF_ERROR(CheckKeys(
      node, {"name", "quota", "max_entries", "token_sha256", "pool_spill", "default_tier"}, who));
  const YAML::Node quota = node["quota"];
  if (!quota) {
    return FieldError(who, "quota", node,
                      absl::StrCat("missing; expected ", common::kSizeUnitsHelp));
  }
  GRANARY_ASSIGN_OR_RETURN(tenant.quota_bytes, ParseQuota(quota, who));
  if (const YAML::Node max_entries = node["max_entries"]) {
    GRANARY_ASSIGN_OR_RETURN(tenant.max_entries, ParseMaxEntries(max_entries, who));
  }
  if (const YAML::Node token = node["token_sha256"]) {
    GRANARY_ASSIGN_OR_RETURN(tenant.token_sha256, ParseTokenSha256(token, who));
  }
  if (const YAML::Node spill = node["pool_spill"]) {
    GRANARY_ASSIGN_OR_RETURN(tenant.pool_spill, ParsePoolSpill(spill, who));
  }
  if (const YAML::Node tier = node["default_tier"]) {
    GRANARY_ASSIGN_OR_RETURN(tenant.default_tier, ParseDefaultTier(tier, who));
  }
  return tenant;
}

absl::StatusOr<Policy> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy", Where(root), ": expected a map with 'version' and 'tenants', got ",
                     KindName(root)));
  }
  GRANARY_RETURN_IF_ERROR(CheckKeys(root, {"version", "tenants"}, "policy"));
  const YAML::Node version = root["version"];
  if (!version) return FieldError("policy", "version", root, "missing; it must be 1");
  if (!version.IsScalar() || version.Scalar() != "1") {
    return FieldError(
        "policy", "version", version,
        absl::StrCat("must be 1, got ", version.IsScalar()
                                            ? absl::StrCat("'", Printable(version.Scalar()), "'")
                                            : std::string(KindName(version))));
  }
  const YAML::Node tenants = root["tenants"];
  if (!tenants) {
    return FieldError("policy", "tenants", root, "missing; write 'tenants: []' for none");
  }
  if (!tenants.IsSequence()) {
    return FieldError(
        "policy", "tenants", tenants,
        absl::StrCat("expected a list (write 'tenants: []' for none), got ", KindName(tenants)));
  }
  Policy policy;
  std::map<std::string, size_t> first_index;  // name -> position where it first appeared
  size_t i = 0;
  for (const YAML::Node& entry : tenants) {
    GRANARY_ASSIGN_OR_RETURN(TenantPolicy tenant, ParseTenant(entry, i));
    auto [it, inserted] = first_index.emplace(tenant.name, i);
    if (!inserted) {
      return FieldError(absl::StrCat("tenant '", Printable(tenant.name), "' (tenants[", i, "])"),
                        "name", entry["name"],
                        absl::StrCat("duplicate name, also at tenants[", it->second, "]"));
    }
    policy.tenants.push_back(std::move(tenant));
    ++i;
  }
  std::sort(policy.tenants.begin(), policy.tenants.end(),
            [](const TenantPolicy& a, const TenantPolicy& b) { return a.name < b.name; });
  return policy;
}

// A YAML double-quoted scalar. Valid ids hold no control characters, so only '"' and '\'
// need escapes; other bytes (UTF-8) pass through unchanged.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace

const TenantPolicy* Policy::Find(absl::string_view name) const {
  // Linear: policies are small (tens of tenants) and callers may build one unsorted.
  for (const TenantPolicy& t : tenants) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<std::string> NormalizeTokenSha256(absl::string_view hex) {
  constexpr size_t kHexDigits = 64;  // SHA-256: 32 bytes
  // A value of the wrong length may be a token written where its hash belongs: show only its
  // start, enough to find it, so the error does not copy a secret into a log.
  constexpr size_t kShownOfWrongLength = 8;
  auto bad = [&](absl::string_view shown, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Printable(shown), "' is not a SHA-256 in hex: ", why,
                     " (make one with: printf %s \"$TOKEN\" | sha256sum)"));
  };
  if (hex.size() != kHexDigits) {
    std::string shown(hex.substr(0, kShownOfWrongLength));
    if (hex.size() > kShownOfWrongLength) shown += "...";
    return bad(shown, absl::StrCat("expected ", kHexDigits, " hex digits, got ", hex.size(),
                                   " characters"));
  }
  std::string out(hex);
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (!absl::ascii_isxdigit(c)) {
      return bad(hex, absl::StrFormat("character %d ('%s') is not a hex digit", i + 1,
                                      Printable(hex.substr(i, 1))));
    }
    out[i] = absl::ascii_tolower(c);
  }
  return out;
}

absl::Status ValidateTenantId(absl::string_view id) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid tenant id '", Printable(id), "': ", why));
  };
  if (id.empty()) return bad("must not be empty");
  if (id.size() > kMaxTenantIdBytes) {
    return bad(absl::StrCat("must be at most ", kMaxTenantIdBytes, " bytes, got ", id.size()));
  }
  if (id[0] == '_') return bad("must not start with '_' (reserved for the master)");
  for (size_t i = 0; i < id.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(id[i]);
    if (c == '\0') return bad(absl::StrCat("must not contain NUL (byte ", i, ")"));
    if (IsControl(c)) {
      return bad(absl::StrFormat("must not contain control characters (0x%02x at byte %d)", c, i));
    }
  }
  if (const size_t at = common::FirstInvalidUtf8Byte(id); at != absl::string_view::npos) {
    return bad(absl::StrFormat("must be valid UTF-8 (byte %d, 0x%02x, starts no UTF-8 character)",
                               at, static_cast<unsigned char>(id[at])));
  }
  return absl::OkStatus();
}

// Walks the document stream without building nodes and fails where the parser stops making
// progress. yaml-cpp 0.7's LoadAll loops forever, growing memory, on a stray top-level flow
// indicator (a document that is just ","): each HandleNextDocument reports a null document without
// consuming the token. Found by fuzz/fuzz_policy.
namespace {
class ProgressCheck : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (started_ && mark.pos <= last_.pos) stuck_ = true;
    started_ = true;
    last_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  // Throws YAML::Exception like the loaders do; OK when the stream parses to its end.
  static void Run(const std::string& yaml) {
    std::istringstream in(yaml);
    YAML::Parser parser(in);
    ProgressCheck check;
    while (parser.HandleNextDocument(check)) {
      if (check.stuck_) {
        throw YAML::ParserException(check.last_, "unexpected token (starts no YAML node)");
      }
    }
  }

 private:
  bool started_ = false;
  bool stuck_ = false;
  YAML::Mark last_ = YAML::Mark::null_mark();
};
}  // namespace

absl::StatusOr<Policy> ParsePolicy(absl::string_view yaml) {
  try {
    ProgressCheck::Run(std::string(yaml));
    std::vector<YAML::Node> docs = YAML::LoadAll(std::string(yaml));
    if (docs.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy: expected one YAML document, got ", docs.size(), Where(docs[1])));
    }
    if (docs.empty() || docs[0].IsNull()) {
      return absl::InvalidArgumentError(
          "policy: empty document; expected 'version: 1' and 'tenants' (write 'tenants: []' "
          "for none)");
    }
    return ParseRoot(docs[0]);
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? std::string()
                                         : absl::StrCat(" at line ", e.mark.line + 1, ", column ",
                                                        e.mark.column + 1);
    return absl::InvalidArgumentError(absl::StrCat("policy: YAML error", where, ": ", e.msg));
  }
}

std::string SerializePolicy(const Policy& policy) {
  std::vector<const TenantPolicy*> sorted;
  sorted.reserve(policy.tenants.size());
  for (const TenantPolicy& t : policy.tenants) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TenantPolicy* a, const TenantPolicy* b) { return a->name < b->name; });

  std::string out = "version: 1\n";
  if (sorted.empty()) return out + "tenants: []\n";
  out += "tenants:\n";
  for (const TenantPolicy* t : sorted) {
    absl::StrAppend(&out, "  - name: ", Quote(t->name), "\n    quota: ", t->quota_bytes, "\n");
    if (t->max_entries) absl::StrAppend(&out, "    max_entries: ", *t->max_entries, "\n");
    if (!t->token_sha256.empty()) {
      absl::StrAppend(&out, "    token_sha256: \"", t->token_sha256, "\"\n");
    }
    if (t->pool_spill) absl::StrAppend(&out, "    pool_spill: true\n");
    if (t->default_tier != common::TierPreference::kHost) {
      absl::StrAppend(&out, "    default_tier: ", common::TierPreferenceName(t->default_tier),
                      "\n");
    }
  }
  return out;
}

}  // namespace granary::master::tenant
