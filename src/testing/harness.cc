#include "jobpact/testing/harness.h"

#include <utility>

namespace jobpact {
namespace testing {

Harness::Harness() : Harness(HarnessOptions{}) {}

Harness::Harness(std::function<void(JobRunnerOptions&)> configure)
    : Harness(HarnessOptions{std::nullopt, std::move(configure)}) {}

Harness::Harness(HarnessOptions options)
    : clock_(options.start.has_value() ? std::make_shared<ManualClock>(*options.start)
                                       : std::make_shared<ManualClock>()),
      queue_(std::make_shared<InMemoryQueueBackend>(clock_)),
      faults_(std::make_shared<FailingQueueBackend>(queue_)),
      locks_(std::make_shared<InMemoryLockStore>(clock_)),
      idempotency_(std::make_shared<InMemoryIdempotencyStore>(clock_)),
      metrics_(std::make_shared<InMemoryMetricsSink>()),
      lock_faults_(std::make_shared<FailingLockStore>(locks_)),
      idempotency_faults_(std::make_shared<FailingIdempotencyStore>(idempotency_)) {
  JobRunnerOptions o;
  o.queue = faults_;
  o.locks = lock_faults_;
  o.idempotency = idempotency_faults_;
  o.metrics = metrics_;
  o.clock = clock_;
  o.workers = 1;
  o.runner_id = "harness";
  o.logger_name = "jobpact.test";
  o.log_level = LogLevel::kWarn;
  if (options.configure) options.configure(o);
  Result<std::unique_ptr<JobRunner>> runner = JobRunner::Create(std::move(o));
  if (runner.ok()) {
    runner_ = std::move(*runner);
  } else {
    init_status_ = runner.status();
  }
}

Harness::~Harness() { runner_.reset(); }

Status Harness::Handle(std::string_view job_type, Handler handler, HandlerOptions options) {
  if (!runner_) return init_status_;
  return runner_->Handle(job_type, std::move(handler), std::move(options));
}

Result<EnqueueResult> Harness::Enqueue(Envelope envelope) {
  if (!runner_) return init_status_;
  return runner_->Enqueue(std::move(envelope));
}

Result<EnqueueResult> Harness::Enqueue(std::string_view job_type, std::string payload) {
  Envelope env;
  env.job_type = std::string(job_type);
  env.payload = std::move(payload);
  return Enqueue(std::move(env));
}

Result<EnqueueResult> Harness::EnqueueJson(std::string_view raw) {
  if (!runner_) return init_status_;
  return runner_->EnqueueJson(raw);
}

Result<std::vector<EnqueueResult>> Harness::EnqueueBatch(std::vector<Envelope> envelopes) {
  if (!runner_) return init_status_;
  return runner_->EnqueueBatch(std::move(envelopes));
}

Result<int> Harness::RunUntilIdle() {
  if (!runner_) return init_status_;
  Result<int> n = runner_->RunUntilIdle();
  last_error_ = n.status();
  return n;
}

Duration Harness::AdvanceToNextRetry() {
  const TimePoint now = clock_->Now();
  std::optional<TimePoint> next;
  for (const std::string& id : faults_->EnqueuedJobIds()) {
    Result<JobRecord> r = queue_->Get(id);
    if (!r.ok()) continue;
    if (r->status != JobStatus::kQueued && r->status != JobStatus::kRetryScheduled) continue;
    if (r->ready_at <= now) continue;
    if (!next.has_value() || r->ready_at < *next) next = r->ready_at;
  }
  if (!next.has_value()) return Duration::zero();
  const Duration d = *next - now;
  clock_->Advance(d);
  return d;
}

Result<int> Harness::AdvanceAndRun(Duration d) {
  clock_->Advance(d);
  return RunUntilIdle();
}

Result<int> Harness::RunUntilSettled(int max_rounds) {
  JOBPACT_ASSIGN_OR_RETURN(int total, RunUntilIdle());
  for (int i = 0; i < max_rounds; ++i) {
    if (AdvanceToNextRetry() == Duration::zero()) break;
    JOBPACT_ASSIGN_OR_RETURN(int n, RunUntilIdle());
    total += n;
  }
  return total;
}

Status Harness::ExpireLease(std::string_view job_id) { return queue_->ForceExpireLease(job_id); }

JobRecord Harness::Job(std::string_view job_id) {
  Result<JobRecord> r = queue_->Get(job_id);
  if (!r.ok()) {
    JobRecord empty;
    empty.envelope.job_id.clear();
    return empty;
  }
  return std::move(*r);
}

std::optional<JobStatus> Harness::StatusOf(std::string_view job_id) {
  Result<JobRecord> r = queue_->Get(job_id);
  if (!r.ok()) return std::nullopt;
  return r->status;
}

std::vector<DlqEntry> Harness::DeadLetters(const DlqFilter& filter) {
  Result<std::vector<DlqEntry>> r = queue_->ListDeadLetters(filter);
  if (!r.ok()) return {};
  return std::move(*r);
}

}  // namespace testing
}  // namespace jobpact
