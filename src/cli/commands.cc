#include "cli/commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/transfer.h"
#include "common/clock.h"
#include "common/quote.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/tier_preference.h"
#include "granary/client.h"
#include "granary/error_reason.h"

namespace granary::cli {
namespace {

// Files at least this large get a progress line on a terminal.
constexpr uint64_t kProgressBytes = 64ull << 20;

// The most put reads from stdin or a pipe before the master has been asked for room: without
// --size, an input that holds more is refused after this much.
constexpr size_t kUnsizedInputBytes = 4u << 20;

// Phase one of the put of `size` bytes under `key`: the master's answer (quota, space, a key
// that exists) before any of the value is read. The grant must be finished (FinishPut) within
// the write window or it is revoked.
absl::StatusOr<granary::client::ClientImpl::PutGrant> AskForRoom(granary::client::ClientImpl& c,
                                                                 const std::string& key,
                                                                 uint64_t size, uint32_t flags) {
  absl::StatusOr<granary::client::ClientImpl::PutGrant> grant = c.BeginPut({key}, {size}, flags);
  if (!grant.ok()) return grant.status();
  GRANARY_RETURN_IF_ERROR(grant->reply.status.ToStatus());
  GRANARY_RETURN_IF_ERROR(grant->reply.results[0].status.ToStatus());
  return grant;
}

// Gives a grant back (the input turned out not to match it).
void GiveBack(granary::client::ClientImpl& c, const std::string& key,
              const granary::client::ClientImpl::PutGrant& grant) {
  granary::proto::KeyGenRequest revoke;
  revoke.entries.push_back({key, grant.reply.results[0].generation, 0});
  (void)c.Call<granary::proto::KeyGenRequest, granary::proto::BatchStatusReply>(
      granary::proto::MsgType::kPutRevoke, revoke);
}

int RunPut(granary::client::ClientImpl& c, const std::vector<std::string>& args,
           const CommandFlags& flags) {
  granary::PutOptions options;  // the tenant's default tier unless --tier names one
  std::optional<granary::common::TierPreference> tier_preference;
  if (!flags.tier.empty()) {
    absl::StatusOr<granary::StorageTier> tier = granary::ParseStorageTier(flags.tier);
    if (!tier.ok()) return Usage(absl::StrCat("--tier: ", tier.status().message()));
    options.tier = *tier;
    tier_preference = *granary::common::ParseTierPreference(flags.tier);
  }
  std::optional<uint64_t> size_flag;
  if (!flags.size.empty()) {
    absl::StatusOr<uint64_t> n = granary::common::ParsePositiveSize(flags.size);
    if (!n.ok()) return Usage(absl::StrCat("--size: ", n.status().message()));
    size_flag = *n;
  }
  const std::string& key = args[0];
  const std::string what = "put " + granary::common::QuotedKey(key);
  const std::string path = args.size() > 1 ? args[1] : "-";
  const std::string input = path == "-" ? "stdin" : "'" + path + "'";
  int fd = path == "-" ? 0 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Usage(absl::StrCat("cannot open ", input, ": ", strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd != 0) close(fd);
    }
  } closer{fd};
  // The size: a regular file's own, else --size's, else unknown (stdin, a pipe, a device).
  std::optional<uint64_t> size = size_flag;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const auto file_size = static_cast<uint64_t>(st.st_size);
    if (size_flag.has_value() && *size_flag != file_size) {
      return Usage(absl::StrCat("--size ", *size_flag, " does not match ", input, ", which holds ",
                                file_size, " bytes"));
    }
    size = file_size;
  }
  std::optional<Progress> progress;
  if (size.value_or(0) >= kProgressBytes || path == "-") {
    progress.emplace("put " + granary::common::EscapeUnprintable(key), size.value_or(0));
  }
  std::string data;
  std::optional<granary::client::ClientImpl::PutGrant> grant;
  if (!size.has_value()) {
    // One chunk at most, then the input must have ended.
    absl::Status read =
        ReadUpTo(fd, input, kUnsizedInputBytes + 1, &data, progress ? &*progress : nullptr);
    if (!read.ok()) return Usage(std::string(read.message()));
    if (data.size() > kUnsizedInputBytes) {
      return Usage(absl::StrCat(input, " holds more than ",
                                granary::common::FormatSize(kUnsizedInputBytes),
                                ": give --size=SIZE (its exact size), so that the master is asked "
                                "for room before the rest is read"));
    }
  } else {
    // More than a chunk: the master is asked first (phase one of the put), so a refusal comes
    // before any of the input is read, and the bytes read go into that grant.
    if (*size > kUnsizedInputBytes) {
      auto g = AskForRoom(c, key, *size, granary::proto::PutTierFlags(tier_preference));
      if (!g.ok()) return Fail(what, g.status());
      grant = std::move(*g);
    }
    data.reserve(*size);
    absl::Status read = ReadUpTo(fd, input, *size, &data, progress ? &*progress : nullptr);
    std::string extra;
    if (read.ok() && data.size() == *size) read = ReadUpTo(fd, input, 1, &extra, nullptr);
    std::string bad;
    if (!read.ok()) {
      bad = std::string(read.message());
    } else if (data.size() < *size) {
      bad = absl::StrCat(input, " ended after ", data.size(), " bytes; --size says ", *size);
    } else if (!extra.empty()) {
      bad = absl::StrCat(input, " holds more than the ", *size, " bytes --size says");
    }
    if (!bad.empty()) {
      if (grant.has_value()) GiveBack(c, key, *grant);
      return Usage(bad);
    }
  }
  int64_t t0 = granary::common::MonotonicUs();
  auto put = [&] {
    if (grant.has_value()) {
      absl::Status st = c.FinishPut({key}, {data.data()}, {data.size()}, *grant)[0];
      // The write window passed while the input was read (a slow pipe), or the master
      // changed: the grant is gone, and the bytes are here now; a put of its own, once.
      if (!absl::IsUnavailable(st)) return st;
    }
    return c.BatchPutWith({key}, {data}, options)[0];
  };
  absl::Status put_status =
      progress && data.size() >= kProgressBytes ? progress->Around("sending", put) : put();
  int64_t us = granary::common::MonotonicUs() - t0;
  if (progress) progress->Done();
  if (!put_status.ok()) return Fail(what, put_status);
  std::cerr << "put " << granary::common::EscapeUnprintable(key) << ": " << Rate(data.size(), us)
            << "\n";
  return kOk;
}

int RunGet(granary::Client& c, const std::vector<std::string>& args) {
  // On a terminal, the size first (one metadata call), so that a large value gets its
  // progress line; elsewhere no line is drawn, and the call is not made.
  std::optional<Progress> progress;
  if (isatty(2) == 1) {
    auto info = c.Stat(args[0]);
    if (info.ok() && info->size >= kProgressBytes) {
      progress.emplace("get " + granary::common::EscapeUnprintable(args[0]), info->size);
    }
  }
  int64_t t0 = granary::common::MonotonicUs();
  auto v =
      progress ? progress->Around("receiving", [&] { return c.Get(args[0]); }) : c.Get(args[0]);
  int64_t us = granary::common::MonotonicUs() - t0;
  if (!v.ok()) return Fail("get " + granary::common::QuotedKey(args[0]), v.status());
  absl::Status st = WriteAll(args.size() > 1 ? args[1] : "-", *v, progress ? &*progress : nullptr);
  if (progress) progress->Done();
  if (!st.ok()) return Fail("get " + granary::common::QuotedKey(args[0]), st);
  std::cerr << "get " << granary::common::EscapeUnprintable(args[0]) << ": " << Rate(v->size(), us)
            << "\n";
  return kOk;
}

int RunRemove(granary::Client& c, const std::vector<std::string>& args, const CommandFlags& flags) {
  auto results = c.BatchRemove(args, flags.force);
  int rc = kOk;
  for (size_t i = 0; i < args.size(); ++i) {
    if (results[i].ok()) continue;
    rc = std::max(rc, Fail("rm " + granary::common::QuotedKey(args[i]), results[i]));
    if (granary::ErrorReasonOf(results[i]) == granary::ErrorReason::kHasLease) {
      std::cerr << "granary: (HAS_LEASE: rm --force removes it anyway; its reader then gets "
                   "NOT_FOUND, never wrong bytes)\n";
    }
  }
  return rc;
}

int RunExists(granary::Client& c, const std::vector<std::string>& args) {
  auto e = c.Exist(args[0]);
  if (!e.ok()) return Fail("exists " + granary::common::QuotedKey(args[0]), e.status());
  std::cout << args[0] << (*e ? " exists" : " does not exist") << "\n";
  return *e ? kOk : kRefused;
}

int RunStat(granary::Client& c, const std::vector<std::string>& args) {
  auto s = c.Stat(args[0]);
  if (!s.ok()) return Fail("stat " + granary::common::QuotedKey(args[0]), s.status());
  std::cout << "key: " << s->key << "\nsize: " << s->size << " ("
            << granary::common::FormatSize(s->size)
            << ")\nstate: " << (s->complete ? "complete" : "processing")
            << "\nreplicas: " << s->replicas << "\ngeneration: " << s->generation
            << "\nage_ms: " << s->age_ms << "\n";
  return kOk;
}

int RunList(granary::Client& c, const std::vector<std::string>& args, const CommandFlags& flags) {
  auto r = c.List(args.empty() ? "" : args[0], flags.limit);
  if (!r.ok()) return Fail("ls", r.status());
  for (const auto& o : r->objects) {
    std::cout << absl::StrFormat("%12d  %s  %s\n", o.size, o.complete ? "complete  " : "processing",
                                 o.key);
  }
  if (r->more) std::cerr << "(more keys: raise --limit or narrow the prefix)\n";
  return kOk;
}

int RunLookup(granary::Client& c, const std::vector<std::string>& args, const CommandFlags& flags) {
  auto r = c.LookupPrefix(flags.model, flags.hash_scheme, flags.adapter_id, args, flags.lease);
  if (!r.ok()) return Fail("lookup", r.status());
  std::cout << "present: " << r->present << " of " << args.size() << "\n";
  for (const auto& b : r->blocks) {
    std::cout << absl::StrFormat("%12d  %-22s %s\n", b.size, b.node_address, b.key);
  }
  return kOk;
}

int RunCopyOrMove(granary::Client& c, const std::string& cmd, const std::vector<std::string>& args,
                  const CommandFlags& flags) {
  int64_t t0 = granary::common::MonotonicUs();
  absl::Status st = cmd == "copy" ? c.Copy(args[0], flags.to) : c.Move(args[0], flags.to);
  if (!st.ok())
    return Fail(cmd + " " + granary::common::QuotedKey(args[0]) + " to " + flags.to, st);
  std::cerr << cmd << " " << granary::common::EscapeUnprintable(args[0]) << " to " << flags.to
            << ": done in " << (granary::common::MonotonicUs() - t0) / 1000.0 << " ms\n";
  return kOk;
}

int RunSegments(granary::Client& c) {
  auto r = c.Segments();
  if (!r.ok()) return Fail("segments", r.status());
  std::cout << absl::StrFormat("%-18s %-6s %-10s %-24s %12s %12s %s\n", "ID", "TIER", "NAME",
                               "NODE", "SIZE", "USED", "POOL");
  for (const auto& s : *r) {
    std::cout << absl::StrFormat("%-18d %-6s %-10s %-24s %12s %12s %s\n", s.segment_id, s.tier,
                                 s.name, s.node_address, granary::common::FormatSize(s.size),
                                 granary::common::FormatSize(s.used),
                                 s.pool.empty() ? "-" : s.pool);
  }
  return kOk;
}

}  // namespace

int RunCommand(client::ClientImpl& c, const std::string& cmd, const std::vector<std::string>& args,
               const CommandFlags& flags) {
  if (cmd == "put") return RunPut(c, args, flags);
  if (cmd == "get") return RunGet(c, args);
  if (cmd == "rm") return RunRemove(c, args, flags);
  if (cmd == "exists") return RunExists(c, args);
  if (cmd == "stat") return RunStat(c, args);
  if (cmd == "ls") return RunList(c, args, flags);
  if (cmd == "lookup") return RunLookup(c, args, flags);
  if (cmd == "copy" || cmd == "move") return RunCopyOrMove(c, cmd, args, flags);
  if (cmd == "segments") return RunSegments(c);
  return Usage("unknown command '" + cmd + "'");
}

}  // namespace granary::cli
