// The JobRunner: JobRunner::Create (the options checked and defaulted), the
// static handler registry (JOBPACT_REGISTER_HANDLER) and the public object,
// which forwards to RunnerCore (src/runner/runner_core.h).
#include "jobpact/job_runner.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "src/runner/runner_core.h"

namespace jobpact {

JobRunner::~JobRunner() = default;

Result<std::vector<EnqueueResult>> JobRunner::EnqueueBatch(std::vector<Envelope> /*envelopes*/) {
  return Status::Unimplemented("EnqueueBatch is not implemented by this JobRunner");
}

namespace internal {
namespace {

// --- The static handler registry (JOBPACT_REGISTER_HANDLER) -----------------

struct StaticRegistry {
  PlainMutex mu;
  std::vector<std::pair<std::string, Handler>> handlers JOBPACT_GUARDED_BY(mu);
};

// Leaked on purpose: registrations run during static initialisation of other
// translation units, and runners may be created during static destruction.
StaticRegistry& Statics() {
  static StaticRegistry* registry = new StaticRegistry;
  return *registry;
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

}  // namespace

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
  Status Pause(std::string_view job_type) override { return core_->Pause(job_type); }
  Status Resume(std::string_view job_type) override { return core_->Resume(job_type); }
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
  internal::MutexLock l(r.mu);
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
  for (const auto& [name, n] : {std::pair{"succeeded", o.finished_retention.succeeded},
                                std::pair{"failed", o.finished_retention.failed},
                                std::pair{"discarded", o.finished_retention.discarded}}) {
    if (n && *n < 0) {
      problems.push_back(std::string("finished_retention.") + name +
                         " must be >= 0 (nullopt: no count limit), not " + std::to_string(*n));
    }
  }
  check(!o.logger_name.empty(), "logger_name must not be empty");
  for (std::size_t i = 0; i < o.transition_observers.size(); ++i) {
    if (o.transition_observers[i] == nullptr) {
      problems.push_back("transition_observers[" + std::to_string(i) + "] is null");
    }
  }
  std::vector<std::string> guard_problems;
  if (o.retry_budget_enabled && o.retry_budgets == nullptr) {
    Status s = ValidateRetryBudgetOptions(o.retry_budget);
    if (!s.ok()) guard_problems.push_back("retry_budget: " + s.message());
  }
  if (o.circuit_breakers == nullptr) {
    Status s = ValidateCircuitBreakerOptions(o.circuit_breaker);
    if (!s.ok()) guard_problems.push_back("circuit_breaker: " + s.message());
  }
  for (const auto& [dependency, limit] : o.dependency_rate_limits) {
    Status s = limit.Validate();
    if (!s.ok()) guard_problems.push_back("dependency_rate_limits[" + dependency + "]: " + s.message());
  }
  for (const auto& [dependency, limit] : o.dependency_concurrency) {
    if (limit < 1) {
      guard_problems.push_back("dependency_concurrency[" + dependency + "] must be >= 1, not " +
                               std::to_string(limit));
    }
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
  // Likewise the rate limiters: the in-memory queue's process is all there is.
  if (o.backend.rate_limits == nullptr && o.queue->Name() == "in_memory") {
    o.backend.rate_limits = MakeInMemoryRateLimitStore(o.clock);
  }
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
    internal::MutexLock l(r.mu);
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
