#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "node/disk/disk_store.h"

namespace granary::node {

// One disk tier as a node serves it: its DiskStore, and the thread the tier's I/O runs on. A
// batch of large values takes milliseconds on a disk, so the node's progress thread never waits
// for one: a Read or Write that names the tier is handed here (Submit), and its answer is sent
// from this thread when the batch is done.
//
// The tier is a segment at the master like any other, at a synthetic base address (Base(i) for
// the node's i-th tier) that no process maps, so a disk address can never be mistaken for
// memory: an offset into the tier is the address minus the base.
//
// Thread-safe. Stop (and the destructor) runs the jobs already submitted, then joins the
// thread; a job submitted after Stop is dropped (the node is going away).
class DiskTier {
 public:
  DiskTier(std::unique_ptr<DiskStore> store, uint64_t base);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The base address of a node's index-th disk tier: above the canonical user address space
  // (bit 63 set), 2^48 bytes apart, so no tier overlaps another or any memory segment.
  static constexpr uint64_t Base(size_t index) {
    return 0xD000'0000'0000'0000ULL + (static_cast<uint64_t>(index) << 48);
  }
  static constexpr uint64_t kMaxSize = 1ULL << 48;

  // Runs job on the tier's thread, after the jobs submitted before it.
  void Submit(std::function<void()> job);
  // Runs what was submitted, then stops the thread. Idempotent.
  void Stop();

  DiskStore& store() { return *store_; }
  uint64_t base() const { return base_; }

 private:
  void Loop();

  const std::unique_ptr<DiskStore> store_;
  const uint64_t base_;
  common::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  common::Mutex join_mu_;  // serializes Stop's join
  std::thread thread_;
};

}  // namespace granary::node
