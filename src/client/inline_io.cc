#include "client/inline_io.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/spin_wait.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::client {

using proto::kAllocHeaderSize;

InlineBatch::InlineBatch(bool write, const std::vector<InlineGroup>* groups,
                         common::MetricCounter* values) {
  if (groups->empty()) return;
  state_ = std::make_shared<State>();
  state_->write = write;
  state_->groups = groups;
  state_->values = values;
  granary::common::MutexLock lock(&state_->mu);
  state_->unanswered.store(groups->size(), std::memory_order_relaxed);
  state_->status.assign(groups->size(), absl::OkStatus());
  state_->answered.assign(groups->size(), false);
}

void InlineBatch::Start(const NodeFn& node_client) {
  if (!state_) return;
  const std::vector<InlineGroup>& groups = *state_->groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    const InlineGroup& group = groups[g];
    absl::StatusOr<std::shared_ptr<transport::RpcClient>> rpc =
        node_client(group.node, group.other_host);
    if (!rpc.ok()) {
      Finish(state_.get(), g, rpc.status());
      continue;
    }
    worker_ = (*rpc)->worker();
    // Wait (or a wait of the caller's before it) sends it: every wait runs what is queued.
    transport::Worker::DriveIntent intent(worker_);
    std::string frame;
    if (state_->write) {
      frame = proto::EncodeWriteRequestFrame(
          group.entries, proto::InlineDataBytes(group.entries),
          [&](char* out) {
            for (size_t j = 0; j < group.entries.size(); ++j) {
              std::memcpy(out, group.headers[j], kAllocHeaderSize);
              out += kAllocHeaderSize;
              std::memcpy(out, group.values[j], group.entries[j].length);
              out += group.entries[j].length;
            }
          },
          group.tenant, group.names);
    } else {
      frame = proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kRead), 0,
                                 proto::ReadRequest{group.entries});
    }
    (*rpc)->CallAsyncRaw(
        std::move(frame),
        [g, state = state_](absl::StatusOr<absl::string_view> r) { Finish(state.get(), g, r); });
  }
}

absl::Status InlineBatch::Scatter(const InlineGroup& group, absl::string_view frame) {
  auto rep = transport::RpcClient::ParseReply<proto::ReadReplyView>(frame);
  if (!rep.ok()) return rep.status();
  const uint64_t want = proto::InlineDataBytes(group.entries);
  if (rep->data.size() != want) {
    return absl::InternalError(absl::StrCat("answered a read of ", group.entries.size(),
                                            " values with ", rep->data.size(), " bytes, not ",
                                            want));
  }
  const char* in = rep->data.data();
  for (size_t j = 0; j < group.entries.size(); ++j) {
    std::memcpy(group.values[j], in, group.entries[j].length);
    in += group.entries[j].length;
  }
  for (size_t j = 0; j < group.entries.size(); ++j) {
    std::memcpy(group.headers[j], in, kAllocHeaderSize);
    in += kAllocHeaderSize;
  }
  return absl::OkStatus();
}

void InlineBatch::Finish(State* s, size_t g, absl::StatusOr<absl::string_view> frame) {
  granary::common::MutexLock lock(&s->mu);
  if (s->abandoned || s->answered[g]) return;
  const InlineGroup& group = (*s->groups)[g];
  absl::Status st = frame.status();
  if (st.ok()) {
    // A Read copies under the lock: Wait cannot give up (and its caller reuse the buffers)
    // while the values land.
    st = s->write ? transport::RpcClient::ParseReply<proto::StatusReply>(*frame).status()
                  : Scatter(group, *frame);
  }
  if (st.ok()) {
    s->values->Inc(group.entries.size());
  } else {
    st = absl::Status(st.code(), absl::StrCat("node ", group.node,
                                              s->write ? " write: " : " read: ", st.message()));
  }
  s->status[g] = std::move(st);
  s->answered[g] = true;
  s->unanswered.fetch_sub(1, std::memory_order_release);
}

std::vector<absl::Status> InlineBatch::Wait(int64_t timeout_ms) {
  if (!state_) return {};
  State* s = state_.get();
  if (worker_ != nullptr) {
    worker_->SpinUntil([s] { return s->Done(); });
  } else {
    common::SpinUntil([s] { return s->Done(); });
  }
  granary::common::MutexLock lock(&s->mu);
  if (!s->mu.AwaitWithTimeout(absl::Condition(s, &State::Done), absl::Milliseconds(timeout_ms))) {
    s->abandoned = true;
    for (size_t g = 0; g < s->answered.size(); ++g) {
      if (s->answered[g]) continue;
      s->status[g] = absl::DeadlineExceededError(
          absl::StrCat("node ", (*s->groups)[g].node, s->write ? " write" : " read",
                       " did not answer within ", timeout_ms, " ms"));
    }
  }
  return s->status;
}

}  // namespace granary::client
