#pragma once

// Node inventories: what the master tells a node of its segments, and what a node reports.

#include <cstdint>
#include <string>
#include <vector>

#include "proto/object_messages.h"

namespace granary::proto {

// Inventories (docs/architecture.md, "Node inventories and master restart"). The master tells
// each replica's node what was committed and freed in its segments; a node never learns it from
// clients. A record names one allocation: the 64-byte AllocHeader at `offset` in the segment.
enum class InventoryOp : uint8_t { kCommit = 0, kFree = 1 };
template <>
struct WireEnum<InventoryOp> {
  static constexpr uint8_t kMin = 0, kMax = 1;
  static constexpr const char* kNoun = "inventory op";
};
struct InventoryRecord {
  InventoryOp op = InventoryOp::kCommit;
  std::string tenant;  // kCommit only (empty in a kFree record)
  std::string key;     // kCommit only
  uint64_t segment_id = 0;
  uint64_t offset = 0;      // of the allocation (its header) inside the segment
  uint64_t alloc_size = 0;  // header + value, aligned: what the allocator reserved
  uint64_t value_length = 0;
  uint64_t generation = 0;
  uint32_t flags = 0;      // kPutFlag* pins
  uint64_t commit_ms = 0;  // wall clock at commit (seeds LRU order after a restart)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryRecord;
    v(&S::op, "record.op");
    v(&S::tenant, "record.tenant", kMaxTenantIdBytes);
    v(&S::key, "record.key", kMaxKeyBytes);
    v(&S::segment_id, "record.segment_id");
    v(&S::offset, "record.offset");
    v(&S::alloc_size, "record.alloc_size");
    v(&S::value_length, "record.value_length");
    v(&S::generation, "record.generation");
    v(&S::flags, "record.flags");
    v(&S::commit_ms, "record.commit_ms");
  }
};
// The long poll: answered as soon as records are queued for the node's segments, or with none
// after wait_ms (at most kMaxInventoryWaitMs).
struct InventorySyncRequest {
  uint32_t wait_ms = 1000;
  // The token of the last reply this node applied (0: none, on this connection): the master
  // keeps every record until a poll acknowledges it, and sends it again otherwise.
  uint64_t acked = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventorySyncRequest;
    v(&S::wait_ms, "wait_ms");
    v(&S::acked, "acked");
    v.Check([](const S& m) {
      return m.wait_ms <= kMaxInventoryWaitMs
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("inventory wait_ms ", m.wait_ms,
                                                           " is over ", kMaxInventoryWaitMs));
    });
  }
};
struct InventorySyncReply {
  WireStatus status;
  std::vector<InventoryRecord> records;  // in the order the master queued them, per segment
  uint64_t token = 0;                    // acknowledges these records (InventorySyncRequest)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventorySyncReply;
    v(&S::status, "status");
    v(&S::records, "records", kMaxInventoryBatch);
    v(&S::token, "token");
  }
};
// A re-mounted node's committed objects (kCommit records naming the segment ids of this
// session), in batches; `last` ends the report and lets the master allocate in the segments.
// `total` is the number of records the whole report holds (protocol 10), so that the master can
// size its table once instead of growing it; 0 when unknown.
struct InventoryReportRequest {
  std::vector<InventoryRecord> records;
  bool last = false;
  uint64_t total = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryReportRequest;
    v(&S::records, "records", kMaxInventoryBatch);
    v(&S::last, "last");
    v(&S::total, "total");
  }
};
struct InventoryReportReply {
  WireStatus status;
  uint32_t restored = 0;  // records the master took
  uint32_t rejected = 0;  // records it refused (out of range, overlap, a newer generation...)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryReportReply;
    v(&S::status, "status");
    v(&S::restored, "restored");
    v(&S::rejected, "rejected");
  }
};

}  // namespace granary::proto
