#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/master_options.h"
#include "master/object.h"
#include "master/object_table.h"
#include "master/segment_registry.h"
#include "master/tenant/quota_ledger.h"
#include "master/tenant/tenant_tokens.h"
#include "master/timer_wheel.h"
#include "proto/messages.h"

namespace granary::master {

// The master's logic: sessions, segments, objects, leases, deadlines, eviction. No transport:
// the RPC adapter feeds it decoded requests with the caller's session, so all of it is testable
// in-process with a FakeClock. Thread-safe. Locks: a shard's mutex may be held while taking the
// segment registry's; never the other way, and never two shards at once.
//
// Per request cost: one shard lock per key, O(1) hash lookups, an O(1) allocator call per
// replica on PutStart. Eviction and node loss scan the table (rare events).
class MasterService {
 public:
  MasterService(const MasterOptions& options, Clock* clock, MetricsRegistry* metrics);

  // Sessions. The adapter assigns session ids (one per connection). A client hello must pass
  // the token check (SetTokenCheck), else UNAUTHENTICATED; node hellos are not checked.
  proto::HelloReply Hello(SessionId sid, const proto::HelloRequest& req);
  // Installs the client credential check used by Hello. Until called, no tenant has a token
  // and options.require_tenant_tokens applies. Call before the service is shared (the master
  // server does, before its listener starts); not thread-safe against Hello.
  void SetTokenCheck(tenant::TokenCheck check) { token_check_ = std::move(check); }
  // Whether a client of this tenant must present a token (the admin API's has_token).
  bool TenantHasToken(const std::string& tenant) const {
    return token_check_.ExpectedHash(tenant).has_value();
  }
  proto::HeartbeatReply Heartbeat(SessionId sid);
  // The connection closed or failed: frees the session's in-flight allocations at once, and for a
  // node unmounts its segments (dropping the replicas on them).
  void SessionClosed(SessionId sid);
  // A session of the master's own, for a reserved tenant ('_probe'): no Hello, never expires.
  SessionId OpenInternalSession(const std::string& reserved_tenant);

  proto::MountSegmentReply MountSegment(SessionId sid, const proto::MountSegmentRequest& req);
  proto::StatusReply UnmountSegment(SessionId sid, const proto::UnmountSegmentRequest& req);

  proto::PutStartReply PutStart(SessionId sid, const proto::PutStartRequest& req);
  proto::BatchStatusReply PutEnd(SessionId sid, const proto::KeyGenRequest& req);
  proto::BatchStatusReply PutRevoke(SessionId sid, const proto::KeyGenRequest& req);
  proto::GetReply Get(SessionId sid, const proto::KeysRequest& req);
  proto::BatchStatusReply GetEnd(SessionId sid, const proto::KeyGenRequest& req);
  proto::BatchStatusReply Exist(SessionId sid, const proto::KeysRequest& req);
  proto::BatchStatusReply Remove(SessionId sid, const proto::KeysRequest& req);
  proto::ListReply List(SessionId sid, const proto::ListRequest& req);
  // The same for the admin API, which names the tenant explicitly.
  proto::ListReply ListObjects(const std::string& tenant, const proto::ListRequest& req) const;
  proto::SegmentsReply Segments(SessionId sid);
  std::optional<proto::SegmentInfo> FindSegment(uint64_t id) const { return segments_.Find(id); }
  proto::LookupPrefixReply LookupPrefix(SessionId sid, const proto::LookupPrefixRequest& req);
  // Copy adds a replica on a chosen node; Move adds it and drops the source at MoveEnd. The
  // destination bytes are charged at start and committed at end; revoke, expiry and the
  // session's death refund them. The object is leased while the copy is in flight.
  proto::CopyStartReply CopyStart(SessionId sid, const proto::CopyStartRequest& req, bool move);
  proto::BatchStatusReply CopyEnd(SessionId sid, const proto::CopyEndRequest& req, bool move);
  proto::BatchStatusReply CopyRevoke(SessionId sid, const proto::CopyEndRequest& req);

  // Timers: expires allocations past their deadline and sessions past client_ttl, and evicts
  // above the high watermark. Returns the sessions it declared dead (the adapter closes them).
  std::vector<SessionId> Tick();

  struct Stats {
    uint64_t objects = 0;
    uint64_t processing = 0;
    uint64_t capacity = 0;
    uint64_t used = 0;
    size_t segments = 0;
    size_t sessions = 0;
    size_t pending_deadlines = 0;
  };
  Stats GetStats() const;
  std::vector<proto::SegmentInfo> ListSegments() const { return segments_.List(); }
  // Frees `bytes` (at least) by evicting least-recently-used complete, unleased objects;
  // tenants over quota or closed to admission first. Returns the bytes freed.
  uint64_t Evict(uint64_t bytes, const char* reason);
  const MasterOptions& options() const { return options_; }
  // Per-tenant byte accounting. The TenantManager applies policies to it.
  tenant::QuotaLedger* ledger() { return &ledger_; }
  // The shared host capacity (placement.h): what quotas are scaled against.
  uint64_t capacity() const { return SharedCapacity(proto::Tier::kHost).capacity; }
  // Bytes one replica of a value of this size occupies: header + value, aligned.
  static uint64_t AllocBytes(uint64_t value_size);

 private:
  static constexpr size_t kShards = 64;
  struct Shard {
    mutable granary::Mutex mu;
    ObjectTable objects ABSL_GUARDED_BY(mu);
  };
  struct Session {
    proto::Role role = proto::Role::kClient;
    std::string tenant;
    std::string client_id;
    int64_t last_seen_ms = 0;
    bool internal = false;                       // the master's own session: never expires
    absl::flat_hash_set<std::string> in_flight;  // table keys with a put in progress
  };

  Shard& ShardOf(const std::string& table_key);
  const Shard& ShardOf(const std::string& table_key) const;
  // Validates the session and returns its tenant.
  absl::StatusOr<std::string> TenantOf(SessionId sid, bool touch = true);
  absl::Status CheckKey(const std::string& key) const;
  static std::string TableKey(const std::string& tenant, const std::string& key);
  // The same into *out, reusing its buffer.
  static void TableKeyInto(const std::string& tenant, const std::string& key, std::string* out);
  // Frees an object's placements and counts it.
  void FreeReplicas(const Object& o);
  // Ends a put in progress if it still matches generation. Returns whether it did.
  bool AbortPut(const std::string& table_key, uint64_t generation, const char* why);
  void ForgetInFlight(SessionId sid, const std::string& table_key);
  // Ends a copy in progress (revoke, expiry, session death): frees and refunds the destination
  // and releases the lease on the object. Returns whether it did.
  bool AbortCopy(const std::string& table_key, uint64_t generation, const char* why);
  void AbortCopiesOf(SessionId sid);
  void DropSegments(const std::vector<uint64_t>& segment_ids);
  std::vector<proto::ReplicaDesc> Describe(const Placements& ps) const;
  // The segments of a tier that every tenant's Puts fill (placement.h).
  SegmentRegistry::Totals SharedCapacity(proto::Tier tier) const {
    return segments_.CapacityOf(PlacementRequest::SharedCapacity(tier));
  }
  absl::StatusOr<Placements> AllocateWithEviction(const PlacementRequest& who, uint64_t bytes,
                                                  int replicas);
  // Charges a tenant; over its quota, evicts the tenant's own oldest objects and retries, at
  // most twice.
  absl::Status ChargeWithTenantEviction(const std::string& tenant, uint64_t bytes);
  // What one eviction round for a single tenant frees at least, of a cap (its byte quota or
  // max_entries): eviction_ratio of it, rounded down. Such a round scans every shard, so a
  // tenant at its cap pays the scan once per that many bytes or entries written, not on every
  // put (a tenant at a 200k max_entries wrote 5.4k keys/s); a cap too small for a whole unit
  // keeps exact eviction.
  uint64_t TenantRound(uint64_t cap) const;
  // Evict, limited to one tenant's objects when only_tenant is set; stops after `bytes` or
  // `max_objects`, whichever comes first.
  uint64_t EvictObjects(uint64_t bytes, const char* reason, const std::string* only_tenant,
                        uint64_t max_objects = UINT64_MAX);
  // After a commit: a tenant past its max_entries loses its oldest entries (never rejected).
  void EnforceMaxEntries(const std::string& tenant);
  static uint64_t PlacedBytes(const Placements& ps);
  static std::string TenantOfKey(absl::string_view table_key);

  const MasterOptions options_;
  Clock* clock_;
  MetricsRegistry* metrics_;
  SegmentRegistry segments_;
  tenant::QuotaLedger ledger_;
  tenant::TokenCheck token_check_;
  TimerWheel deadlines_;
  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> next_generation_;
  // Orders accesses for LRU; a millisecond clock would tie accesses within one millisecond.
  std::atomic<uint64_t> access_clock_{0};
  uint64_t NextAccess() { return access_clock_.fetch_add(1, std::memory_order_relaxed) + 1; }
  std::string master_id_;

  mutable granary::Mutex sessions_mu_;
  absl::flat_hash_map<SessionId, Session> sessions_ ABSL_GUARDED_BY(sessions_mu_);

  granary::Mutex evict_mu_;  // one eviction round at a time

  struct PendingCopy {
    uint64_t generation = 0;  // of the copy (the object keeps its own)
    Placement source;
    Placement dest;
    bool move = false;
    SessionId session = 0;
  };
  // Copies in flight by table key (one per object). Deadlines are in deadlines_ under the key
  // prefixed with kCopyDeadlineTag.
  granary::Mutex copies_mu_;
  absl::flat_hash_map<std::string, PendingCopy> copies_ ABSL_GUARDED_BY(copies_mu_);

  struct Counters {
    MetricCounter* put_start;
    MetricCounter* put_end;
    MetricCounter* put_revoke;
    MetricCounter* put_expired;
    MetricCounter* get;
    MetricCounter* get_miss;
    MetricCounter* remove;
    MetricCounter* evicted;
    MetricCounter* evicted_bytes;
    MetricCounter* lost;
    MetricCounter* sessions_expired;
    MetricCounter* alloc_failures;
    MetricCounter* hello_rejects_token;
  } c_;
};

}  // namespace granary::master
