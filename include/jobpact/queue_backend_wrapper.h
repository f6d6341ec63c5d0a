// File: jobpact/queue_backend_wrapper.h
//
// QueueBackendWrapper forwards every QueueBackend and QueueAdmin method to
// another backend (after leveldb's EnvWrapper), so that a decorator -- a
// fault injector, a tracer, a metrics counter -- overrides only what it
// changes. Every
// forwarded call goes through Intercept(), one hook that sees which method
// is called and can run code before and after it, or answer in its place.
//
// Example:
//   class CountingBackend : public jobpact::QueueBackendWrapper {
//    public:
//     using QueueBackendWrapper::QueueBackendWrapper;
//     std::atomic<int> calls{0};
//    protected:
//     jobpact::Status Intercept(jobpact::QueueMethod m,
//                               const std::function<jobpact::Status()>& call) override {
//       ++calls;
//       return call();
//     }
//   };
//
// Thread-safe if the target is and Intercept is.
#ifndef JOBPACT_QUEUE_BACKEND_WRAPPER_H_
#define JOBPACT_QUEUE_BACKEND_WRAPPER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"

namespace jobpact {

// The QueueBackend methods, as Intercept() names them.
enum class QueueMethod {
  kEnqueue,
  kEnqueueBatch,
  kDeadLetterInvalid,
  kDequeue,
  kRenew,
  kComplete,
  kCompleteBatch,
  kRecoverExpiredLeases,
  kGet,
  kFindDuplicate,
  kListDeadLetters,
  kGetDeadLetter,
  kReplay,
  kDiscard,
  kPurgeDeadLetters,
  kPurgeFinished,
  kStats,
  kListJobs,
  kCancel,
  kReadControl,
  kSetControl,
  kClearControl,
  kControlAudit,
  kPublishPolicies,
  kReadPolicies,
  kTrimFinished,
};
// "Enqueue", "Complete", ...
JOBPACT_EXPORT std::string_view QueueMethodName(QueueMethod m);

class JOBPACT_EXPORT QueueBackendWrapper : public QueueBackend, public QueueAdmin {
 public:
  // REQUIRES: target != nullptr. The operator side forwards to `admin`, by
  // default the target's own (every StoreBackend has one); without one, the
  // QueueAdmin calls return kUnimplemented.
  explicit QueueBackendWrapper(std::shared_ptr<QueueBackend> target,
                               std::shared_ptr<QueueAdmin> admin = nullptr);
  ~QueueBackendWrapper() override;

  QueueBackend& target() const { return *target_; }

  std::string_view Name() const override { return target_->Name(); }
  Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) override;
  Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                  const EnqueueOptions& options) override;
  Result<std::string> DeadLetterInvalid(std::string_view raw,
                                        const std::vector<FieldError>& problems) override;
  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) override;
  // Forwarded as QueueMethod::kDequeue, like Dequeue.
  Status DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) override;
  // Forwarded as is (not intercepted: it changes nothing).
  Result<bool> WaitForWork(Duration timeout) override { return target_->WaitForWork(timeout); }
  bool GroupsCompletions() const override { return target_->GroupsCompletions(); }
  bool CompletesGuards(const LockStore& locks, const IdempotencyStore& idempotency) const override {
    return target_->CompletesGuards(locks, idempotency);
  }
  Result<LockLease> AcquireLockAndClaim(std::string_view lock_key, std::string_view idempotency_key,
                                        std::string_view owner, Duration ttl,
                                        ClaimOutcome* claim) override {
    return target_->AcquireLockAndClaim(lock_key, idempotency_key, owner, ttl, claim);
  }
  Result<Lease> Renew(const Lease& lease, Duration extension, std::string_view checkpoint) override;
  Status Complete(const Delivery& delivery, const Completion& completion) override;
  // Forwarded as QueueMethod::kComplete, like the const& form.
  Status Complete(Delivery&& delivery, const Completion& completion) override;
  std::vector<Status> CompleteBatch(const std::vector<CompletionRequest>& requests) override;
  Result<std::vector<LeaseRecovery>> RecoverExpiredLeases(int max_recoveries) override;
  Result<std::optional<std::string>> FindDuplicate(std::string_view dedup_key,
                                                   std::string_view self_job_id,
                                                   TimePoint since) override;

  // --- QueueAdmin ---
  Result<JobRecord> Get(std::string_view job_id) override;
  Result<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override;
  Result<QueueStats> Stats() override;
  Result<CancelOutcome> Cancel(std::string_view job_id, const DlqAction& action) override;
  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& filter) override;
  Result<DlqEntry> GetDeadLetter(std::string_view job_id) override;
  Status Replay(std::string_view job_id, const DlqAction& action) override;
  Status Discard(std::string_view job_id, const DlqAction& action) override;
  Result<int> PurgeDeadLetters(TimePoint older_than) override;
  Result<int> PurgeFinished(TimePoint older_than) override;
  Result<int> TrimFinished(const FinishedRetention& keep) override;
  Result<ControlState> ReadControl() override;
  Status SetControl(const ControlRule& rule) override;
  Status ClearControl(const ControlRuleKey& key, std::string_view actor,
                      std::string_view reason) override;
  Result<std::vector<std::string>> ControlAudit(std::size_t limit) override;
  Status PublishPolicies(const std::vector<PublishedPolicy>& policies) override;
  Result<std::vector<PublishedPolicy>> ReadPolicies() override;

 protected:
  // Runs for every forwarded call, on the caller's thread. `call` performs
  // the call on the target and returns its status; the default just calls
  // it. Returning the status of `call` gives the caller the target's result;
  // returning another non-OK status gives the caller that status instead
  // (whether `call` ran or not: a fault before or after the change).
  virtual Status Intercept(QueueMethod method, const std::function<Status()>& call);

 private:
  template <typename R, typename F>
  R Forward(QueueMethod method, F&& f);

  class NoAdmin;
  QueueAdmin& AdminOrNone();

  const std::shared_ptr<QueueBackend> target_;
  const std::shared_ptr<QueueAdmin> admin_;  // Null: none.
};

}  // namespace jobpact

#endif  // JOBPACT_QUEUE_BACKEND_WRAPPER_H_
