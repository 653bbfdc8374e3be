#include "node/transfer_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace granary::node {

TransferWatchdog::TransferWatchdog(HoldOff hold_off) : hold_off_(std::move(hold_off)) {
  thread_ = std::thread([this] { Loop(); });
}

TransferWatchdog::~TransferWatchdog() { Stop(); }

void TransferWatchdog::Stop() {
  {
    granary::common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t TransferWatchdog::Start(std::string what, std::string peer, int64_t timeout_ms,
                                 Answer answer) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(std::max<int64_t>(0, timeout_ms));
  granary::common::MutexLock lock(&mu_);
  const uint64_t token = next_token_++;
  pending_.emplace(
      token, Pending{std::move(what), std::move(peer), timeout_ms, deadline, std::move(answer)});
  if (deadline < earliest_) {
    earliest_ = deadline;
    woken_ = true;
  }
  return token;
}

bool TransferWatchdog::Finish(uint64_t token, const absl::Status& st) {
  Answer answer;
  {
    granary::common::MutexLock lock(&mu_);
    auto it = pending_.find(token);
    if (it == pending_.end()) return false;  // the watchdog answered it
    answer = std::move(it->second.answer);
    pending_.erase(it);
  }
  answer(st);
  return true;
}

size_t TransferWatchdog::pending() const {
  granary::common::MutexLock lock(&mu_);
  return pending_.size();
}

uint64_t TransferWatchdog::expired() const {
  granary::common::MutexLock lock(&mu_);
  return expired_;
}

void TransferWatchdog::Loop() {
  mu_.Lock();
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (earliest_ > now) {
      woken_ = false;
      mu_.AwaitWithTimeout(absl::Condition(this, &TransferWatchdog::Wake), earliest_ - now);
      continue;
    }
    std::vector<Pending> due;
    earliest_ = absl::InfiniteFuture();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        due.push_back(std::move(it->second));
        pending_.erase(it++);
      } else {
        earliest_ = std::min(earliest_, it->second.deadline);
        ++it;
      }
    }
    expired_ += due.size();
    mu_.Unlock();
    std::vector<std::string> peers;
    for (const Pending& p : due) {
      if (std::find(peers.begin(), peers.end(), p.peer) == peers.end()) peers.push_back(p.peer);
    }
    // Closed (and held off) first: once answered, no byte of these transfers moves.
    if (!peers.empty()) hold_off_(peers);
    for (Pending& p : due) {
      p.answer(absl::DeadlineExceededError(
          absl::StrCat(p.what, " to ", p.peer, " did not finish within ", p.timeout_ms,
                       " ms: the node closed its endpoint to it and holds it off for a back-off")));
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace granary::node
