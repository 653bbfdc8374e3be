#include "node/segment_file_state.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::node {

namespace {

bool IsNodeId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

// Writes `id` to `path` through a temporary file and a rename, so a crash leaves the old file
// or the new one, never half of one.
absl::Status WriteNodeId(const std::string& path, const std::string& id) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << id << "\n";
    out.flush();
    if (!out) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write the node id file '", tmp, "': ", std::strerror(errno)));
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SegmentFileState> OpenSegmentFileState(const std::string& segment_file,
                                                      bool reused) {
  SegmentFileState state;
  const std::string id_path = segment_file + ".id";
  const std::string journal_path = segment_file + ".journal";
  if (reused) {
    std::ifstream in(id_path);
    std::stringstream text;
    text << in.rdbuf();
    std::string id(absl::StripAsciiWhitespace(text.str()));
    if (IsNodeId(id)) {
      state.node_id = std::move(id);
    } else {
      GRANARY_LOG_WARN << "node id file '" << id_path << "' is missing or holds no node id: "
                       << "this node takes a new id, and the master restores nothing it held";
    }
  } else if (unlink(journal_path.c_str()) == 0) {
    GRANARY_LOG_INFO << "segment file '" << segment_file << "' is new: its old journal '"
                     << journal_path << "' described memory that is gone, and was removed";
  }
  if (state.node_id.empty()) {
    state.node_id = common::RandomId();
    GRANARY_RETURN_IF_ERROR(WriteNodeId(id_path, state.node_id));
  }
  absl::StatusOr<std::unique_ptr<InventoryJournal>> journal =
      InventoryJournal::Open(journal_path, &state.replay);
  if (!journal.ok()) {
    return absl::Status(
        journal.status().code(),
        absl::StrCat("segment file '", segment_file, "': ", journal.status().message(),
                     " (remove the segment file and its journal to start empty)"));
  }
  state.journal = std::move(*journal);
  return state;
}

}  // namespace granary::node
