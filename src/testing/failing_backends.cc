#include "jobpact/testing/failing_backends.h"

#include <utility>

namespace jobpact {
namespace testing {

std::string_view QueueMethodName(QueueMethod m) {
  switch (m) {
    case QueueMethod::kEnqueue:
      return "Enqueue";
    case QueueMethod::kEnqueueBatch:
      return "EnqueueBatch";
    case QueueMethod::kDeadLetterInvalid:
      return "DeadLetterInvalid";
    case QueueMethod::kDequeue:
      return "Dequeue";
    case QueueMethod::kRenew:
      return "Renew";
    case QueueMethod::kComplete:
      return "Complete";
    case QueueMethod::kRecoverExpiredLeases:
      return "RecoverExpiredLeases";
    case QueueMethod::kGet:
      return "Get";
    case QueueMethod::kFindDuplicate:
      return "FindDuplicate";
    case QueueMethod::kListDeadLetters:
      return "ListDeadLetters";
    case QueueMethod::kGetDeadLetter:
      return "GetDeadLetter";
    case QueueMethod::kReplay:
      return "Replay";
    case QueueMethod::kDiscard:
      return "Discard";
    case QueueMethod::kPurgeDeadLetters:
      return "PurgeDeadLetters";
    case QueueMethod::kPurgeFinished:
      return "PurgeFinished";
    case QueueMethod::kStats:
      return "Stats";
  }
  return "?";
}

FailingQueueBackend::FailingQueueBackend(std::shared_ptr<QueueBackend> base)
    : base_(std::move(base)) {}

FailingQueueBackend::~FailingQueueBackend() = default;

void FailingQueueBackend::FailNext(QueueMethod method, Status status, int times) {
  if (status.ok()) status = Status::Unavailable("injected fault");
  std::lock_guard<std::mutex> l(mu_);
  for (int i = 0; i < times; ++i) {
    commands_[method].push_back(Command{Command::Kind::kFailBefore, status, nullptr});
  }
}

void FailingQueueBackend::FailNextAfterApplying(QueueMethod method, Status status, int times) {
  if (status.ok()) status = Status::Unavailable("injected fault");
  std::lock_guard<std::mutex> l(mu_);
  for (int i = 0; i < times; ++i) {
    commands_[method].push_back(Command{Command::Kind::kFailAfter, status, nullptr});
  }
}

void FailingQueueBackend::BeforeNext(QueueMethod method, std::function<void()> hook) {
  std::lock_guard<std::mutex> l(mu_);
  commands_[method].push_back(Command{Command::Kind::kHook, Status(), std::move(hook)});
}

void FailingQueueBackend::DeliverTwice(int times) {
  std::lock_guard<std::mutex> l(mu_);
  deliver_twice_ += times;
}

void FailingQueueBackend::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  commands_.clear();
  deliver_twice_ = 0;
}

int FailingQueueBackend::Calls(QueueMethod method) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

std::vector<std::string> FailingQueueBackend::EnqueuedJobIds() const {
  std::lock_guard<std::mutex> l(mu_);
  return enqueued_;
}

void FailingQueueBackend::RecordEnqueued(const std::string& job_id) {
  std::lock_guard<std::mutex> l(mu_);
  enqueued_.push_back(job_id);
}

// Hooks queued before the first fault run, then at most one fault applies:
// the commands of a method form one queue, consumed a call at a time.
FailingQueueBackend::Plan FailingQueueBackend::Take(QueueMethod method) {
  Plan plan;
  std::lock_guard<std::mutex> l(mu_);
  ++calls_[method];
  auto it = commands_.find(method);
  if (it == commands_.end()) return plan;
  std::vector<Command>& queue = it->second;
  std::size_t used = 0;
  while (used < queue.size()) {
    Command& c = queue[used];
    ++used;
    if (c.kind == Command::Kind::kHook) {
      plan.hooks.push_back(std::move(c.hook));
      continue;
    }
    plan.fail_before = c.kind == Command::Kind::kFailBefore;
    plan.fail_after = c.kind == Command::Kind::kFailAfter;
    plan.status = c.status;
    break;
  }
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(used));
  return plan;
}

template <typename R, typename F>
R FailingQueueBackend::Call(QueueMethod method, F&& f) {
  Plan plan = Take(method);
  for (auto& hook : plan.hooks) {
    if (hook) hook();
  }
  if (plan.fail_before) return plan.status;
  R r = f();
  if (plan.fail_after) return plan.status;
  return r;
}

Result<EnqueueResult> FailingQueueBackend::Enqueue(const Envelope& env,
                                                   const EnqueueOptions& options) {
  Result<EnqueueResult> r = Call<Result<EnqueueResult>>(
      QueueMethod::kEnqueue, [&] { return base_->Enqueue(env, options); });
  if (r.ok() && !r->duplicate) RecordEnqueued(r->job_id);
  return r;
}

Result<std::vector<EnqueueResult>> FailingQueueBackend::EnqueueBatch(
    const std::vector<Envelope>& envs, const EnqueueOptions& options) {
  Result<std::vector<EnqueueResult>> r = Call<Result<std::vector<EnqueueResult>>>(
      QueueMethod::kEnqueueBatch, [&] { return base_->EnqueueBatch(envs, options); });
  if (r.ok()) {
    for (const EnqueueResult& e : *r) {
      if (!e.duplicate) RecordEnqueued(e.job_id);
    }
  }
  return r;
}

Result<std::string> FailingQueueBackend::DeadLetterInvalid(std::string_view raw,
                                                           const std::vector<FieldError>& problems) {
  return Call<Result<std::string>>(QueueMethod::kDeadLetterInvalid,
                                   [&] { return base_->DeadLetterInvalid(raw, problems); });
}

Result<std::vector<Delivery>> FailingQueueBackend::Dequeue(const DequeueRequest& request) {
  Result<std::vector<Delivery>> r = Call<Result<std::vector<Delivery>>>(
      QueueMethod::kDequeue, [&] { return base_->Dequeue(request); });
  if (!r.ok() || r->empty()) return r;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (deliver_twice_ == 0) return r;
    --deliver_twice_;
  }
  std::vector<Delivery> twice;
  twice.reserve(r->size() * 2);
  for (const Delivery& d : *r) {
    twice.push_back(d);
    twice.push_back(d);
  }
  return twice;
}

Result<Lease> FailingQueueBackend::Renew(const Lease& lease, Duration extension,
                                         std::string_view checkpoint) {
  return Call<Result<Lease>>(QueueMethod::kRenew,
                             [&] { return base_->Renew(lease, extension, checkpoint); });
}

Status FailingQueueBackend::Complete(const Lease& lease, const Completion& completion) {
  return Call<Status>(QueueMethod::kComplete, [&] { return base_->Complete(lease, completion); });
}

Result<std::vector<LeaseRecovery>> FailingQueueBackend::RecoverExpiredLeases(int max_recoveries) {
  return Call<Result<std::vector<LeaseRecovery>>>(QueueMethod::kRecoverExpiredLeases,
                           [&] { return base_->RecoverExpiredLeases(max_recoveries); });
}

Result<JobRecord> FailingQueueBackend::Get(std::string_view job_id) {
  return Call<Result<JobRecord>>(QueueMethod::kGet, [&] { return base_->Get(job_id); });
}

Result<std::optional<std::string>> FailingQueueBackend::FindDuplicate(std::string_view dedup_key,
                                                                      std::string_view self_job_id,
                                                                      TimePoint since) {
  return Call<Result<std::optional<std::string>>>(QueueMethod::kFindDuplicate, [&] {
    return base_->FindDuplicate(dedup_key, self_job_id, since);
  });
}

Result<std::vector<DlqEntry>> FailingQueueBackend::ListDeadLetters(const DlqFilter& filter) {
  return Call<Result<std::vector<DlqEntry>>>(QueueMethod::kListDeadLetters,
                                             [&] { return base_->ListDeadLetters(filter); });
}

Result<DlqEntry> FailingQueueBackend::GetDeadLetter(std::string_view job_id) {
  return Call<Result<DlqEntry>>(QueueMethod::kGetDeadLetter,
                                [&] { return base_->GetDeadLetter(job_id); });
}

Status FailingQueueBackend::Replay(std::string_view job_id, const DlqAction& action) {
  return Call<Status>(QueueMethod::kReplay, [&] { return base_->Replay(job_id, action); });
}

Status FailingQueueBackend::Discard(std::string_view job_id, const DlqAction& action) {
  return Call<Status>(QueueMethod::kDiscard, [&] { return base_->Discard(job_id, action); });
}

Result<int> FailingQueueBackend::PurgeDeadLetters(TimePoint older_than) {
  return Call<Result<int>>(QueueMethod::kPurgeDeadLetters,
                           [&] { return base_->PurgeDeadLetters(older_than); });
}

Result<int> FailingQueueBackend::PurgeFinished(TimePoint older_than) {
  return Call<Result<int>>(QueueMethod::kPurgeFinished,
                           [&] { return base_->PurgeFinished(older_than); });
}

Result<QueueStats> FailingQueueBackend::Stats() {
  return Call<Result<QueueStats>>(QueueMethod::kStats, [&] { return base_->Stats(); });
}

// --- FaultScript ------------------------------------------------------------------

namespace testing_internal {

void FaultScript::FailNext(int method, Status status, int times, bool after_applying) {
  if (status.ok()) status = Status::Unavailable("injected fault");
  std::lock_guard<std::mutex> l(mu_);
  for (int i = 0; i < times; ++i) {
    commands_[method].push_back(Command{
        after_applying ? Command::Kind::kFailAfter : Command::Kind::kFailBefore, status, nullptr});
  }
}

void FaultScript::BeforeNext(int method, std::function<void()> hook) {
  std::lock_guard<std::mutex> l(mu_);
  commands_[method].push_back(Command{Command::Kind::kHook, Status(), std::move(hook)});
}

void FaultScript::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  commands_.clear();
}

int FaultScript::Calls(int method) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

FaultScript::Plan FaultScript::Take(int method) {
  Plan plan;
  std::lock_guard<std::mutex> l(mu_);
  ++calls_[method];
  auto it = commands_.find(method);
  if (it == commands_.end()) return plan;
  std::vector<Command>& queue = it->second;
  std::size_t used = 0;
  while (used < queue.size()) {
    Command& c = queue[used];
    ++used;
    if (c.kind == Command::Kind::kHook) {
      plan.hooks.push_back(std::move(c.hook));
      continue;
    }
    plan.fail_before = c.kind == Command::Kind::kFailBefore;
    plan.fail_after = c.kind == Command::Kind::kFailAfter;
    plan.status = c.status;
    break;
  }
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(used));
  return plan;
}

}  // namespace testing_internal

// --- FailingLockStore -----------------------------------------------------------------

std::string_view LockMethodName(LockMethod m) {
  switch (m) {
    case LockMethod::kAcquire:
      return "Acquire";
    case LockMethod::kRenew:
      return "Renew";
    case LockMethod::kRelease:
      return "Release";
    case LockMethod::kInspect:
      return "Inspect";
  }
  return "?";
}

FailingLockStore::FailingLockStore(std::shared_ptr<LockStore> base) : base_(std::move(base)) {}
FailingLockStore::~FailingLockStore() = default;

void FailingLockStore::FailNext(LockMethod method, Status status, int times) {
  script_.FailNext(static_cast<int>(method), std::move(status), times, false);
}
void FailingLockStore::FailNextAfterApplying(LockMethod method, Status status, int times) {
  script_.FailNext(static_cast<int>(method), std::move(status), times, true);
}
void FailingLockStore::BeforeNext(LockMethod method, std::function<void()> hook) {
  script_.BeforeNext(static_cast<int>(method), std::move(hook));
}
void FailingLockStore::Clear() { script_.Clear(); }
int FailingLockStore::Calls(LockMethod method) const {
  return script_.Calls(static_cast<int>(method));
}

Result<LockLease> FailingLockStore::Acquire(std::string_view key, std::string_view owner,
                                            Duration ttl) {
  return script_.Call<Result<LockLease>>(static_cast<int>(LockMethod::kAcquire),
                                         [&] { return base_->Acquire(key, owner, ttl); });
}
Result<LockLease> FailingLockStore::Renew(std::string_view key, std::string_view owner,
                                          Duration ttl) {
  return script_.Call<Result<LockLease>>(static_cast<int>(LockMethod::kRenew),
                                         [&] { return base_->Renew(key, owner, ttl); });
}
Status FailingLockStore::Release(std::string_view key, std::string_view owner) {
  return script_.Call<Status>(static_cast<int>(LockMethod::kRelease),
                              [&] { return base_->Release(key, owner); });
}
Result<std::optional<LockLease>> FailingLockStore::Inspect(std::string_view key) {
  return script_.Call<Result<std::optional<LockLease>>>(static_cast<int>(LockMethod::kInspect),
                                                        [&] { return base_->Inspect(key); });
}

// --- FailingIdempotencyStore ------------------------------------------------------------

std::string_view IdempotencyMethodName(IdempotencyMethod m) {
  switch (m) {
    case IdempotencyMethod::kClaim:
      return "Claim";
    case IdempotencyMethod::kComplete:
      return "Complete";
    case IdempotencyMethod::kRelease:
      return "Release";
    case IdempotencyMethod::kExtend:
      return "Extend";
    case IdempotencyMethod::kGet:
      return "Get";
    case IdempotencyMethod::kPurgeExpired:
      return "PurgeExpired";
  }
  return "?";
}

FailingIdempotencyStore::FailingIdempotencyStore(std::shared_ptr<IdempotencyStore> base)
    : base_(std::move(base)) {}
FailingIdempotencyStore::~FailingIdempotencyStore() = default;

void FailingIdempotencyStore::FailNext(IdempotencyMethod method, Status status, int times) {
  script_.FailNext(static_cast<int>(method), std::move(status), times, false);
}
void FailingIdempotencyStore::FailNextAfterApplying(IdempotencyMethod method, Status status,
                                                    int times) {
  script_.FailNext(static_cast<int>(method), std::move(status), times, true);
}
void FailingIdempotencyStore::BeforeNext(IdempotencyMethod method, std::function<void()> hook) {
  script_.BeforeNext(static_cast<int>(method), std::move(hook));
}
void FailingIdempotencyStore::Clear() { script_.Clear(); }
int FailingIdempotencyStore::Calls(IdempotencyMethod method) const {
  return script_.Calls(static_cast<int>(method));
}

Result<ClaimOutcome> FailingIdempotencyStore::Claim(std::string_view key, std::string_view owner,
                                                    Duration claim_ttl) {
  return script_.Call<Result<ClaimOutcome>>(static_cast<int>(IdempotencyMethod::kClaim),
                                            [&] { return base_->Claim(key, owner, claim_ttl); });
}
Status FailingIdempotencyStore::Complete(std::string_view key, std::string_view owner,
                                         std::string_view result, Duration retention) {
  return script_.Call<Status>(static_cast<int>(IdempotencyMethod::kComplete),
                              [&] { return base_->Complete(key, owner, result, retention); });
}
Status FailingIdempotencyStore::Release(std::string_view key, std::string_view owner) {
  return script_.Call<Status>(static_cast<int>(IdempotencyMethod::kRelease),
                              [&] { return base_->Release(key, owner); });
}
Status FailingIdempotencyStore::Extend(std::string_view key, std::string_view owner,
                                       Duration claim_ttl) {
  return script_.Call<Status>(static_cast<int>(IdempotencyMethod::kExtend),
                              [&] { return base_->Extend(key, owner, claim_ttl); });
}
Result<std::optional<IdempotencyRecord>> FailingIdempotencyStore::Get(std::string_view key) {
  return script_.Call<Result<std::optional<IdempotencyRecord>>>(
      static_cast<int>(IdempotencyMethod::kGet), [&] { return base_->Get(key); });
}
Result<int> FailingIdempotencyStore::PurgeExpired() {
  return script_.Call<Result<int>>(static_cast<int>(IdempotencyMethod::kPurgeExpired),
                                   [&] { return base_->PurgeExpired(); });
}

}  // namespace testing
}  // namespace jobpact
