#include "src/runner/job_context.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace jobpact {

JobContext::~JobContext() = default;

namespace internal {

bool ContextImpl::cancelled() const {
  return cancel_.lost.load(std::memory_order_acquire) ||
         cancel_.shutdown.load(std::memory_order_acquire) ||
         cancel_.operator_cancel.load(std::memory_order_acquire) ||
         core_.clock().Now() >= deadline_;
}

Status ContextImpl::Heartbeat(std::string_view checkpoint) {
  if (!checkpoint.empty()) last_checkpoint_.assign(checkpoint.data(), checkpoint.size());
  Status s = core_.RenewDelivery(d_, lock_held_, claim_held_, dependency_slot_, checkpoint,
                                 &cancel_);
  if (s.code() == StatusCode::kAborted) MarkLost();
  return s;
}

Status ContextImpl::Snooze(Duration delay) {
  if (delay < Duration::zero()) {
    return Status::InvalidArgument("Snooze: delay must be >= 0");
  }
  snooze_ = delay;
  discard_.reset();
  return Status::Ok();
}

Status ContextImpl::Discard(std::string reason) {
  discard_ = IsBlank(reason) ? std::string(reason::kHandlerDiscarded) : std::move(reason);
  snooze_.reset();
  return Status::Ok();
}

Status ContextImpl::RateLimited(Duration retry_after, std::string message) {
  rate_limited_for_ = std::max(retry_after, Duration::zero());
  return Status::ResourceExhausted(fmt::format("rate limited, retry after {:.3f} s: {}",
                                               ToSeconds(*rate_limited_for_), message));
}

void ContextImpl::Log(LogLevel level, std::string_view message) const {
  core_.logger().Log(level, "handler", &d_.job.envelope, {{"message", message}});
}

void ContextImpl::TakeRequests(HandlerOutcome& out) {
  out.snooze = snooze_;
  out.discard = std::move(discard_);
  // Only a failed attempt is rate limited: a handler that said so and then
  // succeeded after all stands as a success.
  if (!out.ok && rate_limited_for_) out.rate_limited_for = rate_limited_for_;
  out.result = std::move(result_);
  out.effect = std::move(effect_);
  out.last_checkpoint = std::move(last_checkpoint_);
}

HandlerOutcome InvokeHandler(const HandlerEntry& entry, ContextImpl& ctx) noexcept {
  HandlerOutcome out;
  try {
    Status s = entry.handler(ctx);
    if (!s.ok()) {
      out.ok = false;
      out.failure = FailureFromStatus(s);
    }
  } catch (...) {
    // One catch-all rather than catch (const std::exception&) plus
    // catch (...): the classifier rethrows the exception_ptr and tells the
    // two apart itself (type rules, system_error codes, DescribeException).
    out.ok = false;
    out.threw = true;
    out.exception = std::current_exception();
  }
  if (out.threw) {
    try {
      out.failure = entry.classifier.Classify(out.exception);
    } catch (...) {
      out.failure =
          Failure{FailureClass::kUnknown, "unclassifiable", "exception could not be classified"};
    }
    try {
      std::rethrow_exception(out.exception);
    } catch (const RateLimitedError& e) {
      out.rate_limited_for = std::max(e.retry_after(), Duration::zero());
    } catch (...) {
    }
  }
  ctx.TakeRequests(out);
  if (out.rate_limited_for) {
    out.failure.failure_class = FailureClass::kTransient;
    out.failure.code = "rate_limited";
  }
  return out;
}

}  // namespace internal
}  // namespace jobpact
