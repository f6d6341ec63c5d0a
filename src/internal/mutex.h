// Private: the mutex of the in-memory stores, annotated for clang's thread
// safety analysis (-Wthread-safety), in the manner of abseil's Mutex.
//
// Why not std::mutex: the stores' critical sections are short (a lease or
// a completion, a microsecond or two), and two workers meet in them on every
// job. std::mutex puts a waiter to sleep in the kernel at once, and its
// holder then pays a futex wake (an inter-processor interrupt under a
// hypervisor) on unlock: measured on the 2-worker drain, that hand-off cost
// more CPU than the jobs themselves (docs/benchmarks.md). This one is
// glibc's adaptive mutex (PTHREAD_MUTEX_ADAPTIVE_NP): a waiter first spins
// a bounded number of times (glibc.pthread.mutex_spin_count) for a holder
// that is running, then sleeps as std::mutex does. Same fairness, same
// futex, no hand-made lock.
#ifndef JOBPACT_SRC_INTERNAL_MUTEX_H_
#define JOBPACT_SRC_INTERNAL_MUTEX_H_

#include <pthread.h>

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

// Holds a Mutex for its scope (std::lock_guard with the annotations).
class JOBPACT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) JOBPACT_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() JOBPACT_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_MUTEX_H_
