#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "node/inventory_journal.h"
#include "node/node_service.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {

// The committed objects this node holds, as the master's commit and free records describe them
// (docs/architecture.md, "Node inventories and master restart"): what a restarted master
// rebuilds its object table from. It lives in RAM, as the bytes do, and, where the host segment
// is kept in a file that outlives the process, in a journal beside it (Adopt, Flush): what a
// restarted node re-adopts. Records come from the master's InventorySync replies, never from
// clients.
//
// - Apply(commit) records the allocation at (segment, offset); a newer generation at the same
//   offset replaces an older one, an older one is ignored.
// - Apply(free) forgets it and invalidates its header in memory: the header's generation word
//   is swapped to 0 by an atomic compare-and-swap, only while it still holds the freed
//   generation. A CAS, and not "magic = 0", because the master may already have given the space
//   to a new put whose writer is writing its own header there: the swap then fails and the new
//   header stays whole. A reader that fetched the header before the swap saw a header that was
//   valid for the bytes it read with it (the one-sided read fetches both at once); one after it
//   sees generation 0, which matches no grant (UNAVAILABLE, retry). So no read returns wrong
//   bytes.
// - GPU segments (tier gpu) are kept too. Their headers are device memory the CPU must not
//   touch: they are read through the device backend (device::ActiveRuntime()) in batches of up
//   to kGpuHeaderChunk into a pinned buffer (one batched device-to-host copy each), and a free
//   swaps the generation word with a device atomic (CompareExchange64: one launch and a wait).
//   A device error on either is counted in mismatches (the entries are dropped, never reported
//   unchecked) or, for a free, in gpu_errors().
// - Disk tiers (tier disk) are kept too, with no header in memory: a free only forgets the entry
//   (the journal's free record keeps a freed record from being re-adopted), and Report reads
//   each record's preamble through the disk reader (SetDiskHeaderReader) as its header.
// - Report() lists every entry for a re-mount, each checked against the 64-byte AllocHeader in
//   this node's memory (magic, generation, key hash, value length); a mismatch (the space was
//   overwritten, or its free record was lost) is dropped and counted.
//
// Owned by NodeServer, with the segment list of its NodeService (which must outlive it).
// Thread-safe: one mutex over the table (the sync thread applies, the session thread reports).
// Cost: Apply is one hash lookup plus, for a free, one CAS on segment memory; an entry costs
// about 80 bytes plus its key (tenant names are kept once, in a dictionary). Report sorts each
// segment's entries by offset (O(n log n)) so that the master reserves them in ascending order.
class NodeInventory {
  struct Entry;  // below

 public:
  explicit NodeInventory(const std::vector<SegmentSpan>* segments) : segments_(segments) {}
  // The headers of the records at offsets[0..n) of disk tier `index` (from their preambles),
  // for Report, read together: ok[i] false where record i could not be read or checked.
  using DiskHeaderReader = std::function<void(size_t index, const uint64_t* offsets, size_t n,
                                              proto::AllocHeader* headers, bool* ok)>;
  // How many disk records Report reads at once.
  static constexpr size_t kDiskHeaderChunk = 256;
  // Before any report (NodeServer::Create).
  void SetDiskHeaderReader(DiskHeaderReader reader) { disk_header_ = std::move(reader); }
  ~NodeInventory();
  NodeInventory(const NodeInventory&) = delete;
  NodeInventory& operator=(const NodeInventory&) = delete;

  // Applies one of the master's records to segment `index`. Returns whether it changed the
  // inventory: false for a commit outside the segment or older than what the offset holds, and
  // for a free of an allocation the inventory does not hold at that generation.
  bool Apply(size_t index, const proto::InventoryRecord& r);
  // The inventory as report batches for a re-mount: ids[i] is segment i's id at the master now
  // (0: not mounted, not reported). Each batch has at most max_records records and about
  // max_bytes of keys; every record passed the header check. Entries that failed it are
  // dropped from the inventory and counted in mismatches().
  std::vector<std::vector<proto::InventoryRecord>> Report(const std::vector<uint64_t>& ids,
                                                          size_t max_records, size_t max_bytes);
  // The same one batch at a time, so that a re-mount streams its report (the node builds the
  // next batch while the master restores the last) and never holds the whole report in memory:
  // BeginReport snapshots the slots in report order (16 bytes an entry: the offset and where
  // the entry is); each NextBatch builds the next batch from the entries still there (empty:
  // the report is complete). An entry changed or erased in between is skipped or reported as
  // it is then. While no entry has been added or erased since BeginReport (the usual case: a
  // master that was just restarted sends no records until the report has ended) the entries
  // are read where the snapshot found them, in offset order, instead of looked up one by one
  // (a random access into a table of a million entries each).
  struct ReportCursor {
    struct At {
      uint64_t offset;
      const Entry* entry;  // valid while the inventory's layout has not changed
      bool operator<(const At& o) const { return offset < o.offset; }
    };
    std::vector<std::vector<At>> slots;  // per segment, ascending offsets
    size_t index = 0;                    // segment
    size_t pos = 0;                      // into slots[index]
    uint64_t total = 0;                  // entries at BeginReport
    uint64_t layout = 0;                 // layout_changes_ at BeginReport
  };
  ReportCursor BeginReport() const;
  std::vector<proto::InventoryRecord> NextBatch(ReportCursor* cursor,
                                                const std::vector<uint64_t>& ids,
                                                size_t max_records, size_t max_bytes);
  // Keeps the inventory in `journal` from here on (NodeOptions::segment_file): the records
  // replayed from it (replay.live, segment_id the node's own index) are applied first, as the
  // master's would be; then every record Apply takes is queued for Flush. Call once, before the
  // node mounts. Returns how many entries the replay gave.
  size_t Adopt(std::unique_ptr<InventoryJournal> journal, const InventoryJournal::Replay& replay);
  // Appends the records applied since the last Flush to the journal and syncs it, one batch
  // (the sync thread calls it after each InventorySync reply); rewrites it as the live set when
  // it has grown past twice that plus kCompactSlack records. No-op without a journal.
  // Thread: one caller at a time (the sync thread).
  [[nodiscard]] absl::Status Flush();
  size_t size() const;
  uint64_t mismatches() const;
  // Device errors while invalidating a freed GPU allocation's header.
  uint64_t gpu_errors() const;

  // How many GPU-segment headers one batched device read fetches at most.
  static constexpr size_t kGpuHeaderChunk = 512;
  // Records a journal may hold beyond twice the live entries before Flush compacts it.
  static constexpr uint64_t kCompactSlack = 65536;

 private:
  struct Entry {
    std::string key;
    uint64_t alloc_size = 0;
    uint64_t value_length = 0;
    uint64_t generation = 0;
    uint64_t commit_ms = 0;
    uint32_t flags = 0;
    uint32_t tenant = 0;  // index into tenants_
  };
  using Slot = std::pair<uint32_t, uint64_t>;  // segment index, offset

  // The header at `offset` of segment `index`, read word by word (a writer may be writing it).
  DiskHeaderReader disk_header_;  // set once, before any report
  // These two are the only places the inventory touches segment memory, which clients write
  // one-sided at any time; tests/tsan.supp names them for that reason (not inlined, so that
  // their frames carry the qualified name the suppression matches).
  [[gnu::noinline]] proto::AllocHeader ReadHeader(size_t index, uint64_t offset) const;
  // Swaps the header's generation word to 0 if it still holds `generation`.
  [[gnu::noinline]] void InvalidateHeader(size_t index, uint64_t offset, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The headers at offsets[0..n) (n <= kGpuHeaderChunk) of GPU segment `index`, in one batched
  // device-to-host copy into the pinned buffer, on the inventory's stream of the segment's
  // device (never the legacy default stream): valid until the next call (under mu_).
  absl::StatusOr<const proto::AllocHeader*> ReadGpuHeaders(size_t index, const uint64_t* offsets,
                                                           size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t TenantIdLocked(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a record Apply took for the journal (with one).
  void Journal(size_t index, const proto::InventoryRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<SegmentSpan>* const segments_;
  mutable granary::common::Mutex mu_;
  absl::flat_hash_map<Slot, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tenants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> tenant_ids_ ABSL_GUARDED_BY(mu_);
  uint64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  // Entries added or erased by Apply (each may move or free an entry that a report cursor
  // points to; a change in place or an erase by NextBatch of the entry it is at does not).
  uint64_t layout_changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t gpu_errors_ ABSL_GUARDED_BY(mu_) = 0;
  // Pinned host memory for kGpuHeaderChunk headers (HostAllocPinned at first use; pageable
  // gpu_headers_fallback_ when the backend has no pinned memory).
  void* gpu_headers_ ABSL_GUARDED_BY(mu_) = nullptr;
  // With a journal (Adopt): records applied and not yet flushed, in the journal's form.
  std::unique_ptr<InventoryJournal> journal_;  // touched by Adopt, then Flush only
  std::vector<proto::InventoryRecord> unflushed_ ABSL_GUARDED_BY(mu_);
  bool journaling_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t journal_records_ = 0;  // in the journal's file (Flush only)
  std::vector<proto::AllocHeader> gpu_headers_fallback_ ABSL_GUARDED_BY(mu_);
  // A stream per device for those reads (created at first use, destroyed with the inventory).
  absl::flat_hash_map<int, void*> gpu_streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::node
