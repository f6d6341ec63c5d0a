#include "jobpact/testing/failing_backends.h"

#include <map>
#include <utility>

#include "src/internal/mutex.h"

namespace jobpact {
namespace testing {

struct FailingQueueBackend::Recorded {
  mutable internal::PlainMutex mu;
  int deliver_twice JOBPACT_GUARDED_BY(mu) = 0;
  std::vector<std::string> enqueued JOBPACT_GUARDED_BY(mu);
};

FailingQueueBackend::FailingQueueBackend(std::shared_ptr<QueueBackend> base)
    : QueueBackendWrapper(std::move(base)),
      script_(std::make_unique<testing_internal::FaultScript>()),
      recorded_(std::make_unique<Recorded>()) {}

FailingQueueBackend::~FailingQueueBackend() = default;

void FailingQueueBackend::FailNext(QueueMethod method, Status status, int times) {
  script_->FailNext(static_cast<int>(method), std::move(status), times, false);
}

void FailingQueueBackend::FailNextAfterApplying(QueueMethod method, Status status, int times) {
  script_->FailNext(static_cast<int>(method), std::move(status), times, true);
}

void FailingQueueBackend::BeforeNext(QueueMethod method, std::function<void()> hook) {
  script_->BeforeNext(static_cast<int>(method), std::move(hook));
}

void FailingQueueBackend::DeliverTwice(int times) {
  Recorded& r = *recorded_;
  internal::MutexLock l(r.mu);
  r.deliver_twice += times;
}

void FailingQueueBackend::Clear() {
  script_->Clear();
  Recorded& r = *recorded_;
  internal::MutexLock l(r.mu);
  r.deliver_twice = 0;
}

int FailingQueueBackend::Calls(QueueMethod method) const {
  return script_->Calls(static_cast<int>(method));
}

std::vector<std::string> FailingQueueBackend::EnqueuedJobIds() const {
  Recorded& r = *recorded_;
  internal::MutexLock l(r.mu);
  return r.enqueued;
}

void FailingQueueBackend::RecordEnqueued(const std::string& job_id) {
  Recorded& r = *recorded_;
  internal::MutexLock l(r.mu);
  r.enqueued.push_back(job_id);
}

Status FailingQueueBackend::Intercept(QueueMethod method, const std::function<Status()>& call) {
  return script_->Call<Status>(static_cast<int>(method), call);
}

Result<EnqueueResult> FailingQueueBackend::Enqueue(const Envelope& env,
                                                   const EnqueueOptions& options) {
  Result<EnqueueResult> r = QueueBackendWrapper::Enqueue(env, options);
  if (r.ok() && !r->duplicate) RecordEnqueued(r->job_id);
  return r;
}

Result<std::vector<EnqueueResult>> FailingQueueBackend::EnqueueBatch(
    const std::vector<Envelope>& envs, const EnqueueOptions& options) {
  Result<std::vector<EnqueueResult>> r = QueueBackendWrapper::EnqueueBatch(envs, options);
  if (r.ok()) {
    for (const EnqueueResult& e : *r) {
      if (!e.duplicate) RecordEnqueued(e.job_id);
    }
  }
  return r;
}

DequeueRequest FailingQueueBackend::ForDequeue(const DequeueRequest& request) const {
  DequeueRequest r = request;
  if (script_->Pending(static_cast<int>(QueueMethod::kFindDuplicate))) r.dedup_window.reset();
  return r;
}

Status FailingQueueBackend::DequeueInto(const DequeueRequest& request,
                                        std::vector<Delivery>* out) {
  return QueueBackendWrapper::DequeueInto(ForDequeue(request), out);
}

Result<std::vector<Delivery>> FailingQueueBackend::Dequeue(const DequeueRequest& request) {
  Result<std::vector<Delivery>> r = QueueBackendWrapper::Dequeue(ForDequeue(request));
  if (!r.ok() || r->empty()) return r;
  {
    Recorded& rec = *recorded_;
    internal::MutexLock l(rec.mu);
    if (rec.deliver_twice == 0) return r;
    --rec.deliver_twice;
  }
  std::vector<Delivery> twice;
  twice.reserve(r->size() * 2);
  for (const Delivery& d : *r) {
    twice.push_back(d);
    twice.push_back(d);
  }
  return twice;
}

// --- FaultScript ------------------------------------------------------------------

namespace testing_internal {

struct FaultScript::State {
  struct Command {
    enum class Kind { kFailBefore, kFailAfter, kHook };
    Kind kind = Kind::kFailBefore;
    Status status;
    std::function<void()> hook;
  };
  mutable internal::PlainMutex mu;
  std::map<int, std::vector<Command>> commands JOBPACT_GUARDED_BY(mu);
  std::map<int, int> calls JOBPACT_GUARDED_BY(mu);
};

FaultScript::FaultScript() : state_(std::make_unique<State>()) {}
FaultScript::~FaultScript() = default;

void FaultScript::FailNext(int method, Status status, int times, bool after_applying) {
  if (status.ok()) status = Status::Unavailable("injected fault");
  State& st = *state_;
  internal::MutexLock l(st.mu);
  for (int i = 0; i < times; ++i) {
    st.commands[method].push_back(State::Command{
        after_applying ? State::Command::Kind::kFailAfter : State::Command::Kind::kFailBefore, status, nullptr});
  }
}

void FaultScript::BeforeNext(int method, std::function<void()> hook) {
  State& st = *state_;
  internal::MutexLock l(st.mu);
  st.commands[method].push_back(State::Command{State::Command::Kind::kHook, Status(), std::move(hook)});
}

void FaultScript::Clear() {
  State& st = *state_;
  internal::MutexLock l(st.mu);
  st.commands.clear();
}

int FaultScript::Calls(int method) const {
  State& st = *state_;
  internal::MutexLock l(st.mu);
  auto it = st.calls.find(method);
  return it == st.calls.end() ? 0 : it->second;
}

bool FaultScript::Pending(int method) const {
  State& st = *state_;
  internal::MutexLock l(st.mu);
  auto it = st.commands.find(method);
  return it != st.commands.end() && !it->second.empty();
}

FaultScript::Plan FaultScript::Take(int method) {
  Plan plan;
  State& st = *state_;
  internal::MutexLock l(st.mu);
  ++st.calls[method];
  auto it = st.commands.find(method);
  if (it == st.commands.end()) return plan;
  std::vector<State::Command>& queue = it->second;
  std::size_t used = 0;
  while (used < queue.size()) {
    State::Command& c = queue[used];
    ++used;
    if (c.kind == State::Command::Kind::kHook) {
      plan.hooks.push_back(std::move(c.hook));
      continue;
    }
    plan.fail_before = c.kind == State::Command::Kind::kFailBefore;
    plan.fail_after = c.kind == State::Command::Kind::kFailAfter;
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
    case LockMethod::kList:
      return "List";
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

Result<std::vector<LockLease>> FailingLockStore::List(std::size_t limit) {
  return script_.Call<Result<std::vector<LockLease>>>(static_cast<int>(LockMethod::kList),
                                                      [&] { return base_->List(limit); });
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
