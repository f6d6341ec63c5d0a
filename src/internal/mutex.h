// Private: the library's mutexes, annotated for clang's thread safety
// analysis (-Wthread-safety), in the manner of abseil's Mutex. Every lock in
// src/ is one of these (or, for the metrics sinks' stripes, a spin lock
// annotated the same way: series_table.h's StripeLock), so that clang
// checks each member's GUARDED_BY and each helper's REQUIRES
// (CMakeLists.txt makes a violation an error; scripts/thread_safety
// builds every library target with it).
//
// Mutex: the in-memory stores' lock. Why not std::mutex: the stores'
// critical sections are short (a lease or a completion, a microsecond or
// two), and two workers meet in them on every job. std::mutex puts a
// waiter to sleep in the kernel at once, and its holder then pays a futex
// wake (an inter-processor interrupt under a hypervisor) on unlock:
// measured on the 2-worker drain, that hand-off cost more CPU than the
// jobs themselves (docs/benchmarks.md). This one is glibc's adaptive mutex
// (PTHREAD_MUTEX_ADAPTIVE_NP): a waiter first spins a bounded number of
// times (glibc.pthread.mutex_spin_count) for a holder that is running,
// then sleeps as std::mutex does. Same fairness, same futex, no hand-made
// lock.
//
// PlainMutex: std::mutex with the annotations, for every other lock. A
// CondVar waits on it (std::condition_variable needs a std::mutex, and so
// does Clock::WaitUntil, the public hook through which a ManualClock wakes
// timed waits). The locks that were std::mutex before the analysis came
// stay std::mutex underneath: the analysis changes no lock's behaviour, and
// whether spinning pays off on one of them is a measurement, not a guess.
//
// SharedMutex: std::shared_mutex with the annotations (registries read on
// every job, written once per new key).
#ifndef JOBPACT_SRC_INTERNAL_MUTEX_H_
#define JOBPACT_SRC_INTERNAL_MUTEX_H_

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "jobpact/clock.h"

#if defined(__clang__)
#define JOBPACT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define JOBPACT_THREAD_ANNOTATION(x)
#endif

#define JOBPACT_CAPABILITY(x) JOBPACT_THREAD_ANNOTATION(capability(x))
#define JOBPACT_SCOPED_CAPABILITY JOBPACT_THREAD_ANNOTATION(scoped_lockable)
#define JOBPACT_GUARDED_BY(x) JOBPACT_THREAD_ANNOTATION(guarded_by(x))
#define JOBPACT_PT_GUARDED_BY(x) JOBPACT_THREAD_ANNOTATION(pt_guarded_by(x))
#define JOBPACT_REQUIRES(...) JOBPACT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define JOBPACT_ACQUIRE(...) JOBPACT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define JOBPACT_RELEASE(...) JOBPACT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define JOBPACT_TRY_ACQUIRE(...) JOBPACT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define JOBPACT_EXCLUDES(...) JOBPACT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define JOBPACT_ACQUIRE_SHARED(...) \
  JOBPACT_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define JOBPACT_RELEASE_SHARED(...) \
  JOBPACT_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define JOBPACT_REQUIRES_SHARED(...) \
  JOBPACT_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// Turns the analysis off for one function. Each use says why next to it.
#define JOBPACT_NO_THREAD_SAFETY_ANALYSIS JOBPACT_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace jobpact {
namespace internal {

class JOBPACT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&mu_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~Mutex() { pthread_mutex_destroy(&mu_); }
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() JOBPACT_ACQUIRE() { pthread_mutex_lock(&mu_); }
  void unlock() JOBPACT_RELEASE() { pthread_mutex_unlock(&mu_); }
  bool try_lock() JOBPACT_TRY_ACQUIRE(true) { return pthread_mutex_trylock(&mu_) == 0; }

 private:
  pthread_mutex_t mu_;
};

// std::mutex with the annotations (see the top of the file). Thread-safe.
class JOBPACT_CAPABILITY("mutex") PlainMutex {
 public:
  PlainMutex() = default;
  PlainMutex(const PlainMutex&) = delete;
  PlainMutex& operator=(const PlainMutex&) = delete;

  void lock() JOBPACT_ACQUIRE() { mu_.lock(); }
  void unlock() JOBPACT_RELEASE() { mu_.unlock(); }
  bool try_lock() JOBPACT_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// std::shared_mutex with the annotations. Thread-safe.
class JOBPACT_CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() JOBPACT_ACQUIRE() { mu_.lock(); }
  void unlock() JOBPACT_RELEASE() { mu_.unlock(); }
  void lock_shared() JOBPACT_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() JOBPACT_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a mutex (Mutex, PlainMutex, SharedMutex in exclusive mode, or any
// annotated lockable) for its scope: std::lock_guard with the annotations.
// The type is deduced: `internal::MutexLock lock(mu_);`.
template <typename M>
class JOBPACT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(M& mu) JOBPACT_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() JOBPACT_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  M& mu_;
};

// Lets go of a held mutex for its scope and takes it back at the end, also
// when an exception leaves the scope (a blocking call made without the lock
// inside a MutexLock's scope).
template <typename M>
class JOBPACT_SCOPED_CAPABILITY MutexUnlock {
 public:
  explicit MutexUnlock(M& mu) JOBPACT_RELEASE(mu) : mu_(mu) { mu_.unlock(); }
  // RELEASE() as on every scoped destructor: clang remembers that this
  // scope let go of `mu` and counts its end as taking it back.
  ~MutexUnlock() JOBPACT_RELEASE() { mu_.lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  M& mu_;
};

// Holds a SharedMutex in shared mode for its scope.
class JOBPACT_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex& mu) JOBPACT_ACQUIRE_SHARED(mu) : mu_(mu) {
    mu_.lock_shared();
  }
  ~ReaderMutexLock() JOBPACT_RELEASE() { mu_.unlock_shared(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A condition variable over a PlainMutex: std::condition_variable with the
// annotations. Every wait REQUIRES the mutex, holds it again on return and
// may return spuriously, so callers wait in a loop over their condition,
// written out (not a predicate lambda: the analysis checks a lambda's body
// as a function of its own, with no lock held). Thread-safe.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Waits until notified.
  void Wait(PlainMutex& mu) JOBPACT_REQUIRES(mu) {
    Adopted l(mu);
    cv_.wait(l.lock);
  }
  // Waits until notified or `deadline` on the steady clock (real time, for
  // waits that are not the Clock's: a socket's or a file's timeout). False
  // on timeout.
  bool WaitUntil(PlainMutex& mu, std::chrono::steady_clock::time_point deadline)
      JOBPACT_REQUIRES(mu) {
    Adopted l(mu);
    return cv_.wait_until(l.lock, deadline) == std::cv_status::no_timeout;
  }
  // Waits until `done()` or until `timeout` has passed in real time, which
  // the condition variable keeps (nothing here reads a clock). `done` runs
  // with `mu` held. The value of `done()` at the end.
  template <typename Done>
  bool WaitFor(PlainMutex& mu, Duration timeout, Done done) JOBPACT_REQUIRES(mu) {
    Adopted l(mu);
    return cv_.wait_for(l.lock, timeout, std::move(done));
  }
  // Waits until notified or clock.Now() >= deadline, through
  // Clock::WaitUntil: the SystemClock waits on the steady clock, a
  // ManualClock wakes it when a test advances time past `deadline`.
  void WaitUntil(PlainMutex& mu, Clock& clock, TimePoint deadline) JOBPACT_REQUIRES(mu) {
    Adopted l(mu);
    clock.WaitUntil(l.lock, cv_, deadline);
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // The caller's hold on the mutex, lent to std::condition_variable for
  // the wait and handed back (not unlocked) at the end, also if the wait
  // throws: the caller's MutexLock still owns it.
  struct Adopted {
    explicit Adopted(PlainMutex& mu) : lock(mu.mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    std::unique_lock<std::mutex> lock;
  };

  std::condition_variable cv_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_MUTEX_H_
