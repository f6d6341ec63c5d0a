// File: src/runner/job_context.h
//
// What a handler sees (ContextImpl, the JobContext of one attempt) and the
// one boundary where handler code is called (InvokeHandler, step 7 of
// docs/pipeline.md). After the call, InvokeHandler moves what the handler
// asked for through its context (a result, a transactional effect, a snooze
// or discard, the last checkpoint) into the HandlerOutcome, so that the
// pipeline's later steps need no context.
//
// Not thread-safe, except ContextImpl::cancelled() and MarkLost(), which may
// be called from any thread.
#ifndef JOBPACT_SRC_RUNNER_JOB_CONTEXT_H_
#define JOBPACT_SRC_RUNNER_JOB_CONTEXT_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/job_runner.h"
#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

// The outcome of one handler call, as the single catch boundary saw it,
// with what the handler requested through its context.
struct HandlerOutcome {
  bool ok = true;
  bool threw = false;
  Failure failure;
  std::exception_ptr exception;  // Kept for in-process diagnosis.
  // The handler's requests (the last one made decides; see JobContext).
  std::optional<Duration> snooze;
  std::optional<std::string> discard;
  // The attempt failed as rate limited (JobContext::RateLimited, or a
  // RateLimitedError thrown): retry no earlier than this, and back off.
  std::optional<Duration> rate_limited_for;
  std::string result;
  std::function<Status(void*)> effect;
  std::string last_checkpoint;  // Of the last Heartbeat with a checkpoint.
};

// What a handler sees. Lives on the worker's stack for the handler call.
class ContextImpl final : public JobContext {
 public:
  ContextImpl(RunnerCore& core, const Delivery& d, CancelFlags& cancel, TimePoint deadline,
              std::uint64_t fencing, bool lock_held, bool claim_held,
              std::string_view dependency_slot)
      : core_(core),
        d_(d),
        cancel_(cancel),
        deadline_(deadline),
        fencing_(fencing),
        lock_held_(lock_held),
        claim_held_(claim_held),
        dependency_slot_(dependency_slot) {}

  const Envelope& envelope() const override { return d_.job.envelope; }
  TimePoint deadline() const override { return deadline_; }
  bool cancelled() const override;
  std::uint64_t fencing_token() const override { return fencing_; }
  const std::string& checkpoint() const override { return d_.job.checkpoint; }
  Status Heartbeat(std::string_view checkpoint) override;
  void SetResult(std::string result) override { result_ = std::move(result); }
  void SetTransactionalEffect(std::function<Status(void* native)> effect) override {
    effect_ = std::move(effect);
  }
  Status Snooze(Duration delay) override;
  Status Discard(std::string reason) override;
  Status RateLimited(Duration retry_after, std::string message) override;
  void Log(LogLevel level, std::string_view message) const override;

  // --- For the runner ---
  void MarkLost() { cancel_.lost.store(true, std::memory_order_release); }
  // Moves the handler's requests into `out`. Call once, after the handler.
  void TakeRequests(HandlerOutcome& out);

 private:
  RunnerCore& core_;
  const Delivery& d_;
  CancelFlags& cancel_;
  const TimePoint deadline_;
  const std::uint64_t fencing_;
  const bool lock_held_;
  const bool claim_held_;
  const std::string_view dependency_slot_;  // The run's; outlives the context.
  // Handler thread only.
  std::string result_;
  std::function<Status(void*)> effect_;
  std::optional<Duration> snooze_;
  std::optional<std::string> discard_;
  std::optional<Duration> rate_limited_for_;
  std::string last_checkpoint_;
};

// The one boundary where handler code is called. Everything a handler can do
// to fail ends here as a Failure: a returned non-OK Status, a thrown
// std::exception, or a thrown anything else (an int, a string). Nothing
// escapes to the worker thread.
HandlerOutcome InvokeHandler(const HandlerEntry& entry, ContextImpl& ctx) noexcept;

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_JOB_CONTEXT_H_
