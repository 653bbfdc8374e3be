#pragma once

// The CLI's commands that talk to the master (put, get, rm, exists, stat, ls, lookup, copy,
// move, segments); main.cc parses the flags, checks the arguments and connects.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/admin.h"
#include "client/client_impl.h"

namespace granary::cli {

// The flags the commands read (main.cc's --tier, --size, ...).
struct CommandFlags {
  std::string tier;                // put: host|gpu|any; empty: the tenant's default
  std::string size;                // put: the input's size, needed for more than 4 MB from a pipe
  bool force = false;              // rm
  uint32_t limit = 1000;           // ls
  std::string model, hash_scheme;  // lookup
  std::optional<std::string> adapter_id;  // lookup
  bool lease = false;                     // lookup
  std::string to;                         // copy, move
};

// Prints "granary: <why>" and the usage text; returns kUsage (main.cc).
int Usage(const std::string& why);
// Prints the failure; the exit status: kUsage when the master cannot be reached, else
// kRefused (main.cc).
int Fail(const std::string& what, const absl::Status& st);

// Runs `cmd`, its arguments already checked, on a connected client.
int RunCommand(client::ClientImpl& c, const std::string& cmd, const std::vector<std::string>& args,
               const CommandFlags& flags);

}  // namespace granary::cli
