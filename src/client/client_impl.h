#pragma once

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "granary/client.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::client {

// The Client implementation. Owns a UCX context, one worker (progress thread), an RPC session
// with the master (reconnected on demand), a cache of segment descriptors, and a heartbeat
// thread. Thread-safe; see Client. The two-phase calls below are public for tools and tests that
// need to stop between the phases.
class ClientImpl : public Client {
 public:
  static absl::StatusOr<std::unique_ptr<ClientImpl>> Create(const ClientOptions& options);
  ~ClientImpl() override;

  absl::Status Put(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::Status PutFrom(absl::string_view key, const void* data, size_t size) override;
  absl::StatusOr<size_t> GetInto(absl::string_view key, void* buffer, size_t capacity) override;
  std::vector<absl::Status> BatchPut(const std::vector<std::string>& keys,
                                     const std::vector<absl::string_view>& values) override;
  std::vector<absl::StatusOr<std::string>> BatchGet(const std::vector<std::string>& keys) override;
  std::vector<absl::Status> BatchPutFrom(const std::vector<std::string>& keys,
                                         const std::vector<const void*>& buffers,
                                         const std::vector<size_t>& sizes) override;
  std::vector<absl::StatusOr<size_t>> BatchGetInto(const std::vector<std::string>& keys,
                                                   const std::vector<void*>& buffers,
                                                   const std::vector<size_t>& capacities) override;
  std::vector<absl::Status> BatchPutWith(const std::vector<std::string>& keys,
                                         const std::vector<absl::string_view>& values,
                                         const PutOptions& options) override;
  absl::StatusOr<PrefixLookup> LookupPrefix(absl::string_view model, absl::string_view hash_scheme,
                                            const std::optional<std::string>& adapter_id,
                                            const std::vector<std::string>& prefix_hashes,
                                            bool lease) override;
  absl::StatusOr<bool> Exist(absl::string_view key) override;
  std::vector<absl::StatusOr<bool>> BatchExist(const std::vector<std::string>& keys) override;
  absl::Status Remove(absl::string_view key) override;
  std::vector<absl::Status> BatchRemove(const std::vector<std::string>& keys) override;
  absl::Status Copy(absl::string_view key, absl::string_view node) override {
    return CopyOrMove(key, node, false);
  }
  absl::Status Move(absl::string_view key, absl::string_view node) override {
    return CopyOrMove(key, node, true);
  }
  absl::Status RegisterBuffer(void* data, size_t size) override;
  absl::Status UnregisterBuffer(void* data) override;
  absl::StatusOr<ListResult> List(absl::string_view prefix, size_t limit,
                                  absl::string_view start_after) override;
  absl::StatusOr<ObjectInfo> Stat(absl::string_view key) override;
  absl::StatusOr<std::vector<SegmentInfo>> Segments() override;
  const ClientOptions& options() const override { return options_; }
  std::string MetricsText() const override { return metrics_.Render(); }

  // Phase one of a put: allocation on the master only, no bytes written.
  absl::StatusOr<proto::PutStartReply> PutStart(const std::vector<std::string>& keys,
                                                const std::vector<uint64_t>& sizes,
                                                uint32_t flags = 0);
  // Reads one replica as a descriptor says, without asking the master: the fenced-read check
  // (header generation, key hash, length) applies. For tests and tools that hold a descriptor.
  absl::StatusOr<std::string> ReadReplica(const std::string& key, uint64_t generation,
                                          uint64_t size, const proto::ReplicaDesc& replica);
  // Releases read leases (GetEnd) without waiting for the answer, as every read does.
  void ReleaseLeasesAsync(const proto::KeyGenRequest& leases);
  // Any control request, with one reconnect on a broken session.
  template <typename Req, typename Rep>
  absl::StatusOr<Rep> Call(proto::MsgType type, const Req& req);
  // The same without waiting: many may be in flight on the one session. No reconnect (a broken
  // session fails the future with UNAVAILABLE; the next Call reconnects) and no deadline: the
  // caller bounds its wait (future::wait_for).
  template <typename Req, typename Rep>
  std::future<absl::StatusOr<Rep>> CallAsync(proto::MsgType type, const Req& req);

 private:
  explicit ClientImpl(const ClientOptions& o) : options_(o) {}
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> Master();
  absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> SegmentFor(uint64_t id);
  absl::Status RefreshSegments();
  ucp_mem_h MemhFor(const void* p, size_t n);
  // The id of the registered buffer holding [p, p + n), or 0 when it is not inside one.
  uint64_t RegistrationIdFor(const void* p, size_t n);
  // That buffer as a node sees it for a Push (its id, rkey and range, this client's worker),
  // or nullopt.
  std::optional<proto::SegmentInfo> PushTargetFor(const void* p, size_t n);
  absl::Status Transfer(std::vector<transport::RmaOp> ops);
  // Has `node` write the values of req into this client's registered buffer (reads over tcp;
  // proto::PushRequest) and copies the headers it returns into (*headers)[keys[j]].
  absl::Status Push(const std::string& node, const proto::PushRequest& req,
                    const std::vector<size_t>& keys, std::vector<proto::AllocHeader>* headers);
  std::vector<absl::Status> PutImpl(const std::vector<std::string>& keys,
                                    const std::vector<const void*>& data,
                                    const std::vector<size_t>& sizes, uint32_t flags = 0);
  // dest(i, size) returns where key i's value goes, or an error for that key.
  using DestFn = std::function<absl::StatusOr<void*>(size_t i, uint64_t size)>;
  std::vector<absl::StatusOr<size_t>> GetImpl(const std::vector<std::string>& keys,
                                              const DestFn& dest);
  void HeartbeatLoop();
  absl::Status CopyOrMove(absl::string_view key, absl::string_view node, bool move);
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> NodeClient(const std::string& address);

  const ClientOptions options_;
  MetricsRegistry metrics_;
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::RmaEngine> rma_;

  granary::Mutex master_mu_;
  std::shared_ptr<transport::RpcClient> master_ ABSL_GUARDED_BY(master_mu_);
  uint32_t heartbeat_ms_ ABSL_GUARDED_BY(master_mu_) = 1000;
  std::string master_id_ ABSL_GUARDED_BY(master_mu_);

  granary::Mutex seg_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const transport::RemoteSegment>> segments_
      ABSL_GUARDED_BY(seg_mu_);

  granary::Mutex nodes_mu_;  // control connections to nodes (Fetch)
  absl::flat_hash_map<std::string, std::shared_ptr<transport::RpcClient>> node_clients_
      ABSL_GUARDED_BY(nodes_mu_);

  granary::Mutex reg_mu_;
  struct Registration {
    std::unique_ptr<transport::MemoryRegion> region;
    uint64_t id = 0;   // never reused in this client
    std::string rkey;  // packed, for nodes that push into it
  };
  std::map<uintptr_t, Registration> registered_ ABSL_GUARDED_BY(reg_mu_);
  const Registration* RegistrationHolding(const void* p, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reg_mu_);
  uint64_t next_registration_ ABSL_GUARDED_BY(reg_mu_) = 1;
  // This client as a node's RmaEngine names it when pushing, and its worker's address.
  std::string push_name_;
  std::string worker_address_;
  MetricCounter* pushed_reads_ = nullptr;

  granary::Mutex hb_mu_;
  bool stopping_ ABSL_GUARDED_BY(hb_mu_) = false;
  std::thread heartbeat_;
};

template <typename Req, typename Rep>
absl::StatusOr<Rep> ClientImpl::Call(proto::MsgType type, const Req& req) {
  absl::Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto m = Master();
    if (!m.ok()) return m.status();
    auto rep =
        (*m)->template Invoke<Req, Rep>(type, req, absl::Milliseconds(options_.rpc_timeout_ms));
    if (rep.ok() || !absl::IsUnavailable(rep.status()) || !(*m)->broken()) return rep;
    last = rep.status();  // the session broke: reconnect once
  }
  return last;
}

template <typename Req, typename Rep>
std::future<absl::StatusOr<Rep>> ClientImpl::CallAsync(proto::MsgType type, const Req& req) {
  auto done = std::make_shared<std::promise<absl::StatusOr<Rep>>>();
  auto result = done->get_future();
  auto m = Master();
  if (!m.ok()) {
    done->set_value(m.status());
    return result;
  }
  (*m)->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(type), 0, req),
                  [done](absl::StatusOr<std::string> frame) {
                    if (!frame.ok()) {
                      done->set_value(frame.status());
                    } else {
                      done->set_value(transport::RpcClient::ParseReply<Rep>(*frame));
                    }
                  });
  return result;
}

}  // namespace granary::client
