#include "src/runner/transition_observers.h"

#include <chrono>
#include <cstdint>
#include <string>

#include "jobpact/retry_policy.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace internal {
namespace {

// "none" for a job that did not exist before the transition.
std::string_view FromName(const TransitionEvent& e) {
  return e.from.has_value() ? JobStatusName(*e.from) : std::string_view("none");
}

// The failure's three fields, in the order every transition line has them.
void AppendFailure(const TransitionEvent& e, std::vector<LogField>& fields) {
  if (e.failure == nullptr) return;
  fields.emplace_back("error_class", FailureClassName(e.failure->failure_class));
  fields.emplace_back("error_code", e.failure->code);
  fields.emplace_back("error_message", e.failure->message);
}

}  // namespace

TransitionEvent JobEvent(const Envelope& env, TransitionOrigin origin, TimePoint at) {
  TransitionEvent e;
  e.job_id = env.job_id;
  e.job_type = env.job_type;
  e.queue = env.queue;
  e.tenant_id = env.tenant_id;
  e.trace_id = env.trace_id;
  e.idempotency_key = env.idempotency_key;
  e.attempt = env.attempt;
  e.max_attempts = env.max_attempts;
  e.envelope = &env;
  e.origin = origin;
  e.at = at;
  if (env.created_at.has_value()) e.total = at - *env.created_at;
  return e;
}

// --- Metrics ---------------------------------------------------------------------

void MetricsObserver::OnTransition(const TransitionEvent& e) {
  const MetricLabels labels{e.job_type, e.queue, {}, {}};
  switch (e.origin) {
    case TransitionOrigin::kEnqueue:
      if (e.to == JobStatus::kQueued) {
        sink_.Increment(metric::kEnqueued, labels, 1);
      } else if (e.to == JobStatus::kDeadLettered) {  // An invalid envelope.
        sink_.Increment(metric::kDeadLettered, MetricLabels{e.job_type, e.queue, e.reason, {}}, 1);
      }
      return;
    case TransitionOrigin::kOperator:
      if (e.to == JobStatus::kQueued) {
        sink_.Increment(metric::kReplayed, MetricLabels{e.job_type, e.queue, e.dlq_reason, {}}, 1);
      } else if (e.to == JobStatus::kDiscarded) {
        sink_.Increment(metric::kDiscarded, MetricLabels{e.job_type, e.queue, e.reason, {}}, 1);
      }
      return;
    case TransitionOrigin::kLeaseRecovery:
      sink_.Increment(metric::kLeaseRecoveries, labels, 1);
      break;
    case TransitionOrigin::kDelivery:
    case TransitionOrigin::kShutdown:
      break;
  }
  CountOutcome(e, labels);
}

void MetricsObserver::CountOutcome(const TransitionEvent& e, const MetricLabels& labels) {
  std::string_view counter;
  switch (e.to) {
    case JobStatus::kSucceeded:
      counter = metric::kSucceeded;
      break;
    case JobStatus::kFailed:
      counter = metric::kFailed;
      break;
    case JobStatus::kDeadLettered:
      counter = metric::kDeadLettered;
      break;
    case JobStatus::kDiscarded:
      counter = metric::kDiscarded;
      break;
    case JobStatus::kRetryScheduled:
      if (e.failure != nullptr && e.attempt_spent) {
        MetricLabels retry = labels;
        retry.failure_class = FailureClassName(e.failure->failure_class);
        sink_.Increment(metric::kRetries, retry, 1);
      }
      return;
    case JobStatus::kQueued:
    case JobStatus::kRunning:
      return;
  }
  MetricLabels by_reason = labels;
  by_reason.reason = e.reason;
  sink_.Increment(counter, by_reason, 1);
  // The attempt distribution, at the job's outcome.
  sink_.Observe(metric::kAttempts, labels, e.attempt);
}

// --- Log lines -------------------------------------------------------------------

void LogObserver::OnTransition(const TransitionEvent& e) {
  switch (e.origin) {
    case TransitionOrigin::kEnqueue:
      LogEnqueue(e);
      return;
    case TransitionOrigin::kDelivery:
      if (e.to == JobStatus::kRunning) {
        LogDelivered(e);
      } else {
        LogOutcome(e);
      }
      return;
    case TransitionOrigin::kShutdown:
      LogOutcome(e);
      return;
    case TransitionOrigin::kLeaseRecovery:
      LogLeaseRecovery(e);
      return;
    case TransitionOrigin::kOperator:
      LogOperator(e);
      return;
  }
}

void LogObserver::LogEnqueue(const TransitionEvent& e) const {
  if (e.envelope != nullptr) {
    if (!logger_.Enabled(LogLevel::kDebug)) return;  // The hot path: skip building the fields.
    logger_.Log(LogLevel::kDebug, "transition", e.envelope,
                {{"from", FromName(e)}, {"to", JobStatusName(e.to)}, {"reason", e.reason}});
    return;
  }
  // An envelope that never parsed: only its DLQ id is known.
  if (!logger_.Enabled(LogLevel::kError)) return;
  std::vector<LogField> fields{{"job_id", e.job_id},
                               {"from", FromName(e)},
                               {"to", JobStatusName(e.to)},
                               {"reason", e.reason}};
  AppendFailure(e, fields);
  logger_.Log(LogLevel::kError, "transition", nullptr, fields);
}

void LogObserver::LogDelivered(const TransitionEvent& e) const {
  if (!logger_.Enabled(LogLevel::kDebug)) return;  // The hot path: skip building the fields.
  logger_.Log(LogLevel::kDebug, "transition", e.envelope,
              {{"from", FromName(e)},
               {"to", JobStatusName(e.to)},
               {"reason", e.reason},
               {"epoch", e.epoch}});
}

void LogObserver::LogOutcome(const TransitionEvent& e) const {
  LogLevel level = LogLevel::kInfo;
  if (e.to == JobStatus::kDeadLettered || e.to == JobStatus::kFailed) {
    level = LogLevel::kError;
  } else if (e.failure != nullptr) {
    level = LogLevel::kWarn;
  }
  if (!logger_.Enabled(level)) return;
  std::vector<LogField> fields;
  fields.reserve(10);
  fields.emplace_back("from", FromName(e));
  fields.emplace_back("to", JobStatusName(e.to));
  fields.emplace_back("reason", e.reason);
  AppendFailure(e, fields);
  if (e.ready_at.has_value()) {
    fields.emplace_back(
        "delay_ms", static_cast<std::int64_t>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(e.delay).count()));
  }
  if (e.run_duration.has_value()) {
    fields.emplace_back("duration_ms", ToSeconds(*e.run_duration) * 1000.0);
  }
  if (!e.attempt_spent) fields.emplace_back("attempt_spent", "false");
  logger_.Log(level, "transition", e.envelope, fields);
}

void LogObserver::LogLeaseRecovery(const TransitionEvent& e) const {
  logger_.Log(e.to == JobStatus::kDeadLettered ? LogLevel::kError : LogLevel::kWarn, "transition",
              e.envelope,
              {{"from", FromName(e)},
               {"to", JobStatusName(e.to)},
               {"reason", e.reason},
               {"lease_recoveries", static_cast<std::int64_t>(e.lease_recoveries)}});
}

void LogObserver::LogOperator(const TransitionEvent& e) const {
  if (!logger_.Enabled(LogLevel::kWarn)) return;
  // No envelope: the DLQ entry's identity fields are spelled out.
  std::vector<LogField> fields{{"job_id", e.job_id},
                               {"job_type", e.job_type},
                               {"trace_id", e.trace_id},
                               {"from", FromName(e)},
                               {"to", JobStatusName(e.to)}};
  if (e.to == JobStatus::kQueued) {  // A replay.
    const std::string ready_at = e.ready_at.has_value() ? FormatRfc3339(*e.ready_at) : "";
    fields.insert(fields.end(), {{"dlq_reason", e.dlq_reason},
                                 {"actor", e.actor},
                                 {"reason", e.operator_reason},
                                 {"ready_at", ready_at},
                                 {"reset_attempts", e.reset_attempts ? "true" : "false"}});
    logger_.Log(LogLevel::kWarn, "dlq_replayed", nullptr, fields);
    return;
  }
  fields.insert(fields.end(), {{"reason", e.reason},
                               {"dlq_reason", e.dlq_reason},
                               {"actor", e.actor},
                               {"operator_reason", e.operator_reason}});
  logger_.Log(LogLevel::kWarn, "transition", nullptr, fields);
}

// --- The fan-out -----------------------------------------------------------------

TransitionObservers::TransitionObservers(
    MetricsSink& sink, const JobLogger& logger,
    const std::vector<std::shared_ptr<TransitionObserver>>& extra)
    : logger_(logger), metrics_(sink), log_(logger), extra_(extra) {
  all_.push_back(&metrics_);
  all_.push_back(&log_);
  for (const auto& o : extra_) all_.push_back(o.get());
  reported_ = std::make_unique<std::atomic<bool>[]>(all_.size());
}

void TransitionObservers::Emit(const TransitionEvent& e) const noexcept {
  for (std::size_t i = 0; i < all_.size(); ++i) {
    try {
      all_[i]->OnTransition(e);
    } catch (...) {
      ReportThrow(i, e);
    }
  }
}

void TransitionObservers::ReportThrow(std::size_t index, const TransitionEvent& e) const noexcept {
  if (reported_[index].exchange(true)) return;
  try {
    // REQUIRES (StatusOfCurrentException): inside the catch block of Emit.
    const Status s = StatusOfCurrentException("transition observer");
    const std::string which = index == 0 ? std::string("metrics")
                              : index == 1
                                  ? std::string("log")
                                  : "transition_observers[" + std::to_string(index - 2) + "]";
    logger_.Log(LogLevel::kError, "transition_observer_threw", nullptr,
                {{"observer", which},
                 {"job_id", e.job_id},
                 {"to", JobStatusName(e.to)},
                 {"error", s.ToString()},
                 {"note", "logged once per observer"}});
  } catch (...) {
    // Out of memory while reporting: the event was delivered to the others.
  }
}

}  // namespace internal
}  // namespace jobpact
