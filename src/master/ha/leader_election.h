#pragma once

// Master election on etcd (docs/architecture.md, "High availability"): one
// txn creates granary/<cluster_id>/master_view under this master's lease and bumps `term`; the
// txn's revision (the view's create_revision) is the epoch. The leader keeps the lease alive
// every TTL/3 and may admit a mutating request only while now < t_valid, where
// t_valid = t_send(last keepalive answered with TTL > 0) + TTL - margin on the monotonic clock.
// The view therefore disappears no earlier than `margin` after this master's last admission:
// at expiry by construction, and a revoke (Stop, or giving the lease up once fenced) waits until
// then. A successor shortens its post-takeover quarantine by that margin (on_elected's
// previous_view carries it).
// A standby watches master_view and campaigns when it is deleted (a slow poll backs the watch
// up).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/etcd/etcd_client.h"
#include "common/mutex.h"

namespace granary::master::ha {

struct ElectionOptions {
  std::string cluster_id;     // keys live under granary/<cluster_id>/
  int64_t lease_ttl_sec = 5;  // --ha_lease_ttl_sec
  int64_t margin_ms = 500;    // drift and scheduling slack subtracted from the TTL
  // How often a standby re-reads master_view even when its watch says nothing (safety net).
  int64_t poll_ms = 3000;
};

// What this master knows of the active master: the epoch and the master_view value (JSON with
// "rpc" and "admin" addresses). epoch 0: none known.
struct ViewInfo {
  int64_t epoch = 0;
  std::string value;
};

// The fencing margin a master_view value declares ("fence_margin_ms": a non-negative integer,
// capped at an hour), the credit a successor takes off its quarantine; 0 when the value is
// empty, not JSON or does not say (a master of an older version).
int64_t FenceMarginOfView(const std::string& view_value);

// Owned by the master server; lives as long as it. One thread (Start) runs the campaign, the
// keepalives and the standby's watch. Thread-safe: Leading() and epoch() are lock-free (one
// atomic load and a monotonic clock read), the rest takes a leaf mutex. Callbacks run on the
// election thread with no lock of this object held.
class LeaderElection {
 public:
  struct Callbacks {
    // Won an election: the master makes itself ready (generations, policy, quarantine) before
    // Leading() turns true. `term` is the new value of the term key; `previous_view` the value
    // of master_view as this master last saw it before campaigning (the previous leader's), or
    // "" when it saw none.
    std::function<void(int64_t epoch, uint64_t term, const std::string& previous_view)> on_elected;
    // Lost the lead (lease expired, keepalives failed past t_valid, a guarded write failed,
    // Stop). Leading() is already false.
    std::function<void(const std::string& why)> on_fenced;
    // Asked before each campaign; false ends the election thread without campaigning (the
    // master has been active before and restarts to drop its stale tables). Null: always
    // campaign.
    std::function<bool()> may_campaign;
  };

  // `client` must outlive this object.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LeaderElection>> Create(
      etcd::EtcdClient* client, const ElectionOptions& options, Callbacks callbacks);
  ~LeaderElection();

  // Starts campaigning. `view_value` is what master_view holds while this master leads (its
  // RPC and admin addresses): call once both listen. Once only.
  void Start(std::string view_value);
  // Graceful stop: fences first, waits until the last admission is `margin` old, then revokes
  // the lease (a standby takes over then instead of after the TTL), then joins the thread.
  // Idempotent.
  void Stop();
  // Fences at once (a guarded write found another epoch). Leading() turns false; the election
  // thread goes back to standing by.
  void Fence(const std::string& why);

  // Whether a mutating request may be admitted now: elected and now < t_valid.
  bool Leading() const;
  // The epoch while Leading(), else 0.
  int64_t LeadingEpoch() const { return Leading() ? epoch_.load() : 0; }
  // The epoch of this master's last election, also once fenced (0: never elected).
  int64_t LastEpoch() const { return epoch_.load(); }
  // The active master as last seen (this one while leading).
  ViewInfo active_view() const;
  const std::string& view_key() const { return view_key_; }

 private:
  LeaderElection(etcd::EtcdClient* client, const ElectionOptions& options, Callbacks callbacks);
  void Run();
  // One campaign: true when this master won (lease_id_, epoch_ set).
  bool Campaign();
  // While leading: keepalives until fenced or stopping.
  void Lead();
  // While standing by: watches master_view until it is gone (returns) or stopping.
  void StandBy();
  // Waits up to `ms` or until stopping; false when stopping.
  bool Sleep(int64_t ms);
  void SetView(ViewInfo view);
  // Before revoking the lease: sleeps until `margin` has passed since the last moment this
  // master could admit a write (min of its fencing and t_valid), so that a revoke never lets a
  // successor in sooner after an admission than an expiry would.
  void WaitOutAdmissions() const;
  void LogOnce(const absl::Status& st, const char* doing);

  etcd::EtcdClient* const client_;
  const ElectionOptions options_;
  std::string view_value_;  // set by Start before the thread exists, read only by it
  const Callbacks callbacks_;
  const std::string view_key_;
  const std::string term_key_;

  // 0 when not leading; else the monotonic ns until which this master may admit writes.
  std::atomic<int64_t> valid_until_ns_{0};
  // Monotonic ns of the last moment an admission could pass: set when fenced.
  std::atomic<int64_t> last_admit_ns_{0};
  std::atomic<int64_t> epoch_{0};
  std::atomic<int64_t> lease_id_{0};
  std::atomic<bool> fence_requested_{false};
  etcd::WatchCancel watch_cancel_;
  mutable granary::common::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ViewInfo view_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace granary::master::ha
