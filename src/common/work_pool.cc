#include "common/work_pool.h"

#include <algorithm>

#include "common/spin_wait.h"

namespace granary::common {

WorkPool::WorkPool(int threads) {
  threads_.reserve(static_cast<size_t>(std::max(0, threads)));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkPool::~WorkPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& t : threads_) t.join();
}

void WorkPool::Work(Job* job) {
  for (size_t i = job->next.fetch_add(1, std::memory_order_relaxed); i < job->n;
       i = job->next.fetch_add(1, std::memory_order_relaxed)) {
    job->fn(i);
    job->done.fetch_add(1, std::memory_order_release);
  }
}

void WorkPool::Dequeue(Job* job) {
  auto it = std::find(jobs_.begin(), jobs_.end(), job);
  if (it != jobs_.end()) jobs_.erase(it);
}

void WorkPool::Loop() {
  for (;;) {
    Job* job = nullptr;
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &WorkPool::StopOrJob), absl::InfiniteDuration());
      if (stop_) return;
      job = jobs_.front();
      ++job->helpers;  // the job's caller waits for this to drop before it returns
    }
    Work(job);
    MutexLock lock(&mu_);
    Dequeue(job);  // every part is taken: the other pool threads need not look at it
    --job->helpers;
  }
}

void WorkPool::ParallelFor(size_t n, absl::FunctionRef<void(size_t)> fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Job job(n, fn);
  {
    MutexLock lock(&mu_);
    jobs_.push_back(&job);
  }
  Work(&job);
  // Every part is taken; those on pool threads are usually a part's length from done.
  SpinUntil([&] { return job.done.load(std::memory_order_acquire) == n; });
  MutexLock lock(&mu_);
  Dequeue(&job);
  // A pool thread leaves the job (helpers--) only after its last part returned, so this also
  // waits for the parts still running; after it no pool thread touches `job`.
  // (Their writes are this thread's too: each part's done.fetch_add and the pool thread's
  // unlock of mu_ after it both release, and this thread acquired one of them.)
  mu_.AwaitWithTimeout(absl::Condition(&job, &Job::Left), absl::InfiniteDuration());
}

}  // namespace granary::common
