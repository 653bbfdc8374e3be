#include "master/master_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"
#include "common/util.h"
#include "proto/alloc_header.h"

namespace granary::master {

namespace {
using proto::WireStatus;

WireStatus Ok() { return WireStatus{}; }
WireStatus Err(const absl::Status& s) { return WireStatus::From(s); }

// Binds `tenant` to the session's tenant, or answers the request with the session error.
#define GRANARY_REQUIRE_TENANT(rep, sid)    \
  auto tenant_or = TenantOf(sid);           \
  if (!tenant_or.ok()) {                    \
    (rep).status = Err(tenant_or.status()); \
    return rep;                             \
  }                                         \
  const std::string& tenant = *tenant_or

}  // namespace

MasterService::MasterService(const MasterOptions& options, Clock* clock, MetricsRegistry* metrics)
    : options_(options),
      clock_(clock),
      metrics_(metrics),
      ledger_(options.enable_multi_tenants),
      token_check_({}, options.require_tenant_tokens, nullptr),
      deadlines_(options.tick_ms),
      master_id_(RandomId()) {
  // Generations are unique across master restarts: wall-clock milliseconds in the high bits.
  uint64_t wall_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
  next_generation_.store(wall_ms << 20);
  auto counter = [&](const char* name, const char* help, MetricLabels labels = {}) {
    return metrics_->Counter(name, help, labels);
  };
  const char* ops = "Object operations handled by the master, by type";
  c_.put_start = counter("granary_master_ops_total", ops, {{"op", "put_start"}});
  c_.put_end = counter("granary_master_ops_total", ops, {{"op", "put_end"}});
  c_.put_revoke = counter("granary_master_ops_total", ops, {{"op", "put_revoke"}});
  c_.get = counter("granary_master_ops_total", ops, {{"op", "get"}});
  c_.remove = counter("granary_master_ops_total", ops, {{"op", "remove"}});
  c_.get_miss =
      counter("granary_master_get_misses_total", "Get of a key that has no complete replica");
  c_.put_expired = counter("granary_master_put_expired_total",
                           "Allocations freed because their put deadline passed");
  c_.evicted = counter("granary_master_evicted_objects_total", "Objects evicted");
  c_.evicted_bytes = counter("granary_master_evicted_bytes_total", "Bytes freed by eviction");
  c_.lost = counter("granary_master_lost_objects_total",
                    "Objects dropped because every replica was on a lost node");
  c_.sessions_expired = counter("granary_master_sessions_expired_total",
                                "Sessions declared dead after client_ttl without a heartbeat");
  c_.alloc_failures = counter("granary_master_allocation_failures_total",
                              "PutStart entries refused for lack of space");
  c_.hello_rejects_token = counter("granary_master_hello_rejects_total",
                                   "Client hellos refused, by reason (token: missing or wrong "
                                   "tenant token)",
                                   {{"reason", "token"}});
  metrics_->AddCollector([this](MetricsWriter& w) {
    Stats s = GetStats();
    w.Gauge("granary_master_objects", "Objects in the table", {}, s.objects);
    w.Gauge("granary_master_objects_processing", "Objects with a put in progress", {},
            s.processing);
    w.Gauge("granary_master_capacity_bytes", "Mounted segment bytes", {{"tier", "host"}},
            s.capacity);
    w.Gauge("granary_master_used_bytes", "Allocated segment bytes", {{"tier", "host"}}, s.used);
    w.Gauge("granary_master_segments", "Mounted segments", {}, s.segments);
    w.Gauge("granary_master_sessions", "Live sessions", {}, s.sessions);
    w.Gauge("granary_tenant_capacity_bytes", "Allocatable capacity quotas are scaled against", {},
            static_cast<double>(ledger_.capacity()));
    w.Gauge("granary_tenant_quota_requested_sum_bytes", "Sum of requested tenant quotas", {},
            static_cast<double>(ledger_.requested_sum()));
    for (const auto& t : ledger_.SnapshotAll()) {
      MetricLabels l = {{"tenant_id", t.tenant_id}};
      w.Gauge("granary_tenant_quota_requested_bytes", "Requested byte quota", l,
              t.requested_quota_bytes);
      w.Gauge("granary_tenant_quota_effective_bytes", "Effective byte quota (scaled to capacity)",
              l, t.effective_quota_bytes);
      w.Gauge("granary_tenant_quota_charged_bytes", "Committed plus in-flight bytes", l,
              t.charged_bytes);
      w.Gauge("granary_tenant_quota_inflight_bytes", "Bytes charged for puts in progress", l,
              t.inflight_bytes);
      w.Gauge("granary_tenant_entries", "Committed objects", l, t.entries);
      w.Gauge("granary_tenant_admission_closed", "1 when the tenant may not write", l,
              t.admission_closed ? 1 : 0);
      w.Gauge("granary_tenant_over_quota", "1 when charged exceeds the effective quota", l,
              t.over_quota ? 1 : 0);
      const char* help = "Writes refused, by reason";
      w.Counter("granary_tenant_quota_reject_total", help,
                {{"tenant_id", t.tenant_id}, {"reason", "quota_exceeded"}}, t.rejects_quota);
      w.Counter("granary_tenant_quota_reject_total", help,
                {{"tenant_id", t.tenant_id}, {"reason", "admission_closed"}}, t.rejects_closed);
    }
    w.Gauge("granary_master_allocator_fragmentation",
            "Mean over segments of 1 - largest free block / free bytes", {},
            segments_.MeanFragmentation());
  });
}

std::string MasterService::TableKey(const std::string& tenant, const std::string& key) {
  std::string k;
  TableKeyInto(tenant, key, &k);
  return k;
}

void MasterService::TableKeyInto(const std::string& tenant, const std::string& key,
                                 std::string* out) {
  out->clear();
  out->reserve(tenant.size() + 1 + key.size());
  out->append(tenant);
  out->push_back('\0');
  out->append(key);
}

MasterService::Shard& MasterService::ShardOf(const std::string& table_key) {
  return shards_[HashBytes(table_key) % kShards];
}
const MasterService::Shard& MasterService::ShardOf(const std::string& table_key) const {
  return shards_[HashBytes(table_key) % kShards];
}

absl::StatusOr<std::string> MasterService::TenantOf(SessionId sid, bool touch) {
  granary::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) {
    return absl::FailedPreconditionError("no session: send Hello first");
  }
  if (touch) it->second.last_seen_ms = clock_->NowMs();
  // A node session binds no (validated) tenant: object requests from it would act in a
  // namespace no client can see, or in the master's reserved '_' one.
  if (it->second.role != proto::Role::kClient) {
    return absl::FailedPreconditionError("object requests need a client session");
  }
  return it->second.tenant;
}

absl::Status MasterService::CheckKey(const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (key.size() > proto::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key is ", key.size(), " bytes; the limit is ", proto::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

proto::HelloReply MasterService::Hello(SessionId sid, const proto::HelloRequest& req) {
  proto::HelloReply rep;
  if (req.protocol_version != proto::kProtocolVersion) {
    rep.status = Err(absl::FailedPreconditionError(
        absl::StrCat("protocol version ", req.protocol_version, " is not supported (master speaks ",
                     proto::kProtocolVersion, ")")));
    return rep;
  }
  if (req.role == proto::Role::kClient) {
    absl::Status st = tenant::ValidateTenantId(req.tenant_id);
    if (!st.ok()) {
      rep.status = Err(st);
      return rep;
    }
    // Names the tenant, never the token (nor its hash).
    st = token_check_.Check(req.tenant_id, req.token);
    if (!st.ok()) {
      c_.hello_rejects_token->Inc();
      LOG_WARN << "session " << sid << " hello refused: " << st.message() << " (client "
               << req.client_id << ")";
      rep.status = Err(st);
      return rep;
    }
  }
  granary::MutexLock lock(&sessions_mu_);
  if (sessions_.contains(sid)) {
    rep.status = Err(absl::FailedPreconditionError("session already said Hello"));
    return rep;
  }
  Session& s = sessions_[sid];
  s.role = req.role;
  s.tenant = req.tenant_id;
  s.client_id = req.client_id;
  s.last_seen_ms = clock_->NowMs();
  rep.session_id = sid;
  rep.heartbeat_interval_ms =
      static_cast<uint32_t>(std::max<int64_t>(options_.client_ttl_ms / 4, 50));
  rep.master_id = master_id_;
  LOG_DEBUG << "session " << sid << " hello: role=" << static_cast<int>(req.role)
            << " tenant=" << req.tenant_id << " client=" << req.client_id;
  return rep;
}

proto::HeartbeatReply MasterService::Heartbeat(SessionId sid) {
  proto::HeartbeatReply rep;
  granary::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) {
    rep.status = Err(absl::FailedPreconditionError("no session: send Hello first"));
    return rep;
  }
  it->second.last_seen_ms = clock_->NowMs();
  return rep;
}

SessionId MasterService::OpenInternalSession(const std::string& reserved_tenant) {
  GRANARY_CHECK(tenant::QuotaLedger::IsReserved(reserved_tenant)) << reserved_tenant;
  static std::atomic<SessionId> next{1ull << 62};  // far from the adapter's connection ids
  SessionId sid = next.fetch_add(1);
  granary::MutexLock lock(&sessions_mu_);
  Session& s = sessions_[sid];
  s.role = proto::Role::kClient;
  s.tenant = reserved_tenant;
  s.client_id = "master";
  s.internal = true;
  s.last_seen_ms = clock_->NowMs();
  return sid;
}

void MasterService::SessionClosed(SessionId sid) {
  AbortCopiesOf(sid);
  Session s;
  {
    granary::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) return;
    s = std::move(it->second);
    sessions_.erase(it);
  }
  for (const std::string& k : s.in_flight) {
    // Any generation: the session owned the put in progress on this key.
    Shard& sh = ShardOf(k);
    Placements freed;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(k);
      if (it == sh.objects.end() || it->second.state != ObjectState::kProcessing ||
          it->second.writer != sid) {
        continue;
      }
      freed = it->second.replicas;
      sh.objects.erase(it);
    }
    segments_.Free(freed);
    ledger_.Refund(TenantOfKey(k), PlacedBytes(freed));
    c_.put_revoke->Inc();
  }
  if (!s.in_flight.empty()) {
    LOG_INFO << "session " << sid << " closed: freed " << s.in_flight.size()
             << " allocation(s) it had in flight";
  }
  if (s.role == proto::Role::kNode) {
    std::vector<uint64_t> ids = segments_.SegmentsOf(sid);
    if (!ids.empty()) {
      LOG_INFO << "node session " << sid << " closed: unmounting " << ids.size() << " segment(s)";
      DropSegments(ids);
    }
  }
}

proto::MountSegmentReply MasterService::MountSegment(SessionId sid,
                                                     const proto::MountSegmentRequest& req) {
  proto::MountSegmentReply rep;
  {
    granary::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || it->second.role != proto::Role::kNode) {
      rep.status = Err(absl::FailedPreconditionError("MountSegment needs a node session"));
      return rep;
    }
    it->second.last_seen_ms = clock_->NowMs();
  }
  auto id = segments_.Mount(req, sid);
  if (!id.ok()) {
    rep.status = Err(id.status());
    return rep;
  }
  rep.segment_id = *id;
  ledger_.SetCapacity(capacity());
  LOG_INFO << "mounted segment " << *id << " '" << req.name << "' of node " << req.node_id << " at "
           << req.node_address << ": " << FormatSize(req.size);
  return rep;
}

proto::StatusReply MasterService::UnmountSegment(SessionId sid,
                                                 const proto::UnmountSegmentRequest& req) {
  proto::StatusReply rep;
  std::vector<uint64_t> mine = segments_.SegmentsOf(sid);
  if (std::find(mine.begin(), mine.end(), req.segment_id) == mine.end()) {
    rep.status = Err(absl::NotFoundError(
        absl::StrCat("segment ", req.segment_id, " is not mounted by this node")));
    return rep;
  }
  DropSegments({req.segment_id});
  LOG_INFO << "unmounted segment " << req.segment_id;
  return rep;
}

absl::StatusOr<Placements> MasterService::AllocateWithEviction(const PlacementRequest& who,
                                                               uint64_t bytes, int replicas) {
  auto p = segments_.Allocate(who, bytes, replicas);
  if (!p.ok() && absl::IsResourceExhausted(p.status())) {
    // Evict only if it could help: `replicas` distinct nodes must have a placeable segment at
    // least this large. Otherwise (too few nodes, a value larger than any segment) eviction
    // would destroy cached objects and the put would fail anyway.
    const uint64_t need =
        (bytes + proto::kAllocAlignment - 1) / proto::kAllocAlignment * proto::kAllocAlignment;
    const size_t nodes = segments_.NodesThatHold(who, need);
    if (nodes < static_cast<size_t>(replicas)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(p.status().message(), "; eviction cannot help: ", nodes,
                       " node(s) have a segment that holds ", FormatSize(need)));
    }
  }
  for (int attempt = 0; attempt < 2 && !p.ok() && absl::IsResourceExhausted(p.status());
       ++attempt) {
    auto totals = SharedCapacity(who.tier());
    if (totals.segments == 0) break;
    uint64_t target = std::max<uint64_t>(
        bytes * replicas, static_cast<uint64_t>(options_.eviction_ratio * totals.capacity));
    if (Evict(target, "space") == 0) break;
    p = segments_.Allocate(who, bytes, replicas);
  }
  return p;
}

proto::PutStartReply MasterService::PutStart(SessionId sid, const proto::PutStartRequest& req) {
  proto::PutStartReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  if (req.replica_num < 1 || req.replica_num > proto::kMaxReplicaNum) {
    rep.status = Err(absl::InvalidArgumentError(
        absl::StrCat("replica_num ", req.replica_num, " is outside 1..", proto::kMaxReplicaNum)));
    return rep;
  }
  const int64_t now = clock_->NowMs();
  const int64_t deadline = now + options_.put_start_timeout_ms;
  rep.results.resize(req.entries.size());
  std::vector<std::string> started;
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    auto& res = rep.results[i];
    c_.put_start->Inc();
    absl::Status st = CheckKey(e.key);
    if (st.ok() && (e.size == 0 || e.size > proto::kMaxValueBytes)) {
      st = absl::InvalidArgumentError(absl::StrCat("value size ", e.size, " of key '", e.key,
                                                   "' is outside 1..", proto::kMaxValueBytes));
    }
    if (!st.ok()) {
      res.status = Err(st);
      continue;
    }
    std::string tk = TableKey(tenant, e.key);
    Shard& sh = ShardOf(tk);
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it != sh.objects.end()) {
        res.status = Err(absl::AlreadyExistsError(
            it->second.state == ObjectState::kComplete
                ? absl::StrCat("key '", e.key, "' already exists")
                : absl::StrCat("key '", e.key, "' has a put in progress")));
        continue;
      }
    }
    // Admission: charge the bytes this put will really hold before allocating them.
    const uint64_t charge = AllocBytes(e.size) * req.replica_num;
    st = ChargeWithTenantEviction(tenant, charge);
    if (!st.ok()) {
      res.status = Err(st);
      continue;
    }
    auto placed = AllocateWithEviction(PlacementRequest::Put(tenant, proto::Tier::kHost),
                                       proto::kAllocHeaderSize + e.size, req.replica_num);
    if (!placed.ok()) {
      ledger_.Refund(tenant, charge);
      c_.alloc_failures->Inc();
      res.status = Err(placed.status());
      continue;
    }
    GRANARY_CHECK(PlacedBytes(*placed) == charge) << "allocator and charge disagree";
    uint64_t gen = next_generation_.fetch_add(1);
    bool inserted = false;
    {
      granary::MutexLock lock(&sh.mu);
      auto [it, fresh] = sh.objects.try_emplace(tk);
      if (fresh) {
        Object& o = it->second;
        o.size = e.size;
        o.generation = gen;
        o.writer = sid;
        o.created_ms = now;
        o.last_access = NextAccess();
        o.replicas = *placed;
        o.pin = (req.flags & kPutFlagHardPin)   ? kPinHard
                : (req.flags & kPutFlagSoftPin) ? kPinSoft
                                                : kPinNone;
        inserted = true;
      }
    }
    if (!inserted) {  // lost a race with another writer of the same key
      segments_.Free(*placed);
      ledger_.Refund(tenant, charge);
      res.status =
          Err(absl::AlreadyExistsError(absl::StrCat("key '", e.key, "' has a put in progress")));
      continue;
    }
    res.generation = gen;
    res.replicas = Describe(*placed);
    deadlines_.Add(deadline, tk, gen);
    started.push_back(std::move(tk));
  }
  if (!started.empty()) {
    granary::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(sid);
    if (it != sessions_.end()) {
      for (auto& k : started) it->second.in_flight.insert(std::move(k));
    }
  }
  return rep;
}

std::vector<proto::ReplicaDesc> MasterService::Describe(const Placements& ps) const {
  std::vector<proto::ReplicaDesc> out;
  out.reserve(ps.size());
  for (const auto& p : ps) {
    auto addr = segments_.AddressOf(p);
    if (!addr.has_value()) continue;
    out.push_back(proto::ReplicaDesc{p.segment_id, *addr, p.size});
  }
  return out;
}

void MasterService::ForgetInFlight(SessionId sid, const std::string& table_key) {
  granary::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(sid);
  if (it != sessions_.end()) it->second.in_flight.erase(table_key);
}

proto::BatchStatusReply MasterService::PutEnd(SessionId sid, const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  rep.results.resize(req.entries.size());
  // Committed keys leave their writer's in-flight set in one pass, under one lock.
  std::vector<std::pair<SessionId, std::string>> committed;
  committed.reserve(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    c_.put_end->Inc();
    std::string tk = TableKey(tenant, e.key);
    Shard& sh = ShardOf(tk);
    absl::Status st;
    SessionId writer = 0;
    int64_t created_ms = 0;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.generation != e.generation) {
        st = absl::NotFoundError(absl::StrCat("no put of key '", e.key, "' generation ",
                                              e.generation,
                                              " is in progress (it expired, was revoked, or "
                                              "its node was lost)"));
      } else if (it->second.state == ObjectState::kProcessing) {
        it->second.state = ObjectState::kComplete;
        it->second.last_access = NextAccess();
        writer = it->second.writer;
        it->second.lease_until_ms = 0;  // the writer's slot now holds the read leases' end
        created_ms = it->second.created_ms;
        // Commit what is still placed (a replica lost meanwhile was refunded already).
        ledger_.Commit(tenant, PlacedBytes(it->second.replicas));
      }
    }
    if (writer != 0) {
      deadlines_.Remove(created_ms + options_.put_start_timeout_ms, e.generation);
      committed.emplace_back(writer, std::move(tk));
    }
    rep.results[i] = st.ok() ? Ok() : Err(st);
  }
  if (!committed.empty()) {
    granary::MutexLock lock(&sessions_mu_);
    for (const auto& [writer, tk] : committed) {
      auto it = sessions_.find(writer);
      if (it != sessions_.end()) it->second.in_flight.erase(tk);
    }
  }
  EnforceMaxEntries(tenant);
  return rep;
}

bool MasterService::AbortPut(const std::string& tk, uint64_t generation, const char* why) {
  Shard& sh = ShardOf(tk);
  Placements freed;
  SessionId writer = 0;
  {
    granary::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.generation != generation ||
        it->second.state != ObjectState::kProcessing) {
      return false;
    }
    freed = it->second.replicas;
    writer = it->second.writer;
    sh.objects.erase(it);
  }
  segments_.Free(freed);
  ledger_.Refund(TenantOfKey(tk), PlacedBytes(freed));
  ForgetInFlight(writer, tk);
  LOG_DEBUG << "put aborted (" << why << "), generation " << generation;
  return true;
}

proto::BatchStatusReply MasterService::PutRevoke(SessionId sid, const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    c_.put_revoke->Inc();
    if (!AbortPut(TableKey(tenant, e.key), e.generation, "revoked")) {
      rep.results[i] = Err(absl::NotFoundError(absl::StrCat(
          "no put of key '", e.key, "' generation ", e.generation, " is in progress")));
    }
  }
  return rep;
}

proto::GetReply MasterService::Get(SessionId sid, const proto::KeysRequest& req) {
  proto::GetReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  const int64_t now = clock_->NowMs();
  rep.results.resize(req.keys.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    const std::string& key = req.keys[i];
    auto& res = rep.results[i];
    c_.get->Inc();
    TableKeyInto(tenant, key, &tk);
    Shard& sh = ShardOf(tk);
    Placements ps;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
        c_.get_miss->Inc();
        res.status = Err(absl::NotFoundError(
            it == sh.objects.end() ? absl::StrCat("key '", key, "' not found")
                                   : absl::StrCat("key '", key, "' is still being written")));
        continue;
      }
      Object& o = it->second;
      o.last_access = NextAccess();
      if (o.lease_until_ms <= now) o.lease_count = 0;  // stale leases have run out
      ++o.lease_count;
      o.lease_until_ms = now + options_.kv_lease_ttl_ms;
      res.size = o.size;
      res.generation = o.generation;
      res.lease_ms = static_cast<uint32_t>(options_.kv_lease_ttl_ms);
      ps = o.replicas;
    }
    res.replicas = Describe(ps);
  }
  return rep;
}

proto::BatchStatusReply MasterService::GetEnd(SessionId sid, const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  rep.results.resize(req.entries.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    TableKeyInto(tenant, e.key, &tk);
    Shard& sh = ShardOf(tk);
    granary::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.generation != e.generation) {
      rep.results[i] = Err(absl::NotFoundError(
          absl::StrCat("key '", e.key, "' generation ", e.generation, " not found")));
      continue;
    }
    Object& o = it->second;
    if (o.lease_count > 0 && --o.lease_count == 0) o.lease_until_ms = 0;
  }
  return rep;
}

proto::BatchStatusReply MasterService::Exist(SessionId sid, const proto::KeysRequest& req) {
  proto::BatchStatusReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  rep.results.resize(req.keys.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    TableKeyInto(tenant, req.keys[i], &tk);
    Shard& sh = ShardOf(tk);
    granary::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
      rep.results[i] = Err(absl::NotFoundError(absl::StrCat("key '", req.keys[i], "' not found")));
    }
  }
  return rep;
}

proto::BatchStatusReply MasterService::Remove(SessionId sid, const proto::KeysRequest& req) {
  proto::BatchStatusReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  const int64_t now = clock_->NowMs();
  rep.results.resize(req.keys.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    const std::string& key = req.keys[i];
    c_.remove->Inc();
    TableKeyInto(tenant, key, &tk);
    Shard& sh = ShardOf(tk);
    Placements freed;
    absl::Status st;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end()) {
        st = absl::NotFoundError(absl::StrCat("key '", key, "' not found"));
      } else if (it->second.state != ObjectState::kComplete) {
        st = absl::FailedPreconditionError(
            absl::StrCat("key '", key, "' has a put in progress; revoke it or wait"));
      } else if (it->second.lease_count > 0 && it->second.lease_until_ms > now) {
        st = absl::FailedPreconditionError(absl::StrCat("key '", key, "' is being read (lease for ",
                                                        it->second.lease_until_ms - now,
                                                        " ms more); retry later"));
      } else {
        freed = it->second.replicas;
        sh.objects.erase(it);
      }
    }
    if (st.ok()) {
      segments_.Free(freed);
      ledger_.Release(tenant, PlacedBytes(freed));
    }
    rep.results[i] = st.ok() ? Ok() : Err(st);
  }
  return rep;
}

proto::ListReply MasterService::List(SessionId sid, const proto::ListRequest& req) {
  proto::ListReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  return ListObjects(tenant, req);
}

proto::ListReply MasterService::ListObjects(const std::string& tenant,
                                            const proto::ListRequest& req) const {
  proto::ListReply rep;
  const int64_t now = clock_->NowMs();
  std::string lo = TableKey(tenant, req.prefix);
  std::string after = TableKey(tenant, req.start_after);
  std::vector<std::pair<std::string, proto::ObjectInfo>> found;
  for (const Shard& sh : shards_) {
    granary::MutexLock lock(&sh.mu);
    for (const auto& [tk, o] : sh.objects) {
      if (!absl::StartsWith(tk, lo)) continue;
      if (!req.start_after.empty() && tk <= after) continue;
      proto::ObjectInfo info;
      info.key = std::string(tk.substr(tenant.size() + 1));
      info.size = o.size;
      info.generation = o.generation;
      info.state = static_cast<uint8_t>(o.state);
      info.replica_count = static_cast<uint32_t>(o.replicas.size());
      info.age_ms = static_cast<uint64_t>(std::max<int64_t>(0, now - o.created_ms));
      for (const Placement& p : o.replicas) {
        info.replicas.push_back(proto::ReplicaDesc{p.segment_id, p.offset, p.size});
      }
      found.emplace_back(tk, std::move(info));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (found.size() > req.limit) {
    found.resize(req.limit);
    rep.more = true;
  }
  for (auto& [tk, info] : found) rep.objects.push_back(std::move(info));
  return rep;
}

proto::LookupPrefixReply MasterService::LookupPrefix(SessionId sid,
                                                     const proto::LookupPrefixRequest& req) {
  proto::LookupPrefixReply rep;
  GRANARY_REQUIRE_TENANT(rep, sid);
  const int64_t now = clock_->NowMs();
  std::string tk;  // reused: one allocation per request, not per key
  for (const std::string& key : req.keys) {
    TableKeyInto(tenant, key, &tk);
    Shard& sh = ShardOf(tk);
    Placements ps;
    proto::BlockHint hint;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.state != ObjectState::kComplete ||
          it->second.replicas.empty()) {
        break;  // the prefix ends at the first missing block
      }
      Object& o = it->second;
      o.last_access = NextAccess();
      if (req.lease) {
        if (o.lease_until_ms <= now) o.lease_count = 0;
        ++o.lease_count;
        o.lease_until_ms = now + options_.kv_lease_ttl_ms;
      }
      hint.size = o.size;
      hint.generation = o.generation;
      ps = o.replicas;
    }
    if (auto seg = segments_.Find(ps[0].segment_id); seg.has_value()) {
      hint.node_address = seg->node_address;
    }
    rep.hints.push_back(std::move(hint));
  }
  rep.present = static_cast<uint32_t>(rep.hints.size());
  if (req.lease) rep.lease_ms = static_cast<uint32_t>(options_.kv_lease_ttl_ms);
  return rep;
}

proto::SegmentsReply MasterService::Segments(SessionId sid) {
  proto::SegmentsReply rep;
  {
    granary::MutexLock lock(&sessions_mu_);  // clients and nodes alike
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) {
      rep.status = Err(absl::FailedPreconditionError("no session: send Hello first"));
      return rep;
    }
    it->second.last_seen_ms = clock_->NowMs();
  }
  rep.segments = segments_.List();
  return rep;
}

}  // namespace granary::master
