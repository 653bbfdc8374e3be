#include "master/ha/leader_election.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"

namespace granary::master::ha {

int64_t FenceMarginOfView(const std::string& view_value) {
  if (view_value.empty()) return 0;
  const nlohmann::json j = nlohmann::json::parse(view_value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  auto it = j.find("fence_margin_ms");
  if (it == j.end() || !it->is_number_integer()) return 0;
  const int64_t ms = it->get<int64_t>();
  return ms < 0 ? 0 : std::min<int64_t>(ms, 3'600'000);
}

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Create(
    etcd::EtcdClient* client, const ElectionOptions& options, Callbacks callbacks) {
  if (options.cluster_id.empty() || options.cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("invalid cluster id '", options.cluster_id,
                                                   "': must be non-empty and contain no '/'"));
  }
  if (options.lease_ttl_sec < 1 || options.lease_ttl_sec * 1000 <= options.margin_ms) {
    return absl::InvalidArgumentError(absl::StrCat("--ha_lease_ttl_sec ", options.lease_ttl_sec,
                                                   " must be at least 1 and above "
                                                   "the fencing margin of ",
                                                   options.margin_ms, " ms"));
  }
  return std::unique_ptr<LeaderElection>(new LeaderElection(client, options, std::move(callbacks)));
}

LeaderElection::LeaderElection(etcd::EtcdClient* client, const ElectionOptions& options,
                               Callbacks callbacks)
    : client_(client),
      options_(options),
      callbacks_(std::move(callbacks)),
      view_key_(absl::StrCat("granary/", options.cluster_id, "/master_view")),
      term_key_(absl::StrCat("granary/", options.cluster_id, "/term")) {}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Start(std::string view_value) {
  view_value_ = std::move(view_value);
  thread_ = std::thread([this] { Run(); });
}

bool LeaderElection::Leading() const {
  const int64_t until = valid_until_ns_.load(std::memory_order_acquire);
  return until != 0 && common::MonotonicNs() < until;
}

ViewInfo LeaderElection::active_view() const {
  const bool leading = Leading();
  granary::common::MutexLock lock(&mu_);
  // This master's own view, once it no longer leads (t_valid passed before the election
  // thread noticed): not a hint worth giving.
  if (!leading && view_.epoch != 0 && view_.epoch == epoch_.load()) return ViewInfo{};
  return view_;
}

void LeaderElection::SetView(ViewInfo view) {
  granary::common::MutexLock lock(&mu_);
  view_ = std::move(view);
}

void LeaderElection::LogOnce(const absl::Status& st, const char* doing) {
  granary::common::MutexLock lock(&mu_);
  std::string msg = absl::StrCat(doing, ": ", st.message());
  if (msg == last_error_) return;
  last_error_ = msg;
  GRANARY_LOG_WARN << "HA: " << msg;
}

bool LeaderElection::Sleep(int64_t ms) {
  granary::common::MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(ms));
}

void LeaderElection::Fence(const std::string& why) {
  const int64_t until = valid_until_ns_.exchange(0);
  const bool was = until != 0;
  if (was) last_admit_ns_.store(std::min(until, common::MonotonicNs()));
  fence_requested_.store(true);
  {
    // The view this master wrote is no longer a hint worth giving.
    granary::common::MutexLock lock(&mu_);
    if (view_.epoch == epoch_.load()) view_ = ViewInfo{};
  }
  if (was) {
    GRANARY_LOG_WARN << "HA: fenced at epoch " << epoch_.load() << ": " << why
                     << "; no more mutating requests are admitted";
    if (callbacks_.on_fenced) callbacks_.on_fenced(why);
  }
}

void LeaderElection::Stop() {
  {
    granary::common::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  Fence("stopping");
  if (const int64_t lease = lease_id_.exchange(0); lease != 0) {
    WaitOutAdmissions();
    absl::Status st = client_->LeaseRevoke(lease);
    if (st.ok()) {
      GRANARY_LOG_INFO << "HA: lease revoked: a standby can take over at once";
    } else {
      GRANARY_LOG_WARN << "HA: revoking the lease failed (a standby takes over after the TTL): "
                       << st;
    }
  }
  watch_cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

void LeaderElection::WaitOutAdmissions() const {
  const int64_t last = last_admit_ns_.load();
  if (last == 0) return;
  const int64_t wait_ns = last + options_.margin_ms * 1'000'000 - common::MonotonicNs();
  if (wait_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
}

void LeaderElection::Run() {
  while (true) {
    {
      granary::common::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (callbacks_.may_campaign && !callbacks_.may_campaign()) return;
    // After leading, stand by too: the view may be another master's by now.
    if (Campaign()) Lead();
    StandBy();
  }
}

bool LeaderElection::Campaign() {
  const int64_t t_send = common::MonotonicNs();
  absl::StatusOr<etcd::LeaseGrant> lease = client_->LeaseGrantTtl(options_.lease_ttl_sec);
  if (!lease.ok()) {
    LogOnce(lease.status(), "granting a lease");
    Sleep(500);
    return false;
  }
  lease_id_.store(lease->id);
  auto give_up = [&] {
    if (lease_id_.exchange(0) != 0) (void)client_->LeaseRevoke(lease->id);
  };
  for (int attempt = 0; attempt < 10; ++attempt) {
    absl::StatusOr<etcd::RangeResult> term = client_->Range(term_key_);
    if (!term.ok()) {
      LogOnce(term.status(), "reading the term");
      break;
    }
    uint64_t t = 0;
    std::vector<etcd::Compare> compares = {etcd::Compare::CreateRevision(view_key_, 0)};
    if (term->kvs.empty()) {
      compares.push_back(etcd::Compare::CreateRevision(term_key_, 0));
    } else {
      if (!absl::SimpleAtoi(term->kvs[0].value, &t)) {
        LogOnce(absl::DataLossError(absl::StrCat("'", term->kvs[0].value, "' is not a number")),
                absl::StrCat("reading ", term_key_).c_str());
        break;
      }
      compares.push_back(etcd::Compare::Value(term_key_, term->kvs[0].value));
    }
    absl::StatusOr<etcd::TxnResult> txn =
        client_->Txn(compares,
                     {etcd::Op::Put(view_key_, view_value_, lease->id),
                      etcd::Op::Put(term_key_, std::to_string(t + 1))},
                     {etcd::Op::Get(view_key_)});
    if (!txn.ok()) {
      LogOnce(txn.status(), "campaigning");
      break;
    }
    if (txn->succeeded) {
      const int64_t epoch = txn->revision;
      std::string previous;
      {
        granary::common::MutexLock lock(&mu_);
        if (view_.epoch != 0) previous = view_.value;
      }
      epoch_.store(epoch);
      SetView(ViewInfo{epoch, view_value_});
      fence_requested_.store(false);
      if (callbacks_.on_elected) callbacks_.on_elected(epoch, t + 1, previous);
      // The lease was granted at t_send at the latest: etcd expires it no earlier than TTL
      // after it received the grant.
      valid_until_ns_.store(
          t_send + options_.lease_ttl_sec * 1'000'000'000 - options_.margin_ms * 1'000'000,
          std::memory_order_release);
      GRANARY_LOG_INFO << "HA: elected: active master at epoch " << epoch << ", term " << t + 1
                       << " (" << view_key_ << " = " << view_value_ << ")";
      return true;
    }
    if (!txn->ranges.empty() && !txn->ranges[0].kvs.empty()) {
      const etcd::KeyValue& kv = txn->ranges[0].kvs[0];
      SetView(ViewInfo{kv.create_revision, kv.value});
      give_up();
      return false;
    }
    // master_view is absent but the term moved: another campaign raced ours. Read it again.
  }
  give_up();
  Sleep(500);
  return false;
}

void LeaderElection::Lead() {
  const int64_t lease = lease_id_.load();
  const int64_t interval_ms = std::max<int64_t>(options_.lease_ttl_sec * 1000 / 3, 100);
  while (Sleep(interval_ms)) {
    // Once t_valid has passed this master stays fenced, even if etcd renews the lease later
    // (a resumed process, or etcd back from a stall): it may have missed a successor.
    if (fence_requested_.load() || !Leading()) break;
    const int64_t t_send = common::MonotonicNs();
    absl::StatusOr<int64_t> ttl = client_->LeaseKeepAlive(lease);
    if (fence_requested_.load() || !Leading()) break;
    if (!ttl.ok()) {
      LogOnce(ttl.status(), "keeping the lease alive");
      continue;
    }
    if (*ttl <= 0) {
      Fence("etcd says the lease is gone (TTL <= 0)");
      break;
    }
    const int64_t next =
        t_send + options_.lease_ttl_sec * 1'000'000'000 - options_.margin_ms * 1'000'000;
    // Only ever extend; a fence that raced this keepalive wins.
    int64_t cur = valid_until_ns_.load();
    while (cur != 0 && cur < next && !valid_until_ns_.compare_exchange_weak(cur, next)) {
    }
    if (cur == 0) break;
  }
  {
    granary::common::MutexLock lock(&mu_);
    if (stopping_) return;  // Stop fences and revokes the lease itself
  }
  // Fenced: the lease is of no more use.
  Fence(fence_requested_.load() ? "leaving the lead" : "no keepalive answered before t_valid");
  if (const int64_t id = lease_id_.exchange(0); id != 0) {
    WaitOutAdmissions();
    (void)client_->LeaseRevoke(id);
  }
}

void LeaderElection::StandBy() {
  // Read the view and watch it from the revision read; a DELETE means campaign now.
  absl::StatusOr<etcd::RangeResult> r = client_->Range(view_key_);
  if (!r.ok()) {
    LogOnce(r.status(), "reading the master view");
    Sleep(500);
    return;
  }
  if (r->kvs.empty()) return;  // no leader: campaign
  SetView(ViewInfo{r->kvs[0].create_revision, r->kvs[0].value});
  int64_t next = r->revision + 1;
  bool gone = false;
  while (!gone) {
    {
      granary::common::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    int64_t resume = next;
    absl::Status st = client_->Watch(
        view_key_, next, static_cast<int>(options_.poll_ms),
        [&](int64_t, const std::vector<etcd::WatchEvent>& events) {
          for (const etcd::WatchEvent& e : events) {
            if (e.type == etcd::WatchEvent::Type::kDelete) {
              gone = true;
              return false;
            }
            SetView(ViewInfo{e.kv.create_revision, e.kv.value});
          }
          return true;
        },
        &watch_cancel_, &resume);
    next = resume;
    if (gone) break;
    if (!st.ok()) {
      LogOnce(st, "watching the master view");
      Sleep(500);
      return;  // re-read from scratch (also after a compaction)
    }
    // The watch timed out (the safety poll): re-read the view.
    absl::StatusOr<etcd::RangeResult> again = client_->Range(view_key_);
    if (again.ok() && again->kvs.empty()) break;
    if (again.ok()) next = std::max(next, again->revision + 1);
  }
  GRANARY_LOG_INFO << "HA: the master view is gone: campaigning";
}

}  // namespace granary::master::ha
