#pragma once

// granary::common::Mutex: absl::Mutex that ThreadSanitizer can see.
//
// Debian's libabsl is built without TSan's annotations, so under -fsanitize=thread absl::Mutex
// gives no happens-before edges and every access it guards reads as a race. These wrappers tell
// TSan about each acquire and release (__tsan_mutex_*). In other builds the annotations compile
// to nothing and each call is the plain absl one, inlined.

#include <cstdlib>
#include <cstring>

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#ifdef ABSL_HAVE_THREAD_SANITIZER
#include <sanitizer/tsan_interface.h>
#endif

namespace granary::common {

namespace internal_mutex {
#ifdef ABSL_HAVE_THREAD_SANITIZER
inline constexpr unsigned kRead = __tsan_mutex_read_lock;
inline constexpr unsigned kTry = __tsan_mutex_try_lock;
inline constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;
inline void PreLock(void* mu, unsigned flags) { __tsan_mutex_pre_lock(mu, flags); }
inline void PostLock(void* mu, unsigned flags) { __tsan_mutex_post_lock(mu, flags, 0); }
inline void PreUnlock(void* mu, unsigned flags) { __tsan_mutex_pre_unlock(mu, flags); }
inline void PostUnlock(void* mu, unsigned flags) { __tsan_mutex_post_unlock(mu, flags); }
inline void Release(void* addr) { __tsan_release(addr); }
inline void Acquire(void* addr) { __tsan_acquire(addr); }
#else
inline constexpr unsigned kRead = 0;
inline constexpr unsigned kTry = 0;
inline constexpr unsigned kTryFailed = 0;
inline void PreLock(void*, unsigned) {}
inline void PostLock(void*, unsigned) {}
inline void PreUnlock(void*, unsigned) {}
inline void PostUnlock(void*, unsigned) {}
inline void Release(void*) {}
inline void Acquire(void*) {}
#endif
}  // namespace internal_mutex

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    internal_mutex::PreLock(this, 0);
    mu_.Lock();
    internal_mutex::PostLock(this, 0);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    internal_mutex::PreUnlock(this, 0);
    mu_.Unlock();
    internal_mutex::PostUnlock(this, 0);
  }
  // True when it took the mutex (without waiting).
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    internal_mutex::PreLock(this, internal_mutex::kTry);
    const bool got = mu_.TryLock();
    internal_mutex::PostLock(this, internal_mutex::kTry | (got ? 0 : internal_mutex::kTryFailed));
    return got;
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() {
    internal_mutex::PreLock(this, internal_mutex::kRead);
    mu_.ReaderLock();
    internal_mutex::PostLock(this, internal_mutex::kRead);
  }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() {
    internal_mutex::PreUnlock(this, internal_mutex::kRead);
    mu_.ReaderUnlock();
    internal_mutex::PostUnlock(this, internal_mutex::kRead);
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() { mu_.AssertHeld(); }
  void AssertReaderHeld() const ABSL_ASSERT_SHARED_LOCK() { mu_.AssertReaderHeld(); }

  // Held exclusively on entry and on return; released while it waits. True when `cond` held.
  // Under TSan the wait counts as a release and a re-acquire. absl evaluates `cond` with the
  // mutex held, but on whichever thread is unlocking it, while TSan was told the mutex is free:
  // each evaluation therefore acquires and releases the mutex for TSan, so that it is ordered
  // with the writes that other holders make.
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    internal_mutex::PreUnlock(this, 0);
    internal_mutex::PostUnlock(this, 0);
#ifdef ABSL_HAVE_THREAD_SANITIZER
    struct Annotated {
      Mutex* mu;
      const absl::Condition* cond;
      static bool Eval(Annotated* a) {
        internal_mutex::Acquire(a->mu);
        const bool held = a->cond->Eval();
        internal_mutex::Release(a->mu);
        return held;
      }
    } annotated{this, &cond};
    bool met = mu_.AwaitWithTimeout(absl::Condition(&Annotated::Eval, &annotated), timeout);
#else
    bool met = mu_.AwaitWithTimeout(cond, timeout);
#endif
    internal_mutex::PreLock(this, 0);
    internal_mutex::PostLock(this, 0);
    return met;
  }

 private:
  absl::Mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// absl::Notification, visible to TSan: Notify happens-before every return of a wait that saw it.
class Notification {
 public:
  void Notify() {
    internal_mutex::Release(this);
    n_.Notify();
  }
  void WaitForNotification() const {
    n_.WaitForNotification();
    internal_mutex::Acquire(const_cast<Notification*>(this));
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    bool done = n_.WaitForNotificationWithTimeout(timeout);
    if (done) internal_mutex::Acquire(const_cast<Notification*>(this));
    return done;
  }
  bool HasBeenNotified() const {
    bool done = n_.HasBeenNotified();
    if (done) internal_mutex::Acquire(const_cast<Notification*>(this));
    return done;
  }

 private:
  absl::Notification n_;
};

// Debian's libabsl is built without NDEBUG, so absl::Mutex checks every acquisition against a
// process-wide lock-order graph, under one global spin lock: measurable on the master's hot
// path (perf: GraphCycles::GetId at 2-3% of the master's samples in `granary_bench meta`).
// The daemons, the CLI and the benchmark turn the check off at start (their main());
// GRANARY_MUTEX_DEADLOCK_DETECTION=1 keeps it on. The client library never calls this: the
// setting belongs to the program that embeds it. Unit tests never call it, so they keep it.
inline void ConfigureMutexDeadlockDetection() {
  const char* keep = std::getenv("GRANARY_MUTEX_DEADLOCK_DETECTION");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace granary::common
