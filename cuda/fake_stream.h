#pragma once

// Private to cuda/: the fake backend's streams and events (fake_backend.h).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace granary::cuda::internal {

// One stream: a worker thread that runs the queued operations in FIFO order, each after its
// delay. Owned by the fake backend through the handle it gave out; lives until DestroyStream,
// whose destructor lets the queue drain and joins the worker. Thread-safe. Cost per operation:
// one std::function (a heap allocation when its captures are large) and two lock round trips.
class FakeStream {
 public:
  using Op = std::function<absl::Status()>;

  explicit FakeStream(int device);
  ~FakeStream();
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;

  int device() const { return device_; }

  // Queues `op`; the worker sleeps `delay`, then runs it. Its error, if any, is kept for
  // Synchronize.
  void Enqueue(absl::Duration delay, Op op);

  // Waits until every operation queued before the call has run; returns the first error any
  // operation reported since the last Synchronize (and forgets it).
  [[nodiscard]] absl::Status Synchronize();

 private:
  struct Item {
    absl::Duration delay;
    Op op;
  };

  void Run();

  const int device_;
  Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: starts after the members above exist
};

// One event. Shared between its handle and the stream operations that complete it, so that
// destroying an event with a record in flight is safe. Thread-safe.
class FakeEvent {
 public:
  // Starts a new recording; returns its number, which MarkDone(number) completes.
  uint64_t BeginRecord();
  void MarkDone(uint64_t number, const absl::Status& status);
  // True when the last recording has completed (or there was none); its error, if it failed.
  absl::StatusOr<bool> Query();
  // The number of the latest recording (0: none yet).
  uint64_t LastRecord();
  // Blocks until recording `number` has completed; returns the error of the recordings, if any.
  absl::Status WaitFor(uint64_t number);

 private:
  bool DoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= recorded_; }

  Mutex mu_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::cuda::internal
