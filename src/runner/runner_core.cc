// RunnerCore's shared machinery: the handler registry, pause and resume,
// waking workers, the circuit breakers' reports, renewals, and the two
// transitions made outside the delivery pipeline (a lease given back at
// shutdown, a lease recovery).
#include "src/runner/runner_core.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/store_backend.h"
#include "src/internal/names.h"

namespace jobpact {
namespace internal {

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
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

namespace {
bool StoreChecksEnvelopes(const QueueBackend& queue) {
  const auto* store = dynamic_cast<const StoreBackend*>(&queue);
  return store != nullptr && store->DeliversStoredEnvelopes();
}

// CompletionWrites as it applies to this runner's queue.
JobRunnerOptions::CompletionWrites EffectiveWrites(const JobRunnerOptions& o) {
  using W = JobRunnerOptions::CompletionWrites;
  if (o.completion_writes != W::kAuto) return o.completion_writes;
  return o.queue->GroupsCompletions() ? W::kGrouped : W::kPerWorker;
}
}  // namespace

RunnerCore::RunnerCore(JobRunnerOptions options)
    : options_(std::move(options)),
      logger_(options_.logger_name, options_.log_level, options_.json_logs, options_.clock),
      observers_(*options_.metrics, logger_, options_.transition_observers),
      worker_prefix_(options_.runner_id + "/w"),
      handlers_(std::make_shared<const HandlerMap>()),
      control_(std::make_unique<ControlCache>(*options_.backend.admin, *options_.clock,
                                              options_.poll_interval)),
      local_rates_(MakeInMemoryRateLimitStore(options_.clock)),
      store_checked_envelopes_(StoreChecksEnvelopes(*options_.queue)),
      completions_(EffectiveWrites(options_) == JobRunnerOptions::CompletionWrites::kGrouped
                       ? std::make_unique<CompletionQueue>(2 * kMaxCompletionGroup)
                       : nullptr),
      per_worker_acks_(EffectiveWrites(options_) ==
                       JobRunnerOptions::CompletionWrites::kPerWorker),
      guards_with_acks_(!per_worker_acks_ &&
                        options_.queue->CompletesGuards(*options_.locks, *options_.idempotency)) {
  OperationsOptions ops;
  ops.clock = options_.clock;
  // The listener reports each replay and discard as a transition event; the
  // metrics observer counts them, so the facade counts nothing itself.
  ops.listener = NewDlqListener();
  ops_ = Operations::Open(options_.backend, std::move(ops)).value();
}

RunnerCore::~RunnerCore() = default;

Status RunnerCore::Handle(std::string_view job_type, Handler handler, HandlerOptions options) {
  if (!IsSafeName(job_type, options_.validation.max_name_length)) {
    return Status::InvalidArgument("Handle: job_type '" + std::string(job_type) + "' must be 1-" +
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
  MutexLock l(handlers_mu_);
  if (handlers_->count(job_type) != 0) {
    return Status::AlreadyExists("Handle: a handler for '" + std::string(job_type) +
                                 "' is already registered");
  }
  if (options.local_max_concurrency.has_value() && *options.local_max_concurrency < 1) {
    return Status::InvalidArgument("Handle: '" + std::string(job_type) +
                                   "': local_max_concurrency must be >= 1, not " +
                                   std::to_string(*options.local_max_concurrency));
  }
  for (const std::optional<RateLimit>* r : {&options.rate_limit, &options.local_rate_limit}) {
    if (!r->has_value()) continue;
    Status s = (*r)->Validate();
    if (!s.ok()) {
      return Status::InvalidArgument("Handle: '" + std::string(job_type) + "': " + s.message());
    }
  }
  if (options.rate_limit.has_value() && options_.backend.rate_limits == nullptr) {
    return Status::InvalidArgument(
        "Handle: '" + std::string(job_type) + "' has a shared rate_limit but the backend " +
        options_.backend.name +
        " has no RateLimitStore (BackendBundle::rate_limits); use local_rate_limit");
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
  entry->rate_limit = options.rate_limit;
  entry->local_rate_limit = options.local_rate_limit;
  entry->local_max_concurrency = options.local_max_concurrency;
  auto next = std::make_shared<HandlerMap>(*handlers_);
  next->emplace(entry->job_type, std::move(entry));
  handlers_ = std::move(next);
  handlers_version_.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

RetryBudget& RunnerCore::BudgetFor(std::string_view job_type, HandlerCache& cache) {
  if (cache.budget == nullptr || cache.budget_type != job_type) {
    cache.budget = &options_.retry_budgets->ForJobType(job_type);
    cache.budget_type.assign(job_type.data(), job_type.size());
  }
  return *cache.budget;
}

const HandlerEntry* RunnerCore::FindHandler(std::string_view job_type, HandlerCache& cache) {
  const std::uint64_t version = handlers_version_.load(std::memory_order_acquire);
  if (cache.version != version || cache.map == nullptr) {
    MutexLock l(handlers_mu_);
    cache.map = handlers_;
    cache.version = version;
  }
  auto it = cache.map->find(job_type);
  // A raw pointer: copying the shared_ptr would bounce its reference count
  // between workers on every delivery.
  if (it == cache.map->end()) return nullptr;
  return it->second.get();
}

// Pause and resume write the store's control state, so they hold in every
// process sharing the store, not only in this one.
Status RunnerCore::Pause(std::string_view job_type) {
  JOBPACT_RETURN_IF_ERROR(
      ops_->PauseType(job_type, options_.runner_id, "JobRunner::Pause"));
  control_->Invalidate();
  logger_.Log(LogLevel::kWarn, "job_type_paused", nullptr, {{"job_type", job_type}});
  return Status::Ok();
}

Status RunnerCore::Resume(std::string_view job_type) {
  Status s = ops_->ResumeType(job_type, options_.runner_id, "JobRunner::Resume");
  control_->Invalidate();
  if (s.code() == StatusCode::kNotFound) return Status::Ok();  // Was not paused.
  JOBPACT_RETURN_IF_ERROR(s);
  logger_.Log(LogLevel::kWarn, "job_type_resumed", nullptr, {{"job_type", job_type}});
  WakeWorkers(static_cast<std::size_t>(options_.workers) *
              static_cast<std::size_t>(options_.dequeue_batch));
  return Status::Ok();
}

Status RunnerCore::PublishPoliciesIfChanged() {
  std::vector<PublishedPolicy> policies;
  std::string signature;
  for (PolicyRegistry::Entry& e : options_.policies->Entries()) {
    PublishedPolicy p;
    p.job_type = e.job_type.empty() ? std::string(kDefaultPolicyType) : std::move(e.job_type);
    p.policy = e.policy;
    p.reason = std::move(e.reason);
    p.publisher = options_.runner_id;
    signature += p.job_type + '\n' + RetryPolicyToJson(p.policy) + '\n' + p.reason + '\n';
    policies.push_back(std::move(p));
  }
  MutexLock l(published_mu_);
  if (signature == published_) return Status::Ok();
  JOBPACT_RETURN_IF_ERROR(options_.backend.admin->PublishPolicies(policies));
  published_ = std::move(signature);
  return Status::Ok();
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
  MutexLock l(work_mu_);
  if (wanted >= static_cast<std::size_t>(idle)) {
    work_cv_.NotifyAll();
  } else {
    for (std::size_t i = 0; i < wanted; ++i) work_cv_.NotifyOne();
  }
}

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

void RunnerCore::GiveBack(const Delivery& d, std::string_view why, bool started) {
  const Envelope& env = d.job.envelope;
  const TimePoint now = clock().Now();
  Completion c;
  c.to = JobStatus::kQueued;
  c.reason = std::string(why);
  c.ready_at = now;
  c.spend_attempt = false;
  if (d.guards_taken && !started) {
    c.guards.release_lock = !env.lock_key.empty();
    if (!env.idempotency_key.empty()) c.guards.claim = CompletionGuards::Claim::kRelease;
  }
  Status s = options_.queue->Complete(d, c);
  if (!s.ok()) {
    logger_.Log(LogLevel::kWarn, "give_back_failed", &env, {{"error", s.ToString()}});
    return;
  }
  TransitionEvent e = JobEvent(env, TransitionOrigin::kShutdown, now);
  e.epoch = static_cast<std::int64_t>(d.lease.epoch);
  e.from = JobStatus::kRunning;
  e.to = JobStatus::kQueued;
  e.reason = why;
  e.attempt_spent = false;
  Emit(e);
}

void RunnerCore::ReportLeaseRecovery(const LeaseRecovery& r) {
  // One event per recovered job (SPEC 8), like the runner's own transitions.
  TransitionEvent e = JobEvent(r.envelope, TransitionOrigin::kLeaseRecovery, clock().Now());
  e.from = JobStatus::kRunning;
  e.to = r.to;
  e.reason = r.reason;
  e.lease_recoveries = r.lease_recoveries;
  Emit(e);
}

Status RunnerCore::RenewDelivery(const Delivery& d, bool lock_held, bool claim_held,
                                 std::string_view dependency_slot, std::string_view checkpoint,
                                 CancelFlags* cancel) {
  const Envelope& env = d.job.envelope;
  const Duration ttl = env.visibility_timeout;
  Status first;
  Result<Lease> lease = options_.queue->Renew(d.lease, ttl, checkpoint);
  if (lease.ok() && lease->cancel_requested && cancel != nullptr &&
      !cancel->operator_cancel.exchange(true, std::memory_order_acq_rel)) {
    logger_.Log(LogLevel::kWarn, "cancel_requested", &env, {});
  }
  if (!lease.ok()) {
    const StatusCode code = lease.status().code();
    if (code == StatusCode::kAborted || code == StatusCode::kNotFound) {
      return Status::Aborted("lease lost: " + lease.status().message());
    }
    first = lease.status();
  }
  Status guards = RenewGuards(d, lock_held, claim_held);
  if (guards.code() == StatusCode::kAborted) return guards;
  if (first.ok()) first = guards;
  if (!dependency_slot.empty()) {
    Result<LockLease> slot = options_.locks->Renew(dependency_slot, d.lease.token, ttl);
    if (!slot.ok()) {
      logger_.Log(LogLevel::kWarn, "dependency_slot_renew_failed", &env,
                  {{"slot", std::string(dependency_slot)}, {"error", slot.status().ToString()}});
    }
  }
  return first;
}

Status RunnerCore::RenewGuards(const Delivery& d, bool lock_held, bool claim_held) {
  const Envelope& env = d.job.envelope;
  const Duration ttl = env.visibility_timeout;
  Status first;
  if (lock_held) {
    Result<LockLease> lock = options_.locks->Renew(env.lock_key, d.lease.token, ttl);
    if (!lock.ok()) {
      if (lock.status().code() == StatusCode::kAborted) {
        return Status::Aborted("lock '" + env.lock_key + "' lost: " + lock.status().message());
      }
      first = lock.status();
    }
  }
  if (claim_held) {
    Status s = options_.idempotency->Extend(env.idempotency_key, d.lease.token, ttl);
    if (!s.ok()) {
      if (s.code() == StatusCode::kAborted) {
        return Status::Aborted("idempotency claim '" + env.idempotency_key +
                               "' lost: " + s.message());
      }
      if (first.ok()) first = s;
    }
  }
  return first;
}

}  // namespace internal
}  // namespace jobpact
