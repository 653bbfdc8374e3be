#include "client/client_impl.h"

#include <algorithm>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/util.h"

namespace granary {

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  auto c = client::ClientImpl::Create(options);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Client>(std::move(*c));
}

absl::StatusOr<std::unique_ptr<Client>> Client::CreateFromEnvironment() {
  auto o = ClientOptions::FromEnvironment();
  if (!o.ok()) return o.status();
  return Create(*o);
}

namespace client {

using proto::AllocHeader;
using proto::kAllocHeaderSize;

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Create(const ClientOptions& options) {
  granary::ConfigureMutexDeadlockDetection();
  absl::Status st = options.Validate();
  if (!st.ok()) return st;
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  std::vector<std::pair<std::string, std::string>> ucx;
  if (options.protocol == "tcp") ucx.emplace_back("TLS", "tcp");
  if (!options.device_name.empty()) ucx.emplace_back("NET_DEVICES", options.device_name);
  auto ctx = transport::Context::Create("granary_client", ucx);
  if (!ctx.ok()) return ctx.status();
  c->ctx_ = std::move(*ctx);
  auto worker = transport::Worker::Create(c->ctx_.get(), "client", &c->metrics_);
  if (!worker.ok()) return worker.status();
  c->worker_ = std::move(*worker);
  c->rma_ = std::make_unique<transport::RmaEngine>(c->worker_.get());
  auto waddr = c->worker_->Address();
  if (!waddr.ok()) return waddr.status();
  c->worker_address_ = std::move(*waddr);
  c->push_name_ = absl::StrCat("client/", RandomId());
  c->pushed_reads_ = c->metrics_.Counter(
      "granary_client_pushed_reads_total",
      "Values a node wrote into a registered buffer for a read over tcp (Push)");
  // Connect now so that a wrong address or tenant fails here, not at the first Put.
  auto m = c->Master();
  if (!m.ok()) return m.status();
  c->heartbeat_ = std::thread([raw = c.get()] { raw->HeartbeatLoop(); });
  return c;
}

ClientImpl::~ClientImpl() {
  {
    granary::MutexLock lock(&hb_mu_);
    stopping_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  {
    granary::MutexLock lock(&master_mu_);
    master_.reset();
  }
  {
    granary::MutexLock lock(&nodes_mu_);
    node_clients_.clear();
  }
  rma_.reset();
  {
    granary::MutexLock lock(&reg_mu_);
    registered_.clear();
  }
  worker_.reset();
  ctx_.reset();
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> ClientImpl::Master() {
  granary::MutexLock lock(&master_mu_);
  if (master_ && !master_->broken()) return master_;
  master_.reset();
  auto rc = transport::RpcClient::Create(worker_.get(), options_.master_server_address);
  if (!rc.ok()) return rc.status();
  std::shared_ptr<transport::RpcClient> m = std::move(*rc);
  proto::HelloRequest hello;
  hello.role = proto::Role::kClient;
  hello.client_id = RandomId();
  hello.tenant_id = options_.tenant_id;
  hello.token = options_.tenant_token;
  auto rep = m->Invoke<proto::HelloRequest, proto::HelloReply>(
      proto::MsgType::kHello, hello, absl::Milliseconds(options_.rpc_timeout_ms));
  if (!rep.ok()) {
    if (absl::IsUnavailable(rep.status()) || absl::IsDeadlineExceeded(rep.status())) {
      return absl::UnavailableError(absl::StrCat("cannot reach the master at ",
                                                 options_.master_server_address, ": ",
                                                 rep.status().message()));
    }
    return rep.status();
  }
  heartbeat_ms_ = std::max<uint32_t>(rep->heartbeat_interval_ms, 50);
  if (master_id_ != rep->master_id) {
    // A different master (a restart or failover): segment descriptors may have changed.
    master_id_ = rep->master_id;
    granary::MutexLock seg_lock(&seg_mu_);
    segments_.clear();
  }
  master_ = m;
  return m;
}

void ClientImpl::HeartbeatLoop() {
  while (true) {
    uint32_t interval;
    std::shared_ptr<transport::RpcClient> m;
    {
      granary::MutexLock lock(&master_mu_);
      interval = heartbeat_ms_;
      m = master_;
    }
    {
      granary::MutexLock lock(&hb_mu_);
      if (hb_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(interval))) {
        return;
      }
    }
    if (m && !m->broken()) {
      m->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kHeartbeat), 0,
                                      proto::HeartbeatRequest{}),
                   [](absl::StatusOr<std::string>) {});
    }
  }
}

absl::Status ClientImpl::RefreshSegments() {
  auto rep = Call<proto::SegmentsRequest, proto::SegmentsReply>(proto::MsgType::kSegments,
                                                                proto::SegmentsRequest{});
  if (!rep.ok()) return rep.status();
  granary::MutexLock lock(&seg_mu_);
  segments_.clear();
  for (auto& s : rep->segments) {
    auto r = std::make_shared<transport::RemoteSegment>();
    r->segment_id = s.segment_id;
    r->node_address = s.node_address;
    r->rkey = std::move(s.rkey);
    r->worker_address = std::move(s.worker_address);
    r->base = s.base;
    r->size = s.size;
    transport::SetHostInfo(r.get(), s.host_id);
    segments_[s.segment_id] = std::move(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> ClientImpl::SegmentFor(
    uint64_t id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      granary::MutexLock lock(&seg_mu_);
      auto it = segments_.find(id);
      if (it != segments_.end()) return it->second;
    }
    if (attempt == 0) {
      absl::Status st = RefreshSegments();
      if (!st.ok()) return st;
    }
  }
  return absl::UnavailableError(absl::StrCat("segment ", id, " is no longer mounted"));
}

const ClientImpl::Registration* ClientImpl::RegistrationHolding(const void* p, size_t n) {
  auto it = registered_.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == registered_.begin()) return nullptr;
  --it;
  return it->second.region->Contains(p, n) ? &it->second : nullptr;
}

ucp_mem_h ClientImpl::MemhFor(const void* p, size_t n) {
  granary::MutexLock lock(&reg_mu_);
  const Registration* r = RegistrationHolding(p, n);
  return r != nullptr ? r->region->memh() : nullptr;
}

uint64_t ClientImpl::RegistrationIdFor(const void* p, size_t n) {
  granary::MutexLock lock(&reg_mu_);
  const Registration* r = RegistrationHolding(p, n);
  return r != nullptr ? r->id : 0;
}

std::optional<proto::SegmentInfo> ClientImpl::PushTargetFor(const void* p, size_t n) {
  granary::MutexLock lock(&reg_mu_);
  const Registration* r = RegistrationHolding(p, n);
  if (r == nullptr) return std::nullopt;
  proto::SegmentInfo dest;
  dest.segment_id = r->id;
  dest.node_address = push_name_;
  dest.base = reinterpret_cast<uint64_t>(r->region->addr());
  dest.size = r->region->length();
  dest.rkey = r->rkey;
  dest.worker_address = worker_address_;
  dest.host_id = transport::LocalHostId();
  return dest;
}

absl::Status ClientImpl::Transfer(std::vector<transport::RmaOp> ops) {
  rma_->CopyMapped(&ops);  // same-host shared memory: plain copies, here
  if (ops.empty()) return absl::OkStatus();
  std::vector<std::string> nodes;
  for (const auto& op : ops) nodes.push_back(op.segment->node_address);
  auto p = std::make_shared<std::promise<absl::Status>>();
  auto f = p->get_future();
  rma_->Execute(std::move(ops), [p](absl::Status st) { p->set_value(std::move(st)); });
  if (f.wait_for(std::chrono::milliseconds(options_.transfer_timeout_ms)) !=
      std::future_status::ready) {
    // Cancel by closing the endpoints (the ops then complete with an error); the buffers must
    // not be released while UCX may still write into them, so wait for that.
    for (const auto& n : nodes) rma_->ForgetNode(n);
    // Closing the endpoints completes their requests with an error, except a request queued on
    // a same-host endpoint whose peer died before wireup, which UCX never completes. Such a
    // request never moves bytes (the peer is gone), so give up on it after a bounded wait.
    if (f.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      LOG_ERROR << "abandoning a transfer to " << nodes.front()
                << " that UCX did not cancel (dead same-host peer)";
    }
    return absl::DeadlineExceededError(
        absl::StrCat("transfer did not finish within ", options_.transfer_timeout_ms, " ms"));
  }
  absl::Status st = f.get();
  if (!st.ok()) {
    for (const auto& n : nodes) rma_->ForgetNode(n);
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Put

absl::StatusOr<proto::PutStartReply> ClientImpl::PutStart(const std::vector<std::string>& keys,
                                                          const std::vector<uint64_t>& sizes,
                                                          uint32_t flags) {
  proto::PutStartRequest req;
  req.flags = flags;
  req.replica_num = static_cast<uint8_t>(options_.replica_num);
  req.entries.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) req.entries.push_back({keys[i], sizes[i]});
  auto rep = Call<proto::PutStartRequest, proto::PutStartReply>(proto::MsgType::kPutStart, req);
  if (rep.ok() && rep->results.size() != keys.size()) {
    return absl::InternalError("master answered PutStart with a different number of results");
  }
  return rep;
}

std::vector<absl::Status> ClientImpl::PutImpl(const std::vector<std::string>& keys,
                                              const std::vector<const void*>& data,
                                              const std::vector<size_t>& sizes, uint32_t flags) {
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  if (data.size() != n || sizes.size() != n) {
    out.assign(n, absl::InvalidArgumentError("keys, buffers and sizes differ in length"));
    return out;
  }
  if (n == 0) return out;
  if (n > proto::kMaxBatch) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat("batch of ", n, " keys exceeds the limit ", proto::kMaxBatch)));
    return out;
  }
  std::vector<uint64_t> sz(sizes.begin(), sizes.end());
  auto started = PutStart(keys, sz, flags);
  if (!started.ok()) {
    out.assign(n, started.status());
    return out;
  }
  std::vector<AllocHeader> headers(n);
  std::vector<transport::RmaOp> ops;
  ops.reserve(n * 2);
  proto::KeyGenRequest commit;
  for (size_t i = 0; i < n; ++i) {
    const auto& res = started->results[i];
    out[i] = res.status.ToStatus();
    if (!out[i].ok()) continue;
    AllocHeader& h = headers[i];
    h.generation = res.generation;
    h.key_hash = HashBytes(keys[i]);
    h.value_length = sizes[i];
    ucp_mem_h memh = MemhFor(data[i], sizes[i]);
    for (const auto& r : res.replicas) {
      auto seg = SegmentFor(r.segment_id);
      if (!seg.ok()) {
        out[i] = seg.status();
        break;
      }
      transport::RmaOp value;
      value.is_put = true;
      value.local = const_cast<void*>(data[i]);
      value.length = sizes[i];
      value.memh = memh;
      value.remote_addr = r.address + kAllocHeaderSize;
      value.segment = *seg;
      ops.push_back(value);
      transport::RmaOp hdr = value;
      hdr.local = &h;
      hdr.length = kAllocHeaderSize;
      hdr.memh = nullptr;
      hdr.remote_addr = r.address;
      ops.push_back(hdr);
    }
    commit.entries.push_back({keys[i], res.generation});
  }
  absl::Status st = Transfer(std::move(ops));
  if (!st.ok()) {
    // Give the space back at once rather than waiting for the deadline.
    (void)Call<proto::KeyGenRequest, proto::BatchStatusReply>(proto::MsgType::kPutRevoke, commit);
    for (size_t i = 0; i < n; ++i) {
      if (out[i].ok()) out[i] = st;
    }
    return out;
  }
  if (commit.entries.empty()) return out;
  auto ended = Call<proto::KeyGenRequest, proto::BatchStatusReply>(proto::MsgType::kPutEnd, commit);
  size_t j = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!out[i].ok()) continue;
    if (!ended.ok()) {
      out[i] = ended.status();
    } else if (j < ended->results.size()) {
      out[i] = ended->results[j].ToStatus();
    }
    ++j;
  }
  return out;
}

absl::Status ClientImpl::Put(absl::string_view key, absl::string_view value) {
  return PutImpl({std::string(key)}, {value.data()}, {value.size()})[0];
}

absl::Status ClientImpl::PutFrom(absl::string_view key, const void* data, size_t size) {
  return PutImpl({std::string(key)}, {data}, {size})[0];
}

std::vector<absl::Status> ClientImpl::BatchPut(const std::vector<std::string>& keys,
                                               const std::vector<absl::string_view>& values) {
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  for (const auto& v : values) {
    data.push_back(v.data());
    sizes.push_back(v.size());
  }
  return PutImpl(keys, data, sizes);
}

std::vector<absl::Status> ClientImpl::BatchPutWith(const std::vector<std::string>& keys,
                                                   const std::vector<absl::string_view>& values,
                                                   const PutOptions& options) {
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  for (const auto& v : values) {
    data.push_back(v.data());
    sizes.push_back(v.size());
  }
  uint32_t flags = (options.soft_pin ? proto::kPutFlagSoftPin : 0u) |
                   (options.hard_pin ? proto::kPutFlagHardPin : 0u);
  return PutImpl(keys, data, sizes, flags);
}

absl::StatusOr<PrefixLookup> ClientImpl::LookupPrefix(absl::string_view model,
                                                      absl::string_view hash_scheme,
                                                      const std::optional<std::string>& adapter_id,
                                                      const std::vector<std::string>& prefix_hashes,
                                                      bool lease) {
  proto::LookupPrefixRequest req;
  req.lease = lease;
  for (const auto& h : prefix_hashes) {
    KvKey k{std::string(model), std::string(hash_scheme), adapter_id, h};
    if (absl::Status st = ValidateKvKey(k); !st.ok()) return st;
    req.keys.push_back(EncodeKvKey(k));
  }
  auto rep = Call<proto::LookupPrefixRequest, proto::LookupPrefixReply>(
      proto::MsgType::kLookupPrefix, req);
  if (!rep.ok()) return rep.status();
  PrefixLookup out;
  out.present = rep->present;
  out.lease_ms = rep->lease_ms;
  for (size_t i = 0; i < rep->hints.size() && i < req.keys.size(); ++i) {
    out.blocks.push_back({req.keys[i], rep->hints[i].size, rep->hints[i].node_address});
  }
  return out;
}

std::vector<absl::Status> ClientImpl::BatchPutFrom(const std::vector<std::string>& keys,
                                                   const std::vector<const void*>& buffers,
                                                   const std::vector<size_t>& sizes) {
  return PutImpl(keys, buffers, sizes);
}

// ---------------------------------------------------------------------------------------------
// Get

std::vector<absl::StatusOr<size_t>> ClientImpl::GetImpl(const std::vector<std::string>& keys,
                                                        const DestFn& dest) {
  const size_t n = keys.size();
  std::vector<absl::StatusOr<size_t>> out(n, absl::UnknownError("not attempted"));
  if (n > proto::kMaxBatch) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat("batch of ", n, " keys exceeds the limit ", proto::kMaxBatch)));
    return out;
  }
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  std::vector<AllocHeader> headers(n);
  for (int attempt = 0; attempt <= options_.get_retries && !pending.empty(); ++attempt) {
    proto::KeysRequest req;
    for (size_t i : pending) req.keys.push_back(keys[i]);
    auto rep = Call<proto::KeysRequest, proto::GetReply>(proto::MsgType::kGet, req);
    if (!rep.ok() || rep->results.size() != pending.size()) {
      absl::Status st =
          rep.ok() ? absl::InternalError("Get reply has the wrong size") : rep.status();
      for (size_t i : pending) out[i] = st;
      return out;
    }
    std::vector<transport::RmaOp> ops;
    std::vector<size_t> fetched;
    proto::KeyGenRequest release;
    std::vector<uint64_t> gens(n, 0), lens(n, 0);
    // Reads from nodes reached over tcp alone, into registered buffers: pushed by the node, one
    // Push per (node, buffer).
    struct PushGroup {
      std::string node;
      proto::PushRequest req;
      std::vector<size_t> keys;
    };
    std::vector<PushGroup> pushes;
    for (size_t j = 0; j < pending.size(); ++j) {
      size_t i = pending[j];
      auto& res = rep->results[j];
      absl::Status st = res.status.ToStatus();
      if (st.ok() && res.replicas.empty()) {
        st = absl::NotFoundError(absl::StrCat("key '", keys[i], "' has no live replica"));
      }
      if (!st.ok()) {
        out[i] = st;
        continue;
      }
      release.entries.push_back({keys[i], res.generation});
      auto where = dest(i, res.size);
      if (!where.ok()) {
        out[i] = where.status();
        continue;
      }
      // Rotate through the replicas on retries, so a dead node is skipped.
      const auto& r = res.replicas[(attempt + i) % res.replicas.size()];
      auto seg = SegmentFor(r.segment_id);
      if (!seg.ok()) {
        out[i] = seg.status();
        continue;
      }
      gens[i] = res.generation;
      lens[i] = res.size;
      fetched.push_back(i);
      // A retry reads one-sided: it works against any node, one that refused the Push too.
      // The buffer's full description (rkey, worker address) is built once per group.
      const uint64_t reg_id = attempt == 0 && rma_->TcpOnly((*seg)->node_address)
                                  ? RegistrationIdFor(*where, res.size)
                                  : 0;
      if (reg_id != 0) {
        auto g = std::find_if(pushes.begin(), pushes.end(), [&](const PushGroup& p) {
          return p.node == (*seg)->node_address && p.req.dest.segment_id == reg_id;
        });
        if (g == pushes.end()) {
          if (auto target = PushTargetFor(*where, res.size)) {  // nullopt if just unregistered
            g = pushes.insert(pushes.end(), PushGroup{(*seg)->node_address, {}, {}});
            g->req.dest = std::move(*target);
          }
        }
        if (g != pushes.end()) {
          g->req.entries.push_back(
              {r.address + kAllocHeaderSize, reinterpret_cast<uint64_t>(*where), res.size});
          g->req.headers.push_back(r.address);
          g->keys.push_back(i);
          continue;
        }
      }
      transport::RmaOp hdr;
      hdr.local = &headers[i];
      hdr.length = kAllocHeaderSize;
      hdr.remote_addr = r.address;
      hdr.segment = *seg;
      ops.push_back(hdr);
      transport::RmaOp value = hdr;
      value.local = *where;
      value.length = res.size;
      value.memh = MemhFor(*where, res.size);
      value.remote_addr = r.address + kAllocHeaderSize;
      ops.push_back(value);
    }
    // Each key's transfer status: its Push's, or the one-sided transfer's.
    std::vector<absl::Status> failed(n);
    std::vector<bool> pushed(n, false);
    for (PushGroup& g : pushes) {
      absl::Status pst = Push(g.node, g.req, g.keys, &headers);
      for (size_t i : g.keys) {
        failed[i] = pst;
        pushed[i] = true;
      }
    }
    absl::Status st = Transfer(std::move(ops));
    for (size_t i : fetched) {
      if (!pushed[i]) failed[i] = st;
    }
    ReleaseLeasesAsync(release);
    pending.clear();
    for (size_t i : fetched) {
      if (!failed[i].ok()) {
        out[i] = absl::UnavailableError(
            absl::StrCat("reading key '", keys[i], "' failed: ", failed[i].message()));
        pending.push_back(i);
        continue;
      }
      absl::Status hs = proto::CheckAllocHeader(headers[i], gens[i], HashBytes(keys[i]), lens[i]);
      if (!hs.ok()) {
        out[i] = hs;
        pending.push_back(i);
        continue;
      }
      out[i] = lens[i];
    }
  }
  return out;
}

absl::Status ClientImpl::Push(const std::string& node, const proto::PushRequest& req,
                              const std::vector<size_t>& keys, std::vector<AllocHeader>* headers) {
  auto rpc = NodeClient(node);
  if (!rpc.ok()) return rpc.status();
  auto rep = (*rpc)->Invoke<proto::PushRequest, proto::PushReply>(
      proto::MsgType::kPush, req, absl::Milliseconds(options_.transfer_timeout_ms));
  if (!rep.ok()) {
    return absl::Status(rep.status().code(),
                        absl::StrCat("node ", node, " push: ", rep.status().message()));
  }
  if (rep->headers.size() != keys.size() * kAllocHeaderSize) {
    return absl::InternalError(absl::StrCat("node ", node, " returned ", rep->headers.size(),
                                            " header bytes for ", keys.size(), " values"));
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    std::memcpy(&(*headers)[keys[j]], rep->headers.data() + j * kAllocHeaderSize, kAllocHeaderSize);
  }
  pushed_reads_->Inc(keys.size());
  return absl::OkStatus();
}

void ClientImpl::ReleaseLeasesAsync(const proto::KeyGenRequest& leases) {
  if (leases.entries.empty()) return;
  auto m = Master();
  if (!m.ok()) return;  // the session is gone, and its leases with it
  (*m)->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kGetEnd), 0, leases),
                  [](absl::StatusOr<std::string>) {});
}

absl::StatusOr<std::string> ClientImpl::ReadReplica(const std::string& key, uint64_t generation,
                                                    uint64_t size,
                                                    const proto::ReplicaDesc& replica) {
  auto seg = SegmentFor(replica.segment_id);
  if (!seg.ok()) return seg.status();
  AllocHeader header;
  std::string value(size, '\0');
  transport::RmaOp hdr;
  hdr.local = &header;
  hdr.length = kAllocHeaderSize;
  hdr.remote_addr = replica.address;
  hdr.segment = *seg;
  transport::RmaOp body = hdr;
  body.local = value.data();
  body.length = size;
  body.remote_addr = replica.address + kAllocHeaderSize;
  absl::Status st = Transfer({hdr, body});
  if (!st.ok()) return st;
  st = proto::CheckAllocHeader(header, generation, HashBytes(key), size);
  if (!st.ok()) return st;
  return value;
}

absl::StatusOr<std::string> ClientImpl::Get(absl::string_view key) {
  return std::move(BatchGet({std::string(key)})[0]);
}

std::vector<absl::StatusOr<std::string>> ClientImpl::BatchGet(
    const std::vector<std::string>& keys) {
  std::vector<std::string> values(keys.size());
  auto sizes = GetImpl(keys, [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
    values[i].resize(size);
    return values[i].data();
  });
  std::vector<absl::StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (sizes[i].ok()) {
      out.emplace_back(std::move(values[i]));
    } else {
      out.emplace_back(sizes[i].status());
    }
  }
  return out;
}

absl::StatusOr<size_t> ClientImpl::GetInto(absl::string_view key, void* buffer, size_t capacity) {
  return BatchGetInto({std::string(key)}, {buffer}, {capacity})[0];
}

std::vector<absl::StatusOr<size_t>> ClientImpl::BatchGetInto(
    const std::vector<std::string>& keys, const std::vector<void*>& buffers,
    const std::vector<size_t>& capacities) {
  if (buffers.size() != keys.size() || capacities.size() != keys.size()) {
    return std::vector<absl::StatusOr<size_t>>(
        keys.size(), absl::InvalidArgumentError("keys, buffers and capacities differ in length"));
  }
  return GetImpl(keys, [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
    if (size > capacities[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key '", keys[i], "' holds ", size, " bytes but the buffer has ", capacities[i]));
    }
    return buffers[i];
  });
}

// ---------------------------------------------------------------------------------------------
// Metadata

std::vector<absl::StatusOr<bool>> ClientImpl::BatchExist(const std::vector<std::string>& keys) {
  auto rep = Call<proto::KeysRequest, proto::BatchStatusReply>(proto::MsgType::kExist,
                                                               proto::KeysRequest{keys});
  std::vector<absl::StatusOr<bool>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!rep.ok()) {
      out.emplace_back(rep.status());
      continue;
    }
    absl::Status st = i < rep->results.size() ? rep->results[i].ToStatus()
                                              : absl::InternalError("short Exist reply");
    if (st.ok())
      out.emplace_back(true);
    else if (absl::IsNotFound(st))
      out.emplace_back(false);
    else
      out.emplace_back(st);
  }
  return out;
}

absl::StatusOr<bool> ClientImpl::Exist(absl::string_view key) {
  return BatchExist({std::string(key)})[0];
}

std::vector<absl::Status> ClientImpl::BatchRemove(const std::vector<std::string>& keys) {
  auto rep = Call<proto::KeysRequest, proto::BatchStatusReply>(proto::MsgType::kRemove,
                                                               proto::KeysRequest{keys});
  std::vector<absl::Status> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!rep.ok())
      out.push_back(rep.status());
    else if (i < rep->results.size())
      out.push_back(rep->results[i].ToStatus());
    else
      out.push_back(absl::InternalError("short Remove reply"));
  }
  return out;
}

absl::Status ClientImpl::Remove(absl::string_view key) {
  return BatchRemove({std::string(key)})[0];
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> ClientImpl::NodeClient(
    const std::string& address) {
  granary::MutexLock lock(&nodes_mu_);
  auto it = node_clients_.find(address);
  if (it != node_clients_.end() && !it->second->broken()) return it->second;
  auto rc = transport::RpcClient::Create(worker_.get(), address);
  if (!rc.ok()) return rc.status();
  std::shared_ptr<transport::RpcClient> c = std::move(*rc);
  node_clients_[address] = c;
  return c;
}

absl::Status ClientImpl::CopyOrMove(absl::string_view key, absl::string_view node, bool move) {
  proto::CopyStartRequest req;
  req.entries.push_back({std::string(key), std::string(node)});
  auto rep = Call<proto::CopyStartRequest, proto::CopyStartReply>(
      move ? proto::MsgType::kMoveStart : proto::MsgType::kCopyStart, req);
  if (!rep.ok()) return rep.status();
  if (rep->results.size() != 1) return absl::InternalError("CopyStart reply has the wrong size");
  const proto::CopyStartResult& res = rep->results[0];
  if (absl::Status st = res.status.ToStatus(); !st.ok()) return st;
  proto::CopyEndRequest end;
  end.entries.push_back({std::string(key), res.generation, res.dest.segment_id});
  auto revoke = [&](const absl::Status& why) {
    (void)Call<proto::CopyEndRequest, proto::BatchStatusReply>(
        move ? proto::MsgType::kMoveRevoke : proto::MsgType::kCopyRevoke, end);
    return why;
  };
  auto src = SegmentFor(res.source.segment_id);
  if (!src.ok()) return revoke(src.status());
  proto::FetchRequest fetch;
  fetch.source.segment_id = (*src)->segment_id;
  fetch.source.node_address = (*src)->node_address;
  fetch.source.rkey = (*src)->rkey;
  fetch.source.worker_address = (*src)->worker_address;
  fetch.source.host_id = (*src)->host_id;
  fetch.source_address = res.source.address;
  fetch.dest_address = res.dest.address;
  fetch.length = std::min(res.source.length, res.dest.length);
  auto node_rpc = NodeClient(res.dest_node_address);
  if (!node_rpc.ok()) return revoke(node_rpc.status());
  auto fetched = (*node_rpc)->Invoke<proto::FetchRequest, proto::StatusReply>(
      proto::MsgType::kFetch, fetch, absl::Milliseconds(options_.transfer_timeout_ms));
  if (!fetched.ok()) {
    return revoke(
        absl::Status(fetched.status().code(),
                     absl::StrCat("node ", res.dest_node_address,
                                  " could not fetch the replica: ", fetched.status().message())));
  }
  auto ended = Call<proto::CopyEndRequest, proto::BatchStatusReply>(
      move ? proto::MsgType::kMoveEnd : proto::MsgType::kCopyEnd, end);
  if (!ended.ok()) return ended.status();
  return ended->results.empty() ? absl::InternalError("empty CopyEnd reply")
                                : ended->results[0].ToStatus();
}

absl::Status ClientImpl::RegisterBuffer(void* data, size_t size) {
  auto r = transport::MemoryRegion::Create(ctx_.get(), data, size);
  if (!r.ok()) return r.status();
  granary::MutexLock lock(&reg_mu_);
  auto key = reinterpret_cast<uintptr_t>(data);
  if (registered_.contains(key)) {
    return absl::AlreadyExistsError(
        absl::StrCat("buffer at 0x", absl::Hex(key), " is already registered"));
  }
  auto rkey = (*r)->PackRkey();
  if (!rkey.ok()) return rkey.status();
  registered_[key] = Registration{std::move(*r), next_registration_++, std::move(*rkey)};
  return absl::OkStatus();
}

absl::Status ClientImpl::UnregisterBuffer(void* data) {
  granary::MutexLock lock(&reg_mu_);
  auto key = reinterpret_cast<uintptr_t>(data);
  if (registered_.erase(key) == 0) {
    return absl::NotFoundError(absl::StrCat("buffer at 0x", absl::Hex(key), " is not registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ListResult> ClientImpl::List(absl::string_view prefix, size_t limit,
                                            absl::string_view start_after) {
  proto::ListRequest req;
  req.prefix = std::string(prefix);
  req.start_after = std::string(start_after);
  req.limit = static_cast<uint32_t>(std::min<size_t>(limit, proto::kMaxListLimit));
  auto rep = Call<proto::ListRequest, proto::ListReply>(proto::MsgType::kList, req);
  if (!rep.ok()) return rep.status();
  ListResult out;
  out.more = rep->more;
  for (auto& o : rep->objects) {
    ObjectInfo info;
    info.key = std::move(o.key);
    info.size = o.size;
    info.generation = o.generation;
    info.complete = o.state == proto::ObjectState::kComplete;
    info.replicas = o.replica_count;
    info.age_ms = o.age_ms;
    out.objects.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<ObjectInfo> ClientImpl::Stat(absl::string_view key) {
  // The key itself sorts first among the keys it prefixes.
  auto r = List(key, 1, "");
  if (!r.ok()) return r.status();
  if (r->objects.empty() || r->objects[0].key != key) {
    return absl::NotFoundError(absl::StrCat("key '", key, "' not found"));
  }
  return r->objects[0];
}

absl::StatusOr<std::vector<SegmentInfo>> ClientImpl::Segments() {
  auto rep = Call<proto::SegmentsRequest, proto::SegmentsReply>(proto::MsgType::kSegments,
                                                                proto::SegmentsRequest{});
  if (!rep.ok()) return rep.status();
  std::vector<SegmentInfo> out;
  for (const auto& s : rep->segments) {
    SegmentInfo i;
    i.segment_id = s.segment_id;
    i.name = s.name;
    i.node_id = s.node_id;
    i.node_address = s.node_address;
    i.tier = s.tier == proto::Tier::kGpu ? "gpu" : "host";
    i.pool = s.pool;
    i.size = s.size;
    i.used = s.used;
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace client
}  // namespace granary
