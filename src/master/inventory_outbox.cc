#include "master/inventory_outbox.h"

#include <algorithm>

#include "master/object_shards.h"
#include "master/tenant/quota_ledger.h"

namespace granary::master {
namespace {

bool Reserved(absl::string_view table_key) {
  return tenant::QuotaLedger::IsReserved(table_key.substr(0, table_key.find('\0')));
}

uint32_t FlagsOf(uint8_t pin) {
  return pin == kPinHard ? kPutFlagHardPin : pin == kPinSoft ? kPutFlagSoftPin : 0u;
}

}  // namespace

InventoryOutbox::InventoryOutbox(common::Clock* clock, common::MetricsRegistry* metrics)
    : clock_(clock),
      sent_(metrics->Counter("granary_master_inventory_records_sent_total",
                             "Commit and free records handed to nodes (InventorySync)")),
      resent_(metrics->Counter(
          "granary_master_inventory_records_resent_total",
          "Records handed to a node again because it had not acknowledged them (a reply lost)")),
      overflow_(metrics->Counter(
          "granary_master_inventory_records_overflow_total",
          "Records dropped because a segment's queue was full (its node did not poll)")) {
  metrics->AddCollector([this](common::MetricsWriter& w) {
    w.Gauge("granary_master_inventory_oldest_pending_ms",
            "Age of the oldest commit or free record its node has not acknowledged yet (0: none); "
            "the commits a master death now would lose are at most this old",
            {}, static_cast<double>(OldestPendingMs()));
  });
}

void InventoryOutbox::Push(uint64_t segment_id, proto::InventoryRecord r) {
  std::deque<Queued>& q = queues_[segment_id];
  if (q.size() >= kMaxQueued) {
    q.pop_front();
    overflow_->Inc();
  }
  q.push_back(Queued{std::move(r), clock_->NowMs(), next_seq_++});
}

void InventoryOutbox::CommittedReplica(absl::string_view tk, const Object& o, const Placement& p,
                                       uint64_t commit_ms) {
  if (Reserved(tk)) return;
  const size_t sep = tk.find('\0');
  proto::InventoryRecord r;
  r.op = proto::InventoryOp::kCommit;
  r.tenant = std::string(tk.substr(0, sep));
  r.key = std::string(tk.substr(sep + 1));
  r.segment_id = p.segment_id;
  r.offset = p.offset;
  r.alloc_size = p.size;
  r.value_length = o.size;
  r.generation = o.generation;
  r.flags = FlagsOf(o.pin);
  r.commit_ms = commit_ms;
  granary::common::MutexLock lock(&mu_);
  Push(p.segment_id, std::move(r));
}

void InventoryOutbox::Committed(absl::string_view tk, const Object& o, uint64_t commit_ms) {
  for (const Placement& p : o.replicas) CommittedReplica(tk, o, p, commit_ms);
}

void InventoryOutbox::FreedReplica(absl::string_view tk, uint64_t generation, const Placement& p) {
  if (Reserved(tk)) return;
  proto::InventoryRecord r;
  r.op = proto::InventoryOp::kFree;
  r.segment_id = p.segment_id;
  r.offset = p.offset;
  r.alloc_size = p.size;
  r.generation = generation;
  granary::common::MutexLock lock(&mu_);
  Push(p.segment_id, std::move(r));
}

void InventoryOutbox::Freed(absl::string_view tk, uint64_t generation, const Placements& ps) {
  for (const Placement& p : ps) FreedReplica(tk, generation, p);
}

std::vector<proto::InventoryRecord> InventoryOutbox::Take(const std::vector<uint64_t>& segment_ids,
                                                          size_t max_records, size_t max_bytes,
                                                          uint64_t acked, uint64_t* token) {
  std::vector<proto::InventoryRecord> out;
  size_t bytes = 0, again = 0;
  uint64_t last = 0;
  granary::common::MutexLock lock(&mu_);
  for (uint64_t id : segment_ids) {
    auto it = queues_.find(id);
    if (it == queues_.end()) continue;
    std::deque<Queued>& q = it->second;
    // A queue's handed records are a prefix of it, in seq order.
    while (!q.empty() && q.front().handed && q.front().seq <= acked) q.pop_front();
    for (Queued& e : q) {
      if (out.size() >= max_records || bytes >= max_bytes) break;
      bytes += 64 + e.record.tenant.size() + e.record.key.size();
      out.push_back(e.record);
      if (e.handed) ++again;
      e.handed = true;
      last = std::max(last, e.seq);
    }
  }
  sent_->Inc(out.size());
  resent_->Inc(again);
  if (token != nullptr) *token = last;
  return out;
}

bool InventoryOutbox::HasPending(const std::vector<uint64_t>& segment_ids) const {
  granary::common::MutexLock lock(&mu_);
  for (uint64_t id : segment_ids) {
    auto it = queues_.find(id);
    if (it != queues_.end() && !it->second.empty()) return true;
  }
  return false;
}

int64_t InventoryOutbox::OldestPendingMs() const {
  const int64_t now = clock_->NowMs();
  int64_t oldest = now;
  bool any = false;
  granary::common::MutexLock lock(&mu_);
  for (const auto& [id, q] : queues_) {
    if (q.empty()) continue;
    any = true;
    oldest = std::min(oldest, q.front().queued_ms);
  }
  // 0 means nothing is pending: a record queued in this very millisecond reads 1, or a caller
  // waiting for the gauge to reach 0 (a handover, a test) would go on with it still queued.
  return any ? std::max<int64_t>(1, now - oldest) : 0;
}

void InventoryOutbox::Forget(uint64_t segment_id) {
  granary::common::MutexLock lock(&mu_);
  queues_.erase(segment_id);
}

}  // namespace granary::master
