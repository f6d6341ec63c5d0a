// File: jobpact/transition_event.h
//
// Every status transition the JobRunner makes or reports produces exactly one
// TransitionEvent, handed to each TransitionObserver in turn. The runner's
// own metrics (MetricsSink) and its structured "transition" log lines are two
// such observers; a Prometheus exporter, an audit trail or a dashboard stream
// is a third, passed in JobRunnerOptions::transition_observers.
//
// The transitions reported: enqueue (none -> queued), an invalid envelope
// dead-lettered at EnqueueJson (none -> dead_lettered), each delivery as the
// pipeline starts it (queued | retry_scheduled -> running; a job leased in a
// batch is reported when its turn comes, so one given back at shutdown
// before its turn shows only running -> queued), the one outcome of a delivery
// (running -> succeeded | retry_scheduled | failed | dead_lettered |
// discarded), a lease given back at shutdown (running -> queued), a lease
// recovery (running -> queued | dead_lettered), and the operator's DLQ
// replay (dead_lettered -> queued) and discard (dead_lettered -> discarded).
// An event is emitted only once the backend stored the transition: a
// completion refused as stale, or one the store failed to write, produces
// none.
//
// Example (count dead letters by tenant):
//   class TenantDlqCounter final : public jobpact::TransitionObserver {
//    public:
//     void OnTransition(const jobpact::TransitionEvent& e) override {
//       if (e.to != jobpact::JobStatus::kDeadLettered) return;
//       std::lock_guard<std::mutex> l(mu_);
//       ++by_tenant_[std::string(e.tenant_id)];
//     }
//    private:
//     std::mutex mu_;
//     std::map<std::string, int> by_tenant_;
//   };
//   options.transition_observers.push_back(std::make_shared<TenantDlqCounter>());
#ifndef JOBPACT_TRANSITION_EVENT_H_
#define JOBPACT_TRANSITION_EVENT_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/failure.h"
#include "jobpact/job.h"
#include "jobpact/job_status.h"

namespace jobpact {

// Who made the transition.
enum class TransitionOrigin {
  kEnqueue,        // JobRunner::Enqueue, EnqueueBatch or EnqueueJson.
  kDelivery,       // The delivery pipeline (a worker or RunUntilIdle).
  kShutdown,       // Shutdown gave a lease back.
  kLeaseRecovery,  // The maintenance pass recovered an expired lease.
  kOperator,       // JobRunner::ReplayDeadLetters or DiscardDeadLetter.
};

// One status transition. The string views and pointers are valid only
// during the OnTransition call: copy what you keep. An empty view means
// "not known here" (e.g. job_type of an envelope that never parsed).
struct TransitionEvent {
  // --- The job ---
  std::string_view job_id;
  std::string_view job_type;
  // Empty where the runner does not know it (a DLQ replay).
  std::string_view queue;
  std::string_view tenant_id;
  std::string_view trace_id;
  std::string_view idempotency_key;
  // envelope.attempt as the runner saw it: for a delivery, the attempt being
  // run (also when the outcome gives it back); for a lease recovery, the
  // attempts spent so far.
  int attempt = 0;
  int max_attempts = 0;
  // The delivery's lease epoch (kDelivery, kShutdown); 0 otherwise.
  std::int64_t epoch = 0;
  // The whole envelope, when the runner holds one (null for an invalid
  // envelope and for the operator's DLQ actions).
  const Envelope* envelope = nullptr;

  // --- The change ---
  TransitionOrigin origin = TransitionOrigin::kDelivery;
  // nullopt: the job did not exist before (enqueue, invalid envelope).
  std::optional<JobStatus> from;
  JobStatus to = JobStatus::kQueued;
  std::string_view reason;  // A reason:: name, or a handler's own.
  // The classified failure, if the transition carries one (null otherwise).
  const Failure* failure = nullptr;
  // retry_scheduled and a DLQ replay: when the job is ready again.
  std::optional<TimePoint> ready_at;
  // retry_scheduled: the delay chosen (ready_at is that long after the
  // decision).
  Duration delay{};
  // False when the delivery's attempt was given back (lock busy, snooze,
  // pause, backend trouble, shutdown...). Meaningful for kDelivery and
  // kShutdown.
  bool attempt_spent = true;
  // kLeaseRecovery: the job's lease recoveries, this one included.
  int lease_recoveries = 0;

  // --- Durations (nullopt: not applicable) ---
  // Handler start - max(ready_at, enqueued_at): set once the handler started
  // (the value jobpact_job_queue_latency_seconds observed).
  std::optional<Duration> queue_latency;
  // The handler's run time (jobpact_job_duration_seconds).
  std::optional<Duration> run_duration;
  // `at` - the job's created_at, when known.
  std::optional<Duration> total;
  // When the runner reported the transition (the injected Clock).
  TimePoint at;

  // --- kOperator only ---
  std::string_view actor;            // Who.
  std::string_view operator_reason;  // Why.
  std::string_view dlq_reason;       // The DLQ entry's reason.
  bool reset_attempts = false;       // Replay: attempts start again from 0.
};

// Receives every TransitionEvent of a runner. Called on the thread that made
// the transition (a worker, the RunUntilIdle caller, the maintenance thread,
// Shutdown's caller, or the caller of Enqueue or a DLQ action), with no
// jobpact lock held, concurrently from several threads: implementations
// must be thread-safe and cheap (they run on the delivery's hot path).
// Must not throw: the runner catches whatever escapes, logs it once per
// observer (error line "transition_observer_threw") and carries on; the
// transition itself is already stored.
class JOBPACT_EXPORT TransitionObserver {
 public:
  TransitionObserver() = default;
  TransitionObserver(const TransitionObserver&) = delete;
  TransitionObserver& operator=(const TransitionObserver&) = delete;
  virtual ~TransitionObserver();

  virtual void OnTransition(const TransitionEvent& event) = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_TRANSITION_EVENT_H_
