// Concurrency limits the runner enforces itself (issue 11): a job type's
// in this process (HandlerOptions::local_max_concurrency) and a
// dependency's across every runner sharing the LockStore
// (JobRunnerOptions::dependency_concurrency, or an operator's
// ControlKind::kDependencyConcurrencyLimit). The per-type limit across
// processes and the per-tenant cap are the store's, in its lease step.
//
// A dependency limit of N is N locks, "dependency:<name>:slot:<i>", each
// taken by a running handler with its delivery's lease token as the owner
// and its visibility timeout as the TTL, renewed with the lease (the
// watchdog, heartbeats) and released when the handler returns: a crashed
// runner's slots free themselves when their TTL runs out, like its leases.
// The search for a free slot starts at a cursor that moves on with each
// search, so that runners do not all try slot 0 first.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "src/runner/pipeline.h"
#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

namespace {

std::string SlotKey(std::string_view dependency, int i) {
  return fmt::format("dependency:{}:slot:{}", dependency, i);
}

}  // namespace

std::optional<Completion> RunnerCore::AcquireConcurrencySlots(DeliveryRun& run) {
  const HandlerEntry& h = *run.handler;
  const Envelope& env = run.env();
  auto refuse = [&](std::string_view limiter, std::string message) {
    options_.metrics->Increment(metric::kConcurrencyLimited,
                                MetricLabels{env.job_type, env.queue, limiter, {}}, 1);
    return Requeue(run, reason::kConcurrencyLimited, LockBusyDelay(), false,
                   Failure{FailureClass::kTransient, std::string(reason::kConcurrencyLimited),
                           std::move(message)});
  };
  if (h.local_max_concurrency) {
    std::atomic<int>& running = h.local_running;
    if (running.fetch_add(1, std::memory_order_acq_rel) >= *h.local_max_concurrency) {
      running.fetch_sub(1, std::memory_order_acq_rel);
      return refuse("local", fmt::format("{} already runs {} handler(s) in this process, its "
                                         "local_max_concurrency",
                                         env.job_type, *h.local_max_concurrency));
    }
    run.local_slot = &running;
  }
  if (h.dependency.empty()) return std::nullopt;
  std::optional<int> limit = control_->DependencyConcurrencyLimit(h.dependency, run.now);
  if (!limit) {
    auto it = options_.dependency_concurrency.find(h.dependency);
    if (it == options_.dependency_concurrency.end()) return std::nullopt;
    limit = it->second;
  }
  const int n = *limit;
  const std::uint32_t start = slot_cursor_.fetch_add(1, std::memory_order_relaxed);
  for (int k = 0; k < n; ++k) {
    std::string key = SlotKey(h.dependency, static_cast<int>((start + k) % n));
    Result<LockLease> taken = options_.locks->Acquire(key, run.d.lease.token, env.visibility_timeout);
    if (taken.ok()) {
      run.dependency_slot = std::move(key);
      return std::nullopt;
    }
    if (taken.status().code() != StatusCode::kAborted) {
      ReleaseConcurrencySlots(run);
      return BackendTrouble(run, "dependency slot " + key, taken.status());
    }
  }
  ReleaseConcurrencySlots(run);
  return refuse("dependency:" + h.dependency,
                n == 0 ? fmt::format("dependency {} is held (its concurrency limit is 0)",
                                     h.dependency)
                       : fmt::format("all {} slot(s) of dependency {} are taken (its concurrency "
                                     "limit)",
                                     n, h.dependency));
}

void RunnerCore::ReleaseConcurrencySlots(DeliveryRun& run) {
  if (run.local_slot != nullptr) {
    run.local_slot->fetch_sub(1, std::memory_order_acq_rel);
    run.local_slot = nullptr;
  }
  if (!run.dependency_slot.empty()) {
    // A failed release (the slot expired meanwhile) leaves nothing to undo:
    // the lock frees itself with its TTL.
    options_.locks->Release(run.dependency_slot, run.d.lease.token).IgnoreError();
    run.dependency_slot.clear();
  }
}

}  // namespace internal
}  // namespace jobpact
