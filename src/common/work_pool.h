#pragma once

// Threads that help a caller run the independent parts of one job (a client's same-host copies
// of a large batch, RmaEngine::CopyMapped). ParallelFor(n, fn) runs fn(0) .. fn(n-1): the
// caller takes parts itself while the pool's threads take others, and it returns once every
// part has run. The caller never waits for a pool thread to wake up: whatever no pool thread
// has taken by the time the caller is free, the caller runs itself, and it then waits only for
// the parts already running on pool threads. So a pool that is busy with another caller's job,
// or slow to be scheduled, costs a caller little more than running every part itself.
//
// One copy thread copies from DRAM at a fraction of what the memory system can move (about
// 15-25 GB/s on the development VM, against a multiple of that with more threads on a server);
// the control path of a batch leaves the other cores idle while its copies run.

#include <atomic>
#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/mutex.h"

namespace granary::common {

class WorkPool {
 public:
  // `threads` pool threads (0: every ParallelFor runs on its caller alone).
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Runs fn(i) for every i in [0, n), each once, on this thread and the pool's; returns when
  // all have returned (their writes visible to this thread). Thread-safe; fn must not call
  // ParallelFor of the same pool.
  void ParallelFor(size_t n, absl::FunctionRef<void(size_t)> fn);

 private:
  struct Job {
    Job(size_t n, absl::FunctionRef<void(size_t)> fn) : n(n), fn(fn) {}
    const size_t n;
    const absl::FunctionRef<void(size_t)> fn;
    std::atomic<size_t> next{0};  // the next part to take
    std::atomic<size_t> done{0};  // parts that have returned
    int helpers = 0;              // pool threads working on this job (under mu_)
    bool Left() const { return helpers == 0; }
  };
  bool StopOrJob() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !jobs_.empty(); }
  // Takes and runs parts until none is left.
  static void Work(Job* job);
  void Loop();
  // Takes `job` off the queue if it is still there.
  void Dequeue(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  std::deque<Job*> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace granary::common
