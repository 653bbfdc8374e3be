// ClientImpl (client_impl.h): Create and teardown, the puts (PutStart, BeginPut and FinishPut:
// the master grants, TransferRouter writes, PutEnd commits or PutRevoke gives back) and
// Copy/Move. The gets are client_get.cc, the scatter-list forms client_regions.cc, the
// metadata calls client_metadata.cc.
#include "client/client_impl.h"

#include <algorithm>
#include <cstdlib>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/device_check.h"
#include "common/clock.h"
#include "common/log.h"
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
  absl::StatusOr<common::TierPreference> t = common::ParseTierPreference(text);
  if (!t.ok()) return t.status();
  switch (*t) {
    case common::TierPreference::kGpu:
      return StorageTier::kGpu;
    case common::TierPreference::kAny:
      return StorageTier::kAny;
    case common::TierPreference::kDisk:
      return StorageTier::kDisk;
    case common::TierPreference::kHost:
      break;
  }
  return StorageTier::kHost;
}

namespace client {

using proto::AllocHeader;

namespace {

// PutOptions::tier as the master's preference (nullopt: the tenant's default_tier).
std::optional<common::TierPreference> TierPreferenceOf(StorageTier tier) {
  switch (tier) {
    case StorageTier::kHost:
      return common::TierPreference::kHost;
    case StorageTier::kGpu:
      return common::TierPreference::kGpu;
    case StorageTier::kAny:
      return common::TierPreference::kAny;
    case StorageTier::kDisk:
      return common::TierPreference::kDisk;
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
    case StorageTier::kDisk:
    case StorageTier::kTenantDefault:
      break;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Create(const ClientOptions& options) {
  GRANARY_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  common::ScopedLogRoute route(&c->log_route_);
  GRANARY_LOG_DEBUG << "client of tenant '" << options.tenant_id
                    << "': connecting to the master at " << options.master_server_address;
  GRANARY_RETURN_IF_ERROR(c->OpenTransport());
  GRANARY_RETURN_IF_ERROR(c->OpenDevicePaths());
  GRANARY_ASSIGN_OR_RETURN(std::string worker_address, c->worker_->Address());
  c->registrations_ = std::make_unique<Registrations>(
      c->ctx_.get(), absl::StrCat(proto::kClientPushPrefix, common::RandomId()),
      std::move(worker_address));
  c->bounce_ = std::make_unique<GpuBounce>(&c->metrics_, c->registrations_.get());
  c->nodes_ =
      std::make_unique<NodeLinks>(c->worker_.get(), &c->metrics_, options.transfer_timeout_ms);
  c->rma_->set_refusal_counter(c->nodes_->refusals());
  // Over tcp alone (no RDMA transport opened), values to other hosts move in messages: no
  // endpoint to another host's worker address is made (ClientOptions::tcp_data_between_hosts).
  const std::vector<std::string> nets = c->ctx_->NetResources();
  const bool messages_between_hosts =
      options.tcp_data_between_hosts == "messages" &&
      std::all_of(nets.begin(), nets.end(), [](const std::string& r) {
        return absl::StartsWith(r, "tcp/") || absl::StartsWith(r, "cuda") ||
               absl::StartsWith(r, "rocm") || absl::StartsWith(r, "gdr");
      });
  if (messages_between_hosts) {
    GRANARY_LOG_DEBUG
        << "UCX opened no network transport but tcp: values to nodes on other hosts move "
           "in Read and Write messages";
  }
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
  TransferRouter::Paths paths;
  paths.session = c->session_.get();
  paths.registrations = c->registrations_.get();
  paths.rma = c->rma_.get();
  paths.gpu = c->gpu_.get();
  paths.bounce = c->bounce_.get();
  paths.device = c->device_.get();
  paths.nodes = c->nodes_.get();
  paths.tenant = options.tenant_id;
  c->router_ =
      std::make_unique<TransferRouter>(paths, &c->metrics_, options.transfer_timeout_ms,
                                       messages_between_hosts, c->ctx_->SupportsCudaMemory());
  return c;
}

absl::Status ClientImpl::OpenTransport() {
  std::vector<std::pair<std::string, std::string>> ucx;
  if (options_.protocol == "tcp") ucx.emplace_back("TLS", "tcp");
  GRANARY_ASSIGN_OR_RETURN(const transport::Topology topo, transport::Topology::Read());
  GRANARY_ASSIGN_OR_RETURN(
      const transport::NetDeviceChoice nic,
      transport::ChooseNetDevice(topo, options_.device_name, options_.gpu_device));
  if (!nic.device.empty()) ucx.emplace_back("NET_DEVICES", nic.device);
  GRANARY_ASSIGN_OR_RETURN(ctx_, transport::Context::Create("granary_client", ucx));
  transport::LogNetDeviceChoice(nic, *ctx_, &metrics_, "granary_client_net_device");
  GRANARY_ASSIGN_OR_RETURN(worker_, transport::Worker::Create(ctx_.get(), "client", &metrics_,
                                                              /*caller_drive=*/true));
  // The progress thread logs through this client's route for as long as it runs.
  worker_->Post([route = &log_route_] { common::SetThreadLogRoute(route); });
  rma_ = std::make_unique<transport::RmaEngine>(worker_.get());
  if (options_.copy_threads > 0) {
    copy_pool_ = std::make_unique<common::WorkPool>(options_.copy_threads);
    rma_->set_copy_pool(
        copy_pool_.get(),
        metrics_.Counter("granary_client_shared_copy_batches_total",
                         "Batches whose same-host copies the calling thread shared with the "
                         "client's copy threads (client option copy_threads)"));
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::OpenDevicePaths() {
  gpu_ = std::make_unique<GpuSegments>(&metrics_);
  uint64_t pin_cap = DeviceTransfers::kDefaultPinCap;
  if (const char* cap = std::getenv("GRANARY_GPU_PIN_MAX_BYTES"); cap != nullptr && *cap != 0) {
    absl::StatusOr<uint64_t> v = common::ParseSize(cap);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GRANARY_GPU_PIN_MAX_BYTES='", cap, "': ", v.status().message()));
    }
    pin_cap = *v;
  }
  device_ = std::make_unique<DeviceTransfers>(&metrics_, rma_.get(), pin_cap);
  rma_->set_unmap_hook(
      [d = device_.get()](void* local, uint64_t size) { d->Unmapped(local, size); });
  if (ctx_->SupportsCudaMemory()) {
    // Where UCX handles CUDA memory: device buffers and GPU segments this process cannot
    // map move through UCX itself, instead of staging and the node bounce.
    rma_->set_device_memory(true);
    device_->set_direct_ucx(GpuTransfersCounter(&metrics_, "ucx"));
    GRANARY_LOG_INFO
        << "this UCX supports CUDA memory: device buffers, and GPU segments this process "
           "cannot map, move through UCX";
  }
  return absl::OkStatus();
}

ClientImpl::~ClientImpl() {
  common::ScopedLogRoute route(&log_route_);  // closing connections may log
  router_.reset();                            // holds pointers only
  session_.reset();
  nodes_.reset();  // closes the connections to nodes
  rma_.reset();
  device_.reset();
  gpu_.reset();
  bounce_.reset();  // unregisters its slots
  registrations_.reset();
  worker_.reset();
  ctx_.reset();
}

// ---------------------------------------------------------------------------------------------
// Put

absl::StatusOr<proto::PutStartReply> ClientImpl::PutStart(absl::Span<const std::string> keys,
                                                          absl::Span<const uint64_t> sizes,
                                                          uint32_t flags) {
  if (proto::PutTierOf(flags) == common::TierPreference::kDisk) {
    // An older master reads the tier bits as its default tier: refuse here rather than put on
    // memory what was asked for disk.
    GRANARY_ASSIGN_OR_RETURN(std::shared_ptr<transport::RpcClient> m, session_->Connection());
    if (m->peer_version() < proto::kDiskTierProtocol) {
      return absl::FailedPreconditionError(
          absl::StrCat("tier disk needs a master of protocol ", proto::kDiskTierProtocol,
                       " or later; this one speaks ", m->peer_version()));
    }
  }
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
  common::ScopedLogRoute route(&log_route_);
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
  grant.sent_us = common::MonotonicUs();  // the write window counts from here
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
  common::ScopedLogRoute route(&log_route_);
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  const int64_t sent_us = grant.sent_us;
  const int64_t epoch0 = grant.epoch;
  std::vector<AllocHeader> headers(n);
  TransferRouter::Batch batch(router_.get());
  PutPlan plan;
  router_->PlanPut(&batch, keys, data, sizes, grant.reply, &headers, &out, &plan, devices);
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
    const int64_t left_ms = (sent_us + window_ms * 1000 - common::MonotonicUs()) / 1000;
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
  if (st.ok()) {
    st = router_->RunPut(&plan, timeout_ms, order, devices);
    if (absl::IsDeadlineExceeded(st) && timeout_ms < options_.transfer_timeout_ms) {
      st = absl::UnavailableError(absl::StrCat(
          "the writes did not finish within the write window (", window_ms,
          " ms after PutStart) and were cancelled: retry the put (", st.message(), ")"));
    }
  }
  batch.ReleasePins();
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

absl::Status ClientImpl::CopyOrMove(absl::string_view key, absl::string_view node, bool move) {
  common::ScopedLogRoute route(&log_route_);
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
    if (absl::StatusOr<std::string> pushed = nodes_->Push((*src)->node_address, push);
        !pushed.ok()) {
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
    auto node_rpc = nodes_->Get(res.dest_node_address);
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
