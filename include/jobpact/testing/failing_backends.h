// File: jobpact/testing/failing_backends.h
//
// Fault injection for tests (after leveldb's ErrorEnv): FailingQueueBackend
// wraps any QueueBackend and, on command, makes chosen calls fail, reports a
// failure after the change was made, runs a hook just before a call, or
// hands out the same delivery twice. FailingLockStore and
// FailingIdempotencyStore do the same for a LockStore and an
// IdempotencyStore. Everything not commanded passes through unchanged.
//
// FailNext / FailNextAfterApplying with an OK status: an OK status would
// inject nothing, so it is replaced by Unavailable("injected fault").
//
// The incidents it reproduces:
//   - "the store is down":                FailNext(kDequeue, Unavailable, 3)
//   - "crash between the side effect and the ack":
//                                         FailNext(kComplete, Unavailable)
//     (the handler ran, the idempotency result was recorded, the job stays
//     running until its lease expires and is delivered again)
//   - "the ack was written but the reply was lost":
//                                         FailNextAfterApplying(kComplete, Unavailable)
//   - "the worker stalls right before its ack" (lease expires meanwhile):
//                                         BeforeNext(kComplete, [&] { clock.Advance(...); })
//   - "the broker delivers a message twice": DeliverTwice()
//   - a lost lease: InMemoryQueueBackend::ForceExpireLease(job_id), or
//     advance the ManualClock past the visibility timeout.
//   - "the lock store is down":           locks.FailNext(LockMethod::kAcquire, Unavailable)
//   - "the idempotency store is down":    idem.FailNext(IdempotencyMethod::kClaim, Unavailable)
//   - "crash before the idempotency record is written" (the effect is done,
//     the record is not): idem.FailNext(IdempotencyMethod::kComplete, Unavailable)
//
// Example:
//   auto faulty = std::make_shared<jobpact::testing::FailingQueueBackend>(queue);
//   faulty->FailNext(jobpact::testing::QueueMethod::kComplete,
//                    jobpact::Status::Unavailable("connection reset"));
//
// Part of jobpact::testing, for users' own tests. Thread-safe.
#ifndef JOBPACT_TESTING_FAILING_BACKENDS_H_
#define JOBPACT_TESTING_FAILING_BACKENDS_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_backend.h"
#include "jobpact/queue_backend_wrapper.h"

namespace jobpact {
namespace testing {

// The QueueBackend methods that can be commanded (jobpact/queue_backend_wrapper.h).
using ::jobpact::QueueMethod;
using ::jobpact::QueueMethodName;

namespace testing_internal {
class FaultScript;
}  // namespace testing_internal

// Wraps a QueueBackend (a QueueBackendWrapper: everything not commanded
// passes through unchanged). Thread-safe.
class JOBPACT_EXPORT FailingQueueBackend final : public QueueBackendWrapper {
 public:
  // REQUIRES: base != nullptr.
  explicit FailingQueueBackend(std::shared_ptr<QueueBackend> base);
  ~FailingQueueBackend() override;

  // The next `times` calls of `method` return `status` without reaching the
  // wrapped backend (nothing changes). An OK `status` is replaced by
  // Unavailable("injected fault").
  void FailNext(QueueMethod method, Status status, int times = 1);
  // The next `times` calls of `method` reach the wrapped backend (the change
  // is made) and then report `status` to the caller (OK: as FailNext).
  void FailNextAfterApplying(QueueMethod method, Status status, int times = 1);
  // Runs `hook` once, on the calling thread with no lock held, just before
  // the next call of `method` goes on (to advance a clock, run a second
  // worker, ...). Hooks and faults queue up in the order given.
  void BeforeNext(QueueMethod method, std::function<void()> hook);
  // The next `times` Dequeue calls that return jobs return each delivery
  // twice, as a broker with at-least-once delivery may: the same lease is
  // handed out to two consumers.
  void DeliverTwice(int times = 1);
  // Drops every pending command.
  void Clear();

  // Calls of `method` so far, including failed ones.
  int Calls(QueueMethod method) const;
  // Ids of the jobs stored through this wrapper (Enqueue, EnqueueBatch,
  // duplicates excluded), in order.
  std::vector<std::string> EnqueuedJobIds() const;

  QueueBackend& base() { return target(); }

  // The calls this wrapper does more with than fault injection.
  Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) override;
  Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                  const EnqueueOptions& options) override;
  // While a FindDuplicate fault or hook is pending, these ask the store
  // without its lease-step dedup check (DequeueRequest::dedup_window), so
  // that the caller makes the FindDuplicate call the command is for.
  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) override;
  Status DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) override;

 protected:
  Status Intercept(QueueMethod method, const std::function<Status()>& call) override;

 private:
  void RecordEnqueued(const std::string& job_id);
  // `request`, less its lease-step dedup check while a FindDuplicate
  // command is pending.
  DequeueRequest ForDequeue(const DequeueRequest& request) const;

  // DeliverTwice's count and the enqueued ids, with their lock
  // (failing_backends.cc), out of this header so that the lock is the
  // library's annotated one, which clang's thread safety analysis checks.
  struct Recorded;

  const std::unique_ptr<testing_internal::FaultScript> script_;
  const std::unique_ptr<Recorded> recorded_;
};

namespace testing_internal {

// The pending commands and call counts of one wrapper, keyed by method
// number. Thread-safe.
class JOBPACT_EXPORT FaultScript {
 public:
  FaultScript();
  ~FaultScript();
  FaultScript(const FaultScript&) = delete;
  FaultScript& operator=(const FaultScript&) = delete;

  struct Plan {
    std::vector<std::function<void()>> hooks;
    bool fail_before = false;
    bool fail_after = false;
    Status status;
  };
  void FailNext(int method, Status status, int times, bool after_applying);
  void BeforeNext(int method, std::function<void()> hook);
  void Clear();
  int Calls(int method) const;
  // True if a fault or hook is queued for `method`.
  bool Pending(int method) const;
  // Counts the call and takes what applies to it: the hooks queued before
  // the first fault, then at most one fault.
  Plan Take(int method);

  // Runs `f` under the plan of one call of `method`.
  template <typename R, typename F>
  R Call(int method, F&& f) {
    Plan plan = Take(method);
    for (auto& hook : plan.hooks) {
      if (hook) hook();
    }
    if (plan.fail_before) return plan.status;
    R r = f();
    if (plan.fail_after) return plan.status;
    return r;
  }

 private:
  // The commands and counts, with their lock (failing_backends.cc).
  struct State;
  const std::unique_ptr<State> state_;
};

}  // namespace testing_internal

// The LockStore methods that can be commanded.
enum class LockMethod { kAcquire, kRenew, kRelease, kInspect, kList };
// "Acquire", "Renew", "Release", "Inspect", "List".
JOBPACT_EXPORT std::string_view LockMethodName(LockMethod m);

// Wraps a LockStore; same commands as FailingQueueBackend. Thread-safe.
//   locks->FailNext(LockMethod::kAcquire, Status::Unavailable("redis down"));
class JOBPACT_EXPORT FailingLockStore final : public LockStore {
 public:
  // REQUIRES: base != nullptr.
  explicit FailingLockStore(std::shared_ptr<LockStore> base);
  ~FailingLockStore() override;

  // As FailingQueueBackend's (an OK status becomes Unavailable("injected fault")).
  void FailNext(LockMethod method, Status status, int times = 1);
  void FailNextAfterApplying(LockMethod method, Status status, int times = 1);
  void BeforeNext(LockMethod method, std::function<void()> hook);
  void Clear();
  int Calls(LockMethod method) const;

  LockStore& base() { return *base_; }

  // LockStore.
  std::string_view Name() const override { return base_->Name(); }
  Result<LockLease> Acquire(std::string_view key, std::string_view owner, Duration ttl) override;
  Result<LockLease> Renew(std::string_view key, std::string_view owner, Duration ttl) override;
  Status Release(std::string_view key, std::string_view owner) override;
  Result<std::optional<LockLease>> Inspect(std::string_view key) override;
  Result<std::vector<LockLease>> List(std::size_t limit) override;

 private:
  const std::shared_ptr<LockStore> base_;
  testing_internal::FaultScript script_;
};

// The IdempotencyStore methods that can be commanded.
enum class IdempotencyMethod { kClaim, kComplete, kRelease, kExtend, kGet, kPurgeExpired };
// "Claim", "Complete", "Release", "Extend", "Get", "PurgeExpired".
JOBPACT_EXPORT std::string_view IdempotencyMethodName(IdempotencyMethod m);

// Wraps an IdempotencyStore; same commands as FailingQueueBackend.
// Thread-safe.
//   // The effect runs, then recording its result fails:
//   idem->FailNext(IdempotencyMethod::kComplete, Status::Unavailable("timeout"));
class JOBPACT_EXPORT FailingIdempotencyStore final : public IdempotencyStore {
 public:
  // REQUIRES: base != nullptr.
  explicit FailingIdempotencyStore(std::shared_ptr<IdempotencyStore> base);
  ~FailingIdempotencyStore() override;

  // As FailingQueueBackend's (an OK status becomes Unavailable("injected fault")).
  void FailNext(IdempotencyMethod method, Status status, int times = 1);
  void FailNextAfterApplying(IdempotencyMethod method, Status status, int times = 1);
  void BeforeNext(IdempotencyMethod method, std::function<void()> hook);
  void Clear();
  int Calls(IdempotencyMethod method) const;

  IdempotencyStore& base() { return *base_; }

  // IdempotencyStore.
  std::string_view Name() const override { return base_->Name(); }
  Result<ClaimOutcome> Claim(std::string_view key, std::string_view owner,
                             Duration claim_ttl) override;
  Status Complete(std::string_view key, std::string_view owner, std::string_view result,
                  Duration retention) override;
  Status Release(std::string_view key, std::string_view owner) override;
  Status Extend(std::string_view key, std::string_view owner, Duration claim_ttl) override;
  Result<std::optional<IdempotencyRecord>> Get(std::string_view key) override;
  Result<int> PurgeExpired() override;

 private:
  const std::shared_ptr<IdempotencyStore> base_;
  testing_internal::FaultScript script_;
};

}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_TESTING_FAILING_BACKENDS_H_
