// The fake backend's streams and events (fake_stream.h).

#include "device/fake/fake_stream.h"

#include <utility>

namespace granary::device::internal {
namespace {

// The absl::Condition of a wait on `*value` reaching `target`.
struct AtLeast {
  const uint64_t* value;
  uint64_t target;
  static bool Reached(AtLeast* a) { return *a->value >= a->target; }
};

}  // namespace

uint64_t FakeHold::Queue() {
  common::MutexLock lock(&mu_);
  return ++queued_;
}

void FakeHold::ReleaseAll() {
  common::MutexLock lock(&mu_);
  released_ = queued_;
}

void FakeHold::AwaitTurn(uint64_t number, absl::Time queued) {
  common::MutexLock lock(&mu_);
  AtLeast cond{&released_, number};
  mu_.AwaitWithTimeout(absl::Condition(&AtLeast::Reached, &cond), queued + hold_ - absl::Now());
}

FakeStream::FakeStream(int device, std::shared_ptr<FakeHold> hold)
    : device_(device), hold_(std::move(hold)), worker_([this] { Run(); }) {}

FakeStream::~FakeStream() {
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (hold_ != nullptr) hold_->ReleaseAll();
  worker_.join();
}

void FakeStream::Enqueue(absl::Duration delay, Op op) {
  Item item{delay, std::move(op)};
  if (hold_ != nullptr) {
    item.number = hold_->Queue();
    item.queued = absl::Now();
  }
  common::MutexLock lock(&mu_);
  queue_.push_back(std::move(item));
  ++enqueued_;
}

absl::Status FakeStream::Synchronize() {
  if (hold_ != nullptr) hold_->ReleaseAll();
  common::MutexLock lock(&mu_);
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
      common::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&HasWork::Check, this), absl::InfiniteDuration());
      // Stopping drains the queue first: DestroyStream's work still completes.
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (hold_ != nullptr) hold_->AwaitTurn(item.number, item.queued);
    if (item.delay > absl::ZeroDuration()) absl::SleepFor(item.delay);
    absl::Status status = item.op();
    common::MutexLock lock(&mu_);
    if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
    ++completed_;
  }
}

uint64_t FakeEvent::BeginRecord(std::shared_ptr<FakeHold> hold) {
  common::MutexLock lock(&mu_);
  hold_ = std::move(hold);
  return ++recorded_;
}

void FakeEvent::ReleaseHeld() {
  std::shared_ptr<FakeHold> hold;
  {
    common::MutexLock lock(&mu_);
    hold = hold_;
  }
  if (hold != nullptr) hold->ReleaseAll();
}

void FakeEvent::MarkDone(uint64_t number, const absl::Status& status) {
  common::MutexLock lock(&mu_);
  if (number > done_) done_ = number;
  if (!status.ok()) status_ = status;
}

absl::StatusOr<bool> FakeEvent::Query() {
  common::MutexLock lock(&mu_);
  if (!DoneLocked()) return false;
  if (!status_.ok()) return status_;
  return true;
}

uint64_t FakeEvent::LastRecord() {
  common::MutexLock lock(&mu_);
  return recorded_;
}

absl::Status FakeEvent::WaitFor(uint64_t number) {
  common::MutexLock lock(&mu_);
  AtLeast cond{&done_, number};
  mu_.AwaitWithTimeout(absl::Condition(&AtLeast::Reached, &cond), absl::InfiniteDuration());
  return status_;
}

}  // namespace granary::device::internal
