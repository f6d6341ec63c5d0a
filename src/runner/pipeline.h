// File: src/runner/pipeline.h
//
// What the delivery pipeline (SPEC 3, docs/pipeline.md) holds for one
// delivery while its steps run: each step of RunnerCore (pipeline.cc) reads
// it and adds what it took (the lock, the claim, the handler's outcome), and
// step 9 releases and reports from it. Lives on the worker's stack.
//
// Thread-compatible: only the worker running the delivery touches it.
#ifndef JOBPACT_SRC_RUNNER_PIPELINE_H_
#define JOBPACT_SRC_RUNNER_PIPELINE_H_

#include <cstdint>
#include <optional>

#include "jobpact/circuit_breaker.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/queue_backend.h"
#include "src/runner/job_context.h"
#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

struct DeliveryRun {
  DeliveryRun(Delivery& delivery, WorkerSlot* worker, HandlerCache& handlers, TimePoint started)
      : d(delivery), slot(worker), cache(handlers), now(started) {}
  const Envelope& env() const { return d.job.envelope; }

  Delivery& d;
  WorkerSlot* const slot;  // Null under RunUntilIdle.
  HandlerCache& cache;
  const TimePoint now;  // When the pipeline started.

  // 5. Lock.
  bool lock_held = false;
  std::uint64_t fencing = 0;
  // 6. Idempotency.
  bool claim_held = false;
  // Step 6's outcome when step 5 took the claim with the lock in one write
  // (QueueBackend::AcquireLockAndClaim).
  std::optional<ClaimOutcome> claim;
  // 7. Run the handler.
  const HandlerEntry* handler = nullptr;
  // Concurrency slots held while the handler runs (concurrency_slots.cc):
  // the type's count in this process (null: none), and the dependency's
  // slot lock (empty: none).
  std::atomic<int>* local_slot = nullptr;
  std::string dependency_slot;
  CircuitBreaker* breaker = nullptr;  // Null: no dependency.
  CircuitBreaker::Permit permit;
  bool handler_ran = false;
  TimePoint deadline;
  TimePoint finished;
  Duration queue_latency{};
  Duration handler_duration{};
  HandlerOutcome outcome;
  // An operator cancelled the job while its handler ran.
  bool operator_cancel = false;
  // Shutdown gave the lease back while the handler ran: no Complete().
  bool given_back = false;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_PIPELINE_H_
