#include "node/disk/disk_tier.h"

#include <utility>

namespace granary::node {

DiskTier::DiskTier(std::unique_ptr<DiskStore> store, uint64_t base)
    : store_(std::move(store)), base_(base), thread_([this] { Loop(); }) {}

DiskTier::~DiskTier() { Stop(); }

void DiskTier::Stop() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  common::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

void DiskTier::Submit(std::function<void()> job) {
  common::MutexLock lock(&mu_);
  if (stop_) return;
  jobs_.push_back(std::move(job));
}

void DiskTier::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      common::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !jobs_.empty(); };
      while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(60))) {
      }
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace granary::node
