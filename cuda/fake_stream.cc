// The fake backend's streams and events (fake_stream.h).

#include "cuda/fake_stream.h"

#include <utility>

namespace granary::cuda::internal {
namespace {

// The absl::Condition of a wait on `*value` reaching `target`.
struct AtLeast {
  const uint64_t* value;
  uint64_t target;
  static bool Reached(AtLeast* a) { return *a->value >= a->target; }
};

}  // namespace

FakeStream::FakeStream(int device) : device_(device), worker_([this] { Run(); }) {}

FakeStream::~FakeStream() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.join();
}

void FakeStream::Enqueue(absl::Duration delay, Op op) {
  MutexLock lock(&mu_);
  queue_.push_back(Item{delay, std::move(op)});
  ++enqueued_;
}

absl::Status FakeStream::Synchronize() {
  MutexLock lock(&mu_);
  AtLeast cond{&completed_, enqueued_};
  mu_.AwaitWithTimeout(absl::Condition(&AtLeast::Reached, &cond), absl::InfiniteDuration());
  return std::exchange(first_error_, absl::OkStatus());
}

void FakeStream::Run() {
  struct HasWork {
    static bool Check(FakeStream* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return s->stopping_ || !s->queue_.empty();
    }
  };
  for (;;) {
    Item item;
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&HasWork::Check, this), absl::InfiniteDuration());
      // Stopping drains the queue first: DestroyStream's work still completes.
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (item.delay > absl::ZeroDuration()) absl::SleepFor(item.delay);
    absl::Status status = item.op();
    MutexLock lock(&mu_);
    if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
    ++completed_;
  }
}

uint64_t FakeEvent::BeginRecord() {
  MutexLock lock(&mu_);
  return ++recorded_;
}

void FakeEvent::MarkDone(uint64_t number, const absl::Status& status) {
  MutexLock lock(&mu_);
  if (number > done_) done_ = number;
  if (!status.ok()) status_ = status;
}

absl::StatusOr<bool> FakeEvent::Query() {
  MutexLock lock(&mu_);
  if (!DoneLocked()) return false;
  if (!status_.ok()) return status_;
  return true;
}

uint64_t FakeEvent::LastRecord() {
  MutexLock lock(&mu_);
  return recorded_;
}

absl::Status FakeEvent::WaitFor(uint64_t number) {
  MutexLock lock(&mu_);
  AtLeast cond{&done_, number};
  mu_.AwaitWithTimeout(absl::Condition(&AtLeast::Reached, &cond), absl::InfiniteDuration());
  return status_;
}

}  // namespace granary::cuda::internal
