// Enqueue, EnqueueBatch and EnqueueJson: validation, the policy's
// defaults, one backend call, and the enqueue's transition event.
#include <string>
#include <utility>
#include <vector>

#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

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
  if (r.duplicate) {
    // Nothing was stored: a dedup hit, not a transition.
    options_.metrics->Increment(metric::kDedupHits, MetricLabels{env.job_type, env.queue, {}, {}},
                                1);
    logger_.Log(LogLevel::kInfo, "enqueue_duplicate", &env,
                {{"existing_job_id", r.job_id}, {"dedup_key", env.dedup_key}});
    return;
  }
  TransitionEvent e = JobEvent(env, TransitionOrigin::kEnqueue, clock().Now());
  e.to = JobStatus::kQueued;
  e.reason = reason::kEnqueued;
  Emit(e);
}

void RunnerCore::ReportRefused(const Envelope* envs, std::size_t n, const Status& s) {
  // Only backpressure refuses with kResourceExhausted at enqueue.
  if (s.code() != StatusCode::kResourceExhausted) return;
  for (std::size_t i = 0; i < n; ++i) {
    options_.metrics->Increment(metric::kEnqueueRefused,
                                MetricLabels{envs[i].job_type, envs[i].queue,
                                             reason::kMaxQueueDepth, {}},
                                1);
  }
}

Result<EnqueueResult> RunnerCore::Enqueue(Envelope&& env) {
  std::vector<FieldError> problems = PrepareEnvelope(env, clock().Now());
  if (!problems.empty()) {
    return Status::InvalidArgument("invalid envelope: " + JoinProblems(problems));
  }
  EnqueueOptions eo;
  eo.dedup_window = options_.dedup_window;
  Result<EnqueueResult> r = options_.queue->Enqueue(env, eo);
  if (!r.ok()) {
    ReportRefused(&env, 1, r.status());
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
    ReportRefused(envs.data(), envs.size(), r.status());
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
  const Failure failure{FailureClass::kPermanent, std::string(reason::kInvalidEnvelope), listed};
  TransitionEvent e;
  e.job_id = *id;
  e.origin = TransitionOrigin::kEnqueue;
  e.to = JobStatus::kDeadLettered;
  e.reason = reason::kInvalidEnvelope;
  e.failure = &failure;
  e.at = clock().Now();
  Emit(e);
  return Status::InvalidArgument("invalid envelope dead-lettered as " + *id + ": " + listed);
}

}  // namespace internal
}  // namespace jobpact
