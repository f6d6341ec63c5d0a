// The JobRunner: creation, the handler registry, enqueue, and the delivery
// pipeline of SPEC 3. Threads (workers, watchdog, maintenance, shutdown) are
// in job_runner_workers.cc.
#include "jobpact/job_runner.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <atomic>
#include <cmath>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "src/internal/names.h"
#include "src/runner/runner_core.h"

namespace jobpact {

JobContext::~JobContext() = default;
JobRunner::~JobRunner() = default;

Result<std::vector<EnqueueResult>> JobRunner::EnqueueBatch(std::vector<Envelope> /*envelopes*/) {
  return Status::Unimplemented("EnqueueBatch is not implemented by this JobRunner");
}

namespace internal {
namespace {

// --- The static handler registry (JOBPACT_REGISTER_HANDLER) -----------------

struct StaticRegistry {
  std::mutex mu;
  std::vector<std::pair<std::string, Handler>> handlers;  // Guarded by mu.
};

// Leaked on purpose: registrations run during static initialisation of other
// translation units, and runners may be created during static destruction.
StaticRegistry& Statics() {
  static StaticRegistry* registry = new StaticRegistry;
  return *registry;
}

// Paused job types are requeued after a jittered delay in this range: long
// enough that a paused backlog does not spin through the queue, short enough
// that Resume() takes effect within seconds.
constexpr Duration kPausedMinDelay = std::chrono::milliseconds(2500);
constexpr Duration kPausedMaxDelay = std::chrono::milliseconds(5000);

std::string JoinProblems(const std::vector<FieldError>& problems) {
  std::string out;
  for (const FieldError& p : problems) {
    if (!out.empty()) out += "; ";
    out += p.field;
    out += ": ";
    out += p.message;
  }
  return out;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

std::string DefaultRunnerId() {
  static std::atomic<int> counter{0};
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "host");
  }
  return std::string(host) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1) + 1);
}

double SecondsOf(Duration d) { return ToSeconds(d); }

std::string FormatSeconds(Duration d) { return fmt::format("{}s", ToSeconds(d)); }

// The outcome of one handler call, as the single catch boundary saw it.
struct HandlerOutcome {
  bool ok = true;
  bool threw = false;
  Failure failure;
  std::exception_ptr exception;  // Kept for in-process diagnosis.
};

}  // namespace

// --- JobContext --------------------------------------------------------------

// What a handler sees. Lives on the worker's stack for the handler call.
class ContextImpl final : public JobContext {
 public:
  ContextImpl(RunnerCore& core, const Delivery& d, CancelFlags& cancel, TimePoint deadline,
              std::uint64_t fencing, bool lock_held, bool claim_held)
      : core_(core),
        d_(d),
        cancel_(cancel),
        deadline_(deadline),
        fencing_(fencing),
        lock_held_(lock_held),
        claim_held_(claim_held) {}

  const Envelope& envelope() const override { return d_.job.envelope; }
  TimePoint deadline() const override { return deadline_; }
  bool cancelled() const override {
    return cancel_.lost.load(std::memory_order_acquire) ||
           cancel_.shutdown.load(std::memory_order_acquire) || core_.clock().Now() >= deadline_;
  }
  std::uint64_t fencing_token() const override { return fencing_; }
  const std::string& checkpoint() const override { return d_.job.checkpoint; }

  Status Heartbeat(std::string_view checkpoint) override {
    if (!checkpoint.empty()) last_checkpoint_.assign(checkpoint.data(), checkpoint.size());
    Status s = core_.RenewDelivery(d_, lock_held_, claim_held_, checkpoint);
    if (s.code() == StatusCode::kAborted) MarkLost();
    return s;
  }

  void SetResult(std::string result) override { result_ = std::move(result); }
  void SetTransactionalEffect(std::function<Status(void* native)> effect) override {
    effect_ = std::move(effect);
  }

  Status Snooze(Duration delay) override {
    if (delay < Duration::zero()) {
      return Status::InvalidArgument("Snooze: delay must be >= 0");
    }
    snooze_ = delay;
    discard_.reset();
    return Status::Ok();
  }
  Status Discard(std::string reason) override {
    discard_ = IsBlank(reason) ? std::string(reason::kHandlerDiscarded) : std::move(reason);
    snooze_.reset();
    return Status::Ok();
  }

  void Log(LogLevel level, std::string_view message) const override {
    core_.logger().Log(level, "handler", &d_.job.envelope, {{"message", message}});
  }

  // --- For the runner ---
  void MarkLost() { cancel_.lost.store(true, std::memory_order_release); }

  const std::optional<Duration>& snooze() const { return snooze_; }
  const std::optional<std::string>& discard() const { return discard_; }
  std::string& result() { return result_; }
  std::function<Status(void*)>& effect() { return effect_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  RunnerCore& core_;
  const Delivery& d_;
  CancelFlags& cancel_;
  const TimePoint deadline_;
  const std::uint64_t fencing_;
  const bool lock_held_;
  const bool claim_held_;
  // Handler thread only.
  std::string result_;
  std::function<Status(void*)> effect_;
  std::optional<Duration> snooze_;
  std::optional<std::string> discard_;
  std::string last_checkpoint_;
};

namespace {

// The one boundary where handler code is called. Everything a handler can do
// to fail ends here as a Failure: a returned non-OK Status, a thrown
// std::exception, or a thrown anything else (an int, a string). Nothing
// escapes to the worker thread.
HandlerOutcome InvokeHandler(const HandlerEntry& entry, ContextImpl& ctx) noexcept {
  HandlerOutcome out;
  try {
    Status s = entry.handler(ctx);
    if (!s.ok()) {
      out.ok = false;
      out.failure = FailureFromStatus(s);
    }
    return out;
  } catch (...) {
    // One catch-all rather than catch (const std::exception&) plus
    // catch (...): the classifier rethrows the exception_ptr and tells the
    // two apart itself (type rules, system_error codes, DescribeException).
    out.ok = false;
    out.threw = true;
    out.exception = std::current_exception();
  }
  try {
    out.failure = entry.classifier.Classify(out.exception);
  } catch (...) {
    out.failure = Failure{FailureClass::kUnknown, "unclassifiable", "exception could not be classified"};
  }
  return out;
}

}  // namespace

// --- RunnerCore: registry and enqueue -----------------------------------------

RunnerCore::RunnerCore(JobRunnerOptions options)
    : options_(std::move(options)),
      logger_(options_.logger_name, options_.log_level, options_.json_logs, options_.clock),
      worker_prefix_(options_.runner_id + "/w"),
      handlers_(std::make_shared<const HandlerMap>()) {}

RunnerCore::~RunnerCore() = default;

Status RunnerCore::Handle(std::string_view job_type, Handler handler, HandlerOptions options) {
  if (!IsSafeName(job_type, options_.validation.max_name_length)) {
    return Status::InvalidArgument("Handle: job_type '" + std::string(job_type) +
                                   "' must be 1-" +
                                   std::to_string(options_.validation.max_name_length) +
                                   " characters of [A-Za-z0-9._:-]");
  }
  if (!handler) {
    return Status::InvalidArgument("Handle: the handler of '" + std::string(job_type) +
                                   "' is empty");
  }
  if (options.policy.has_value() && IsBlank(options.policy_reason)) {
    return Status::InvalidArgument(
        "Handle: the policy override of '" + std::string(job_type) +
        "' needs a policy_reason (write down why this job type differs from the default)");
  }
  if (!options.dependency.empty() &&
      !IsSafeName(options.dependency, options_.validation.max_name_length)) {
    return Status::InvalidArgument("Handle: the dependency '" + options.dependency + "' of '" +
                                   std::string(job_type) + "' must be 1-" +
                                   std::to_string(options_.validation.max_name_length) +
                                   " characters of [A-Za-z0-9._:-]");
  }
  std::lock_guard<std::mutex> l(handlers_mu_);
  if (handlers_->count(job_type) != 0) {
    return Status::AlreadyExists("Handle: a handler for '" + std::string(job_type) +
                                 "' is already registered");
  }
  if (options.policy.has_value()) {
    JOBPACT_RETURN_IF_ERROR(
        options_.policies->Override(job_type, *options.policy, options.policy_reason));
  }
  auto entry = std::make_shared<HandlerEntry>();
  entry->job_type = std::string(job_type);
  entry->handler = std::move(handler);
  entry->classifier = std::move(options.classifier);
  entry->dependency = std::move(options.dependency);
  auto next = std::make_shared<HandlerMap>(*handlers_);
  next->emplace(entry->job_type, std::move(entry));
  handlers_ = std::move(next);
  handlers_version_.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

const HandlerEntry* RunnerCore::FindHandler(std::string_view job_type, HandlerCache& cache) {
  const std::uint64_t version = handlers_version_.load(std::memory_order_acquire);
  if (cache.version != version || cache.map == nullptr) {
    std::lock_guard<std::mutex> l(handlers_mu_);
    cache.map = handlers_;
    cache.version = version;
  }
  auto it = cache.map->find(job_type);
  // A raw pointer: copying the shared_ptr would bounce its reference count
  // between workers on every delivery.
  if (it == cache.map->end()) return nullptr;
  return it->second.get();
}

void RunnerCore::Pause(std::string_view job_type) {
  std::lock_guard<std::mutex> l(paused_mu_);
  if (paused_.emplace(job_type).second) paused_count_.fetch_add(1, std::memory_order_release);
  logger_.Log(LogLevel::kWarn, "job_type_paused", nullptr, {{"job_type", job_type}});
}

void RunnerCore::Resume(std::string_view job_type) {
  std::lock_guard<std::mutex> l(paused_mu_);
  auto it = paused_.find(job_type);
  if (it == paused_.end()) return;
  paused_.erase(it);
  paused_count_.fetch_sub(1, std::memory_order_release);
  logger_.Log(LogLevel::kWarn, "job_type_resumed", nullptr, {{"job_type", job_type}});
}

bool RunnerCore::IsPaused(std::string_view job_type) const {
  // Nothing paused (the usual case): no lock on the hot path.
  if (paused_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> l(paused_mu_);
  return paused_.count(job_type) != 0;
}

Duration RunnerCore::JitteredDelay(Duration lo, Duration hi) const {
  if (hi <= lo) return lo;
  const double sample = options_.random->NextUnit();
  return lo + std::chrono::duration_cast<Duration>((hi - lo) * sample);
}

void RunnerCore::WakeOneWorker() { WakeWorkers(1); }

void RunnerCore::WakeWorkers(std::size_t jobs) {
  if (jobs == 0) return;
  enqueue_seq_.fetch_add(1, std::memory_order_seq_cst);
  // A worker increments idle_workers_ before it re-checks enqueue_seq_ under
  // work_mu_, so either it sees the new sequence number or we see it idle
  // and notify it once it waits (the notify takes the same mutex).
  const int idle = idle_workers_.load(std::memory_order_seq_cst);
  if (idle <= 0) return;
  // One worker per dequeue batch of new jobs.
  const std::size_t batch = static_cast<std::size_t>(options_.dequeue_batch);
  const std::size_t wanted = (jobs + batch - 1) / batch;
  std::lock_guard<std::mutex> l(work_mu_);
  if (wanted >= static_cast<std::size_t>(idle)) {
    work_cv_.notify_all();
  } else {
    for (std::size_t i = 0; i < wanted; ++i) work_cv_.notify_one();
  }
}

std::vector<FieldError> RunnerCore::PrepareEnvelope(Envelope& env, TimePoint now) const {
  std::vector<FieldError> problems = ValidateEnvelope(env, options_.validation);
  if (!problems.empty()) return problems;
  // The job type's policy decides the budget unless the producer gave one;
  // storing it makes the record (and the DLQ entry) say what applied.
  if (env.max_attempts == 0) env.max_attempts = options_.policies->For(env.job_type).max_attempts;
  PrepareForEnqueue(env, now);
  return problems;
}

void RunnerCore::ReportEnqueued(const Envelope& env, const EnqueueResult& r) {
  MetricLabels labels{env.job_type, env.queue, {}, {}};
  if (r.duplicate) {
    options_.metrics->Increment(metric::kDedupHits, labels, 1);
    logger_.Log(LogLevel::kInfo, "enqueue_duplicate", &env,
                {{"existing_job_id", r.job_id}, {"dedup_key", env.dedup_key}});
    return;
  }
  options_.metrics->Increment(metric::kEnqueued, labels, 1);
  logger_.Log(LogLevel::kDebug, "transition", &env,
              {{"from", "none"}, {"to", "queued"}, {"reason", reason::kEnqueued}});
}

Result<EnqueueResult> RunnerCore::Enqueue(Envelope env) {
  std::vector<FieldError> problems = PrepareEnvelope(env, clock().Now());
  if (!problems.empty()) {
    return Status::InvalidArgument("invalid envelope: " + JoinProblems(problems));
  }
  EnqueueOptions eo;
  eo.dedup_window = options_.dedup_window;
  Result<EnqueueResult> r = options_.queue->Enqueue(env, eo);
  if (!r.ok()) {
    logger_.Log(LogLevel::kError, "enqueue_failed", &env, {{"error", r.status().ToString()}});
    return r;
  }
  ReportEnqueued(env, *r);
  if (!r->duplicate) WakeOneWorker();
  return r;
}

Result<std::vector<EnqueueResult>> RunnerCore::EnqueueBatch(std::vector<Envelope> envs) {
  if (envs.empty()) return std::vector<EnqueueResult>{};
  // Every envelope is checked before anything is stored: the batch is
  // refused whole, and the caller still holds every envelope to fix.
  const TimePoint now = clock().Now();
  std::string invalid;
  std::size_t invalid_count = 0;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    std::vector<FieldError> problems = PrepareEnvelope(envs[i], now);
    if (problems.empty()) continue;
    if (invalid_count++ > 0) invalid += ", ";
    invalid += "index " + std::to_string(i) + " (" + JoinProblems(problems) + ")";
  }
  if (invalid_count > 0) {
    return Status::InvalidArgument("EnqueueBatch: " + std::to_string(invalid_count) + " of " +
                                   std::to_string(envs.size()) +
                                   " envelopes are invalid, none enqueued: " + invalid);
  }
  EnqueueOptions eo;
  eo.dedup_window = options_.dedup_window;
  // One backend call: atomic where the backend's EnqueueBatch is.
  Result<std::vector<EnqueueResult>> r = options_.queue->EnqueueBatch(envs, eo);
  if (!r.ok()) {
    logger_.Log(
        LogLevel::kError, "enqueue_batch_failed", nullptr,
        {{"jobs", static_cast<std::int64_t>(envs.size())}, {"error", r.status().ToString()}});
    return r;
  }
  if (r->size() != envs.size()) {
    // A backend bug; what was stored is unknown, so say so rather than
    // report results that do not line up with the input.
    return Status::Internal("EnqueueBatch: the backend returned " + std::to_string(r->size()) +
                            " results for " + std::to_string(envs.size()) + " envelopes");
  }
  std::size_t stored = 0;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    ReportEnqueued(envs[i], (*r)[i]);
    if (!(*r)[i].duplicate) ++stored;
  }
  WakeWorkers(stored);
  return r;
}

Result<EnqueueResult> RunnerCore::EnqueueJson(std::string_view raw) {
  std::vector<FieldError> problems;
  Result<Envelope> env = ParseEnvelope(raw, options_.validation, &problems);
  if (env.ok()) return Enqueue(std::move(*env));
  if (problems.empty()) problems.push_back(FieldError{"envelope", env.status().message()});
  Result<std::string> id = options_.queue->DeadLetterInvalid(raw, problems);
  const std::string listed = JoinProblems(problems);
  if (!id.ok()) {
    logger_.Log(LogLevel::kError, "dead_letter_invalid_failed", nullptr,
                {{"error", id.status().ToString()}, {"problems", listed}});
    return Status::InvalidArgument("invalid envelope (" + listed +
                                   "); storing it in the DLQ failed: " + id.status().ToString());
  }
  options_.metrics->Increment(metric::kDeadLettered,
                              MetricLabels{{}, {}, reason::kInvalidEnvelope, {}}, 1);
  logger_.Log(LogLevel::kError, "transition", nullptr,
              {{"job_id", *id},
               {"from", "none"},
               {"to", "dead_lettered"},
               {"reason", reason::kInvalidEnvelope},
               {"error_class", "permanent"},
               {"error_code", "invalid_envelope"},
               {"error_message", listed}});
  return Status::InvalidArgument("invalid envelope dead-lettered as " + *id + ": " + listed);
}

// --- The pipeline -------------------------------------------------------------

struct RunnerCore::DeliveryRun {
  DeliveryRun(Delivery& delivery, WorkerSlot* worker) : d(delivery), slot(worker) {}
  const Envelope& env() const { return d.job.envelope; }

  Delivery& d;
  WorkerSlot* slot;
  bool lock_held = false;
  bool claim_held = false;
  // Shutdown gave the lease back while the handler ran: no Complete().
  bool given_back = false;
  bool handler_ran = false;
  Duration handler_duration{};
};

bool RunnerCore::EnsureLease(Delivery& d) {
  const TimePoint now = clock().Now();
  const Duration vis = d.job.envelope.visibility_timeout;
  // Renewal is due once a third of the lease has passed (SPEC 11); before
  // that the lease certainly outlasts a start.
  if (d.lease.expires_at - now > vis - vis / 3) return true;
  Result<Lease> renewed = options_.queue->Renew(d.lease, vis, {});
  if (renewed.ok()) {
    d.lease.expires_at = renewed->expires_at;
    return true;
  }
  const StatusCode code = renewed.status().code();
  if (code == StatusCode::kAborted || code == StatusCode::kNotFound) {
    logger_.Log(LogLevel::kWarn, "lease_lost_before_start", &d.job.envelope,
                {{"error", renewed.status().ToString()}});
    return false;
  }
  // The store is unreachable: start only if the lease is certainly ours.
  return now < d.lease.expires_at;
}

void RunnerCore::ProcessDelivery(Delivery& d, WorkerSlot* slot, HandlerCache& cache) {
  deliveries_.fetch_add(1, std::memory_order_relaxed);
  DeliveryRun run(d, slot);
  const Envelope& env = d.job.envelope;
  const TimePoint now = clock().Now();

  if (logger_.Enabled(LogLevel::kDebug)) {
    const std::string_view from =
        d.job.history.empty() ? std::string_view("queued") : JobStatusName(d.job.history.back().from);
    logger_.Log(LogLevel::kDebug, "transition", &env,
                {{"from", from},
                 {"to", "running"},
                 {"reason", reason::kDelivered},
                 {"epoch", static_cast<std::int64_t>(d.lease.epoch)}});
  }

  auto requeue = [&](std::string_view why, Duration delay, bool lock_wait,
                     std::optional<Failure> failure) {
    Completion c;
    c.to = JobStatus::kRetryScheduled;
    c.reason = std::string(why);
    c.ready_at = now + delay;
    c.delay = delay;
    c.spend_attempt = false;
    c.lock_wait = lock_wait;
    c.failure = std::move(failure);
    Finish(run, std::move(c));
  };
  auto finish = [&](JobStatus to, std::string_view why, std::optional<Failure> failure) {
    Completion c;
    c.to = to;
    c.reason = std::string(why);
    c.failure = std::move(failure);
    Finish(run, std::move(c));
  };
  // A store we depend on failed (kUnavailable and the like): requeue without
  // spending an attempt rather than let the lease expire, which would count
  // a crash recovery against a job that did nothing wrong.
  auto backend_trouble = [&](std::string_view what, const Status& s) {
    logger_.Log(LogLevel::kError, "backend_error", &env,
                {{"step", what}, {"error", s.ToString()}});
    requeue(reason::kTransientError,
            JitteredDelay(options_.lock_busy_min_delay, options_.lock_busy_max_delay), false,
            Failure{FailureClass::kTransient, std::string(StatusCodeName(s.code())),
                    std::string(what) + ": " + s.message()});
  };

  // 1. Validate: a producer may have written straight to the backend.
  std::vector<FieldError> problems = ValidateEnvelope(env, options_.validation);
  if (!problems.empty()) {
    finish(JobStatus::kDeadLettered, reason::kInvalidEnvelope,
           Failure{FailureClass::kPermanent, std::string(reason::kInvalidEnvelope),
                   JoinProblems(problems)});
    return;
  }

  // 2. TTL and the start-by and total deadlines.
  if (env.expires_at.has_value() && now > *env.expires_at) {
    finish(JobStatus::kDiscarded, reason::kExpired, std::nullopt);
    return;
  }
  // Start-by applies to a job that has not started yet: its first attempt
  // (a lock-busy requeue gives the attempt back, so it still counts as 1).
  if (env.start_by.has_value() && env.attempt <= 1 && now > *env.start_by) {
    finish(JobStatus::kDiscarded, reason::kStartByPassed, std::nullopt);
    return;
  }
  if (env.deadline.has_value() && now > *env.deadline) {
    finish(JobStatus::kDeadLettered, reason::kTotalDeadlinePassed, std::nullopt);
    return;
  }

  // 3. Attempt budget (a job can get here through lease recoveries). This
  // delivery runs nothing, so it does not count: the record keeps
  // attempt == max_attempts.
  // A job stored without going through Enqueue may not carry a budget.
  const int max_attempts =
      env.max_attempts > 0 ? env.max_attempts : options_.policies->For(env.job_type).max_attempts;
  if (env.attempt > max_attempts) {
    Completion c;
    c.to = JobStatus::kDeadLettered;
    c.reason = std::string(reason::kMaxAttemptsExceeded);
    c.spend_attempt = false;
    Finish(run, std::move(c));
    return;
  }

  // SPEC 10 safe action: a paused type is not run, and nothing is spent.
  if (IsPaused(env.job_type)) {
    requeue(reason::kPaused, JitteredDelay(kPausedMinDelay, kPausedMaxDelay), false,
            std::nullopt);
    return;
  }

  // 4. Dedup at delivery.
  if (!env.dedup_key.empty()) {
    Result<std::optional<std::string>> dup =
        options_.queue->FindDuplicate(env.dedup_key, env.job_id, now - options_.dedup_window);
    if (!dup.ok()) {
      backend_trouble("dedup check", dup.status());
      return;
    }
    if (dup->has_value()) {
      options_.metrics->Increment(metric::kDedupHits, MetricLabels{env.job_type, env.queue, {}, {}},
                                  1);
      Completion c;
      c.to = JobStatus::kSucceeded;
      c.reason = std::string(reason::kDuplicate);
      c.result = "duplicate of " + **dup;
      Finish(run, std::move(c));
      return;
    }
  }

  // 5. Lock.
  std::uint64_t fencing = 0;
  if (!env.lock_key.empty()) {
    Result<LockLease> lock =
        options_.locks->Acquire(env.lock_key, d.lease.token, env.visibility_timeout);
    if (!lock.ok()) {
      if (lock.status().code() != StatusCode::kAborted) {
        backend_trouble("lock acquire", lock.status());
        return;
      }
      options_.metrics->Increment(metric::kLockContention,
                                  MetricLabels{env.job_type, env.queue, {}, {}}, 1);
      if (d.job.lock_waits >= options_.max_lock_waits) {
        finish(JobStatus::kDeadLettered, reason::kLockWaitsExhausted,
               Failure{FailureClass::kTransient, std::string(reason::kLockBusy),
                       "lock '" + env.lock_key + "' still busy after " +
                           std::to_string(d.job.lock_waits) + " waits: " + lock.status().message()});
        return;
      }
      requeue(reason::kLockBusy,
              JitteredDelay(options_.lock_busy_min_delay, options_.lock_busy_max_delay), true,
              std::nullopt);
      return;
    }
    fencing = lock->fencing_token;
    run.lock_held = true;
  }

  // 6. Idempotency.
  if (!env.idempotency_key.empty()) {
    Result<ClaimOutcome> claim =
        options_.idempotency->Claim(env.idempotency_key, d.lease.token, env.visibility_timeout);
    if (!claim.ok()) {
      backend_trouble("idempotency claim", claim.status());
      return;
    }
    switch (claim->kind) {
      case ClaimOutcome::Kind::kCompleted: {
        options_.metrics->Increment(metric::kIdempotentSkips,
                                    MetricLabels{env.job_type, env.queue, {}, {}}, 1);
        Completion c;
        c.to = JobStatus::kSucceeded;
        c.reason = std::string(reason::kIdempotentSkip);
        c.result = std::move(claim->record.result);
        Finish(run, std::move(c));
        return;
      }
      case ClaimOutcome::Kind::kInProgress:
        requeue(reason::kIdempotencyInProgress,
                JitteredDelay(options_.lock_busy_min_delay, options_.lock_busy_max_delay), false,
                std::nullopt);
        return;
      case ClaimOutcome::Kind::kClaimed:
        run.claim_held = true;
        break;
    }
  }

  // 7. Run the handler under its execution timeout.
  const HandlerEntry* handler = FindHandler(env.job_type, cache);
  if (handler == nullptr) {
    finish(JobStatus::kDeadLettered, reason::kNoHandler,
           Failure{FailureClass::kPermanent, std::string(reason::kNoHandler),
                   "no handler registered for job type '" + env.job_type + "'"});
    return;
  }
  // The dependency's circuit breaker: an open circuit reschedules the job
  // to the end of the open period without spending an attempt (Finish
  // releases the lock and claim taken above).
  CircuitBreaker* breaker = nullptr;
  CircuitBreaker::Permit permit;
  if (!handler->dependency.empty()) {
    breaker = &options_.circuit_breakers->Get(handler->dependency);
    Result<CircuitBreaker::Permit> p = breaker->Acquire();
    if (!p.ok()) {
      options_.metrics->Increment(metric::kCircuitRejected,
                                  MetricLabels{env.job_type, env.queue, {}, {}}, 1);
      const Duration wait = std::max(Duration::zero(), breaker->retry_after() - now);
      requeue(reason::kCircuitOpen, wait, false,
              Failure{FailureClass::kTransient, std::string(reason::kCircuitOpen),
                      p.status().message()});
      return;
    }
    permit = *p;
  }
  const TimePoint started = clock().Now();
  const TimePoint deadline = started + env.timeout;
  const MetricLabels labels{env.job_type, env.queue, {}, {}};
  options_.metrics->Increment(metric::kStarted, labels, 1);
  // Deposits of the retry budget: first attempts only (a lock-busy requeue
  // or a snooze gives its attempt back, so attempt 1 runs once).
  if (options_.retry_budgets != nullptr && env.attempt == 1) {
    options_.retry_budgets->RecordFirstAttempt(env.job_type);
  }
  options_.metrics->Observe(metric::kQueueLatency, labels,
                            SecondsOf(started - std::max(d.job.ready_at, d.job.enqueued_at)));

  CancelFlags cancel;
  ContextImpl ctx(*this, d, cancel, deadline, fencing, run.lock_held, run.claim_held);
  if (slot != nullptr) {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->running = true;
    slot->job = RunningJob{&d, &cancel, deadline, started + env.visibility_timeout / 3,
                           run.lock_held, run.claim_held, true};
  }
  HandlerOutcome outcome = InvokeHandler(*handler, ctx);
  const TimePoint finished = clock().Now();
  if (slot != nullptr) {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->running = false;
    slot->job = RunningJob{};
    run.given_back = slot->given_back;
  }
  run.handler_ran = true;
  run.handler_duration = finished - started;
  options_.metrics->Observe(metric::kDuration, labels, SecondsOf(run.handler_duration));

  if (breaker != nullptr) {
    // The dependency answered unless the attempt failed transiently (or
    // unclassified) or timed out. A snooze or discard judges nothing.
    const bool handler_chose = !outcome.threw && (ctx.snooze() || ctx.discard());
    if (handler_chose) {
      breaker->Release(permit);
    } else if (outcome.ok) {
      breaker->RecordSuccess(permit);
    } else if (finished >= deadline ||
               outcome.failure.failure_class != FailureClass::kPermanent) {
      breaker->RecordFailure(permit);
    } else {
      breaker->RecordSuccess(permit);
    }
  }

  // 8. Classify and decide: exactly one transition.
  Completion c;
  if (!outcome.threw && ctx.snooze().has_value()) {
    c.to = JobStatus::kRetryScheduled;
    c.reason = std::string(reason::kSnoozed);
    c.ready_at = finished + *ctx.snooze();
    c.delay = *ctx.snooze();
    c.spend_attempt = false;
  } else if (!outcome.threw && ctx.discard().has_value()) {
    c.to = JobStatus::kDiscarded;
    c.reason = *ctx.discard();
  } else if (outcome.ok) {
    // Success stands even if it came after the deadline: the effect is done,
    // and calling it a timeout would only make a retry repeat it.
    c.to = JobStatus::kSucceeded;
    c.reason = std::string(reason::kSucceeded);
    c.result = std::move(ctx.result());
    c.transactional_effect = std::move(ctx.effect());
  } else {
    Failure failure = std::move(outcome.failure);
    const bool timed_out = finished >= deadline;
    if (timed_out) {
      options_.metrics->Increment(metric::kTimeouts, labels, 1);
      failure = Failure{FailureClass::kTransient, std::string(reason::kTimeout),
                        "execution timeout of " + FormatSeconds(env.timeout) + " exceeded (" +
                            failure.code + ": " + failure.message + ")"};
    }
    if (failure.failure_class == FailureClass::kUnknown) {
      options_.metrics->Increment(metric::kAnomalies, labels, 1);
      logger_.Log(LogLevel::kWarn, "unknown_error", &env,
                  {{"error_code", failure.code}, {"error_message", failure.message}});
    }
    c = DecideFailure(run, std::move(failure), finished, timed_out);
  }
  if (c.to == JobStatus::kRetryScheduled && c.checkpoint.empty()) c.checkpoint = ctx.last_checkpoint();
  Finish(run, std::move(c));
}

Completion RunnerCore::DecideFailure(const DeliveryRun& run, Failure failure, TimePoint finished,
                                     bool timed_out) {
  const Envelope& env = run.env();
  Completion c;
  RetryPolicy policy = options_.policies->For(env.job_type);
  if (env.max_attempts > 0) policy.max_attempts = env.max_attempts;
  if (env.retry_policy.has_value()) policy.backoff = *env.retry_policy;
  const double sample = options_.random->NextUnit();
  RetryDecision decision =
      DecideRetry(policy, failure.failure_class, env.attempt, sample, run.d.job.previous_delay);
  switch (decision.kind) {
    case RetryDecision::Kind::kRetry: {
      TimePoint ready_at = finished + decision.delay;
      if (env.deadline.has_value() && ready_at > *env.deadline) {
        c.to = JobStatus::kDeadLettered;
        c.reason = std::string(reason::kTotalDeadlinePassed);
        break;
      }
      c.reason = timed_out ? std::string(reason::kTimeout) : decision.reason;
      if (options_.retry_budgets != nullptr) {
        // SPEC 10: retries may not outgrow traffic; the budget sheds them by
        // time, never by dropping work.
        RetryBudget& budget = options_.retry_budgets->ForJobType(env.job_type);
        const MetricLabels labels{env.job_type, env.queue, {}, {}};
        if (budget.options().on_exhausted == RetryBudgetExhaustedAction::kDeadLetter) {
          // Opted in per job type: quarantine the refused retry.
          if (!budget.TryRetry()) {
            options_.metrics->Increment(metric::kRetryBudgetExhausted, labels, 1);
            c.to = JobStatus::kDeadLettered;
            c.reason = std::string(reason::kRetryBudgetExhausted);
            break;
          }
        } else {
          // Deferred: booked at the time the budget allows it, so deferred
          // retries come back at the budget's pace, not in one wave.
          const RetryReservation r = budget.ReserveRetry(env.deadline);
          if (r.kind != RetryReservation::Kind::kNow) {
            options_.metrics->Increment(metric::kRetryBudgetExhausted, labels, 1);
          }
          if (r.kind == RetryReservation::Kind::kPastDeadline) {
            c.to = JobStatus::kDeadLettered;
            c.reason = std::string(reason::kTotalDeadlinePassed);
            break;
          }
          if (r.kind == RetryReservation::Kind::kDeferred) {
            options_.metrics->Increment(metric::kRetryBudgetDeferred, labels, 1);
            c.reason = std::string(reason::kRetryBudgetDeferred);
            ready_at = std::max(ready_at, r.at);
          }
        }
      }
      c.to = JobStatus::kRetryScheduled;
      c.ready_at = ready_at;
      c.delay = ready_at - finished;
      break;
    }
    case RetryDecision::Kind::kDeadLetter:
      c.to = JobStatus::kDeadLettered;
      c.reason = decision.reason;
      break;
    case RetryDecision::Kind::kFail:
      c.to = JobStatus::kFailed;
      c.reason = decision.reason;
      break;
  }
  c.failure = std::move(failure);
  return c;
}

void RunnerCore::Finish(DeliveryRun& run, Completion c) {
  const Envelope& env = run.env();
  const Lease& lease = run.d.lease;

  // 9. Record the idempotent result before the ack, so that a crash between
  // the two makes the redelivery skip the effect; release the claim on any
  // other outcome so that a retry can claim it again.
  //
  // With a transactional effect the order is reversed: the ack commits the
  // effect and the job together, so it goes first, and the result is
  // recorded only once it committed. Recording first would let a crash
  // between the two calls (or an effect that fails and rolls the
  // completion back) leave the key completed while the effect never
  // committed, and the redelivery would be skipped as idempotent_skip.
  bool record_after_ack =
      run.claim_held && c.to == JobStatus::kSucceeded && c.transactional_effect;
  if (record_after_ack) {
    // The effect commits with the ack, so the claim must still be ours when
    // it does: a claim that expired while the handler ran may have been
    // taken by another delivery of the same key, which runs the same effect.
    // Extending it proves it is held for another TTL. (A backend that keeps
    // the claims in the same store checks this again inside the completion
    // transaction.)
    Status held = options_.idempotency->Extend(env.idempotency_key, lease.token,
                                               env.visibility_timeout);
    if (!held.ok()) {
      logger_.Log(LogLevel::kError, "idempotency_claim_lost", &env, {{"error", held.ToString()}});
      record_after_ack = false;
      c = DecideFailure(
          run,
          Failure{FailureClass::kTransient, std::string(reason::kIdempotencyClaimLost),
                  "the idempotency claim on '" + env.idempotency_key +
                      "' could not be confirmed before the transactional effect committed, so "
                      "the effect was not committed: " +
                      held.ToString()},
          clock().Now(), false);
    }
  }
  if (run.claim_held && !record_after_ack) {
    if (c.to == JobStatus::kSucceeded) {
      Status s = options_.idempotency->Complete(env.idempotency_key, lease.token, c.result,
                                                options_.idempotency_retention);
      if (!s.ok()) {
        // Not recorded, so not acked as succeeded (SPEC 3 step 9): an ack
        // without the record would let a later job with the same key run
        // the effect again with no trace. The attempt fails as transient
        // and goes through the retry policy. The claim is kept, not
        // released: it is the only sign that the effect may have happened,
        // so the retry waits (idempotency_in_progress) until it expires
        // with its TTL, then runs again -- as after a crash between the
        // effect and the record. A transactional effect is dropped with the
        // success it belonged to.
        logger_.Log(LogLevel::kError, "idempotency_record_failed", &env,
                    {{"error", s.ToString()}});
        c = DecideFailure(
            run,
            Failure{FailureClass::kTransient, std::string(reason::kIdempotencyRecordFailed),
                    "the handler succeeded but its idempotency record could not be written: " +
                        s.ToString()},
            clock().Now(), false);
      }
    } else {
      Status s = options_.idempotency->Release(env.idempotency_key, lease.token);
      if (!s.ok() && s.code() != StatusCode::kAborted) {
        logger_.Log(LogLevel::kWarn, "idempotency_release_failed", &env,
                    {{"error", s.ToString()}});
      }
    }
  }

  Status st;
  if (run.given_back) {
    st = Status::Aborted("the lease was given back at shutdown");
  } else {
    st = options_.queue->Complete(run.d, c);
  }

  if (record_after_ack && st.ok()) RecordAfterAck(run, c);

  if (run.lock_held) {
    Status s = options_.locks->Release(env.lock_key, lease.token);
    if (!s.ok() && s.code() != StatusCode::kAborted && s.code() != StatusCode::kNotFound) {
      logger_.Log(LogLevel::kWarn, "lock_release_failed", &env, {{"error", s.ToString()}});
    }
  }

  if (st.ok()) {
    EmitTransitionMetrics(env, c);
    LogTransition(run, c);
    return;
  }
  const MetricLabels labels{env.job_type, env.queue, {}, {}};
  if (st.code() == StatusCode::kAborted || st.code() == StatusCode::kFailedPrecondition) {
    // Fenced: another delivery owns the job now (or it already has its
    // outcome). Never overwrite it.
    options_.metrics->Increment(metric::kStaleCompletions, labels, 1);
    logger_.Log(LogLevel::kWarn, "stale_completion_refused", &env,
                {{"to", JobStatusName(c.to)},
                 {"reason", c.reason},
                 {"epoch", static_cast<std::int64_t>(lease.epoch)},
                 {"error", st.ToString()}});
    return;
  }
  // The store failed: the job stays running until its lease expires, then
  // it is delivered again (at-least-once).
  logger_.Log(LogLevel::kError, "completion_failed", &env,
              {{"to", JobStatusName(c.to)}, {"reason", c.reason}, {"error", st.ToString()}});
}

void RunnerCore::RecordAfterAck(const DeliveryRun& run, const Completion& c) {
  const Envelope& env = run.env();
  const Lease& lease = run.d.lease;
  Status s = options_.idempotency->Complete(env.idempotency_key, lease.token, c.result,
                                            options_.idempotency_retention);
  if (s.ok()) return;
  if (s.code() == StatusCode::kAborted) {
    // A backend that keeps the idempotency records in the same store (SQLite)
    // already marked this delivery's claim completed inside the completion
    // transaction: that is success.
    Result<std::optional<IdempotencyRecord>> rec = options_.idempotency->Get(env.idempotency_key);
    if (rec.ok() && rec->has_value() &&
        (*rec)->state == IdempotencyRecord::State::kCompleted && (*rec)->owner == lease.token) {
      return;
    }
  }
  // The effect and the job's success are committed: this is not a failed
  // attempt and must not be retried (a retry would not repeat the effect, but
  // the job is no longer ours to change). The claim expires with its TTL; a
  // later job with the same key may then run again.
  logger_.Log(LogLevel::kError, "idempotency_record_failed", &env,
              {{"error", s.ToString()}, {"after_ack", "true"}});
}

void RunnerCore::EmitTransitionMetrics(const Envelope& env, const Completion& c) {
  MetricLabels labels{env.job_type, env.queue, {}, {}};
  MetricsSink& m = *options_.metrics;
  switch (c.to) {
    case JobStatus::kSucceeded:
      labels.reason = c.reason;
      m.Increment(metric::kSucceeded, labels, 1);
      break;
    case JobStatus::kFailed:
      labels.reason = c.reason;
      m.Increment(metric::kFailed, labels, 1);
      break;
    case JobStatus::kDeadLettered:
      labels.reason = c.reason;
      m.Increment(metric::kDeadLettered, labels, 1);
      break;
    case JobStatus::kDiscarded:
      labels.reason = c.reason;
      m.Increment(metric::kDiscarded, labels, 1);
      break;
    case JobStatus::kRetryScheduled:
      if (c.failure.has_value() && c.spend_attempt) {
        labels.failure_class = FailureClassName(c.failure->failure_class);
        m.Increment(metric::kRetries, labels, 1);
      }
      return;
    default:
      return;
  }
  // The attempt distribution, at the job's outcome.
  m.Observe(metric::kAttempts, MetricLabels{env.job_type, env.queue, {}, {}}, env.attempt);
}

void RunnerCore::LogTransition(const DeliveryRun& run, const Completion& c) {
  LogLevel level = LogLevel::kInfo;
  if (c.to == JobStatus::kDeadLettered || c.to == JobStatus::kFailed) {
    level = LogLevel::kError;
  } else if (c.failure.has_value()) {
    level = LogLevel::kWarn;
  }
  if (!logger_.Enabled(level)) return;
  std::vector<LogField> fields;
  fields.reserve(10);
  fields.emplace_back("from", "running");
  fields.emplace_back("to", JobStatusName(c.to));
  fields.emplace_back("reason", c.reason);
  if (c.failure.has_value()) {
    fields.emplace_back("error_class", FailureClassName(c.failure->failure_class));
    fields.emplace_back("error_code", c.failure->code);
    fields.emplace_back("error_message", c.failure->message);
  }
  if (c.ready_at.has_value()) {
    fields.emplace_back("delay_ms", static_cast<std::int64_t>(
                                        std::chrono::duration_cast<std::chrono::milliseconds>(c.delay)
                                            .count()));
  }
  if (run.handler_ran) {
    fields.emplace_back("duration_ms", ToSeconds(run.handler_duration) * 1000.0);
  }
  if (!c.spend_attempt) fields.emplace_back("attempt_spent", "false");
  logger_.Log(level, "transition", &run.env(), fields);
}

// --- DLQ operations (SPEC 7) ------------------------------------------------------

namespace {

bool MatchesFilter(const DlqEntry& e, const DlqFilter& f) {
  if (f.job_type && e.job_type != *f.job_type) return false;
  if (f.reason && e.reason != *f.reason) return false;
  if (f.failure_class &&
      (!e.last_failure || e.last_failure->failure_class != *f.failure_class)) {
    return false;
  }
  if (f.dead_lettered_after && e.dead_lettered_at < *f.dead_lettered_after) return false;
  if (f.dead_lettered_before && e.dead_lettered_at >= *f.dead_lettered_before) return false;
  return true;
}

}  // namespace

Result<ReplayReport> RunnerCore::ReplayDeadLetters(const ReplayRequest& req) {
  if (IsBlank(req.actor) || IsBlank(req.reason)) {
    return Status::InvalidArgument(
        "ReplayDeadLetters: actor and reason are required (who replays, and why)");
  }
  if (!(req.max_per_second >= 0) || std::isinf(req.max_per_second)) {
    return Status::InvalidArgument("ReplayDeadLetters: max_per_second must be >= 0 and finite");
  }
  if (req.max_jobs < 1) return Status::InvalidArgument("ReplayDeadLetters: max_jobs must be >= 1");
  if (req.extra_attempts < 0) {
    return Status::InvalidArgument("ReplayDeadLetters: extra_attempts must be >= 0");
  }
  ReplayReport report;
  std::vector<DlqEntry> selected;
  if (req.job_ids.empty()) {
    DlqFilter filter = req.selection;
    filter.limit = std::min(filter.limit, req.max_jobs);
    JOBPACT_ASSIGN_OR_RETURN(selected, options_.backend.admin->ListDeadLetters(filter));
  } else {
    for (const std::string& id : req.job_ids) {
      if (selected.size() >= req.max_jobs) break;
      Result<DlqEntry> e = options_.backend.admin->GetDeadLetter(id);
      if (!e.ok()) {
        report.failed.emplace_back(id, e.status());
      } else if (!MatchesFilter(*e, req.selection)) {
        report.failed.emplace_back(
            id, Status::FailedPrecondition("does not match the selection: " + id));
      } else {
        selected.push_back(std::move(*e));
      }
    }
  }

  const TimePoint now = clock().Now();
  const Duration spacing =
      req.max_per_second > 0
          ? std::chrono::duration_cast<Duration>(std::chrono::duration<double>(1.0 / req.max_per_second))
          : Duration::zero();
  for (DlqEntry& e : selected) {
    if (!e.raw_envelope.empty()) {
      // Input that never parsed as an envelope cannot run (the backend
      // refuses it too); said here so that a dry run reports it as well.
      report.failed.emplace_back(
          e.job_id, Status::FailedPrecondition(
                        "an invalid envelope cannot run; fix it and enqueue it again: " + e.job_id));
      continue;
    }
    if (req.dry_run) {
      report.would_replay.push_back(e.job_id);
      continue;
    }
    DlqAction action;
    action.actor = req.actor;
    action.reason = req.reason;
    action.reset_attempts = req.reset_attempts;
    action.extra_attempts = req.extra_attempts;
    const TimePoint ready_at =
        now + spacing * static_cast<std::int64_t>(report.replayed.size());
    action.ready_at = ready_at;
    Status st = options_.backend.admin->Replay(e.job_id, action);
    if (!st.ok()) {
      report.failed.emplace_back(e.job_id, st);
      logger_.Log(LogLevel::kWarn, "dlq_replay_failed", nullptr,
                  {{"job_id", e.job_id},
                   {"job_type", e.job_type},
                   {"actor", req.actor},
                   {"reason", req.reason},
                   {"error", st.ToString()}});
      continue;
    }
    report.replayed.push_back(e.job_id);
    options_.metrics->Increment(metric::kReplayed, MetricLabels{e.job_type, {}, e.reason, {}}, 1);
    logger_.Log(LogLevel::kWarn, "dlq_replayed", nullptr,
                {{"job_id", e.job_id},
                 {"job_type", e.job_type},
                 {"trace_id", e.trace_id},
                 {"from", "dead_lettered"},
                 {"to", "queued"},
                 {"dlq_reason", e.reason},
                 {"actor", req.actor},
                 {"reason", req.reason},
                 {"ready_at", FormatRfc3339(ready_at)},
                 {"reset_attempts", req.reset_attempts ? "true" : "false"}});
  }
  if (req.dry_run) {
    logger_.Log(LogLevel::kInfo, "dlq_replay_dry_run", nullptr,
                {{"actor", req.actor},
                 {"reason", req.reason},
                 {"would_replay", static_cast<std::int64_t>(report.would_replay.size())},
                 {"failed", static_cast<std::int64_t>(report.failed.size())}});
  } else if (!report.replayed.empty()) {
    WakeOneWorker();
  }
  return report;
}

Status RunnerCore::DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                                     std::string_view why) {
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "DiscardDeadLetter: actor and reason are required (who discards, and why)");
  }
  JOBPACT_ASSIGN_OR_RETURN(DlqEntry e, options_.backend.admin->GetDeadLetter(job_id));
  // A DLQ entry does not name its queue; the job record does. Label the
  // counter like every other one: the job's queue, "default" if unknown (an
  // envelope that never parsed has none).
  std::string queue = Envelope{}.queue;
  if (Result<JobRecord> rec = options_.backend.admin->Get(job_id);
      rec.ok() && !rec->envelope.queue.empty()) {
    queue = std::move(rec->envelope.queue);
  }
  DlqAction action;
  action.actor = std::string(actor);
  action.reason = std::string(why);
  JOBPACT_RETURN_IF_ERROR(options_.backend.admin->Discard(job_id, action));
  options_.metrics->Increment(metric::kDiscarded,
                              MetricLabels{e.job_type, queue, reason::kOperatorDiscard, {}}, 1);
  logger_.Log(LogLevel::kWarn, "transition", nullptr,
              {{"job_id", e.job_id},
               {"job_type", e.job_type},
               {"trace_id", e.trace_id},
               {"from", "dead_lettered"},
               {"to", "discarded"},
               {"reason", reason::kOperatorDiscard},
               {"dlq_reason", e.reason},
               {"actor", actor},
               {"operator_reason", why}});
  return Status::Ok();
}

// --- Circuit breakers -----------------------------------------------------------------

void RunnerCore::SetCircuitGauge(std::string_view dependency, CircuitState state) {
  double v = 0;
  if (state == CircuitState::kOpen) v = 1;
  if (state == CircuitState::kHalfOpen) v = 2;
  options_.metrics->SetGauge(metric::kCircuitState, MetricLabels{{}, {}, dependency, {}}, v);
}

void RunnerCore::OnCircuitChange(const CircuitStateChange& change) {
  SetCircuitGauge(change.dependency, change.to);
  logger_.Log(change.to == CircuitState::kClosed ? LogLevel::kInfo : LogLevel::kWarn,
              "circuit_state_changed", nullptr,
              {{"dependency", change.dependency},
               {"from", CircuitStateName(change.from)},
               {"to", CircuitStateName(change.to)},
               {"calls", change.calls},
               {"failures", change.failures},
               {"failure_rate", change.failure_rate}});
}

void RunnerCore::GiveBack(const Delivery& d, std::string_view why) {
  const Envelope& env = d.job.envelope;
  Completion c;
  c.to = JobStatus::kQueued;
  c.reason = std::string(why);
  c.ready_at = clock().Now();
  c.spend_attempt = false;
  Status s = options_.queue->Complete(d, c);
  if (s.ok()) {
    logger_.Log(LogLevel::kInfo, "transition", &env,
                {{"from", "running"}, {"to", "queued"}, {"reason", why}, {"attempt_spent", "false"}});
  } else {
    logger_.Log(LogLevel::kWarn, "give_back_failed", &env, {{"error", s.ToString()}});
  }
}

Status RunnerCore::RenewDelivery(const Delivery& d, bool lock_held, bool claim_held,
                                 std::string_view checkpoint) {
  const Envelope& env = d.job.envelope;
  const Duration ttl = env.visibility_timeout;
  Status first;
  Result<Lease> lease = options_.queue->Renew(d.lease, ttl, checkpoint);
  if (!lease.ok()) {
    const StatusCode code = lease.status().code();
    if (code == StatusCode::kAborted || code == StatusCode::kNotFound) {
      return Status::Aborted("lease lost: " + lease.status().message());
    }
    first = lease.status();
  }
  if (lock_held) {
    Result<LockLease> lock = options_.locks->Renew(env.lock_key, d.lease.token, ttl);
    if (!lock.ok()) {
      if (lock.status().code() == StatusCode::kAborted) {
        return Status::Aborted("lock '" + env.lock_key + "' lost: " + lock.status().message());
      }
      if (first.ok()) first = lock.status();
    }
  }
  if (claim_held) {
    Status s = options_.idempotency->Extend(env.idempotency_key, d.lease.token, ttl);
    if (!s.ok()) {
      if (s.code() == StatusCode::kAborted) {
        return Status::Aborted("idempotency claim '" + env.idempotency_key + "' lost: " +
                               s.message());
      }
      if (first.ok()) first = s;
    }
  }
  return first;
}

// --- The public object ----------------------------------------------------------

namespace {

class JobRunnerImpl final : public JobRunner {
 public:
  explicit JobRunnerImpl(std::shared_ptr<RunnerCore> core) : core_(std::move(core)) {}
  ~JobRunnerImpl() override { core_->Shutdown(Duration::zero()).IgnoreError(); }

  Status Handle(std::string_view job_type, Handler handler, HandlerOptions options) override {
    return core_->Handle(job_type, std::move(handler), std::move(options));
  }
  Result<EnqueueResult> Enqueue(Envelope envelope) override {
    return core_->Enqueue(std::move(envelope));
  }
  Result<std::vector<EnqueueResult>> EnqueueBatch(std::vector<Envelope> envelopes) override {
    return core_->EnqueueBatch(std::move(envelopes));
  }
  Result<EnqueueResult> EnqueueJson(std::string_view raw) override {
    return core_->EnqueueJson(raw);
  }
  Status Start() override { return core_->Start(); }
  Status Shutdown(Duration grace) override { return core_->Shutdown(grace); }
  Result<int> RunUntilIdle() override { return core_->RunUntilIdle(); }
  Status RunMaintenance() override { return core_->RunMaintenance(); }
  void Pause(std::string_view job_type) override { core_->Pause(job_type); }
  void Resume(std::string_view job_type) override { core_->Resume(job_type); }
  Result<ReplayReport> ReplayDeadLetters(const ReplayRequest& request) override {
    return core_->ReplayDeadLetters(request);
  }
  Status DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                           std::string_view reason) override {
    return core_->DiscardDeadLetter(job_id, actor, reason);
  }
  RunnerStats Stats() const override { return core_->Stats(); }
  PolicyRegistry& policies() override { return core_->policies(); }
  const JobRunnerOptions& options() const override { return core_->options(); }

 private:
  std::shared_ptr<RunnerCore> core_;
};

}  // namespace

bool RegisterStaticHandler(const char* job_type, Handler handler) {
  StaticRegistry& r = Statics();
  std::lock_guard<std::mutex> l(r.mu);
  r.handlers.emplace_back(job_type == nullptr ? "" : job_type, std::move(handler));
  return true;
}

}  // namespace internal

Result<std::unique_ptr<JobRunner>> JobRunner::Create(JobRunnerOptions o) {
  std::vector<std::string> problems;
  auto check = [&](bool ok, const char* what) {
    if (!ok) problems.emplace_back(what);
  };
  const bool bundle_given = o.backend.queue || o.backend.locks || o.backend.idempotency;
  if (bundle_given && (o.queue || o.locks || o.idempotency)) {
    problems.emplace_back(
        "backend and queue/locks/idempotency are both set: give the stores either as one bundle "
        "(backend) or one by one, not both");
  } else if (bundle_given) {
    o.queue = o.backend.queue;
    o.locks = o.backend.locks;
    o.idempotency = o.backend.idempotency;
  }
  check(o.queue != nullptr, "queue: a QueueBackend is required (set backend, or queue)");
  // The operator side: the bundle's, else the queue's own (every
  // StoreBackend and QueueBackendWrapper has one).
  if (o.backend.admin == nullptr) o.backend.admin = std::dynamic_pointer_cast<QueueAdmin>(o.queue);
  check(o.queue == nullptr || o.backend.admin != nullptr,
        "the queue has no operator side (QueueAdmin): derive it from StoreBackend, or pass "
        "backend.admin");
  if (o.queue != nullptr && (o.locks == nullptr || o.idempotency == nullptr) &&
      o.queue->Name() != "in_memory") {
    // The in-memory fallback below would hold locks and claims in this
    // process only, while the queue is shared: two processes could then
    // hold one lock, or both run one idempotency key.
    const char* missing = o.locks == nullptr && o.idempotency == nullptr
                              ? "locks and idempotency are"
                          : o.locks == nullptr ? "locks is"
                                               : "idempotency is";
    problems.push_back("the queue is \"" + std::string(o.queue->Name()) + "\" but " + missing +
                       " not set: locks and idempotency must come from the same backend as the "
                       "queue (pass the bundle: backend = OpenBackend(url) or "
                       "SqliteBackend::bundle()); in-memory ones would hold only in this "
                       "process, so locking and idempotency would break across processes");
  }
  check(o.workers >= 1, "workers must be >= 1");
  check(o.dequeue_batch >= 1, "dequeue_batch must be >= 1");
  check(o.poll_interval > Duration::zero(), "poll_interval must be > 0");
  check(o.dedup_window >= Duration::zero(), "dedup_window must be >= 0");
  check(o.idempotency_retention > Duration::zero(), "idempotency_retention must be > 0");
  check(o.lock_busy_min_delay >= Duration::zero(), "lock_busy_min_delay must be >= 0");
  check(o.lock_busy_max_delay >= o.lock_busy_min_delay,
        "lock_busy_max_delay must be >= lock_busy_min_delay");
  check(o.max_lock_waits >= 0, "max_lock_waits must be >= 0");
  check(o.max_lease_recoveries >= 0, "max_lease_recoveries must be >= 0");
  check(o.hung_grace >= Duration::zero(), "hung_grace must be >= 0");
  check(o.max_replacement_workers >= 0, "max_replacement_workers must be >= 0");
  check(o.maintenance_interval > Duration::zero(), "maintenance_interval must be > 0");
  check(o.dlq_retention > Duration::zero(), "dlq_retention must be > 0");
  check(o.final_status_retention > Duration::zero(), "final_status_retention must be > 0");
  check(!o.logger_name.empty(), "logger_name must not be empty");
  std::vector<std::string> guard_problems;
  if (o.retry_budget_enabled && o.retry_budgets == nullptr) {
    Status s = ValidateRetryBudgetOptions(o.retry_budget);
    if (!s.ok()) guard_problems.push_back("retry_budget: " + s.message());
  }
  if (o.circuit_breakers == nullptr) {
    Status s = ValidateCircuitBreakerOptions(o.circuit_breaker);
    if (!s.ok()) guard_problems.push_back("circuit_breaker: " + s.message());
  }
  for (std::string& p : guard_problems) problems.push_back(std::move(p));
  if (!problems.empty()) {
    std::string msg = "JobRunnerOptions: ";
    for (std::size_t i = 0; i < problems.size(); ++i) {
      if (i > 0) msg += "; ";
      msg += problems[i];
    }
    return Status::InvalidArgument(std::move(msg));
  }
  if (o.clock == nullptr) o.clock = SystemClock::Default();
  if (o.locks == nullptr) o.locks = std::make_shared<InMemoryLockStore>(o.clock);
  if (o.idempotency == nullptr) o.idempotency = std::make_shared<InMemoryIdempotencyStore>(o.clock);
  o.backend.queue = o.queue;
  o.backend.locks = o.locks;
  o.backend.idempotency = o.idempotency;
  if (o.backend.name.empty()) o.backend.name = std::string(o.queue->Name());
  if (o.metrics == nullptr) o.metrics = std::make_shared<NullMetricsSink>();
  if (o.random == nullptr) o.random = MakeSeededRandomSource(o.random_seed);
  if (o.policies == nullptr) o.policies = std::make_shared<PolicyRegistry>();
  if (o.runner_id.empty()) o.runner_id = internal::DefaultRunnerId();

  if (!o.retry_budget_enabled) {
    o.retry_budgets = nullptr;
  } else if (o.retry_budgets == nullptr) {
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<RetryBudgets> budgets,
                             RetryBudgets::Create(o.retry_budget, o.clock));
    o.retry_budgets = std::move(budgets);
  }
  // The breakers report state changes to the core, which does not exist
  // yet: the callback finds it through a weak pointer set below.
  auto core_ref = std::make_shared<std::weak_ptr<internal::RunnerCore>>();
  if (o.circuit_breakers == nullptr) {
    CircuitBreakerOptions cb = o.circuit_breaker;
    cb.on_state_change = [core_ref, user = o.circuit_breaker.on_state_change](
                             const CircuitStateChange& change) {
      if (auto core = core_ref->lock()) core->OnCircuitChange(change);
      if (user) user(change);
    };
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<CircuitBreakers> breakers,
                             CircuitBreakers::Create(std::move(cb), o.clock));
    o.circuit_breakers = std::move(breakers);
  }

  auto core = std::make_shared<internal::RunnerCore>(std::move(o));
  *core_ref = core;
  {
    internal::StaticRegistry& r = internal::Statics();
    std::lock_guard<std::mutex> l(r.mu);
    for (const auto& [type, handler] : r.handlers) {
      Status s = core->Handle(type, handler, {});
      if (!s.ok()) {
        return Status(s.code(), "static handler (JOBPACT_REGISTER_HANDLER): " + s.message());
      }
    }
  }
  return std::unique_ptr<JobRunner>(new internal::JobRunnerImpl(std::move(core)));
}

}  // namespace jobpact
