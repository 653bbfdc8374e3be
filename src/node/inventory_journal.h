#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/inventory_messages.h"

namespace granary::node {

// The node's inventory on disk: an append-only log of the master's commit and free records for
// the segments that outlive the process (disk tiers, host segments in named files), so that a
// restarted node knows what it holds (which object, which tenant and key, at which offset and
// generation) before any master tells it again. Each live entry is still checked against the
// allocation's header in the segment before it is reported (NodeInventory, DiskStore): the
// journal says what should be there, the header whether it is.
//
// File: a 16-byte header (magic "GRNYJRN1", the protocol version the records are encoded in),
// then records, each a u32 body length, the body's u64 checksum (device::ChecksumCpu) and the
// body (a proto::InventoryRecord in the codec's encoding, so a journal written by an older
// build is read with its own version). In a journal, `segment_id` is the node's own index of
// the segment (stable across restarts), not the master's id (which changes at each mount).
//
// - Open replays the log into the live set: a commit replaces an older generation at its
//   (segment, offset), a free removes the entry it names (same generation). A torn tail (a
//   record cut short or failing its checksum: the process died mid-append) ends the replay;
//   the file is truncated there, and its bytes counted, so appends follow good records.
// - Append writes records at the end; Sync makes everything appended so far durable
//   (fdatasync), so a caller batches records and syncs once per batch.
// - Compact rewrites the file as the given live set (to a temporary file, synced, then renamed
//   over the journal, and the directory synced), when the log has grown well past it.
//
// Not thread-safe: one owner (the node's inventory, under its lock).
class InventoryJournal {
 public:
  struct Replay {
    std::vector<proto::InventoryRecord> live;  // commit records, by (segment, offset)
    uint64_t records = 0;                      // good records read
    uint64_t torn_bytes = 0;                   // cut off the end
  };

  // Opens (or creates) the journal at `path`, replaying it into *replay. INVALID_ARGUMENT names a
  // file that is no journal (bad magic) or of a protocol this build cannot read; the file is
  // left untouched then.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<InventoryJournal>> Open(
      const std::string& path, Replay* replay);
  ~InventoryJournal();
  InventoryJournal(const InventoryJournal&) = delete;
  InventoryJournal& operator=(const InventoryJournal&) = delete;

  [[nodiscard]] absl::Status Append(absl::Span<const proto::InventoryRecord> records);
  [[nodiscard]] absl::Status Sync();
  [[nodiscard]] absl::Status Compact(absl::Span<const proto::InventoryRecord> live);

  const std::string& path() const { return path_; }
  // The file's length now.
  uint64_t bytes() const { return bytes_; }

 private:
  InventoryJournal(std::string path, int fd, uint64_t bytes)
      : path_(std::move(path)), fd_(fd), bytes_(bytes) {}
  absl::Status Error(const char* op, int err) const;

  std::string path_;
  int fd_;
  uint64_t bytes_;
};

}  // namespace granary::node
