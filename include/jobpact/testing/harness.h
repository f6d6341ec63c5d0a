// File: jobpact/testing/harness.h
//
// Harness is the handler testing kit: a JobRunner wired to the in-memory
// backends and a ManualClock, driven by hand, with no threads and no sleeps
// ("turn the crank"). Register handlers, enqueue, run until idle, advance the
// clock to the next retry, then assert the final status, attempts, history,
// DLQ records and metrics. Faults are injected through faults(),
// lock_faults() and idempotency_faults() (see failing_backends.h), which sit
// between the runner and the queue, the lock store and the idempotency
// store.
//
// Example:
//   jobpact::testing::Harness h;
//   int calls = 0;
//   h.Handle("invoice.generate", [&](jobpact::JobContext&) {
//     return ++calls < 3 ? jobpact::Status::Unavailable("upstream 503") : jobpact::Status::Ok();
//   });
//   auto queued = h.Enqueue("invoice.generate", R"({"order_id":"ord_987"})");
//   ASSERT_THAT(queued, IsOk());
//   const std::string id = queued->job_id;
//   EXPECT_EQ(h.RunUntilIdle().value(), 1);  // attempt 1 fails, retry scheduled
//   h.AdvanceToNextRetry();                  // the clock jumps to the retry time
//   ASSERT_THAT(h.RunUntilIdle(), IsOk());   // attempt 2 fails
//   ASSERT_THAT(h.RunUntilSettled(), IsOk());  // ...until nothing is pending
//   EXPECT_EQ(h.StatusOf(id), jobpact::JobStatus::kSucceeded);
//   EXPECT_EQ(h.Job(id).envelope.attempt, 3);
//
// Threaded tests may call runner().Start() instead (then RunUntilIdle() is
// refused); the ManualClock still drives every wait.
//
// Part of the core target (like ManualClock). Not thread-safe, except the
// accessors to the thread-safe components.
#ifndef JOBPACT_TESTING_HARNESS_H_
#define JOBPACT_TESTING_HARNESS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/in_memory/queue_backend.h"
#include "jobpact/job_runner.h"
#include "jobpact/testing/failing_backends.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace testing {

struct HarnessOptions {
  // The ManualClock's start; default 2026-01-01T00:00:00Z.
  std::optional<TimePoint> start;
  // Called with the runner's options after the harness set the backends,
  // clock and its defaults (log level warn, logger "jobpact.test"), before
  // JobRunner::Create: set workers, random, policies, json_logs...
  std::function<void(JobRunnerOptions&)> configure;
};

class JOBPACT_EXPORT Harness {
 public:
  Harness();
  explicit Harness(std::function<void(JobRunnerOptions&)> configure);
  explicit Harness(HarnessOptions options);
  ~Harness();

  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  // OK unless the configured options were refused by JobRunner::Create; then
  // Handle, Enqueue* and the Run* calls return this status, and the other
  // calls are invalid (REQUIRES: init_status().ok()).
  const Status& init_status() const { return init_status_; }

  // --- Driving ---
  Status Handle(std::string_view job_type, Handler handler, HandlerOptions options = {});
  Result<EnqueueResult> Enqueue(Envelope envelope);
  // A job of `job_type` with `payload` (JSON text) and default metadata.
  Result<EnqueueResult> Enqueue(std::string_view job_type, std::string payload = "{}");
  Result<EnqueueResult> EnqueueJson(std::string_view raw);
  // JobRunner::EnqueueBatch: all valid and stored in one backend call, or
  // none stored.
  Result<std::vector<EnqueueResult>> EnqueueBatch(std::vector<Envelope> envelopes);

  // JobRunner::RunUntilIdle(), same shape: the maintenance pass, then every
  // ready job on this thread. Returns the deliveries processed, or the error
  // that refused the run (a failed Dequeue, ...), which last_error() also
  // keeps. May be called from inside a handler to play a second worker
  // taking over while the first one is still running.
  Result<int> RunUntilIdle();
  // Moves the clock to the earliest ready_at of a job waiting in queued or
  // retry_scheduled (only jobs stored through this harness's queue are
  // known), and returns how far it moved; zero if nothing waits in the
  // future.
  Duration AdvanceToNextRetry();
  // Advances the clock by `d`, then RunUntilIdle() (and returns what it
  // returns).
  Result<int> AdvanceAndRun(Duration d);
  // RunUntilIdle, then AdvanceToNextRetry, repeatedly, until no job waits
  // (or `max_rounds` rounds). Returns the deliveries processed, or the first
  // error of a RunUntilIdle (and stops there).
  Result<int> RunUntilSettled(int max_rounds = 1000);
  // Lets the job's lease expire now (a lost worker), for the next
  // maintenance pass to recover.
  Status ExpireLease(std::string_view job_id);

  // --- Inspecting ---
  // The job's record; an empty record (job_id "") if unknown.
  JobRecord Job(std::string_view job_id);
  // The job's status, or std::nullopt for an unknown (or purged) job.
  std::optional<JobStatus> StatusOf(std::string_view job_id);
  std::vector<DlqEntry> DeadLetters(const DlqFilter& filter = {});
  // The status of the most recent RunUntilIdle() call (also through
  // AdvanceAndRun / RunUntilSettled), for code that did not make the call
  // itself (a fault hook, a nested run): OK if it succeeded, or if none was
  // made yet. Errors inside a delivery (a failing lock store, ...) are
  // handled by the runner and do not show here; only a refused run does
  // (e.g. a Dequeue that failed).
  const Status& last_error() const { return last_error_; }

  // --- Components ---
  ManualClock& clock() { return *clock_; }
  const std::shared_ptr<ManualClock>& clock_ptr() const { return clock_; }
  JobRunner& runner() { return *runner_; }
  InMemoryQueueBackend& queue() { return *queue_; }
  const std::shared_ptr<InMemoryQueueBackend>& queue_ptr() const { return queue_; }
  // The fault injector between the runner and the queue.
  FailingQueueBackend& faults() { return *faults_; }
  const std::shared_ptr<FailingQueueBackend>& faults_ptr() const { return faults_; }
  // The stores behind the lock and idempotency fault injectors (the runner
  // calls them through lock_faults() and idempotency_faults()).
  InMemoryLockStore& locks() { return *locks_; }
  InMemoryIdempotencyStore& idempotency() { return *idempotency_; }
  FailingLockStore& lock_faults() { return *lock_faults_; }
  FailingIdempotencyStore& idempotency_faults() { return *idempotency_faults_; }
  InMemoryMetricsSink& metrics() { return *metrics_; }

 private:
  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<InMemoryQueueBackend> queue_;
  std::shared_ptr<FailingQueueBackend> faults_;
  std::shared_ptr<InMemoryLockStore> locks_;
  std::shared_ptr<InMemoryIdempotencyStore> idempotency_;
  std::shared_ptr<InMemoryMetricsSink> metrics_;
  std::shared_ptr<FailingLockStore> lock_faults_;
  std::shared_ptr<FailingIdempotencyStore> idempotency_faults_;
  Status init_status_;
  Status last_error_;
  std::unique_ptr<JobRunner> runner_;  // Destroyed first.
};

}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_TESTING_HARNESS_H_
