// File: jobpact/metrics_sink.h
//
// MetricsSink receives the minimum metrics of SPEC 8 from the JobRunner:
// counters, histograms (latency, duration, attempts) and gauges (depth,
// oldest job age, busy and hung workers). Adapt it to Prometheus,
// OpenTelemetry or StatsD by implementing three methods.
//
// Contract for every implementation: methods are called concurrently from
// worker threads with no jobpact lock held, must be cheap, and must not
// throw: they are noexcept, so an exception escaping a sink ends the process
// (std::terminate). Catch inside the sink what its own client may throw.
#ifndef JOBPACT_METRICS_SINK_H_
#define JOBPACT_METRICS_SINK_H_

#include <cstdint>
#include <string_view>

#include "jobpact/export.h"

namespace jobpact {

// The labels of a metric. Empty means "not applicable".
struct MetricLabels {
  std::string_view job_type;
  std::string_view queue;
  std::string_view reason;         // Dead-lettered / discarded by reason.
  std::string_view failure_class;  // Retries by failure class.
  // The cache guard's metrics (jobpact/cache.h) by key prefix: the part of
  // the key before its first ':' unless CacheGuardOptions::label_of says
  // otherwise.
  std::string_view cache = {};
};

// Metric names (SPEC 8). Counters end in _total; histograms in seconds.
namespace metric {
inline constexpr std::string_view kEnqueued = "jobpact_jobs_enqueued_total";
inline constexpr std::string_view kStarted = "jobpact_jobs_started_total";
inline constexpr std::string_view kSucceeded = "jobpact_jobs_succeeded_total";
inline constexpr std::string_view kFailed = "jobpact_jobs_failed_total";
inline constexpr std::string_view kDeadLettered = "jobpact_jobs_dead_lettered_total";
inline constexpr std::string_view kDiscarded = "jobpact_jobs_discarded_total";
inline constexpr std::string_view kRetries = "jobpact_job_retries_total";
inline constexpr std::string_view kTimeouts = "jobpact_job_timeouts_total";
inline constexpr std::string_view kLockContention = "jobpact_lock_contention_total";
inline constexpr std::string_view kDedupHits = "jobpact_dedup_hits_total";
inline constexpr std::string_view kIdempotentSkips = "jobpact_idempotent_skips_total";
inline constexpr std::string_view kLeaseRecoveries = "jobpact_lease_recoveries_total";
inline constexpr std::string_view kStaleCompletions = "jobpact_stale_completions_total";
inline constexpr std::string_view kAnomalies = "jobpact_unknown_errors_total";
// Workers ever declared hung (lifetime counter, by job type); the gauge
// kHungWorkersNow counts those hung right now.
inline constexpr std::string_view kHungWorkers = "jobpact_hung_workers_total";
// DLQ operations (JobRunner::ReplayDeadLetters, by job type and the entry's
// dead-letter reason). An operator discard counts in kDiscarded with reason
// "operator_discard".
inline constexpr std::string_view kReplayed = "jobpact_dlq_replayed_total";
// Retries refused by the retry budget (by job type); each such retry is
// deferred until the budget has room (retry_budget_deferred), or, for a type
// that opted in, dead-lettered with reason "retry_budget_exhausted".
inline constexpr std::string_view kRetryBudgetExhausted = "jobpact_retry_budget_exhausted_total";
// Jobs an enqueue was refused for because their queue was at its maximum
// depth (ControlKind::kMaxQueueDepth), by job type and queue, reason
// "max_queue_depth": backpressure pushing back on producers.
inline constexpr std::string_view kEnqueueRefused = "jobpact_enqueue_refused_total";
// Deliveries rescheduled because a rate limiter refused them (by job type;
// `reason` is the limiter's key, "type:<job type>" or "dependency:<name>"),
// and attempts that failed because the upstream said "rate limited"
// (JobContext::RateLimited; reason "upstream").
inline constexpr std::string_view kRateLimited = "jobpact_rate_limited_total";
// Deliveries rescheduled because a concurrency limit the runner enforces
// was full (by job type and queue; `reason` is "local" for the type's
// HandlerOptions::local_max_concurrency, "dependency:<name>" for a
// dependency's JobRunnerOptions::dependency_concurrency).
inline constexpr std::string_view kConcurrencyLimited = "jobpact_concurrency_limited_total";
// Deliveries rescheduled because their dependency's circuit was open (by
// job type).
inline constexpr std::string_view kCircuitRejected = "jobpact_circuit_rejected_total";
// Histograms.
inline constexpr std::string_view kQueueLatency = "jobpact_job_queue_latency_seconds";
inline constexpr std::string_view kDuration = "jobpact_job_duration_seconds";
inline constexpr std::string_view kAttempts = "jobpact_job_attempts";
// Gauges.
inline constexpr std::string_view kQueueDepth = "jobpact_queue_depth";
inline constexpr std::string_view kOldestJobAge = "jobpact_queue_oldest_job_age_seconds";
inline constexpr std::string_view kBusyWorkers = "jobpact_workers_busy";
inline constexpr std::string_view kHungWorkersNow = "jobpact_workers_hung";
// Circuit breaker state per dependency: 0 closed, 1 open, 2 half_open.
// MetricLabels has no dependency field, so the dependency name is carried in
// the `reason` label.
inline constexpr std::string_view kCircuitState = "jobpact_circuit_state";
// Retries each job type's retry budget allows right now (by job type; set by
// the runner's maintenance pass). Near or below 1 while jobs fail: the budget
// is deferring retries (see kRetryBudgetExhausted).
inline constexpr std::string_view kRetryBudgetBalance = "jobpact_retry_budget_balance";

// The cache guard (jobpact/cache.h), each by `cache` (the key prefix).
// Gets answered from a fresh entry, and gets that found no usable fresh one
// (missing, expired or stale: the loader or a peer had to be asked).
inline constexpr std::string_view kCacheHits = "jobpact_cache_hits_total";
inline constexpr std::string_view kCacheMisses = "jobpact_cache_misses_total";
// Gets that waited for another caller's load of the same key in this
// process instead of calling the loader (request coalescing).
inline constexpr std::string_view kCacheCoalesced = "jobpact_cache_coalesced_total";
// Stale values served, by `reason`: "revalidate" (stale-while-revalidate),
// "error" (stale-if-error: the loader failed), "lock_wait" (another process
// held the refill lock past the bounded wait).
inline constexpr std::string_view kCacheStaleServed = "jobpact_cache_stale_served_total";
// Refills that found the key's refill lock held by another owner and waited;
// refill lock failures by `reason`: "timeout" (the bounded wait ended with
// the lock still held) or "lock_store_error" (the LockStore failed).
inline constexpr std::string_view kCacheLockWaits = "jobpact_cache_refill_lock_waits_total";
inline constexpr std::string_view kCacheLockFailures = "jobpact_cache_refill_lock_failures_total";
// Loads made without the refill lock after a lock failure (the fallback:
// no stale value to serve), so the origin saw more than one load.
inline constexpr std::string_view kCacheFallbackLoads = "jobpact_cache_fallback_loads_total";
// Refreshes started early by XFetch while the entry was still fresh.
inline constexpr std::string_view kCacheEarlyRefreshes = "jobpact_cache_early_refreshes_total";
// Loader calls that failed (an error Result or a throw), and the cache
// store's own failures (the guard then behaves as on a miss).
inline constexpr std::string_view kCacheLoaderErrors = "jobpact_cache_loader_errors_total";
inline constexpr std::string_view kCacheStoreErrors = "jobpact_cache_store_errors_total";
// Histogram: loader run time per call, in seconds.
inline constexpr std::string_view kCacheLoaderDuration = "jobpact_cache_loader_duration_seconds";
}  // namespace metric

class JOBPACT_EXPORT MetricsSink {
 public:
  MetricsSink() = default;
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;
  virtual ~MetricsSink();

  // Adds `delta` to a counter.
  virtual void Increment(std::string_view name, const MetricLabels& labels,
                         std::int64_t delta) noexcept = 0;
  // Records one observation in a histogram.
  virtual void Observe(std::string_view name, const MetricLabels& labels,
                       double value) noexcept = 0;
  // Sets a gauge.
  virtual void SetGauge(std::string_view name, const MetricLabels& labels,
                        double value) noexcept = 0;
};

// Discards everything. Thread-safe.
class JOBPACT_EXPORT NullMetricsSink final : public MetricsSink {
 public:
  void Increment(std::string_view, const MetricLabels&, std::int64_t) noexcept override {}
  void Observe(std::string_view, const MetricLabels&, double) noexcept override {}
  void SetGauge(std::string_view, const MetricLabels&, double) noexcept override {}
};

}  // namespace jobpact

#endif  // JOBPACT_METRICS_SINK_H_
