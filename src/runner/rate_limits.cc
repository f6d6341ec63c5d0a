// Rate limits in the pipeline (HandlerOptions::rate_limit and
// local_rate_limit, JobRunnerOptions::dependency_rate_limits,
// JobContext::RateLimited): the permit taken before the handler runs, and
// the backoff an upstream's "429, retry after" sets for everyone.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "src/runner/pipeline.h"
#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

namespace {

// One limiter a job must pass: where it is counted and under what rate.
struct Limiter {
  RateLimitStore* store;
  std::string key;
  RateLimit limit;
};

}  // namespace

std::optional<Completion> RunnerCore::AcquireRatePermits(DeliveryRun& run) {
  const HandlerEntry& h = *run.handler;
  const Envelope& env = run.env();
  RateLimitStore* shared = options_.backend.rate_limits.get();
  // This process's limiters first (no store call), then the shared ones.
  // The local ones are asked only with a local rate or once a backoff was
  // set here, so a runner without rate limits pays nothing per job; the
  // shared dependency limiter is asked even without a rate, since another
  // process's backoff may hold it.
  Limiter limiters[4];
  int n = 0;
  const bool local_backoffs = local_backoffs_.load(std::memory_order_relaxed);
  if (h.local_rate_limit || local_backoffs) {
    limiters[n++] = {local_rates_.get(), RateLimitKeyForType(env.job_type),
                     h.local_rate_limit.value_or(RateLimit{})};
  }
  if (!h.dependency.empty() && local_backoffs) {
    limiters[n++] = {local_rates_.get(), RateLimitKeyForDependency(h.dependency), RateLimit{}};
  }
  if (h.rate_limit && shared != nullptr) {
    limiters[n++] = {shared, RateLimitKeyForType(env.job_type), *h.rate_limit};
  }
  if (!h.dependency.empty() && shared != nullptr) {
    auto it = options_.dependency_rate_limits.find(h.dependency);
    limiters[n++] = {shared, RateLimitKeyForDependency(h.dependency),
                     it == options_.dependency_rate_limits.end() ? RateLimit{} : it->second};
  }
  for (int i = 0; i < n; ++i) {
    const Limiter& l = limiters[i];
    Result<RateDecision> d = l.store->Take(l.key, l.limit);
    if (!d.ok()) return BackendTrouble(run, "rate limit " + l.key, d.status());
    if (d->allowed) continue;
    options_.metrics->Increment(metric::kRateLimited,
                                MetricLabels{env.job_type, env.queue, l.key, {}}, 1);
    const Duration wait = std::max(Duration::zero(), d->retry_at - run.now);
    return Requeue(run, reason::kRateLimited, wait, false,
                   Failure{FailureClass::kTransient, std::string(reason::kRateLimited),
                           fmt::format("{} allows no start for {:.3f} s", l.key, ToSeconds(wait))});
  }
  return std::nullopt;
}

void RunnerCore::BackOffLimiter(const DeliveryRun& run, Duration for_) {
  const HandlerEntry& h = *run.handler;
  const Envelope& env = run.env();
  const TimePoint until = run.finished + for_;
  const std::string why = env.job_type + " job " + env.job_id + ": " + run.outcome.failure.message;
  options_.metrics->Increment(metric::kRateLimited,
                              MetricLabels{env.job_type, env.queue, "upstream", {}}, 1);
  RateLimitStore* shared = options_.backend.rate_limits.get();
  std::string key;
  RateLimitStore* store = nullptr;
  if (!h.dependency.empty()) {
    key = RateLimitKeyForDependency(h.dependency);
    store = shared;
  } else if (h.rate_limit && shared != nullptr) {
    key = RateLimitKeyForType(env.job_type);
    store = shared;
  }
  // Shared where it can be, so that everyone holds and an operator's lift
  // (`jobpact ratelimit lift`) frees everyone; in this process only where
  // there is no shared limiter for it, or the store cannot be reached.
  if (store != nullptr) {
    Status s = store->Backoff(key, until, why);
    if (s.ok()) return;
    logger_.Log(LogLevel::kWarn, "rate_limit_backoff_failed", &env, {{"error", s.ToString()}});
  }
  if (key.empty()) key = RateLimitKeyForType(env.job_type);
  Status local = local_rates_->Backoff(key, until, why);
  if (local.ok()) {
    local_backoffs_.store(true, std::memory_order_relaxed);
  } else {
    logger_.Log(LogLevel::kWarn, "rate_limit_backoff_failed", &env, {{"error", local.ToString()}});
  }
}

}  // namespace internal
}  // namespace jobpact
