#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "node/inventory_journal.h"

namespace granary::node {

// What a node keeps beside its segment file (NodeOptions::segment_file) so that a restarted
// node takes up where it left off:
//   FILE.id       its node id, so that the master knows the restarted node as the one it
//                 dropped (and restores only what that one held: InventoryRestore::ExpectOnly);
//   FILE.journal  its inventory (InventoryJournal): which object of which tenant sits at which
//                 offset of the segment, at which generation.
// With a segment file that a previous run left (`reused`), both are read: a missing or unreadable
// id is replaced by a new one (logged), and a journal that is no journal is refused, naming it.
// With a new segment file, whatever the two files held describes memory that is gone: a new
// id is written and the journal starts empty.
struct SegmentFileState {
  std::string node_id;
  std::unique_ptr<InventoryJournal> journal;
  InventoryJournal::Replay replay;
};
[[nodiscard]] absl::StatusOr<SegmentFileState> OpenSegmentFileState(const std::string& segment_file,
                                                                    bool reused);

}  // namespace granary::node
