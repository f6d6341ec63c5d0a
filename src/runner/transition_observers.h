// File: src/runner/transition_observers.h
//
// The runner reports every status transition once, as a TransitionEvent
// (jobpact/transition_event.h), through TransitionObservers::Emit. Its
// metrics and its "transition" log lines (SPEC 8) are two observers of that
// event, MetricsObserver and LogObserver; a user's observers
// (JobRunnerOptions::transition_observers) come after them.
//
// Example:
//   TransitionEvent e = JobEvent(env, TransitionOrigin::kDelivery, clock.Now());
//   e.from = JobStatus::kRunning;
//   e.to = JobStatus::kSucceeded;
//   e.reason = reason::kSucceeded;
//   observers.Emit(e);
//
// Thread-safe (immutable after construction, but for the once-per-observer
// "threw" flags, which are atomic).
#ifndef JOBPACT_SRC_RUNNER_TRANSITION_OBSERVERS_H_
#define JOBPACT_SRC_RUNNER_TRANSITION_OBSERVERS_H_

#include <atomic>
#include <memory>
#include <vector>

#include "jobpact/metrics_sink.h"
#include "jobpact/transition_event.h"
#include "src/runner/job_logger.h"

namespace jobpact {
namespace internal {

// An event about `env`'s job: its identity fields, `origin`, `at`, and the
// total time since its created_at (if set). The caller fills in the change.
TransitionEvent JobEvent(const Envelope& env, TransitionOrigin origin, TimePoint at);

// The SPEC 8 counters and histograms of a transition: jobs enqueued;
// succeeded, failed, dead-lettered and discarded by reason, with the attempt
// number at the outcome; retries by failure class; lease recoveries; DLQ
// replays and operator discards. Counters of a step rather than of a
// transition (started, dedup hits, lock contention, timeouts...) are counted
// by the pipeline step itself.
class MetricsObserver final : public TransitionObserver {
 public:
  explicit MetricsObserver(MetricsSink& sink) : sink_(sink) {}
  void OnTransition(const TransitionEvent& e) override;

 private:
  // The outcome counters (final statuses, the DLQ, spent retries).
  void CountOutcome(const TransitionEvent& e, const MetricLabels& labels);

  MetricsSink& sink_;
};

// One structured "transition" line per transition (a "dlq_replayed" line for
// a replay), in the formats of docs/pipeline.md.
class LogObserver final : public TransitionObserver {
 public:
  explicit LogObserver(const JobLogger& logger) : logger_(logger) {}
  void OnTransition(const TransitionEvent& e) override;

 private:
  void LogEnqueue(const TransitionEvent& e) const;
  void LogDelivered(const TransitionEvent& e) const;
  void LogOutcome(const TransitionEvent& e) const;
  void LogLeaseRecovery(const TransitionEvent& e) const;
  void LogOperator(const TransitionEvent& e) const;

  const JobLogger& logger_;
};

// The runner's observers in order: metrics, the log line, then the user's.
class TransitionObservers {
 public:
  // `sink` and `logger` must outlive this object.
  TransitionObservers(MetricsSink& sink, const JobLogger& logger,
                      const std::vector<std::shared_ptr<TransitionObserver>>& extra);

  TransitionObservers(const TransitionObservers&) = delete;
  TransitionObservers& operator=(const TransitionObservers&) = delete;

  // Hands `e` to every observer. The one boundary for observer code: what an
  // observer throws is caught and logged once per observer
  // ("transition_observer_threw"); the others still see the event.
  void Emit(const TransitionEvent& e) const noexcept;

 private:
  void ReportThrow(std::size_t index, const TransitionEvent& e) const noexcept;

  // Immutable after construction.
  const JobLogger& logger_;
  MetricsObserver metrics_;
  LogObserver log_;
  std::vector<TransitionObserver*> all_;  // &metrics_, &log_, then extra_.
  std::vector<std::shared_ptr<TransitionObserver>> extra_;
  // One per entry of all_: set once that observer's first throw was logged.
  std::unique_ptr<std::atomic<bool>[]> reported_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_TRANSITION_OBSERVERS_H_
