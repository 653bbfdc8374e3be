#include "client/node_links.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace granary::client {

NodeLinks::NodeLinks(transport::Worker* worker, common::MetricsRegistry* metrics,
                     int64_t transfer_timeout_ms)
    : worker_(worker),
      transfer_timeout_ms_(transfer_timeout_ms),
      timeouts_(metrics->Counter(
          "granary_client_node_transfer_timeouts_total",
          "Transfers to a node that did not finish within transfer_timeout_ms (the node then "
          "backs off: transfers to it fail at once for a jittered exponential wait)")),
      refusals_(metrics->Counter(
          "granary_client_node_backoff_refusals_total",
          "Transfers refused at once because their node is in its back-off after a timeout")) {}

NodeLinks::~NodeLinks() {
  granary::common::MutexLock lock(&mu_);
  clients_.clear();
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> NodeLinks::Get(const std::string& address,
                                                                     bool other_host) {
  granary::common::MutexLock lock(&mu_);
  auto it = clients_.find(address);
  if (it != clients_.end() && !it->second->broken()) return it->second;
  if (absl::Status held = holds_.Check(address); !held.ok()) {
    refusals_->Inc();
    return held;
  }
  // Connecting waits at most one transfer timeout; a node that let it run out (cut off, not
  // refusing) is held off like one whose transfers time out, so the next batches fail at once.
  const absl::Duration timeout = absl::Milliseconds(transfer_timeout_ms_);
  const absl::Time start = absl::Now();
  auto c = transport::RpcClient::Create(worker_, address, /*try_shm=*/!other_host, timeout);
  if (!c.ok()) {
    if (absl::Now() - start >= timeout) {
      timeouts_->Inc();
      holds_.Hold(address);
    }
    return c.status();
  }
  std::shared_ptr<transport::RpcClient> shared = std::move(*c);
  clients_[address] = shared;
  return shared;
}

void NodeLinks::Drop(const std::string& address, bool back_off) {
  granary::common::MutexLock lock(&mu_);
  clients_.erase(address);
  if (!back_off) return;
  timeouts_->Inc();
  holds_.Hold(address);  // once: two groups of one batch, or two batches, count once
}

absl::StatusOr<std::string> NodeLinks::Push(const std::string& node,
                                            const proto::PushRequest& req) {
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc = Get(node);
  if (!rpc.ok()) return rpc.status();
  auto rep = (*rpc)->Invoke<proto::PushRequest, proto::PushReply>(
      proto::MsgType::kPush, req, absl::Milliseconds(transfer_timeout_ms_));
  if (!rep.ok()) {
    return absl::Status(rep.status().code(),
                        absl::StrCat("node ", node, " push: ", rep.status().message()));
  }
  return std::move(rep->headers);
}

void NodeLinks::PushAsync(const std::string& node, const proto::PushRequest& req,
                          std::function<void(absl::StatusOr<std::string>)> done) {
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc = Get(node);
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

void NodeLinks::FetchAsync(const std::string& node, const proto::FetchRequest& req,
                           std::function<void(absl::Status)> done) {
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc = Get(node);
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

}  // namespace granary::client
