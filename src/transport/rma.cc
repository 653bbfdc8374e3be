#include "transport/rma.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/range.h"
#include "common/util.h"
#include "transport/ep_info.h"

namespace granary::transport {

namespace {

struct Batch {
  int remaining = 0;
  absl::Status status;
  std::function<void(absl::Status)> done;
  std::vector<std::shared_ptr<Endpoint>> eps;  // keep endpoints alive until completion
  Worker* worker = nullptr;

  void Complete(ucs_status_t st, const char* what) {
    if (st != UCS_OK && status.ok()) status = UcsError(st, what);
    if (--remaining == 0) {
      if (status.ok()) {
        for (auto& ep : eps)
          worker->NoteTransport(ep.get(), /*data_path=*/true);  // once per endpoint
      }
      done(status);
      delete this;
    }
  }
};

void OnOpDone(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  static_cast<Batch*>(user_data)->Complete(status, "one-sided transfer");
}

// Whether a same-host node process still exists (signal 0 checks without sending).
bool ProcessAlive(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Handles the immediate result of an nbx call.
void Track(Batch* b, ucs_status_ptr_t req, const char* what) {
  if (req == nullptr) {
    b->Complete(UCS_OK, what);
  } else if (UCS_PTR_IS_ERR(req)) {
    b->Complete(UCS_PTR_STATUS(req), what);
  }
  // Otherwise OnOpDone completes it.
}

}  // namespace

std::string LocalHostId() { return absl::StrCat(common::HostId(), "/", getpid()); }

std::shared_ptr<RemoteSegment> RemoteSegmentOf(const proto::SegmentInfo& info) {
  auto seg = std::make_shared<RemoteSegment>();
  seg->segment_id = info.segment_id;
  seg->node_address = info.node_address;
  seg->rkey = info.rkey;
  seg->worker_address = info.worker_address;
  seg->base = info.base;
  seg->size = info.size;
  seg->gpu = info.tier == proto::Tier::kGpu;
  seg->disk = info.tier == proto::Tier::kDisk;
  seg->gpu_ipc = info.gpu_ipc;
  seg->gpu_uuid = info.gpu_uuid;
  SetHostInfo(seg.get(), info.host_id);
  return seg;
}

proto::SegmentInfo SegmentInfoOf(const RemoteSegment& seg) {
  proto::SegmentInfo info;
  info.segment_id = seg.segment_id;
  info.node_address = seg.node_address;
  info.rkey = seg.rkey;
  info.worker_address = seg.worker_address;
  info.host_id = seg.host_id;
  return info;
}

void SetHostInfo(RemoteSegment* seg, const std::string& host_id) {
  seg->host_id = host_id;
  size_t slash = host_id.rfind('/');
  std::string boot = slash == std::string::npos ? host_id : host_id.substr(0, slash);
  seg->same_host = !boot.empty() && boot == common::HostId();
  seg->pid = 0;
  if (seg->same_host && slash != std::string::npos) {
    int pid = 0;
    if (absl::SimpleAtoi(host_id.substr(slash + 1), &pid) && pid > 0) seg->pid = pid;
  }
}

RmaEngine::~RmaEngine() {
  worker_->Run([this] {
    std::vector<std::string> addrs;
    for (auto& [a, p] : peers_) addrs.push_back(a);
    for (auto& a : addrs) DropPeer(a);
  });
}

absl::StatusOr<RmaEngine::Peer*> RmaEngine::GetPeer(const RemoteSegment& seg) {
  const std::string& address = seg.node_address;
  if (absl::Status held = unreachable_.Check(address); !held.ok()) {
    if (refusals_ != nullptr) refusals_->Inc();
    return held;
  }
  auto it = peers_.find(address);
  if (it != peers_.end()) {
    if (!it->second->ep->broken.load()) return it->second.get();
    DropPeer(address);
  }
  auto ep = worker_->ConnectWorker(seg.worker_address, address,
                                   /*peer_failure_handling=*/!seg.same_host);
  if (!ep.ok()) return ep.status();
  (*ep)->on_error = [this, address](ucs_status_t) {
    worker_->Post([this, address] {
      auto it = peers_.find(address);
      if (it != peers_.end() && it->second->ep->broken.load()) DropPeer(address);
    });
  };
  // A worker-address endpoint has its lanes once created.
  if (QueryTransports((*ep)->ep).IsSlowFallback()) {
    granary::common::MutexLock lock(&tcp_mu_);
    tcp_only_.insert(address);
    tcp_only_count_.store(tcp_only_.size(), std::memory_order_relaxed);
  }
  auto peer = std::make_unique<Peer>();
  peer->ep = *ep;
  Peer* raw = peer.get();
  peers_[address] = std::move(peer);
  return raw;
}

absl::StatusOr<ucp_rkey_h> RmaEngine::GetRkey(Peer* peer, const RemoteSegment& seg) {
  auto it = peer->rkeys.find(seg.segment_id);
  if (it != peer->rkeys.end()) return it->second;
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(peer->ep->ep, seg.rkey.data(), &rkey);
  if (st != UCS_OK) {
    return UcsError(st, absl::StrCat("unpacking the remote key of segment ", seg.segment_id, " on ",
                                     seg.node_address));
  }
  peer->rkeys[seg.segment_id] = rkey;
  void* local = nullptr;
  // Never a GPU segment (with a CUDA UCX it has an rkey): its memory is the device's.
  if (seg.same_host && !seg.gpu && seg.size > 0 && ucp_rkey_ptr(rkey, seg.base, &local) == UCS_OK) {
    granary::common::MutexLock lock(&map_mu_);
    mapped_[seg.segment_id] = Mapped{seg.node_address, rkey, seg.base, seg.size};
  }
  return rkey;
}

void RmaEngine::DropPeer(const std::string& address) {
  auto it = peers_.find(address);
  if (it == peers_.end()) return;
  {
    granary::common::MutexLock lock(&map_mu_);
    for (auto& [id, rkey] : it->second->rkeys) {
      auto m = mapped_.find(id);
      if (m == mapped_.end() || m->second.rkey != rkey) continue;
      void* local = nullptr;
      if (unmap_hook_ && ucp_rkey_ptr(rkey, m->second.base, &local) == UCS_OK) {
        unmap_hook_(local, m->second.size);
      }
      mapped_.erase(m);
    }
  }
  for (auto& [id, rkey] : it->second->rkeys) ucp_rkey_destroy(rkey);
  {
    granary::common::MutexLock lock(&tcp_mu_);
    tcp_only_.erase(address);
    tcp_only_count_.store(tcp_only_.size(), std::memory_order_relaxed);
  }
  it->second->ep->on_error = nullptr;
  worker_->Close(it->second->ep);
  peers_.erase(it);
}

void RmaEngine::ForgetNode(const std::string& node_address) {
  worker_->Post([this, node_address] { DropPeer(node_address); });
}

void RmaEngine::MarkUnreachable(const std::vector<std::string>& node_addresses, bool back_off) {
  worker_->Run([&] {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& a : node_addresses) {
      DropPeer(a);
      // Held once: a node named twice, or by a concurrent transfer, keeps its hold.
      if (back_off) unreachable_.Hold(a, now);
    }
  });
}

void RmaEngine::Execute(std::vector<RmaOp> ops, std::function<void(absl::Status)> done) {
  worker_->Post([this, ops = std::move(ops), done = std::move(done)]() mutable {
    // A caller driving the worker does not connect: UCX's tcp connect(2) to a host that went
    // away blocks for seconds, and the caller must keep its deadline. The worker's own thread
    // connects (as every connection was made before callers drove), meanwhile the caller waits.
    const bool connects =
        !worker_->OnOwnThread() && std::any_of(ops.begin(), ops.end(), [this](const RmaOp& op) {
          return NeedsConnect(op.segment->node_address);
        });
    if (connects) {
      worker_->PostOwn([this, ops = std::move(ops), done = std::move(done)]() mutable {
        Start(std::move(ops), std::move(done));
      });
      return;
    }
    Start(std::move(ops), std::move(done));
  });
}

bool RmaEngine::NeedsConnect(const std::string& address) const {
  if (unreachable_.Held(address)) return false;  // refused at once (GetPeer)
  auto it = peers_.find(address);
  return it == peers_.end() || it->second->ep->broken.load();
}

void RmaEngine::Start(std::vector<RmaOp> ops, std::function<void(absl::Status)> done) {
  auto* b = new Batch;
  b->done = std::move(done);
  b->worker = worker_;
  // +1 guards against completion while posting.
  b->remaining = 1;
  absl::flat_hash_map<Endpoint*, bool> put_eps;
  absl::flat_hash_map<int, bool> alive;  // same-host node processes checked in this batch
  for (RmaOp& op : ops) {
    if (op.device >= 0 && !device_memory_) {  // a caller's bug: this UCX has no CUDA
      if (b->status.ok()) {
        b->status = absl::InternalError(
            absl::StrCat("device memory (device ", op.device,
                         ") was handed to UCX, which here has no CUDA "
                         "support; it must go through the client's device transfers"));
      }
      continue;
    }
    if (op.segment->pid > 0) {
      auto it = alive.find(op.segment->pid);
      if (it == alive.end()) {
        bool up = ProcessAlive(op.segment->pid);
        it = alive.emplace(op.segment->pid, up).first;
        if (!up) DropPeer(op.segment->node_address);
      }
      if (!it->second) {
        if (b->status.ok()) {
          b->status = absl::UnavailableError(absl::StrCat("node process ", op.segment->pid, " at ",
                                                          op.segment->node_address, " is gone"));
        }
        continue;
      }
    }
    auto peer = GetPeer(*op.segment);
    absl::StatusOr<ucp_rkey_h> rkey =
        peer.ok() ? GetRkey(*peer, *op.segment) : absl::StatusOr<ucp_rkey_h>(peer.status());
    if (!rkey.ok()) {
      if (b->status.ok()) b->status = rkey.status();
      continue;
    }
    Endpoint* ep = (*peer)->ep.get();
    if (put_eps.find(ep) == put_eps.end()) {
      put_eps[ep] = false;
      b->eps.push_back((*peer)->ep);
    }
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &OnOpDone;
    p.user_data = b;
    if (op.memh != nullptr) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = op.memh;
    }
    ++b->remaining;
    if (op.is_put) {
      put_eps[ep] = true;
      Track(b, ucp_put_nbx(ep->ep, op.local, op.length, op.remote_addr, *rkey, &p), "put");
    } else {
      Track(b, ucp_get_nbx(ep->ep, op.local, op.length, op.remote_addr, *rkey, &p), "get");
    }
  }
  for (auto& [ep, has_put] : put_eps) {
    if (!has_put) continue;
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &OnOpDone;
    p.user_data = b;
    ++b->remaining;
    Track(b, ucp_ep_flush_nbx(ep->ep, &p), "flush");
  }
  b->Complete(UCS_OK, "");
}

struct RmaEngine::MapCursor {
  const RemoteSegment* seg = nullptr;
  const Mapped* mapped = nullptr;
  absl::flat_hash_map<int, bool> alive;  // node processes checked in this call
};

void* RmaEngine::MappedLocked(const RmaOp& op, MapCursor* c) {
  if (op.segment.get() != c->seg) {
    c->seg = op.segment.get();
    auto it = mapped_.find(c->seg->segment_id);
    c->mapped = it != mapped_.end() && it->second.node_address == c->seg->node_address ? &it->second
                                                                                       : nullptr;
    if (c->mapped != nullptr && c->seg->pid > 0) {
      auto a = c->alive.find(c->seg->pid);
      if (a == c->alive.end()) a = c->alive.emplace(c->seg->pid, ProcessAlive(c->seg->pid)).first;
      if (!a->second) c->mapped = nullptr;  // Execute reports it and drops the endpoint
    }
  }
  const Mapped* last = c->mapped;
  void* remote = nullptr;
  if (last != nullptr && op.length > 0 &&
      common::RangeWithin(last->base, last->size, op.remote_addr, op.length) &&
      ucp_rkey_ptr(last->rkey, op.remote_addr, &remote) == UCS_OK) {
    return remote;
  }
  return nullptr;
}

size_t RmaEngine::CopyMapped(std::vector<RmaOp>* ops) {
  granary::common::ReaderMutexLock lock(&map_mu_);
  if (mapped_.empty()) return 0;
  size_t kept = 0, copied = 0;
  MapCursor cursor;
  // With a copy pool and at least kParallelCopyBytes of host ops (mapped or not: the mapped
  // ones cannot add up to more), the mapped copies are gathered in parts of about
  // kCopyPartBytes (a large value split, small ones grouped) and, once they add up to
  // kParallelCopyBytes, shared with the pool's threads; otherwise each is copied as it is found.
  struct Part {
    void* dst;
    const void* src;
    size_t len;
  };
  bool pooled = copy_pool_ != nullptr && copy_pool_->threads() > 0;
  if (pooled) {
    uint64_t host_bytes = 0;
    for (const RmaOp& op : *ops) host_bytes += op.device < 0 ? op.length : 0;
    pooled = host_bytes >= kParallelCopyBytes;
  }
  std::vector<Part> parts;
  std::vector<size_t> ends;  // part k is parts[ends[k-1] .. ends[k])
  uint64_t mapped_bytes = 0, in_part = 0;
  for (size_t i = 0; i < ops->size(); ++i) {
    RmaOp& op = (*ops)[i];
    void* remote = op.device < 0 ? MappedLocked(op, &cursor) : nullptr;
    if (remote != nullptr) {
      char* dst = static_cast<char*>(op.is_put ? remote : op.local);
      const char* src = static_cast<const char*>(op.is_put ? op.local : remote);
      ++copied;
      if (!pooled) {
        std::memcpy(dst, src, op.length);
        continue;
      }
      mapped_bytes += op.length;
      for (size_t off = 0; off < op.length;) {
        const size_t len = std::min<size_t>(op.length - off, kCopyPartBytes - in_part);
        parts.push_back({dst + off, src + off, len});
        off += len;
        in_part += len;
        if (in_part == kCopyPartBytes) {
          ends.push_back(parts.size());
          in_part = 0;
        }
      }
      continue;
    }
    if (kept != i) (*ops)[kept] = std::move(op);
    ++kept;
  }
  ops->resize(kept);
  if (in_part > 0) ends.push_back(parts.size());
  if (mapped_bytes >= kParallelCopyBytes) {
    if (shared_copies_ != nullptr) shared_copies_->Inc();
    copy_pool_->ParallelFor(ends.size(), [&](size_t k) {
      for (size_t j = k == 0 ? 0 : ends[k - 1]; j < ends[k]; ++j) {
        std::memcpy(parts[j].dst, parts[j].src, parts[j].len);
      }
    });
  } else {
    for (const Part& p : parts) std::memcpy(p.dst, p.src, p.len);
  }
  // The node's other readers learn of a put from the master, after this returns.
  if (copied > 0) std::atomic_thread_fence(std::memory_order_release);
  return copied;
}

absl::Status RmaEngine::RunMapped(std::vector<RmaOp>* ops,
                                  absl::FunctionRef<bool(const RmaOp&)> want,
                                  absl::FunctionRef<absl::Status(std::vector<MappedOp>&)> fn) {
  granary::common::ReaderMutexLock lock(&map_mu_);
  if (mapped_.empty()) return absl::OkStatus();
  std::vector<MappedOp> taken;
  size_t kept = 0;
  MapCursor cursor;
  for (size_t i = 0; i < ops->size(); ++i) {
    RmaOp& op = (*ops)[i];
    void* remote = want(op) ? MappedLocked(op, &cursor) : nullptr;
    if (remote != nullptr) {
      void* base = nullptr;
      (void)ucp_rkey_ptr(cursor.mapped->rkey, cursor.mapped->base, &base);
      taken.push_back({std::move(op), remote, base, cursor.mapped->size});
      continue;
    }
    if (kept != i) (*ops)[kept] = std::move(op);
    ++kept;
  }
  ops->resize(kept);
  if (taken.empty()) return absl::OkStatus();
  return fn(taken);
}

bool RmaEngine::TcpOnly(const std::string& node_address) {
  if (tcp_only_count_.load(std::memory_order_relaxed) == 0) return false;
  granary::common::MutexLock lock(&tcp_mu_);
  return tcp_only_.contains(node_address);
}

absl::Status RmaEngine::ExecuteSync(std::vector<RmaOp> ops) {
  return ExecuteWithin(std::move(ops), absl::InfiniteDuration(), nullptr, absl::InfiniteDuration());
}

absl::Status RmaEngine::ExecuteWithin(std::vector<RmaOp> ops, absl::Duration timeout,
                                      const std::function<void()>& on_timeout,
                                      absl::Duration grace) {
  if (ops.empty()) return absl::OkStatus();
  const std::string first_node = ops.front().segment ? ops.front().segment->node_address : "";
  // Shared with the completion, which may run after this call gave up on it.
  struct Wait {
    std::promise<absl::Status> p;
    std::atomic<bool> done{false};
  };
  auto w = std::make_shared<Wait>();
  std::future<absl::Status> f = w->p.get_future();
  {
    Worker::DriveIntent intent(worker_);  // the SpinUntil below starts them
    Execute(std::move(ops), [w](absl::Status st) {
      w->done.store(true, std::memory_order_release);
      w->p.set_value(std::move(st));
    });
  }
  if (worker_->caller_drive()) {
    worker_->SpinUntil([&w] { return w->done.load(std::memory_order_acquire); });
  }
  auto ready_within = [&f](absl::Duration d) {
    if (d == absl::InfiniteDuration()) {
      f.wait();
      return true;
    }
    return f.wait_for(absl::ToChronoNanoseconds(d)) == std::future_status::ready;
  };
  if (ready_within(timeout)) return f.get();
  if (on_timeout) on_timeout();
  if (!ready_within(grace)) {
    GRANARY_LOG_WARN << "abandoning a transfer to " << first_node
                     << " that UCX did not complete when its endpoint closed";
  }
  return absl::DeadlineExceededError(
      absl::StrCat("transfer did not finish within ", absl::FormatDuration(timeout)));
}

}  // namespace granary::transport
