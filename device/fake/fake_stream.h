#pragma once

// Private to the fake backend (fake_backend.h): its streams and events.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace granary::device::internal {

// What holds an engine stream's operations back (FakeBackend::CreateEngineStream): an operation
// runs once released (its stream synchronized, or an event recorded on the stream waited for) or
// once `hold` has passed since it was queued, as an engine's kernels finish on their own time.
// Shared by the stream and the events recorded on it. Thread-safe.
class FakeHold {
 public:
  explicit FakeHold(absl::Duration hold) : hold_(hold) {}
  // Numbers the next operation of the stream.
  uint64_t Queue();
  // Every operation queued so far may run.
  void ReleaseAll();
  // Blocks until operation `number`, queued at `queued`, may run.
  void AwaitTurn(uint64_t number, absl::Time queued);

 private:
  const absl::Duration hold_;
  common::Mutex mu_;
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;
};

// One stream: a worker thread that runs the queued operations in FIFO order, each after its
// delay (and, for an engine stream, once its FakeHold lets it). Owned by the fake backend through
// the handle it gave out; lives until DestroyStream, whose destructor lets the queue drain and
// joins the worker. Thread-safe. Cost per operation: one std::function (a heap allocation when its
// captures are large) and two lock round trips.
class FakeStream {
 public:
  using Op = std::function<absl::Status()>;

  // `hold`: an engine stream's (null: an ordinary stream).
  explicit FakeStream(int device, std::shared_ptr<FakeHold> hold = nullptr);
  ~FakeStream();
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;

  int device() const { return device_; }
  const std::shared_ptr<FakeHold>& hold() const { return hold_; }

  // Queues `op`; the worker sleeps `delay`, then runs it. Its error, if any, is kept for
  // Synchronize.
  void Enqueue(absl::Duration delay, Op op);

  // Waits until every operation queued before the call has run (releasing them on an engine
  // stream); returns the first error any operation reported since the last Synchronize (and
  // forgets it).
  [[nodiscard]] absl::Status Synchronize();

 private:
  struct Item {
    absl::Duration delay;
    Op op;
    uint64_t number = 0;  // FakeHold::Queue's, on an engine stream
    absl::Time queued;
  };

  void Run();

  const int device_;
  const std::shared_ptr<FakeHold> hold_;
  common::Mutex mu_;
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
  // Starts a new recording; returns its number, which MarkDone(number) completes. `hold`: the
  // engine stream's it is recorded on (null for an ordinary stream), released by ReleaseHeld.
  uint64_t BeginRecord(std::shared_ptr<FakeHold> hold = nullptr);
  // A wait for the event lets the engine stream's held work run (FakeHold::ReleaseAll).
  void ReleaseHeld();
  void MarkDone(uint64_t number, const absl::Status& status);
  // True when the last recording has completed (or there was none); its error, if it failed.
  absl::StatusOr<bool> Query();
  // The number of the latest recording (0: none yet).
  uint64_t LastRecord();
  // Blocks until recording `number` has completed; returns the error of the recordings, if any.
  absl::Status WaitFor(uint64_t number);

 private:
  bool DoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= recorded_; }

  common::Mutex mu_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FakeHold> hold_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::device::internal
