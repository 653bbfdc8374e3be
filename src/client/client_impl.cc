#include "client/client_impl.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/device_check.h"
#include "client/inline_io.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/quote.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "transport/topology.h"

namespace granary {

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  GRANARY_ASSIGN_OR_RETURN(auto c, client::ClientImpl::Create(options));
  return std::unique_ptr<Client>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Client>> Client::CreateFromEnvironment() {
  GRANARY_ASSIGN_OR_RETURN(ClientOptions o, ClientOptions::FromEnvironment());
  return Create(o);
}

absl::StatusOr<StorageTier> ParseStorageTier(absl::string_view text) {
  absl::StatusOr<TierPreference> t = ParseTierPreference(text);
  if (!t.ok()) return t.status();
  switch (*t) {
    case TierPreference::kGpu:
      return StorageTier::kGpu;
    case TierPreference::kAny:
      return StorageTier::kAny;
    case TierPreference::kHost:
      break;
  }
  return StorageTier::kHost;
}

namespace client {

using proto::AllocHeader;
using proto::kAllocHeaderSize;

namespace {

// PutOptions::tier as the master's preference (nullopt: the tenant's default_tier).
std::optional<TierPreference> TierPreferenceOf(StorageTier tier) {
  switch (tier) {
    case StorageTier::kHost:
      return TierPreference::kHost;
    case StorageTier::kGpu:
      return TierPreference::kGpu;
    case StorageTier::kAny:
      return TierPreference::kAny;
    case StorageTier::kTenantDefault:
      break;
  }
  return std::nullopt;
}

}  // namespace

uint32_t PutFlags(const PutOptions& options) {
  return (options.soft_pin ? proto::kPutFlagSoftPin : 0u) |
         (options.hard_pin ? proto::kPutFlagHardPin : 0u) |
         proto::PutTierFlags(TierPreferenceOf(options.tier));
}

std::optional<bool> PreferGpu(StorageTier tier) {
  switch (tier) {
    case StorageTier::kHost:
      return false;
    case StorageTier::kGpu:
      return true;
    case StorageTier::kAny:
    case StorageTier::kTenantDefault:
      break;
  }
  return std::nullopt;
}

// The planners' view of this client, for one batch: lookups pin registrations into pins_,
// which the batch drops when it ends (after its transfers).
class ClientImpl::Inputs : public PlanInputs {
 public:
  explicit Inputs(ClientImpl* c) : c_(c), pins_(c->registrations_.get()) {}
  absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> Segment(uint64_t id) override {
    return c_->session_->SegmentFor(id);
  }
  bool TcpOnly(const std::string& node_address) override { return c_->rma_->TcpOnly(node_address); }
  bool MessagesOnly(const transport::RemoteSegment& segment) override {
    return c_->messages_between_hosts_ && !segment.same_host;
  }
  RegisteredRange Registered(const void* p, size_t n) override {
    return c_->registrations_->Lookup(p, n, &pins_);
  }
  proto::SegmentInfo PushTarget(const RegisteredRange& range) override {
    return c_->registrations_->PushTarget(range);
  }
  // Once the batch's transfers are done (the destructor does it too).
  void ReleasePins() { pins_.Release(); }

 private:
  ClientImpl* const c_;
  Registrations::Pins pins_;
};

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Create(const ClientOptions& options) {
  GRANARY_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  ScopedLogRoute route(&c->log_route_);
  GRANARY_LOG_DEBUG << "client of tenant '" << options.tenant_id
                    << "': connecting to the master at " << options.master_server_address;
  std::vector<std::pair<std::string, std::string>> ucx;
  if (options.protocol == "tcp") ucx.emplace_back("TLS", "tcp");
  GRANARY_ASSIGN_OR_RETURN(const transport::Topology topo, transport::Topology::Read());
  GRANARY_ASSIGN_OR_RETURN(
      const transport::NetDeviceChoice nic,
      transport::ChooseNetDevice(topo, options.device_name, options.gpu_device));
  if (!nic.device.empty()) ucx.emplace_back("NET_DEVICES", nic.device);
  GRANARY_ASSIGN_OR_RETURN(c->ctx_, transport::Context::Create("granary_client", ucx));
  transport::LogNetDeviceChoice(nic, *c->ctx_, &c->metrics_, "granary_client_net_device");
  GRANARY_ASSIGN_OR_RETURN(c->worker_,
                           transport::Worker::Create(c->ctx_.get(), "client", &c->metrics_,
                                                     /*caller_drive=*/true));
  // The progress thread logs through this client's route for as long as it runs.
  c->worker_->Post([route = &c->log_route_] { SetThreadLogRoute(route); });
  c->rma_ = std::make_unique<transport::RmaEngine>(c->worker_.get());
  if (options.copy_threads > 0) {
    c->copy_pool_ = std::make_unique<WorkPool>(options.copy_threads);
    c->rma_->set_copy_pool(
        c->copy_pool_.get(),
        c->metrics_.Counter("granary_client_shared_copy_batches_total",
                            "Batches whose same-host copies the calling thread shared with the "
                            "client's copy threads (client option copy_threads)"));
  }
  c->gpu_ = std::make_unique<GpuSegments>(&c->metrics_);
  uint64_t pin_cap = DeviceTransfers::kDefaultPinCap;
  if (const char* cap = std::getenv("GRANARY_GPU_PIN_MAX_BYTES"); cap != nullptr && *cap != 0) {
    absl::StatusOr<uint64_t> v = ParseSize(cap);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GRANARY_GPU_PIN_MAX_BYTES='", cap, "': ", v.status().message()));
    }
    pin_cap = *v;
  }
  c->device_ = std::make_unique<DeviceTransfers>(&c->metrics_, c->rma_.get(), pin_cap);
  c->rma_->set_unmap_hook(
      [d = c->device_.get()](void* local, uint64_t size) { d->Unmapped(local, size); });
  c->ipc_transfers_ = c->metrics_.Counter(
      "granary_client_gpu_transfers_total",
      "Values moved to or from this client's device buffers, by path (ipc, host_segment, "
      "staging)",
      {{"path", "ipc"}});
  c->bounce_transfers_ = c->metrics_.Counter(
      "granary_client_gpu_transfers_total",
      "Values moved to or from this client's device buffers, by path (ipc, host_segment, "
      "staging)",
      {{"path", "bounce"}});
  if (c->ctx_->SupportsCudaMemory()) {
    // Where UCX handles CUDA memory: device buffers and GPU segments this process cannot
    // map move through UCX itself, instead of staging and the node bounce.
    c->ucx_transfers_ = c->metrics_.Counter(
        "granary_client_gpu_transfers_total",
        "Values moved to or from this client's device buffers, by path (ipc, host_segment, "
        "staging)",
        {{"path", "ucx"}});
    c->rma_->set_device_memory(true);
    c->device_->set_direct_ucx(c->ucx_transfers_);
    GRANARY_LOG_INFO
        << "this UCX supports CUDA memory: device buffers, and GPU segments this process "
           "cannot map, move through UCX";
  }
  GRANARY_ASSIGN_OR_RETURN(std::string worker_address, c->worker_->Address());
  c->registrations_ = std::make_unique<Registrations>(
      c->ctx_.get(), absl::StrCat(proto::kClientPushPrefix, RandomId()), std::move(worker_address));
  c->bounce_ = std::make_unique<GpuBounce>(&c->metrics_, c->registrations_.get());
  c->node_timeouts_ = c->metrics_.Counter(
      "granary_client_node_transfer_timeouts_total",
      "Transfers to a node that did not finish within transfer_timeout_ms (the node then backs "
      "off: transfers to it fail at once for a jittered exponential wait)");
  c->node_refusals_ = c->metrics_.Counter(
      "granary_client_node_backoff_refusals_total",
      "Transfers refused at once because their node is in its back-off after a timeout");
  c->rma_->set_refusal_counter(c->node_refusals_);
  // Over tcp alone (no RDMA transport opened), values to other hosts move in messages: no
  // endpoint to another host's worker address is made (ClientOptions::tcp_data_between_hosts).
  const std::vector<std::string> nets = c->ctx_->NetResources();
  c->messages_between_hosts_ = options.tcp_data_between_hosts == "messages" &&
                               std::all_of(nets.begin(), nets.end(), [](const std::string& r) {
                                 return absl::StartsWith(r, "tcp/") ||
                                        absl::StartsWith(r, "cuda") ||
                                        absl::StartsWith(r, "rocm") || absl::StartsWith(r, "gdr");
                               });
  if (c->messages_between_hosts_) {
    GRANARY_LOG_DEBUG
        << "UCX opened no network transport but tcp: values to nodes on other hosts move "
           "in Read and Write messages";
  }
  for (int op = 0; op < 2; ++op) {
    c->inline_values_[op] = c->metrics_.Counter(
        "granary_client_inline_values_total",
        "Values read or written inline in one message per node (Read and Write, nodes over tcp)",
        {{"op", op == 0 ? "read" : "write"}});
  }
  c->pushed_reads_ = c->metrics_.Counter(
      "granary_client_pushed_reads_total",
      "Values a node wrote into a registered buffer for a read over tcp (Push)");
  GRANARY_ASSIGN_OR_RETURN(
      c->session_,
      MasterSession::Create(
          options, c->worker_.get(), &c->log_route_,
          c->metrics_.Counter("granary_client_master_connect_failures_total",
                              "Failed reconnects to the master (then calls fail fast until a "
                              "jittered exponential back-off has passed)")));
  // The session is destroyed before gpu_, so the listener never outlives it.
  c->session_->SetSegmentsListener(
      [gpu = c->gpu_.get()](const absl::flat_hash_set<uint64_t>& mounted) {
        gpu->Retain(mounted);
      });
  return c;
}

ClientImpl::~ClientImpl() {
  ScopedLogRoute route(&log_route_);  // closing connections may log
  session_.reset();
  {
    granary::MutexLock lock(&nodes_mu_);
    node_clients_.clear();
  }
  rma_.reset();
  device_.reset();
  gpu_.reset();
  bounce_.reset();  // unregisters its slots
  registrations_.reset();
  worker_.reset();
  ctx_.reset();
}

absl::Status ClientImpl::Transfer(std::vector<transport::RmaOp> ops, int64_t timeout_ms,
                                  EngineOrder* order) {
  if (timeout_ms <= 0) timeout_ms = options_.transfer_timeout_ms;
  // GPU segments: device copies through the backend, never a CPU copy (to and from host and
  // device buffers alike), and never UCX unless it supports CUDA memory.
  std::vector<transport::RmaOp> direct;  // moved by a CUDA UCX, after the device transfers
  if (GpuSegments::AnyGpu(ops)) {
    std::vector<transport::RmaOp> bounced;
    size_t device_values = 0;
    for (const auto& op : ops) device_values += op.segment->gpu && op.device >= 0 && !op.header;
    GRANARY_RETURN_IF_ERROR(gpu_->Run(&ops, &bounced, order));
    for (const auto& op : bounced) device_values -= op.device >= 0 && !op.header ? 1 : 0;
    ipc_transfers_->Inc(device_values);
    // A UCX that supports CUDA memory moves the segments that have an rkey (their node mapped
    // them with it) itself, one-sided, with the host ops below; never Debian's UCX.
    if (ucx_transfers_ != nullptr) {
      std::vector<transport::RmaOp> mapped = transport::TakeOps(
          &bounced, [](const transport::RmaOp& op) { return !op.segment->rkey.empty(); });
      size_t device_direct = 0;
      for (const auto& op : mapped) device_direct += op.device >= 0 && !op.header;
      ucx_transfers_->Inc(device_direct);
      direct = std::move(mapped);
    }
    // Segments this process cannot map: the node stages them (Push and Fetch).
    if (!bounced.empty()) {
      size_t device_bounced = 0;
      for (const auto& op : bounced) device_bounced += op.device >= 0 && !op.header;
      if (order != nullptr) GRANARY_RETURN_IF_ERROR(order->OnHost());  // copies synchronously
      GRANARY_RETURN_IF_ERROR(bounce_->Run(
          std::move(bounced), proto::NodeTransferTimeoutMs(timeout_ms), timeout_ms,
          [this](const std::string& node, const proto::PushRequest& req, GpuBounce::PushDone done) {
            PushAsync(node, req, std::move(done));
          },
          [this](const std::string& node, const proto::FetchRequest& req,
                 GpuBounce::FetchDone done) { FetchAsync(node, req, std::move(done)); }));
      bounce_transfers_->Inc(device_bounced);
    }
  }
  // This client's device buffers: from mapped node memory, or staged.
  if (DeviceTransfers::AnyDevice(ops)) {
    GRANARY_RETURN_IF_ERROR(device_->Run(
        &ops, timeout_ms,
        [this](std::vector<transport::RmaOp> staged, int64_t ms) {
          rma_->CopyMapped(&staged);  // none is mapped, or it would not be staged
          return staged.empty() ? absl::OkStatus() : Remote(std::move(staged), ms);
        },
        order));
  }
  rma_->CopyMapped(&ops);  // same-host shared memory: plain copies, here
  // A CUDA UCX reads device memory on a stream of its own: the host waits for the engine.
  if (order != nullptr && !direct.empty()) GRANARY_RETURN_IF_ERROR(order->OnHost());
  ops.insert(ops.end(), std::make_move_iterator(direct.begin()),
             std::make_move_iterator(direct.end()));
  if (ops.empty()) return absl::OkStatus();
  return Remote(std::move(ops), timeout_ms);
}

absl::Status ClientImpl::Remote(std::vector<transport::RmaOp> ops, int64_t timeout_ms) {
  std::vector<std::string> nodes;
  for (const auto& op : ops) nodes.push_back(op.segment->node_address);
  // Past the timeout: cancel by closing the endpoints, on the worker thread and waited for:
  // once closed, no transport of theirs moves another byte into or out of the buffers. Closing
  // completes most requests with an error at once, but UCX 1.13 never completes some: one
  // queued on a same-host endpoint whose peer died before wireup, and an RMA read over tcp from
  // a peer the network cut off (seen in the netns tests). Waiting longer would only delay the
  // fail-over to another replica, so give up on them after 100 ms. The nodes stay unreachable
  // for a back-off, so the next reads go to other replicas instead of connecting again. A
  // put's write window can cut the timeout short: that deadline is the put's, not the nodes'
  // fault, so they are not held off for it.
  const bool nodes_fault = timeout_ms >= options_.transfer_timeout_ms;
  absl::Status st = rma_->ExecuteWithin(
      std::move(ops), absl::Milliseconds(timeout_ms),
      [&] {
        if (nodes_fault) node_timeouts_->Inc();
        rma_->MarkUnreachable(nodes, nodes_fault);
      },
      absl::Milliseconds(100));
  if (absl::IsDeadlineExceeded(st)) {
    return absl::DeadlineExceededError(
        absl::StrCat("transfer did not finish within ", timeout_ms, " ms"));
  }
  if (!st.ok()) {
    for (const auto& n : nodes) rma_->ForgetNode(n);
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Put

absl::StatusOr<proto::PutStartReply> ClientImpl::PutStart(absl::Span<const std::string> keys,
                                                          absl::Span<const uint64_t> sizes,
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

std::vector<absl::Status> ClientImpl::PutImpl(absl::Span<const std::string> keys,
                                              absl::Span<const void* const> data,
                                              absl::Span<const size_t> sizes, uint32_t flags,
                                              const std::vector<int>* devices, EngineOrder* order) {
  ScopedLogRoute route(&log_route_);
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
  absl::StatusOr<PutGrant> grant = BeginPut(keys, sz, flags);
  if (!grant.ok()) {
    out.assign(n, grant.status());
    return out;
  }
  return FinishPut(keys, data, sizes, *grant, devices, order);
}

std::vector<absl::Status> ClientImpl::PutWaiting(absl::Span<const std::string> keys,
                                                 absl::Span<const void* const> data,
                                                 absl::Span<const size_t> sizes, uint32_t flags,
                                                 const DeviceWait& wait, EngineOrder* order) {
  if (data.size() != keys.size() || sizes.size() != keys.size()) {
    return PutImpl(keys, data, sizes, flags);  // refuses the whole batch
  }
  return WithBufferDevices<absl::Status>(
      keys, data, sizes,
      [&](absl::Span<const std::string> k, absl::Span<const void* const> b,
          absl::Span<const size_t> n, const std::vector<int>* devices) {
        if (order != nullptr || wait.empty()) return PutImpl(k, b, n, flags, devices, order);
        int device = -1;  // the event goes on the device of the first device buffer
        for (size_t i = 0; devices != nullptr && i < devices->size() && device < 0; ++i) {
          device = (*devices)[i];
        }
        absl::StatusOr<std::unique_ptr<EngineOrder>> made = EngineOrder::Create(wait, device);
        if (!made.ok()) return std::vector<absl::Status>(k.size(), made.status());
        return PutImpl(k, b, n, flags, devices, made->get());
      });
}

absl::StatusOr<ClientImpl::PutGrant> ClientImpl::BeginPut(absl::Span<const std::string> keys,
                                                          absl::Span<const uint64_t> sizes,
                                                          uint32_t flags) {
  PutGrant grant;
  grant.sent_us = MonotonicUs();  // the write window counts from here
  grant.epoch = session_->highest_epoch();
  GRANARY_ASSIGN_OR_RETURN(grant.reply, PutStart(keys, sizes, flags));
  return grant;
}

std::vector<absl::Status> ClientImpl::FinishPut(absl::Span<const std::string> keys,
                                                absl::Span<const void* const> data,
                                                absl::Span<const size_t> sizes,
                                                const PutGrant& grant,
                                                const std::vector<int>* devices,
                                                EngineOrder* order) {
  ScopedLogRoute route(&log_route_);
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  const int64_t sent_us = grant.sent_us;
  const int64_t epoch0 = grant.epoch;
  std::vector<AllocHeader> headers(n);
  Inputs inputs(this);
  PutPlan plan;
  PlanPut(keys, data, sizes, grant.reply, &inputs, &headers, &out, &plan, devices);
  if (!plan.revoke.entries.empty()) {
    (void)Call<proto::KeyGenRequest, proto::BatchStatusReply>(proto::MsgType::kPutRevoke,
                                                              plan.revoke);
  }
  proto::KeyGenRequest& commit = plan.commit;
  // The write window (MasterOptions::write_window_ms): a master that restarts or takes over keeps
  // space no node reported out of allocation for the window (plus a margin) only, so this client
  // must not write what it was granted past PutStart + window. Writes still running then are
  // cancelled, and the put fails with UNAVAILABLE (retry it).
  const int64_t window_ms = session_->write_window_ms();
  int64_t timeout_ms = options_.transfer_timeout_ms;
  absl::Status st;
  if (window_ms > 0 && !commit.entries.empty()) {
    const int64_t left_ms = (sent_us + window_ms * 1000 - MonotonicUs()) / 1000;
    if (left_ms <= 0) {
      st = absl::UnavailableError(absl::StrCat("the write window (", window_ms,
                                               " ms after PutStart) passed before the "
                                               "writes began: retry the put"));
    } else if (left_ms < timeout_ms) {
      timeout_ms = left_ms;
    }
  }
  // HA: a newer epoch seen since PutStart means the grant may be a deposed master's, whose
  // space the new leader may hand out again after its quarantine: write nothing.
  if (const int64_t epoch = session_->highest_epoch();
      st.ok() && !commit.entries.empty() && epoch0 != 0 && epoch != epoch0) {
    st = absl::UnavailableError(absl::StrCat("the master changed (epoch ", epoch0, " -> ", epoch,
                                             ") after PutStart: retry the put"));
  }
  // The stream contract (DeviceWait): host memory among the values is read by the CPU or UCX,
  // so the host waits for the engine first; device memory waits on the device, in Transfer.
  if (st.ok() && order != nullptr && !commit.entries.empty() &&
      (devices == nullptr ||
       std::any_of(devices->begin(), devices->end(), [](int d) { return d < 0; }))) {
    st = order->OnHost();
  }
  if (st.ok()) {
    // Small values to nodes over tcp travel in one Write per node, sent first; the rest
    // one-sided meanwhile.
    const int64_t start_us = MonotonicUs();
    InlineBatch writes(/*write=*/true, &plan.writes, inline_values_[1]);
    writes.Start(
        [this](const std::string& node, bool other_host) { return NodeClient(node, other_host); });
    if (!plan.ops.empty()) st = Transfer(std::move(plan.ops), timeout_ms, order);
    const int64_t left_ms = std::max<int64_t>(1, timeout_ms - (MonotonicUs() - start_us) / 1000);
    std::vector<absl::Status> wrote = writes.Wait(left_ms);
    for (size_t g = 0; g < wrote.size(); ++g) {
      if (absl::IsDeadlineExceeded(wrote[g])) {
        DropNodeClient(plan.writes[g].node,
                       /*back_off=*/timeout_ms >= options_.transfer_timeout_ms);
      }
      if (st.ok()) st = wrote[g];
    }
    if (absl::IsDeadlineExceeded(st) && timeout_ms < options_.transfer_timeout_ms) {
      st = absl::UnavailableError(absl::StrCat(
          "the writes did not finish within the write window (", window_ms,
          " ms after PutStart) and were cancelled: retry the put (", st.message(), ")"));
    }
  }
  inputs.ReleasePins();
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
  const std::string k(key);
  const void* data = value.data();
  const size_t size = value.size();
  return PutImpl(absl::MakeConstSpan(&k, 1), absl::MakeConstSpan(&data, 1),
                 absl::MakeConstSpan(&size, 1))[0];
}

std::vector<absl::Status> ClientImpl::BatchPut(absl::Span<const std::string> keys,
                                               absl::Span<const absl::string_view> values) {
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  for (const auto& v : values) {
    data.push_back(v.data());
    sizes.push_back(v.size());
  }
  return PutImpl(keys, data, sizes);
}

std::vector<absl::Status> ClientImpl::BatchPutWith(absl::Span<const std::string> keys,
                                                   absl::Span<const absl::string_view> values,
                                                   const PutOptions& options) {
  std::vector<const void*> data;
  std::vector<size_t> sizes;
  for (const auto& v : values) {
    data.push_back(v.data());
    sizes.push_back(v.size());
  }
  // Values may be views of device memory too (PutFrom's paths).
  return PutWaiting(keys, data, sizes, PutFlags(options), options.wait);
}

std::vector<absl::Status> ClientImpl::BatchPutFrom(absl::Span<const std::string> keys,
                                                   absl::Span<const void* const> buffers,
                                                   absl::Span<const size_t> sizes,
                                                   const PutOptions& options) {
  return PutWaiting(keys, buffers, sizes, PutFlags(options), options.wait);
}

// ---------------------------------------------------------------------------------------------
// Get

std::vector<absl::StatusOr<size_t>> ClientImpl::GetImpl(absl::Span<const std::string> keys,
                                                        const DestFn& dest,
                                                        const GetOptions& options,
                                                        const std::vector<int>* devices) {
  ScopedLogRoute route(&log_route_);
  const size_t n = keys.size();
  std::vector<absl::StatusOr<size_t>> out(n, absl::UnknownError("not attempted"));
  if (n > proto::kMaxBatch) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat("batch of ", n, " keys exceeds the limit ", proto::kMaxBatch)));
    return out;
  }
  if (options.lease_ms > GetOptions::kMaxLeaseMs) {
    out.assign(n, absl::InvalidArgumentError(absl::StrCat("GetOptions::lease_ms ", options.lease_ms,
                                                          " exceeds the limit ",
                                                          GetOptions::kMaxLeaseMs, " ms")));
    return out;
  }
  const std::optional<bool> prefer_gpu = PreferGpu(options.tier);
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  std::vector<AllocHeader> headers(n);
  for (int attempt = 0; attempt <= options_.get_retries && !pending.empty(); ++attempt) {
    proto::GetRequest req;
    req.lease_ms = options.lease_ms;
    for (size_t i : pending) req.keys.push_back(keys[i]);
    auto rep = Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, req);
    if (!rep.ok() || rep->results.size() != pending.size()) {
      absl::Status st =
          rep.ok() ? absl::InternalError("Get reply has the wrong size") : rep.status();
      for (size_t i : pending) out[i] = st;
      return out;
    }
    Inputs inputs(this);  // its pins last until the round's transfers are done
    GetPlan plan;
    PlanGet(attempt, keys, pending, *rep, dest, &inputs, &headers, &out, &plan, devices,
            prefer_gpu);
    RunGetRound(keys, &plan, &headers, &out, &pending);
  }
  return out;
}

void ClientImpl::RunGetRound(absl::Span<const std::string> keys, GetPlan* plan,
                             std::vector<AllocHeader>* headers,
                             std::vector<absl::StatusOr<size_t>>* out,
                             std::vector<size_t>* pending) {
  // Each key's transfer status: its Push's, or the one-sided transfer's.
  const size_t n = keys.size();
  std::vector<absl::Status> failed(n);
  std::vector<bool> pushed(n, false);  // read by a Read or a Push: failed[i] is its own
  const int64_t start_us = MonotonicUs();
  InlineBatch reads(/*write=*/false, &plan->reads, inline_values_[0]);
  reads.Start(
      [this](const std::string& node, bool other_host) { return NodeClient(node, other_host); });
  for (PushGroup& g : plan->pushes) {
    g.req.timeout_ms = proto::NodeTransferTimeoutMs(options_.transfer_timeout_ms);
    absl::Status pst = Push(g.node, g.req, g.keys, headers);
    for (size_t i : g.keys) {
      failed[i] = pst;
      pushed[i] = true;
    }
  }
  absl::Status st = plan->ops.empty() ? absl::OkStatus() : Transfer(std::move(plan->ops));
  for (size_t i : plan->fetched) {
    if (!pushed[i]) failed[i] = st;
  }
  const int64_t left_ms =
      std::max<int64_t>(1, options_.transfer_timeout_ms - (MonotonicUs() - start_us) / 1000);
  std::vector<absl::Status> read = reads.Wait(left_ms);
  for (size_t g = 0; g < read.size(); ++g) {
    if (absl::IsDeadlineExceeded(read[g])) DropNodeClient(plan->reads[g].node, /*back_off=*/true);
    for (size_t i : plan->reads[g].keys) {
      failed[i] = read[g];
      pushed[i] = true;
    }
  }
  ReleaseLeasesAsync(plan->release);
  pending->clear();
  for (size_t i : plan->fetched) {
    if (!failed[i].ok()) {
      (*out)[i] = absl::UnavailableError(
          absl::StrCat("reading key ", QuotedKey(keys[i]), " failed: ", failed[i].message()));
      pending->push_back(i);
      continue;
    }
    absl::Status hs =
        proto::CheckAllocHeader((*headers)[i], plan->gens[i], HashBytes(keys[i]), plan->lens[i]);
    if (!hs.ok()) {
      (*out)[i] = hs;
      pending->push_back(i);
      continue;
    }
    (*out)[i] = plan->lens[i];
  }
}

absl::StatusOr<std::string> ClientImpl::PushRpc(const std::string& node,
                                                const proto::PushRequest& req) {
  GRANARY_ASSIGN_OR_RETURN(auto rpc, NodeClient(node));
  auto rep = rpc->Invoke<proto::PushRequest, proto::PushReply>(
      proto::MsgType::kPush, req, absl::Milliseconds(options_.transfer_timeout_ms));
  if (!rep.ok()) {
    return absl::Status(rep.status().code(),
                        absl::StrCat("node ", node, " push: ", rep.status().message()));
  }
  return std::move(rep->headers);
}

void ClientImpl::PushAsync(const std::string& node, const proto::PushRequest& req,
                           std::function<void(absl::StatusOr<std::string>)> done) {
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc = NodeClient(node);
  if (!rpc.ok()) return done(rpc.status());
  (*rpc)->CallAsync(
      proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kPush), 0, req),
      [node, done = std::move(done)](absl::StatusOr<std::string> frame) {
        absl::StatusOr<proto::PushReply> rep =
            frame.ok() ? transport::RpcClient::ParseReply<proto::PushReply>(*frame)
                       : absl::StatusOr<proto::PushReply>(frame.status());
        if (!rep.ok()) {
          return done(absl::Status(rep.status().code(),
                                   absl::StrCat("node ", node, " push: ", rep.status().message())));
        }
        done(std::move(rep->headers));
      });
}

void ClientImpl::FetchAsync(const std::string& node, const proto::FetchRequest& req,
                            std::function<void(absl::Status)> done) {
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc = NodeClient(node);
  if (!rpc.ok()) return done(rpc.status());
  (*rpc)->CallAsync(
      proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kFetch), 0, req),
      [node, done = std::move(done)](absl::StatusOr<std::string> frame) {
        absl::Status st =
            frame.ok() ? transport::RpcClient::ParseReply<proto::StatusReply>(*frame).status()
                       : frame.status();
        if (!st.ok()) {
          return done(
              absl::Status(st.code(), absl::StrCat("node ", node, " fetch: ", st.message())));
        }
        done(absl::OkStatus());
      });
}

absl::Status ClientImpl::Push(const std::string& node, const proto::PushRequest& req,
                              absl::Span<const size_t> keys, std::vector<AllocHeader>* headers) {
  GRANARY_ASSIGN_OR_RETURN(std::string got, PushRpc(node, req));
  if (got.size() != keys.size() * kAllocHeaderSize) {
    return absl::InternalError(absl::StrCat("node ", node, " returned ", got.size(),
                                            " header bytes for ", keys.size(), " values"));
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    std::memcpy(&(*headers)[keys[j]], got.data() + j * kAllocHeaderSize, kAllocHeaderSize);
  }
  pushed_reads_->Inc(keys.size());
  return absl::OkStatus();
}

void ClientImpl::ReleaseLeasesAsync(const proto::KeyGenRequest& leases) {
  if (leases.entries.empty()) return;
  {
    // Sent from this thread when it can be, rather than by waking the progress thread.
    transport::Worker::DriveIntent intent(worker_.get());
    session_->Send(proto::MsgType::kGetEnd, leases);  // no session: its leases are gone with it
  }
  worker_->SendNow();
}

absl::StatusOr<std::string> ClientImpl::ReadReplica(const std::string& key, uint64_t generation,
                                                    uint64_t size,
                                                    const proto::ReplicaDesc& replica) {
  ScopedLogRoute route(&log_route_);
  GRANARY_ASSIGN_OR_RETURN(auto seg, session_->SegmentFor(replica.segment_id));
  AllocHeader header;
  std::string value(size, '\0');
  transport::RmaOp hdr;
  hdr.local = &header;
  hdr.length = kAllocHeaderSize;
  hdr.remote_addr = replica.address;
  hdr.segment = std::move(seg);
  hdr.header = true;
  transport::RmaOp body = hdr;
  body.header = false;
  body.local = value.data();
  body.length = size;
  body.remote_addr = replica.address + kAllocHeaderSize;
  GRANARY_RETURN_IF_ERROR(Transfer({hdr, body}));
  GRANARY_RETURN_IF_ERROR(proto::CheckAllocHeader(header, generation, HashBytes(key), size));
  return value;
}

absl::StatusOr<std::string> ClientImpl::Get(absl::string_view key) {
  const std::string k(key);
  return std::move(BatchGet(absl::MakeConstSpan(&k, 1), GetOptions{})[0]);
}

std::vector<absl::StatusOr<std::string>> ClientImpl::BatchGet(absl::Span<const std::string> keys,
                                                              const GetOptions& options) {
  std::vector<std::string> values(keys.size());
  auto sizes = GetImpl(
      keys,
      [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
        values[i].resize(size);
        return values[i].data();
      },
      options);
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

std::vector<absl::StatusOr<size_t>> ClientImpl::BatchGetInto(absl::Span<const std::string> keys,
                                                             absl::Span<void* const> buffers,
                                                             absl::Span<const size_t> capacities,
                                                             const GetOptions& options) {
  if (buffers.size() != keys.size() || capacities.size() != keys.size()) {
    return std::vector<absl::StatusOr<size_t>>(
        keys.size(), absl::InvalidArgumentError("keys, buffers and capacities differ in length"));
  }
  auto run = [this, &options](absl::Span<const std::string> k, absl::Span<void* const> b,
                              absl::Span<const size_t> cap, const std::vector<int>* devices) {
    return GetImpl(
        k,
        [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
          if (size > cap[i]) {
            return absl::FailedPreconditionError(absl::StrCat(
                "key ", QuotedKey(k[i]), " holds ", size, " bytes but the buffer has ", cap[i]));
          }
          return b[i];
        },
        options, devices);
  };
  return WithBufferDevices<absl::StatusOr<size_t>>(keys, buffers, capacities, run);
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> ClientImpl::NodeClient(
    const std::string& address, bool other_host) {
  granary::MutexLock lock(&nodes_mu_);
  auto it = node_clients_.find(address);
  if (it != node_clients_.end() && !it->second->broken()) return it->second;
  if (absl::Status held = node_holds_.Check(address); !held.ok()) {
    node_refusals_->Inc();
    return held;
  }
  // Connecting waits at most one transfer timeout; a node that let it run out (cut off, not
  // refusing) is held off like one whose transfers time out, so the next batches fail at once.
  const absl::Duration timeout = absl::Milliseconds(options_.transfer_timeout_ms);
  const absl::Time start = absl::Now();
  auto c = transport::RpcClient::Create(worker_.get(), address, /*try_shm=*/!other_host, timeout);
  if (!c.ok()) {
    if (absl::Now() - start >= timeout) {
      node_timeouts_->Inc();
      node_holds_.Hold(address);
    }
    return c.status();
  }
  std::shared_ptr<transport::RpcClient> shared = std::move(*c);
  node_clients_[address] = shared;
  return shared;
}

void ClientImpl::DropNodeClient(const std::string& address, bool back_off) {
  granary::MutexLock lock(&nodes_mu_);
  node_clients_.erase(address);
  if (!back_off) return;
  node_timeouts_->Inc();
  node_holds_.Hold(address);  // once: two groups of one batch, or two batches, count once
}

absl::Status ClientImpl::CopyOrMove(absl::string_view key, absl::string_view node, bool move) {
  ScopedLogRoute route(&log_route_);
  proto::CopyStartRequest req;
  req.entries.push_back({std::string(key), std::string(node)});
  GRANARY_ASSIGN_OR_RETURN(
      auto rep, (Call<proto::CopyStartRequest, proto::CopyStartReply>(
                    move ? proto::MsgType::kMoveStart : proto::MsgType::kCopyStart, req)));
  if (rep.results.size() != 1) return absl::InternalError("CopyStart reply has the wrong size");
  const proto::CopyStartResult& res = rep.results[0];
  GRANARY_RETURN_IF_ERROR(res.status.ToStatus());
  proto::CopyEndRequest end;
  end.entries.push_back({std::string(key), res.generation, res.dest.segment_id});
  auto revoke = [&](const absl::Status& why) {
    (void)Call<proto::CopyEndRequest, proto::BatchStatusReply>(
        move ? proto::MsgType::kMoveRevoke : proto::MsgType::kCopyRevoke, end);
    return why;
  };
  auto src = session_->SegmentFor(res.source.segment_id);
  if (!src.ok()) return revoke(src.status());
  if ((*src)->gpu) {
    // A GPU-tier source has no rkey: its node pushes [header | value] out of the segment
    // through its bounce (node/gpu_bounce.h) into the destination, a host segment of the
    // target node (registered with UCX), and answers once every byte is written.
    auto dst = session_->SegmentFor(res.dest.segment_id);
    if (!dst.ok()) return revoke(dst.status());
    proto::PushRequest push;
    push.dest = transport::SegmentInfoOf(**dst);
    push.dest.base = res.dest.address;  // the push may touch the new allocation only
    push.dest.size = res.dest.length;
    push.entries.push_back(
        {res.source.address, res.dest.address, std::min(res.source.length, res.dest.length)});
    push.timeout_ms = proto::NodeTransferTimeoutMs(options_.transfer_timeout_ms);
    if (absl::StatusOr<std::string> pushed = PushRpc((*src)->node_address, push); !pushed.ok()) {
      return revoke(
          absl::Status(pushed.status().code(),
                       absl::StrCat("node ", (*src)->node_address,
                                    " could not push the GPU-tier replica to node ",
                                    res.dest_node_address, ": ", pushed.status().message())));
    }
  } else {
    proto::FetchRequest fetch;
    fetch.source = transport::SegmentInfoOf(**src);
    fetch.source_address = res.source.address;
    fetch.dest_address = res.dest.address;
    fetch.length = std::min(res.source.length, res.dest.length);
    fetch.timeout_ms = proto::NodeTransferTimeoutMs(options_.transfer_timeout_ms);
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
  }
  GRANARY_ASSIGN_OR_RETURN(auto ended,
                           (Call<proto::CopyEndRequest, proto::BatchStatusReply>(
                               move ? proto::MsgType::kMoveEnd : proto::MsgType::kCopyEnd, end)));
  return ended.results.empty() ? absl::InternalError("empty CopyEnd reply")
                               : ended.results[0].ToStatus();
}

}  // namespace client
}  // namespace granary
