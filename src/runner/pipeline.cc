// The delivery pipeline of SPEC 3, one function per step of
// docs/pipeline.md. A step returns nullopt to let the delivery go on, or the
// one Completion that ends it; ProcessDelivery hands that to Finish (step 9),
// the only place a delivery's outcome is written and reported.
#include "src/runner/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "src/internal/stored_validation.h"
#include "src/runner/job_context.h"
#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {
namespace {

// Paused job types are requeued after a jittered delay in this range: long
// enough that a paused backlog does not spin through the queue, short enough
// that Resume() takes effect within seconds.
constexpr Duration kPausedMinDelay = std::chrono::milliseconds(2500);
constexpr Duration kPausedMaxDelay = std::chrono::milliseconds(5000);

std::string FormatSeconds(Duration d) { return fmt::format("{}s", ToSeconds(d)); }

// A completion that spends the delivery's attempt.
Completion EndWith(JobStatus to, std::string_view why,
                   std::optional<Failure> failure = std::nullopt) {
  Completion c;
  c.to = to;
  c.reason = std::string(why);
  c.failure = std::move(failure);
  return c;
}

MetricLabels JobLabels(const Envelope& env) {
  return MetricLabels{env.job_type, env.queue, {}, {}};
}

}  // namespace

void RunnerCore::ProcessDelivery(Delivery& d, WorkerSlot* slot, HandlerCache& cache) {
  deliveries_.fetch_add(1, std::memory_order_relaxed);
  DeliveryRun run(d, slot, cache, clock().Now());
  if (d.guards_taken) {
    // Steps 5 and 6 were taken by the lease step: held from here, so that a
    // delivery ended before them gives them back with its completion.
    run.lock_held = !d.job.envelope.lock_key.empty();
    run.fencing = d.fencing_token;
    run.claim_held = !d.job.envelope.idempotency_key.empty();
  }
  ReportDelivered(run);
  std::optional<Completion> c = Validate(run);  // 1
  if (!c) c = CheckCancelled(run);              // Cancel
  if (!c) c = CheckTtlAndDeadlines(run);        // 2
  if (!c) c = CheckAttemptBudget(run);          // 3
  if (!c) c = CheckPaused(run);                 // Pause
  if (!c) c = CheckDedup(run);                  // 4
  if (!c) c = AcquireLock(run);                 // 5
  if (!c) c = ClaimIdempotency(run);            // 6
  if (!c) c = RunHandler(run);                  // 7
  if (!c) c = ClassifyAndDecide(run);           // 8
  Finish(run, std::move(*c));                   // 9
}

bool RunnerCore::EnsureLease(Delivery& d) {
  const TimePoint now = clock().Now();
  const Duration vis = d.job.envelope.visibility_timeout;
  // Renewal is due once a third of the lease has passed (SPEC 11); before
  // that the lease certainly outlasts a start.
  if (d.lease.expires_at - now > vis - vis / 3) return true;
  Result<Lease> renewed = RenewWaiting(d);
  if (renewed.ok()) {
    d.lease.expires_at = renewed->expires_at;
    return true;
  }
  const StatusCode code = renewed.status().code();
  if (code == StatusCode::kAborted || code == StatusCode::kNotFound) {
    logger_.Log(LogLevel::kWarn, "lease_lost_before_start", &d.job.envelope,
                {{"error", renewed.status().ToString()}});
    ReleaseLeasedGuards(d);
    return false;
  }
  // The store is unreachable: start only if the lease is certainly ours.
  if (now < d.lease.expires_at) return true;
  ReleaseLeasedGuards(d);
  return false;
}

Result<Lease> RunnerCore::RenewWaiting(Delivery& d) {
  const Envelope& env = d.job.envelope;
  Result<Lease> renewed = options_.queue->Renew(d.lease, env.visibility_timeout, {});
  if (!renewed.ok() || !d.guards_taken) return renewed;
  if (!RenewGuards(d, !env.lock_key.empty(), !env.idempotency_key.empty()).ok()) {
    ReleaseLeasedGuards(d);
  }
  return renewed;
}

void RunnerCore::ReleaseLeasedGuards(Delivery& d) {
  if (!d.guards_taken) return;
  d.guards_taken = false;
  if (!d.job.envelope.lock_key.empty()) ReleaseLock(d);
  if (!d.job.envelope.idempotency_key.empty()) ReleaseClaim(d);
}

void RunnerCore::ReportDelivered(const DeliveryRun& run) const {
  const Delivery& d = run.d;
  TransitionEvent e = JobEvent(run.env(), TransitionOrigin::kDelivery, run.now);
  e.epoch = static_cast<std::int64_t>(d.lease.epoch);
  e.from = d.job.history.empty() ? JobStatus::kQueued : d.job.history.back().from;
  e.to = JobStatus::kRunning;
  e.reason = reason::kDelivered;
  Emit(e);
}

// --- Helpers of the steps --------------------------------------------------------

Completion RunnerCore::Requeue(const DeliveryRun& run, std::string_view why, Duration delay,
                               bool lock_wait, std::optional<Failure> failure) const {
  Completion c;
  c.to = JobStatus::kRetryScheduled;
  c.reason = std::string(why);
  c.ready_at = run.now + delay;
  c.delay = delay;
  c.spend_attempt = false;
  c.lock_wait = lock_wait;
  c.failure = std::move(failure);
  return c;
}

// A store we depend on failed (kUnavailable and the like): requeue without
// spending an attempt rather than let the lease expire, which would count
// a crash recovery against a job that did nothing wrong.
Completion RunnerCore::BackendTrouble(const DeliveryRun& run, std::string_view what,
                                      const Status& s) const {
  logger_.Log(LogLevel::kError, "backend_error", &run.env(),
              {{"step", what}, {"error", s.ToString()}});
  return Requeue(run, reason::kTransientError, LockBusyDelay(), false,
                 Failure{FailureClass::kTransient, std::string(StatusCodeName(s.code())),
                         std::string(what) + ": " + s.message()});
}

Duration RunnerCore::LockBusyDelay() const {
  return JitteredDelay(options_.lock_busy_min_delay, options_.lock_busy_max_delay);
}

// --- 1-3: checks that need no store -----------------------------------------------

// 1. Validate: a producer may have written straight to the backend.
std::optional<Completion> RunnerCore::Validate(const DeliveryRun& run) const {
  std::vector<FieldError> problems =
      store_checked_envelopes_ ? ValidateStoredEnvelopeBounds(run.env(), options_.validation)
                               : ValidateEnvelope(run.env(), options_.validation);
  if (problems.empty()) return std::nullopt;
  return EndWith(JobStatus::kDeadLettered, reason::kInvalidEnvelope,
                 Failure{FailureClass::kPermanent, std::string(reason::kInvalidEnvelope),
                         JoinProblems(problems)});
}

// 2. TTL and the start-by and total deadlines.
std::optional<Completion> RunnerCore::CheckTtlAndDeadlines(const DeliveryRun& run) const {
  const Envelope& env = run.env();
  if (env.expires_at.has_value() && run.now > *env.expires_at) {
    return EndWith(JobStatus::kDiscarded, reason::kExpired);
  }
  // Start-by applies to a job that has not started yet: its first attempt
  // (a lock-busy requeue gives the attempt back, so it still counts as 1).
  if (env.start_by.has_value() && env.attempt <= 1 && run.now > *env.start_by) {
    return EndWith(JobStatus::kDiscarded, reason::kStartByPassed);
  }
  if (env.deadline.has_value() && run.now > *env.deadline) {
    return EndWith(JobStatus::kDeadLettered, reason::kTotalDeadlinePassed);
  }
  return std::nullopt;
}

// 3. Attempt budget (a job can get here through lease recoveries). This
// delivery runs nothing, so it does not count: the record keeps
// attempt == max_attempts.
std::optional<Completion> RunnerCore::CheckAttemptBudget(const DeliveryRun& run) const {
  const Envelope& env = run.env();
  // A job stored without going through Enqueue may not carry a budget.
  const int max_attempts =
      env.max_attempts > 0 ? env.max_attempts : options_.policies->For(env.job_type).max_attempts;
  if (env.attempt <= max_attempts) return std::nullopt;
  Completion c = EndWith(JobStatus::kDeadLettered, reason::kMaxAttemptsExceeded);
  c.spend_attempt = false;
  return c;
}

// Cancel, SPEC 10 safe action: an operator cancelled the job after it was
// leased, or while an earlier attempt ran.
std::optional<Completion> RunnerCore::CheckCancelled(const DeliveryRun& run) const {
  if (!run.d.job.cancel_requested && !run.d.lease.cancel_requested) return std::nullopt;
  return EndWith(JobStatus::kDiscarded, reason::kCancelled);
}

// Pause, SPEC 10 safe action: a paused type is not run, and nothing is spent.
// The store's lease step leases no job of a paused type; this catches the
// ones leased (in a batch) just before the pause.
std::optional<Completion> RunnerCore::CheckPaused(const DeliveryRun& run) const {
  if (!control_->TypePaused(run.env().job_type, run.now)) return std::nullopt;
  return Requeue(run, reason::kPaused, JitteredDelay(kPausedMinDelay, kPausedMaxDelay), false,
                 std::nullopt);
}

// --- 4-6: the stores ---------------------------------------------------------------

// 4. Dedup at delivery: checked by the store in the lease step where it can
// (Delivery::dedup_checked), else asked here.
std::optional<Completion> RunnerCore::CheckDedup(const DeliveryRun& run) {
  const Envelope& env = run.env();
  if (env.dedup_key.empty()) return std::nullopt;
  std::string duplicate_of;
  if (run.d.dedup_checked) {
    duplicate_of = run.d.duplicate_of;
  } else {
    Result<std::optional<std::string>> dup =
        options_.queue->FindDuplicate(env.dedup_key, env.job_id, run.now - options_.dedup_window);
    if (!dup.ok()) return BackendTrouble(run, "dedup check", dup.status());
    if (dup->has_value()) duplicate_of = std::move(**dup);
  }
  if (duplicate_of.empty()) return std::nullopt;
  options_.metrics->Increment(metric::kDedupHits, JobLabels(env), 1);
  Completion c = EndWith(JobStatus::kSucceeded, reason::kDuplicate);
  c.result = "duplicate of " + duplicate_of;
  return c;
}

// 5. Lock.
std::optional<Completion> RunnerCore::AcquireLock(DeliveryRun& run) {
  const Envelope& env = run.env();
  if (env.lock_key.empty() || run.lock_held) return std::nullopt;  // Held: taken with the lease.
  // A job of this key that finished here may still hold it, its release
  // on the way with its completion: wait for that rather than requeue.
  if (guards_with_acks_ && completions_ != nullptr) {
    completions_->AwaitGuards(env.lock_key, env.idempotency_key);
  }
  Result<LockLease> lock = Status::Unknown("");
  if (guards_with_acks_ && !env.idempotency_key.empty()) {
    // The store keeps both beside the jobs: steps 5 and 6 in one write.
    ClaimOutcome claim;
    lock = options_.queue->AcquireLockAndClaim(env.lock_key, env.idempotency_key,
                                               run.d.lease.token, env.visibility_timeout, &claim);
    if (lock.ok()) run.claim = std::move(claim);
  } else {
    lock = options_.locks->Acquire(env.lock_key, run.d.lease.token, env.visibility_timeout);
  }
  if (lock.ok()) {
    run.fencing = lock->fencing_token;
    run.lock_held = true;
    return std::nullopt;
  }
  if (lock.status().code() != StatusCode::kAborted) {
    return BackendTrouble(run, "lock acquire", lock.status());
  }
  options_.metrics->Increment(metric::kLockContention, JobLabels(env), 1);
  const int waits = run.d.job.lock_waits;
  if (waits >= options_.max_lock_waits) {
    return EndWith(JobStatus::kDeadLettered, reason::kLockWaitsExhausted,
                   Failure{FailureClass::kTransient, std::string(reason::kLockBusy),
                           "lock '" + env.lock_key + "' still busy after " + std::to_string(waits) +
                               " waits: " + lock.status().message()});
  }
  return Requeue(run, reason::kLockBusy, LockBusyDelay(), true, std::nullopt);
}

// 6. Idempotency.
std::optional<Completion> RunnerCore::ClaimIdempotency(DeliveryRun& run) {
  const Envelope& env = run.env();
  if (env.idempotency_key.empty() || run.claim_held) return std::nullopt;  // Taken with the lease.
  Result<ClaimOutcome> claim = Status::Unknown("");
  if (run.claim.has_value()) {
    claim = std::move(*run.claim);  // Taken with the lock.
  } else {
    // As for the lock: a result being recorded here is waited for.
    if (guards_with_acks_ && completions_ != nullptr) {
      completions_->AwaitGuards({}, env.idempotency_key);
    }
    claim = options_.idempotency->Claim(env.idempotency_key, run.d.lease.token,
                                        env.visibility_timeout);
  }
  if (!claim.ok()) return BackendTrouble(run, "idempotency claim", claim.status());
  switch (claim->kind) {
    case ClaimOutcome::Kind::kCompleted: {
      options_.metrics->Increment(metric::kIdempotentSkips, JobLabels(env), 1);
      Completion c = EndWith(JobStatus::kSucceeded, reason::kIdempotentSkip);
      c.result = std::move(claim->record.result);
      return c;
    }
    case ClaimOutcome::Kind::kInProgress:
      return Requeue(run, reason::kIdempotencyInProgress, LockBusyDelay(), false, std::nullopt);
    case ClaimOutcome::Kind::kClaimed:
      run.claim_held = true;
      break;
  }
  return std::nullopt;
}

// --- 7. Run the handler -------------------------------------------------------------

std::optional<Completion> RunnerCore::RunHandler(DeliveryRun& run) {
  const Envelope& env = run.env();
  run.handler = FindHandler(env.job_type, run.cache);
  if (run.handler == nullptr) {
    return EndWith(JobStatus::kDeadLettered, reason::kNoHandler,
                   Failure{FailureClass::kPermanent, std::string(reason::kNoHandler),
                           "no handler registered for job type '" + env.job_type + "'"});
  }
  if (std::optional<Completion> refused = AcquireConcurrencySlots(run)) return refused;
  std::optional<Completion> refused = AcquireRatePermits(run);
  if (!refused) refused = AcquireCircuitPermit(run);
  if (!refused) {
    InvokeUnderDeadline(run);
    RecordCircuitOutcome(run);
  }
  ReleaseConcurrencySlots(run);
  return refused;
}

// The dependency's circuit breaker: an open circuit reschedules the job to
// the end of the open period without spending an attempt (Finish releases
// the lock and claim taken above).
std::optional<Completion> RunnerCore::AcquireCircuitPermit(DeliveryRun& run) {
  if (run.handler->dependency.empty()) return std::nullopt;
  run.breaker = &options_.circuit_breakers->Get(run.handler->dependency);
  Result<CircuitBreaker::Permit> p = run.breaker->Acquire();
  if (p.ok()) {
    run.permit = *p;
    return std::nullopt;
  }
  options_.metrics->Increment(metric::kCircuitRejected, JobLabels(run.env()), 1);
  const Duration wait = std::max(Duration::zero(), run.breaker->retry_after() - run.now);
  return Requeue(
      run, reason::kCircuitOpen, wait, false,
      Failure{FailureClass::kTransient, std::string(reason::kCircuitOpen), p.status().message()});
}

// Calls the handler once, under its execution timeout, visible to the
// watchdog (which renews the lease, lock and claim) while it runs.
void RunnerCore::InvokeUnderDeadline(DeliveryRun& run) {
  const Envelope& env = run.env();
  const Delivery& d = run.d;
  const TimePoint started = clock().Now();
  run.deadline = started + env.timeout;
  const MetricLabels labels = JobLabels(env);
  options_.metrics->Increment(metric::kStarted, labels, 1);
  // Deposits of the retry budget: first attempts only (a lock-busy requeue
  // or a snooze gives its attempt back, so attempt 1 runs once).
  if (options_.retry_budgets != nullptr && env.attempt == 1) {
    BudgetFor(env.job_type, run.cache).RecordFirstAttempt();
  }
  run.queue_latency = started - std::max(d.job.ready_at, d.job.enqueued_at);
  options_.metrics->Observe(metric::kQueueLatency, labels, ToSeconds(run.queue_latency));

  CancelFlags cancel;
  ContextImpl ctx(*this, d, cancel, run.deadline, run.fencing, run.lock_held, run.claim_held,
                  run.dependency_slot);
  if (run.slot != nullptr) {
    MutexLock l(run.slot->mu);
    run.slot->running = true;
    run.slot->job = RunningJob{&d,
                               &cancel,
                               run.deadline,
                               started + env.visibility_timeout / 3,
                               run.lock_held,
                               run.claim_held,
                               run.dependency_slot,
                               true};
  }
  run.outcome = InvokeHandler(*run.handler, ctx);
  run.finished = clock().Now();
  run.operator_cancel = cancel.operator_cancel.load(std::memory_order_acquire);
  if (run.slot != nullptr) {
    MutexLock l(run.slot->mu);
    run.slot->running = false;
    run.slot->job = RunningJob{};
    run.given_back = run.slot->given_back;
  }
  run.handler_ran = true;
  run.handler_duration = run.finished - started;
  options_.metrics->Observe(metric::kDuration, labels, ToSeconds(run.handler_duration));
}

// The dependency answered unless the attempt failed transiently (or
// unclassified) or timed out. A snooze or discard judges nothing.
void RunnerCore::RecordCircuitOutcome(const DeliveryRun& run) const {
  if (run.breaker == nullptr) return;
  const HandlerOutcome& outcome = run.outcome;
  const bool handler_chose = !outcome.threw && (outcome.snooze || outcome.discard);
  if (handler_chose) {
    run.breaker->Release(run.permit);
  } else if (outcome.ok) {
    run.breaker->RecordSuccess(run.permit);
  } else if (run.finished >= run.deadline ||
             outcome.failure.failure_class != FailureClass::kPermanent) {
    run.breaker->RecordFailure(run.permit);
  } else {
    run.breaker->RecordSuccess(run.permit);
  }
}

// --- 8. Classify and decide ------------------------------------------------------------

Completion RunnerCore::ClassifyAndDecide(DeliveryRun& run) {
  HandlerOutcome& outcome = run.outcome;
  Completion c;
  if (run.operator_cancel && !outcome.ok) {
    // The handler stopped because an operator cancelled it (or failed
    // meanwhile): the cancel stands, nothing is retried.
    c = EndWith(JobStatus::kDiscarded, reason::kCancelled);
  } else if (!outcome.threw && outcome.snooze.has_value()) {
    c.to = JobStatus::kRetryScheduled;
    c.reason = std::string(reason::kSnoozed);
    c.ready_at = run.finished + *outcome.snooze;
    c.delay = *outcome.snooze;
    c.spend_attempt = false;
  } else if (!outcome.threw && outcome.discard.has_value()) {
    c = EndWith(JobStatus::kDiscarded, *outcome.discard);
  } else if (outcome.ok) {
    // Success stands even if it came after the deadline: the effect is done,
    // and calling it a timeout would only make a retry repeat it.
    c = EndWith(JobStatus::kSucceeded, reason::kSucceeded);
    c.result = std::move(outcome.result);
    c.transactional_effect = std::move(outcome.effect);
  } else {
    Failure failure = std::move(outcome.failure);
    const Envelope& env = run.env();
    const bool timed_out = run.finished >= run.deadline;
    if (timed_out) {
      options_.metrics->Increment(metric::kTimeouts, JobLabels(env), 1);
      failure = Failure{FailureClass::kTransient, std::string(reason::kTimeout),
                        "execution timeout of " + FormatSeconds(env.timeout) + " exceeded (" +
                            failure.code + ": " + failure.message + ")"};
    }
    if (failure.failure_class == FailureClass::kUnknown) {
      options_.metrics->Increment(metric::kAnomalies, JobLabels(env), 1);
      logger_.Log(LogLevel::kWarn, "unknown_error", &env,
                  {{"error_code", failure.code}, {"error_message", failure.message}});
    }
    c = DecideFailure(run.d, std::move(failure), run.finished, timed_out);
    if (outcome.rate_limited_for) {
      // The upstream's Retry-After: no retry before it, and the limiter
      // holds everyone (SPEC 10 "backoff on rate limits").
      BackOffLimiter(run, *outcome.rate_limited_for);
      const TimePoint not_before = run.finished + *outcome.rate_limited_for;
      if (c.to == JobStatus::kRetryScheduled && c.ready_at && *c.ready_at < not_before) {
        if (env.deadline.has_value() && not_before > *env.deadline) {
          Failure f = std::move(*c.failure);
          c = EndWith(JobStatus::kDeadLettered, reason::kTotalDeadlinePassed);
          c.failure = std::move(f);
        } else {
          c.ready_at = not_before;
          c.delay = *outcome.rate_limited_for;
        }
      }
    }
  }
  if (c.to == JobStatus::kRetryScheduled && c.checkpoint.empty()) {
    c.checkpoint = outcome.last_checkpoint;
  }
  return c;
}

Completion RunnerCore::DecideFailure(const Delivery& d, Failure failure, TimePoint finished,
                                     bool timed_out) {
  const Envelope& env = d.job.envelope;
  if (control_->RoutesToDlq(env.job_type, failure.failure_class, finished)) {
    // SPEC 10 safe action: an operator routes this class of the type to the
    // DLQ, whatever the retry policy says.
    Completion c = EndWith(JobStatus::kDeadLettered, reason::kRoutedToDlq);
    c.failure = std::move(failure);
    return c;
  }
  RetryPolicy policy = options_.policies->For(env.job_type);
  if (env.max_attempts > 0) policy.max_attempts = env.max_attempts;
  if (env.retry_policy.has_value()) policy.backoff = *env.retry_policy;
  const double sample = options_.random->NextUnit();
  const RetryDecision decision =
      DecideRetry(policy, failure.failure_class, env.attempt, sample, d.job.previous_delay);
  Completion c;
  switch (decision.kind) {
    case RetryDecision::Kind::kRetry:
      c = ScheduleRetry(env, decision, finished, timed_out);
      break;
    case RetryDecision::Kind::kDeadLetter:
      c = EndWith(JobStatus::kDeadLettered, decision.reason);
      break;
    case RetryDecision::Kind::kFail:
      c = EndWith(JobStatus::kFailed, decision.reason);
      break;
  }
  c.failure = std::move(failure);
  return c;
}

Completion RunnerCore::ScheduleRetry(const Envelope& env, const RetryDecision& decision,
                                     TimePoint finished, bool timed_out) {
  TimePoint ready_at = finished + decision.delay;
  if (env.deadline.has_value() && ready_at > *env.deadline) {
    return EndWith(JobStatus::kDeadLettered, reason::kTotalDeadlinePassed);
  }
  Completion c;
  c.reason = timed_out ? std::string(reason::kTimeout) : decision.reason;
  if (options_.retry_budgets != nullptr && !ApplyRetryBudget(env, c, ready_at)) return c;
  c.to = JobStatus::kRetryScheduled;
  c.ready_at = ready_at;
  c.delay = ready_at - finished;
  return c;
}

// SPEC 10: retries may not outgrow traffic; the budget sheds them by time,
// never by dropping work.
bool RunnerCore::ApplyRetryBudget(const Envelope& env, Completion& c, TimePoint& ready_at) {
  RetryBudget& budget = options_.retry_budgets->ForJobType(env.job_type);
  const MetricLabels labels = JobLabels(env);
  if (budget.options().on_exhausted == RetryBudgetExhaustedAction::kDeadLetter) {
    // Opted in per job type: quarantine the refused retry.
    if (budget.TryRetry()) return true;
    options_.metrics->Increment(metric::kRetryBudgetExhausted, labels, 1);
    c = EndWith(JobStatus::kDeadLettered, reason::kRetryBudgetExhausted);
    return false;
  }
  // Deferred: booked at the time the budget allows it, so deferred retries
  // come back at the budget's pace, not in one wave.
  const RetryReservation r = budget.ReserveRetry(env.deadline);
  if (r.kind != RetryReservation::Kind::kNow) {
    options_.metrics->Increment(metric::kRetryBudgetExhausted, labels, 1);
  }
  if (r.kind == RetryReservation::Kind::kPastDeadline) {
    c = EndWith(JobStatus::kDeadLettered, reason::kTotalDeadlinePassed);
    return false;
  }
  if (r.kind == RetryReservation::Kind::kDeferred) {
    options_.metrics->Increment(metric::kRetryBudgetDeferred, labels, 1);
    c.reason = std::string(reason::kRetryBudgetDeferred);
    ready_at = std::max(ready_at, r.at);
  }
  return true;
}

// --- 9. Record, ack, release, report -----------------------------------------------------

void RunnerCore::Finish(DeliveryRun& run, Completion c) {
  AfterAck after;
  after.handler_ran = run.handler_ran;
  after.queue_latency = run.queue_latency;
  after.handler_duration = run.handler_duration;
  if (guards_with_acks_ && !run.given_back) {
    // The store keeps the locks and claims beside the jobs: the write of the
    // outcome releases the lock and records (or drops) the claim in the
    // same atomic step, instead of two more writes (CompletionGuards).
    c.guards.release_lock = run.lock_held;
    if (run.claim_held) {
      // Only the handler's success records the key: a claim the lease step
      // took for a delivery ended before the handler (a duplicate, too,
      // ends as succeeded) is dropped.
      c.guards.claim = c.to == JobStatus::kSucceeded && run.handler_ran
                           ? CompletionGuards::Claim::kRecord
                           : CompletionGuards::Claim::kRelease;
      c.guards.retention = options_.idempotency_retention;
    }
  } else {
    after.record_result = RecordOrReleaseClaim(run, c);
    // The handler's work is done, so the lock can go before the write --
    // unless a transactional effect, part of the work the lock guards,
    // commits with it.
    if (run.lock_held && c.transactional_effect) {
      after.release_lock = true;
    } else if (run.lock_held) {
      ReleaseLock(run.d);
    }
  }
  if (run.given_back) {
    AfterWrite(run.d, c, after, Status::Aborted("the lease was given back at shutdown"));
    return;
  }
  if (per_worker_acks_ && run.slot != nullptr && !c.transactional_effect) {
    // Kept, and written with the rest of the batch's quick outcomes
    // (FlushAcks): one hold of the store's lock per batch, not per job.
    const bool quick = !run.handler_ran || run.handler_duration < kQuickHandler;
    if (run.cache.acks_type != run.env().job_type) run.cache.acks_type = run.env().job_type;
    {
      // The watchdog may take the kept outcomes at any time (FlushAcks).
      MutexLock l(run.slot->mu);
      if (run.slot->acks.empty()) run.slot->acks_since = clock().Now();
      run.slot->acks.push_back(CompletionRequest{std::move(run.d), std::move(c)});
      run.slot->acks_after.push_back(after);
      run.slot->acks_at.push_back(run.slot->next - 1);
    }
    if (!quick) FlushAcks(*run.slot, true);
    return;
  }
  if (completions_ != nullptr) {
    // The writer stores it with whatever else accumulated. The delivery
    // is moved there: the worker is done with it.
    CompletionRequest request{std::move(run.d), std::move(c)};
    if (completions_->Push(std::move(request), after)) return;
    // Closed (the runner stopped): written here, as below.
    run.d = std::move(request.delivery);
    c = std::move(request.completion);
  }
  // The delivered record is not read after the ack, only its lease and
  // envelope (the lock, the key, the event), which the rvalue Complete
  // leaves as they were: the backend need not copy the record. With guards
  // a refused ack may still need the record (RecoverGuards).
  const Status acked = c.guards.any() ? options_.queue->Complete(run.d, c)
                                      : options_.queue->Complete(std::move(run.d), c);
  AfterWrite(run.d, c, after, acked);
}

void RunnerCore::AfterWrite(const Delivery& d, const Completion& c, const AfterAck& after,
                            const Status& acked) {
  if (!acked.ok() && c.guards.any() && RecoverGuards(d, c, after, acked)) return;
  if (after.record_result && acked.ok()) RecordAfterAck(d, c);
  if (after.release_lock) ReleaseLock(d);
  ReportCompletion(d, c, after, acked);
}

void RunnerCore::WriteGroup(const std::vector<CompletionRequest>& group,
                            const std::vector<AfterAck>& after) {
  std::vector<Status> acked = options_.queue->CompleteBatch(group);
  if (acked.size() != group.size()) {
    acked.assign(group.size(),
                 Status::Internal("CompleteBatch returned " + std::to_string(acked.size()) +
                                  " results for " + std::to_string(group.size()) + " completions"));
  }
  for (std::size_t i = 0; i < group.size(); ++i) {
    AfterWrite(group[i].delivery, group[i].completion, after[i], acked[i]);
  }
}

void RunnerCore::FlushAcks(WorkerSlot& slot, bool from_worker) {
  std::vector<CompletionRequest> acks;
  std::vector<AfterAck> after;
  std::vector<std::size_t> at;
  {
    MutexLock l(slot.mu);
    if (slot.acks.empty()) return;
    acks.swap(slot.acks);
    after.swap(slot.acks_after);
    at.swap(slot.acks_at);
  }
  WriteGroup(acks, after);
  if (!from_worker) return;
  // The worker's own batch is still in slot.batch (it flushes before it
  // swaps the batch out), so each delivery goes back to its place.
  MutexLock l(slot.mu);
  for (std::size_t i = 0; i < acks.size(); ++i) slot.batch[at[i]] = std::move(acks[i].delivery);
  if (slot.acks.empty()) {  // The vectors' buffers, for the next outcomes.
    acks.clear();
    after.clear();
    at.clear();
    slot.acks.swap(acks);
    slot.acks_after.swap(after);
    slot.acks_at.swap(at);
  }
}

void RunnerCore::CompletionWriterLoop() {
  // Reused across groups (Pop swaps them with the queue's buffers).
  std::vector<CompletionRequest> group;
  std::vector<AfterAck> after;
  while (completions_->Pop(kMaxCompletionGroup, &group, &after)) {
    WriteGroup(group, after);
    completions_->Written(group);
    group.clear();
    after.clear();
  }
}

// Record the idempotent result before the ack, so that a crash between the
// two makes the redelivery skip the effect; release the claim on any other
// outcome so that a retry can claim it again.
//
// With a transactional effect the order is reversed: the ack commits the
// effect and the job together, so it goes first, and the result is recorded
// only once it committed. Recording first would let a crash between the two
// calls (or an effect that fails and rolls the completion back) leave the
// key completed while the effect never committed, and the redelivery would
// be skipped as idempotent_skip.
bool RunnerCore::RecordOrReleaseClaim(const DeliveryRun& run, Completion& c) {
  if (!run.claim_held) return false;
  if (c.to == JobStatus::kSucceeded && c.transactional_effect && ConfirmClaim(run, c)) return true;
  if (c.to == JobStatus::kSucceeded) {
    RecordResult(run, c);
    return false;
  }
  ReleaseClaim(run.d);
  return false;
}

void RunnerCore::ReleaseClaim(const Delivery& d) {
  const Envelope& env = d.job.envelope;
  Status s = options_.idempotency->Release(env.idempotency_key, d.lease.token);
  if (!s.ok() && s.code() != StatusCode::kAborted) {
    logger_.Log(LogLevel::kWarn, "idempotency_release_failed", &env, {{"error", s.ToString()}});
  }
}

// A completion whose guards were to ride with it was refused or not
// written. A refused write (kAborted: a stale lease, a claim not held) still
// applied them; a failed one did not. Each guard is the delivery's own, and
// giving it back twice is harmless, so what may be missing is done here --
// except when the claim to record was no longer held: then, as in
// RecordResult, the job was not acked, and the attempt is written as failed.
bool RunnerCore::RecoverGuards(const Delivery& d, const Completion& c, const AfterAck& after,
                               const Status& acked) {
  const Envelope& env = d.job.envelope;
  const bool record = c.guards.claim == CompletionGuards::Claim::kRecord && !c.transactional_effect;
  if (record && acked.code() == StatusCode::kAborted) {
    if (!ClaimRecordedBy(env.idempotency_key, d.lease.token)) {
      logger_.Log(LogLevel::kError, "idempotency_record_failed", &env, {{"error", acked.ToString()}});
      const Completion failed = DecideFailure(
          d,
          Failure{FailureClass::kTransient, std::string(reason::kIdempotencyRecordFailed),
                  "the handler succeeded but its idempotency record could not be written: " +
                      acked.ToString()},
          clock().Now(), false);
      ReportCompletion(d, failed, after, options_.queue->Complete(d, failed));
      return true;
    }
  } else if (record) {
    RecordAfterAck(d, c, /*acked=*/false);
  } else if (c.guards.claim == CompletionGuards::Claim::kRelease) {
    ReleaseClaim(d);
  }
  if (c.guards.release_lock) ReleaseLock(d);
  return false;
}

bool RunnerCore::ClaimRecordedBy(const std::string& key, const std::string& owner) {
  Result<std::optional<IdempotencyRecord>> rec = options_.idempotency->Get(key);
  return rec.ok() && rec->has_value() &&
         (*rec)->state == IdempotencyRecord::State::kCompleted && (*rec)->owner == owner;
}

// The effect commits with the ack, so the claim must still be ours when it
// does: a claim that expired while the handler ran may have been taken by
// another delivery of the same key, which runs the same effect. Extending it
// proves it is held for another TTL. (A backend that keeps the claims in the
// same store checks this again inside the completion transaction.)
bool RunnerCore::ConfirmClaim(const DeliveryRun& run, Completion& c) {
  const Envelope& env = run.env();
  Status held =
      options_.idempotency->Extend(env.idempotency_key, run.d.lease.token, env.visibility_timeout);
  if (held.ok()) return true;
  logger_.Log(LogLevel::kError, "idempotency_claim_lost", &env, {{"error", held.ToString()}});
  c = DecideFailure(
      run.d,
      Failure{FailureClass::kTransient, std::string(reason::kIdempotencyClaimLost),
              "the idempotency claim on '" + env.idempotency_key +
                  "' could not be confirmed before the transactional effect committed, so "
                  "the effect was not committed: " +
                  held.ToString()},
      clock().Now(), false);
  return false;
}

void RunnerCore::RecordResult(const DeliveryRun& run, Completion& c) {
  const Envelope& env = run.env();
  Status s = options_.idempotency->Complete(env.idempotency_key, run.d.lease.token, c.result,
                                            options_.idempotency_retention);
  if (s.ok()) return;
  // Not recorded, so not acked as succeeded (SPEC 3 step 9): an ack without
  // the record would let a later job with the same key run the effect again
  // with no trace. The attempt fails as transient and goes through the retry
  // policy. The claim is kept, not released: it is the only sign that the
  // effect may have happened, so the retry waits (idempotency_in_progress)
  // until it expires with its TTL, then runs again -- as after a crash
  // between the effect and the record. A transactional effect is dropped
  // with the success it belonged to.
  logger_.Log(LogLevel::kError, "idempotency_record_failed", &env, {{"error", s.ToString()}});
  c = DecideFailure(
      run.d,
      Failure{
          FailureClass::kTransient, std::string(reason::kIdempotencyRecordFailed),
          "the handler succeeded but its idempotency record could not be written: " + s.ToString()},
      clock().Now(), false);
}

void RunnerCore::RecordAfterAck(const Delivery& d, const Completion& c, bool acked) {
  const Envelope& env = d.job.envelope;
  const Lease& lease = d.lease;
  Status s = options_.idempotency->Complete(env.idempotency_key, lease.token, c.result,
                                            options_.idempotency_retention);
  if (s.ok()) return;
  // A backend that keeps the idempotency records in the same store (SQLite)
  // already marked this delivery's claim completed inside the completion
  // transaction: that is success.
  if (s.code() == StatusCode::kAborted && ClaimRecordedBy(env.idempotency_key, lease.token)) return;
  // The effect is done (and, when acked, the job's success committed): this
  // is not a failed attempt and must not be retried (a retry would not
  // repeat the effect, but the job is no longer ours to change). The claim
  // expires with its TTL; a later job with the same key may then run again.
  logger_.Log(LogLevel::kError, "idempotency_record_failed", &env,
              {{"error", s.ToString()}, {"after_ack", acked ? "true" : "false"}});
}

void RunnerCore::ReleaseLock(const Delivery& d) {
  const Envelope& env = d.job.envelope;
  Status s = options_.locks->Release(env.lock_key, d.lease.token);
  if (!s.ok() && s.code() != StatusCode::kAborted && s.code() != StatusCode::kNotFound) {
    logger_.Log(LogLevel::kWarn, "lock_release_failed", &env, {{"error", s.ToString()}});
  }
}

void RunnerCore::ReportCompletion(const Delivery& d, const Completion& c, const AfterAck& after,
                                  const Status& acked) {
  const Envelope& env = d.job.envelope;
  if (acked.ok()) {
    TransitionEvent e = JobEvent(env, TransitionOrigin::kDelivery, clock().Now());
    e.epoch = static_cast<std::int64_t>(d.lease.epoch);
    e.from = JobStatus::kRunning;
    e.to = c.to;
    e.reason = c.reason;
    e.failure = c.failure.has_value() ? &*c.failure : nullptr;
    e.ready_at = c.ready_at;
    e.delay = c.delay;
    e.attempt_spent = c.spend_attempt;
    if (after.handler_ran) {
      e.queue_latency = after.queue_latency;
      e.run_duration = after.handler_duration;
    }
    Emit(e);
    return;
  }
  if (acked.code() == StatusCode::kAborted || acked.code() == StatusCode::kFailedPrecondition) {
    // Fenced: another delivery owns the job now (or it already has its
    // outcome). Never overwrite it.
    options_.metrics->Increment(metric::kStaleCompletions, JobLabels(env), 1);
    logger_.Log(LogLevel::kWarn, "stale_completion_refused", &env,
                {{"to", JobStatusName(c.to)},
                 {"reason", c.reason},
                 {"epoch", static_cast<std::int64_t>(d.lease.epoch)},
                 {"error", acked.ToString()}});
    return;
  }
  // The store failed: the job stays running until its lease expires, then
  // it is delivered again (at-least-once).
  logger_.Log(LogLevel::kError, "completion_failed", &env,
              {{"to", JobStatusName(c.to)}, {"reason", c.reason}, {"error", acked.ToString()}});
}

}  // namespace internal
}  // namespace jobpact
