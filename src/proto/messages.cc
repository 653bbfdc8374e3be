#include "proto/messages.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "proto/alloc_header.h"

namespace granary::proto {

WireStatus WireStatus::From(const absl::Status& s) {
  WireStatus w;
  w.code = static_cast<uint8_t>(s.code());
  w.message = std::string(s.message().substr(0, kMaxMessageBytes));
  w.reason = ErrorReasonOf(s);
  return w;
}

absl::Status WireStatus::ToStatus() const {
  if (code == 0) return absl::OkStatus();
  auto c = static_cast<absl::StatusCode>(code);
  if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated))
    c = absl::StatusCode::kUnknown;
  return WithReason(absl::Status(c, message), reason);
}

namespace {

void Put(const WireStatus& s, Writer& w) {
  w.U8(s.code);
  w.Str(s.message);
  w.U8(static_cast<uint8_t>(s.reason));
}
void Get(Reader& r, WireStatus* s) {
  s->code = r.U8("status.code");
  s->message = r.Str("status.message", kMaxMessageBytes);
  uint8_t reason = r.U8("status.reason");
  if (r.ok() && s->code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)) {
    r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown status code ", s->code)));
  }
  if (r.ok() && reason > static_cast<uint8_t>(kLastErrorReason)) {
    r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown error reason ", reason)));
  }
  s->reason = static_cast<ErrorReason>(reason);
}
void Put(const ReplicaDesc& d, Writer& w) {
  w.U64(d.segment_id);
  w.U64(d.address);
  w.U64(d.length);
}
void Get(Reader& r, ReplicaDesc* d) {
  d->segment_id = r.U64("replica.segment_id");
  d->address = r.U64("replica.address");
  d->length = r.U64("replica.length");
}
void PutReplicas(const std::vector<ReplicaDesc>& v, Writer& w) {
  w.U32(static_cast<uint32_t>(v.size()));
  for (const auto& d : v) Put(d, w);
}
void GetReplicas(Reader& r, std::vector<ReplicaDesc>* v) {
  uint32_t n = r.Count("replicas", kMaxReplicaNum, 24);
  v->resize(n);
  for (auto& d : *v) Get(r, &d);
}
Tier GetTier(Reader& r) {
  uint8_t t = r.U8("tier");
  if (r.ok() && t > 1) r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown tier ", t)));
  return static_cast<Tier>(t);
}
ObjectState GetObjectState(Reader& r) {
  uint8_t s = r.U8("state");
  if (r.ok() && s > 1) {
    r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown object state ", s)));
  }
  return static_cast<ObjectState>(s);
}

}  // namespace

void Encode(const HelloRequest& m, Writer& w) {
  w.U8(static_cast<uint8_t>(m.role));
  w.Str(m.client_id);
  w.Str(m.tenant_id);
  w.U16(m.protocol_version);
  w.Str(m.token);
}
absl::Status Decode(Reader& r, HelloRequest* m) {
  uint8_t role = r.U8("role");
  if (r.ok() && role != 1 && role != 2) {
    r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown role ", role)));
  }
  m->role = static_cast<Role>(role);
  m->client_id = r.Str("client_id", kMaxNameBytes);
  m->tenant_id = r.Str("tenant_id", kMaxTenantIdBytes);
  m->protocol_version = r.U16("protocol_version");
  m->token = r.Str("token", kMaxTokenBytes);
  return r.status();
}

void Encode(const HelloReply& m, Writer& w) {
  Put(m.status, w);
  w.U64(m.session_id);
  w.U32(m.heartbeat_interval_ms);
  w.Str(m.master_id);
  w.U64(m.epoch);
  w.U32(m.write_window_ms);
}
absl::Status Decode(Reader& r, HelloReply* m) {
  Get(r, &m->status);
  m->session_id = r.U64("session_id");
  m->heartbeat_interval_ms = r.U32("heartbeat_interval_ms");
  m->master_id = r.Str("master_id", kMaxNameBytes);
  m->epoch = r.U64("epoch");
  m->write_window_ms = r.U32("write_window_ms");
  return r.status();
}

void Encode(const HeartbeatRequest& m, Writer& w) {
  w.Bool(m.has_cgroup);
  if (!m.has_cgroup) return;
  const NodeCgroupReport& c = m.cgroup;
  w.Str(c.path);
  w.Str(c.version);
  for (uint64_t v :
       {c.limit, c.effective_limit, c.usage, c.peak, c.limit_hits, c.oom, c.oom_kill}) {
    w.U64(v);
  }
}
absl::Status Decode(Reader& r, HeartbeatRequest* m) {
  m->has_cgroup = r.Bool("has_cgroup");
  if (!m->has_cgroup) return r.status();
  NodeCgroupReport& c = m->cgroup;
  c.path = r.Str("cgroup.path", kMaxNameBytes);
  c.version = r.Str("cgroup.version", kMaxNameBytes);
  c.limit = r.U64("cgroup.limit");
  c.effective_limit = r.U64("cgroup.effective_limit");
  c.usage = r.U64("cgroup.usage");
  c.peak = r.U64("cgroup.peak");
  c.limit_hits = r.U64("cgroup.limit_hits");
  c.oom = r.U64("cgroup.oom");
  c.oom_kill = r.U64("cgroup.oom_kill");
  return r.status();
}
void Encode(const HeartbeatReply& m, Writer& w) { Put(m.status, w); }
absl::Status Decode(Reader& r, HeartbeatReply* m) {
  Get(r, &m->status);
  return r.status();
}

void Encode(const MountSegmentRequest& m, Writer& w) {
  w.Str(m.name);
  w.Str(m.node_id);
  w.Str(m.node_address);
  w.U64(m.base);
  w.U64(m.size);
  w.U8(static_cast<uint8_t>(m.tier));
  w.Str(m.rkey);
  w.Str(m.pool);
  w.Str(m.worker_address);
  w.Str(m.host_id);
  w.Bool(m.resumed);
  w.Str(m.gpu_ipc);
  w.Str(m.gpu_uuid);
  w.Str(m.nic);
  w.U32(static_cast<uint32_t>(m.numa_node));
  w.U32(static_cast<uint32_t>(m.gpu));
}
absl::Status Decode(Reader& r, MountSegmentRequest* m) {
  m->name = r.Str("name", kMaxNameBytes);
  m->node_id = r.Str("node_id", kMaxNameBytes);
  m->node_address = r.Str("node_address", kMaxNameBytes);
  m->base = r.U64("base");
  m->size = r.U64("size");
  m->tier = GetTier(r);
  m->rkey = r.Str("rkey", kMaxRkeyBytes);
  m->pool = r.Str("pool", kMaxTenantIdBytes);
  m->worker_address = r.Str("worker_address", kMaxRkeyBytes);
  m->host_id = r.Str("host_id", kMaxNameBytes);
  m->resumed = r.Bool("resumed");
  m->gpu_ipc = r.Str("gpu_ipc", kMaxGpuIpcBytes);
  m->gpu_uuid = r.Str("gpu_uuid", kGpuUuidBytes);
  m->nic = r.Str("nic", kMaxNameBytes);
  m->numa_node = static_cast<int32_t>(r.U32("numa_node"));
  m->gpu = static_cast<int32_t>(r.U32("gpu"));
  return r.status();
}
void Encode(const MountSegmentReply& m, Writer& w) {
  Put(m.status, w);
  w.U64(m.segment_id);
}
absl::Status Decode(Reader& r, MountSegmentReply* m) {
  Get(r, &m->status);
  m->segment_id = r.U64("segment_id");
  return r.status();
}

void Encode(const UnmountSegmentRequest& m, Writer& w) { w.U64(m.segment_id); }
absl::Status Decode(Reader& r, UnmountSegmentRequest* m) {
  m->segment_id = r.U64("segment_id");
  return r.status();
}
void Encode(const StatusReply& m, Writer& w) { Put(m.status, w); }
absl::Status Decode(Reader& r, StatusReply* m) {
  Get(r, &m->status);
  return r.status();
}

void Encode(const AttachRequest& m, Writer& w) {
  w.U64(m.nonce);
  w.Str(m.worker_address);
}
absl::Status Decode(Reader& r, AttachRequest* m) {
  m->nonce = r.U64("nonce");
  m->worker_address = r.Str("worker_address", kMaxRkeyBytes);
  return r.status();
}

void Encode(const PutStartRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    w.Str(e.key);
    w.U64(e.size);
  }
  w.U8(m.replica_num);
  w.U32(m.flags);
}
absl::Status Decode(Reader& r, PutStartRequest* m) {
  uint32_t n = r.Count("entries", kMaxBatch, 12);
  m->entries.resize(n);
  for (auto& e : m->entries) {
    e.key = r.Str("key", kMaxKeyBytes);
    e.size = r.U64("size");
  }
  m->replica_num = r.U8("replica_num");
  m->flags = r.U32("flags");
  return r.status();
}
void Encode(const PutStartReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.results.size()));
  for (const auto& res : m.results) {
    Put(res.status, w);
    w.U64(res.generation);
    PutReplicas(res.replicas, w);
  }
}
absl::Status Decode(Reader& r, PutStartReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("results", kMaxBatch, 18);
  m->results.resize(n);
  for (auto& res : m->results) {
    Get(r, &res.status);
    res.generation = r.U64("generation");
    GetReplicas(r, &res.replicas);
  }
  return r.status();
}

void Encode(const KeyGenRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    w.Str(e.key);
    w.U64(e.generation);
    w.U64(e.lease_token);
  }
}
absl::Status Decode(Reader& r, KeyGenRequest* m) {
  uint32_t n = r.Count("entries", kMaxBatch, 20);
  m->entries.resize(n);
  for (auto& e : m->entries) {
    e.key = r.Str("key", kMaxKeyBytes);
    e.generation = r.U64("generation");
    e.lease_token = r.U64("lease_token");
  }
  return r.status();
}
void Encode(const BatchStatusReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.results.size()));
  for (const auto& s : m.results) Put(s, w);
}
absl::Status Decode(Reader& r, BatchStatusReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("results", kMaxBatch, 6);
  m->results.resize(n);
  for (auto& s : m->results) Get(r, &s);
  return r.status();
}

void Encode(const KeysRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.keys.size()));
  for (const auto& k : m.keys) w.Str(k);
}
absl::Status Decode(Reader& r, KeysRequest* m) {
  uint32_t n = r.Count("keys", kMaxBatch, 4);
  m->keys.resize(n);
  for (auto& k : m->keys) k = r.Str("key", kMaxKeyBytes);
  return r.status();
}

void Encode(const RemoveRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.keys.size()));
  for (const auto& k : m.keys) w.Str(k);
  w.Bool(m.force);
}
absl::Status Decode(Reader& r, RemoveRequest* m) {
  uint32_t n = r.Count("keys", kMaxBatch, 4);
  m->keys.resize(n);
  for (auto& k : m->keys) k = r.Str("key", kMaxKeyBytes);
  m->force = r.Bool("force");
  return r.status();
}

void Encode(const GetReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.results.size()));
  for (const auto& res : m.results) {
    Put(res.status, w);
    w.U64(res.size);
    w.U64(res.generation);
    w.U32(res.lease_ms);
    w.U64(res.lease_token);
    PutReplicas(res.replicas, w);
  }
}
absl::Status Decode(Reader& r, GetReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("results", kMaxBatch, 38);
  m->results.resize(n);
  for (auto& res : m->results) {
    Get(r, &res.status);
    res.size = r.U64("size");
    res.generation = r.U64("generation");
    res.lease_ms = r.U32("lease_ms");
    res.lease_token = r.U64("lease_token");
    GetReplicas(r, &res.replicas);
  }
  return r.status();
}

void Encode(const ListRequest& m, Writer& w) {
  w.Str(m.prefix);
  w.Str(m.start_after);
  w.U32(m.limit);
}
absl::Status Decode(Reader& r, ListRequest* m) {
  m->prefix = r.Str("prefix", kMaxKeyBytes);
  m->start_after = r.Str("start_after", kMaxKeyBytes);
  m->limit = r.U32("limit");
  if (r.ok() && (m->limit == 0 || m->limit > kMaxListLimit)) {
    r.Fail(absl::InvalidArgumentError(
        absl::StrCat("list limit ", m->limit, " is outside 1..", kMaxListLimit)));
  }
  return r.status();
}
void Encode(const ListReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.objects.size()));
  for (const auto& o : m.objects) {
    w.Str(o.key);
    w.U64(o.size);
    w.U64(o.generation);
    w.U8(static_cast<uint8_t>(o.state));
    w.U32(o.replica_count);
    w.U64(o.age_ms);
    PutReplicas(o.replicas, w);
  }
  w.Bool(m.more);
}
absl::Status Decode(Reader& r, ListReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("objects", kMaxListLimit, 37);
  m->objects.resize(n);
  for (auto& o : m->objects) {
    o.key = r.Str("key", kMaxKeyBytes);
    o.size = r.U64("size");
    o.generation = r.U64("generation");
    o.state = GetObjectState(r);
    o.replica_count = r.U32("replica_count");
    o.age_ms = r.U64("age_ms");
    GetReplicas(r, &o.replicas);
  }
  m->more = r.Bool("more");
  return r.status();
}

namespace {
void PutSegment(const SegmentInfo& s, Writer& w) {
  w.U64(s.segment_id);
  w.Str(s.name);
  w.Str(s.node_id);
  w.Str(s.node_address);
  w.U64(s.base);
  w.U64(s.size);
  w.U64(s.used);
  w.U8(static_cast<uint8_t>(s.tier));
  w.Str(s.pool);
  w.Str(s.rkey);
  w.Str(s.worker_address);
  w.Str(s.host_id);
  w.Str(s.gpu_ipc);
  w.Str(s.gpu_uuid);
  w.Str(s.nic);
  w.U32(static_cast<uint32_t>(s.numa_node));
  w.U32(static_cast<uint32_t>(s.gpu));
}
void GetSegment(Reader& r, SegmentInfo* s) {
  s->segment_id = r.U64("segment_id");
  s->name = r.Str("name", kMaxNameBytes);
  s->node_id = r.Str("node_id", kMaxNameBytes);
  s->node_address = r.Str("node_address", kMaxNameBytes);
  s->base = r.U64("base");
  s->size = r.U64("size");
  s->used = r.U64("used");
  s->tier = GetTier(r);
  s->pool = r.Str("pool", kMaxTenantIdBytes);
  s->rkey = r.Str("rkey", kMaxRkeyBytes);
  s->worker_address = r.Str("worker_address", kMaxRkeyBytes);
  s->host_id = r.Str("host_id", kMaxNameBytes);
  s->gpu_ipc = r.Str("gpu_ipc", kMaxGpuIpcBytes);
  s->gpu_uuid = r.Str("gpu_uuid", kGpuUuidBytes);
  s->nic = r.Str("nic", kMaxNameBytes);
  s->numa_node = static_cast<int32_t>(r.U32("numa_node"));
  s->gpu = static_cast<int32_t>(r.U32("gpu"));
}
}  // namespace

void Encode(const CopyStartRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    w.Str(e.key);
    w.Str(e.target);
  }
}
absl::Status Decode(Reader& r, CopyStartRequest* m) {
  uint32_t n = r.Count("entries", kMaxBatch, 8);
  m->entries.resize(n);
  for (auto& e : m->entries) {
    e.key = r.Str("key", kMaxKeyBytes);
    e.target = r.Str("target", kMaxNameBytes);
  }
  return r.status();
}
void Encode(const CopyStartReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.results.size()));
  for (const auto& res : m.results) {
    Put(res.status, w);
    w.U64(res.generation);
    Put(res.source, w);
    Put(res.dest, w);
    w.Str(res.dest_node_address);
  }
}
absl::Status Decode(Reader& r, CopyStartReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("results", kMaxBatch, 66);
  m->results.resize(n);
  for (auto& res : m->results) {
    Get(r, &res.status);
    res.generation = r.U64("generation");
    Get(r, &res.source);
    Get(r, &res.dest);
    res.dest_node_address = r.Str("dest_node_address", kMaxNameBytes);
  }
  return r.status();
}
void Encode(const CopyEndRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    w.Str(e.key);
    w.U64(e.generation);
    w.U64(e.dest_segment_id);
  }
}
absl::Status Decode(Reader& r, CopyEndRequest* m) {
  uint32_t n = r.Count("entries", kMaxBatch, 20);
  m->entries.resize(n);
  for (auto& e : m->entries) {
    e.key = r.Str("key", kMaxKeyBytes);
    e.generation = r.U64("generation");
    e.dest_segment_id = r.U64("dest_segment_id");
  }
  return r.status();
}
void Encode(const FetchRequest& m, Writer& w) {
  PutSegment(m.source, w);
  w.U64(m.source_address);
  w.U64(m.dest_address);
  w.U64(m.length);
  w.U32(m.timeout_ms);
}
absl::Status Decode(Reader& r, FetchRequest* m) {
  GetSegment(r, &m->source);
  m->source_address = r.U64("source_address");
  m->dest_address = r.U64("dest_address");
  m->length = r.U64("length");
  m->timeout_ms = r.U32("timeout_ms");
  return r.status();
}

uint32_t NodeTransferTimeoutMs(int64_t client_timeout_ms) {
  const int64_t bounded = std::clamp<int64_t>(client_timeout_ms, 0, 2 * kMaxNodeTransferTimeoutMs);
  return static_cast<uint32_t>(std::clamp<int64_t>(bounded * 3 / 4, 1, kMaxNodeTransferTimeoutMs));
}

void Encode(const PushRequest& m, Writer& w) {
  PutSegment(m.dest, w);
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const auto& e : m.entries) {
    w.U64(e.source_address);
    w.U64(e.dest_address);
    w.U64(e.length);
  }
  w.U32(static_cast<uint32_t>(m.headers.size()));
  for (uint64_t h : m.headers) w.U64(h);
  w.U32(m.timeout_ms);
}
absl::Status Decode(Reader& r, PushRequest* m) {
  GetSegment(r, &m->dest);
  uint32_t n = r.Count("entries", kMaxBatch, 24);
  m->entries.resize(n);
  for (auto& e : m->entries) {
    e.source_address = r.U64("source_address");
    e.dest_address = r.U64("dest_address");
    e.length = r.U64("length");
  }
  n = r.Count("headers", kMaxBatch, 8);
  m->headers.resize(n);
  for (auto& h : m->headers) h = r.U64("header");
  m->timeout_ms = r.U32("timeout_ms");
  return r.status();
}
void Encode(const PushReply& m, Writer& w) {
  Put(m.status, w);
  w.Str(m.headers);
}
absl::Status Decode(Reader& r, PushReply* m) {
  Get(r, &m->status);
  m->headers = r.Str("headers", static_cast<size_t>(kMaxBatch) * kAllocHeaderSize);
  return r.status();
}

uint64_t InlineDataBytes(const std::vector<InlineEntry>& entries) {
  uint64_t n = 0;
  for (const auto& e : entries) n += kAllocHeaderSize + e.length;
  return n;
}
namespace {
void PutInlineEntries(const std::vector<InlineEntry>& entries, Writer& w) {
  w.U32(static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    w.U64(e.address);
    w.U64(e.length);
  }
}
void GetInlineEntries(Reader& r, std::vector<InlineEntry>* entries) {
  const uint32_t n = r.Count("entries", kMaxBatch, 16);
  entries->resize(n);
  for (auto& e : *entries) {
    e.address = r.U64("address");
    e.length = r.U64("length");
  }
}
// Appends a length-prefixed string of `size` bytes that fill writes in place.
void PutFilled(size_t size, absl::FunctionRef<void(char*)> fill, std::string* out) {
  Writer(out).U32(static_cast<uint32_t>(size));
  const size_t at = out->size();
  out->resize(at + size);
  fill(out->data() + at);
}
}  // namespace
void Encode(const ReadRequest& m, Writer& w) { PutInlineEntries(m.entries, w); }
absl::Status Decode(Reader& r, ReadRequest* m) {
  GetInlineEntries(r, &m->entries);
  return r.status();
}
void Encode(const ReadReply& m, Writer& w) {
  Put(m.status, w);
  w.Str(m.data);
}
absl::Status Decode(Reader& r, ReadReplyView* m) {
  Get(r, &m->status);
  m->data = r.View("data", kMaxFrameBody);
  return r.status();
}
absl::Status Decode(Reader& r, ReadReply* m) {
  ReadReplyView v;
  GRANARY_RETURN_IF_ERROR(Decode(r, &v));
  m->status = std::move(v.status);
  m->data = std::string(v.data);
  return absl::OkStatus();
}
void Encode(const WriteRequest& m, Writer& w) {
  PutInlineEntries(m.entries, w);
  w.Str(m.data);
}
absl::Status Decode(Reader& r, WriteRequestView* m) {
  GetInlineEntries(r, &m->entries);
  m->data = r.View("data", kMaxFrameBody);
  return r.status();
}
absl::Status Decode(Reader& r, WriteRequest* m) {
  WriteRequestView v;
  GRANARY_RETURN_IF_ERROR(Decode(r, &v));
  m->entries = std::move(v.entries);
  m->data = std::string(v.data);
  return absl::OkStatus();
}
std::string EncodeReadReplyFrame(uint16_t type, uint64_t request_id, size_t size,
                                 absl::FunctionRef<void(char*)> fill) {
  std::string out;
  out.reserve(kFrameHeaderSize + 16 + size);
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  BeginFrame(h, &out);
  Writer w(&out);
  Put(WireStatus{}, w);
  PutFilled(size, fill, &out);
  FinishFrame(&out);
  return out;
}
std::string EncodeWriteRequestFrame(const std::vector<InlineEntry>& entries, size_t size,
                                    absl::FunctionRef<void(char*)> fill) {
  std::string out;
  out.reserve(kFrameHeaderSize + 8 + 16 * entries.size() + size);
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kWrite);
  BeginFrame(h, &out);
  Writer w(&out);
  PutInlineEntries(entries, w);
  PutFilled(size, fill, &out);
  FinishFrame(&out);
  return out;
}

void Encode(const LookupPrefixRequest& m, Writer& w) {
  w.U32(static_cast<uint32_t>(m.keys.size()));
  for (const auto& k : m.keys) w.Str(k);
  w.Bool(m.lease);
}
absl::Status Decode(Reader& r, LookupPrefixRequest* m) {
  uint32_t n = r.Count("keys", kMaxBatch, 4);
  m->keys.resize(n);
  for (auto& k : m->keys) k = r.Str("key", kMaxKeyBytes);
  m->lease = r.Bool("lease");
  return r.status();
}
void Encode(const LookupPrefixReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(m.present);
  w.U32(static_cast<uint32_t>(m.hints.size()));
  for (const auto& h : m.hints) {
    w.U64(h.size);
    w.U64(h.generation);
    w.Str(h.node_address);
  }
  w.U32(m.lease_ms);
}
absl::Status Decode(Reader& r, LookupPrefixReply* m) {
  Get(r, &m->status);
  m->present = r.U32("present");
  uint32_t n = r.Count("hints", kMaxBatch, 20);
  m->hints.resize(n);
  for (auto& h : m->hints) {
    h.size = r.U64("size");
    h.generation = r.U64("generation");
    h.node_address = r.Str("node_address", kMaxNameBytes);
  }
  m->lease_ms = r.U32("lease_ms");
  if (r.ok() && m->present != m->hints.size()) {
    r.Fail(absl::InvalidArgumentError(absl::StrCat("LookupPrefix reply says ", m->present,
                                                   " present but carries ", m->hints.size(),
                                                   " hints")));
  }
  return r.status();
}

void Encode(const SegmentsRequest&, Writer&) {}
absl::Status Decode(Reader& r, SegmentsRequest*) { return r.status(); }
void Encode(const SegmentsReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(static_cast<uint32_t>(m.segments.size()));
  for (const auto& s : m.segments) PutSegment(s, w);
}
absl::Status Decode(Reader& r, SegmentsReply* m) {
  Get(r, &m->status);
  uint32_t n = r.Count("segments", kMaxBatch, 61);
  m->segments.resize(n);
  for (auto& s : m->segments) GetSegment(r, &s);
  return r.status();
}

namespace {
// u8 op, two string lengths, five u64s, a u32 and a u64: 61 bytes at least.
constexpr size_t kMinInventoryRecordBytes = 1 + 4 + 4 + 5 * 8 + 4 + 8;
void PutRecords(const std::vector<InventoryRecord>& v, Writer& w) {
  w.U32(static_cast<uint32_t>(v.size()));
  for (const auto& e : v) {
    w.U8(static_cast<uint8_t>(e.op));
    w.Str(e.tenant);
    w.Str(e.key);
    w.U64(e.segment_id);
    w.U64(e.offset);
    w.U64(e.alloc_size);
    w.U64(e.value_length);
    w.U64(e.generation);
    w.U32(e.flags);
    w.U64(e.commit_ms);
  }
}
void GetRecords(Reader& r, std::vector<InventoryRecord>* v) {
  uint32_t n = r.Count("records", kMaxInventoryBatch, kMinInventoryRecordBytes);
  v->resize(n);
  for (auto& e : *v) {
    uint8_t op = r.U8("record.op");
    if (r.ok() && op > 1) {
      r.Fail(absl::InvalidArgumentError(absl::StrCat("unknown inventory op ", op)));
    }
    e.op = static_cast<InventoryOp>(op);
    e.tenant = r.Str("record.tenant", kMaxTenantIdBytes);
    e.key = r.Str("record.key", kMaxKeyBytes);
    e.segment_id = r.U64("record.segment_id");
    e.offset = r.U64("record.offset");
    e.alloc_size = r.U64("record.alloc_size");
    e.value_length = r.U64("record.value_length");
    e.generation = r.U64("record.generation");
    e.flags = r.U32("record.flags");
    e.commit_ms = r.U64("record.commit_ms");
  }
}
}  // namespace

void Encode(const InventorySyncRequest& m, Writer& w) {
  w.U32(m.wait_ms);
  w.U64(m.acked);
}
absl::Status Decode(Reader& r, InventorySyncRequest* m) {
  m->wait_ms = r.U32("wait_ms");
  m->acked = r.U64("acked");
  if (r.ok() && m->wait_ms > kMaxInventoryWaitMs) {
    r.Fail(absl::InvalidArgumentError(
        absl::StrCat("inventory wait_ms ", m->wait_ms, " is over ", kMaxInventoryWaitMs)));
  }
  return r.status();
}
void Encode(const InventorySyncReply& m, Writer& w) {
  Put(m.status, w);
  PutRecords(m.records, w);
  w.U64(m.token);
}
absl::Status Decode(Reader& r, InventorySyncReply* m) {
  Get(r, &m->status);
  GetRecords(r, &m->records);
  m->token = r.U64("token");
  return r.status();
}
void Encode(const InventoryReportRequest& m, Writer& w) {
  PutRecords(m.records, w);
  w.Bool(m.last);
  w.U64(m.total);
}
absl::Status Decode(Reader& r, InventoryReportRequest* m) {
  GetRecords(r, &m->records);
  m->last = r.Bool("last");
  m->total = r.U64("total");
  return r.status();
}
void Encode(const InventoryReportReply& m, Writer& w) {
  Put(m.status, w);
  w.U32(m.restored);
  w.U32(m.rejected);
}
absl::Status Decode(Reader& r, InventoryReportReply* m) {
  Get(r, &m->status);
  m->restored = r.U32("restored");
  m->rejected = r.U32("rejected");
  return r.status();
}

}  // namespace granary::proto
