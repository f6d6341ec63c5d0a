// The in-memory RateLimitStore (jobpact/rate_limit_store.h): the limiters
// in one map under one mutex, each step the shared GCRA one.
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "jobpact/rate_limit_store.h"
#include "src/internal/gcra.h"
#include "src/internal/mutex.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace {

struct Limiter {
  internal::GcraState gcra;
  std::string backoff_reason;
  std::optional<RateLimit> override_limit;
  std::string override_actor;
  std::string override_reason;
  TimePoint updated_at;
};

class InMemoryRateLimitStore final : public RateLimitStore {
 public:
  explicit InMemoryRateLimitStore(std::shared_ptr<Clock> clock) : clock_(std::move(clock)) {}

  Result<RateDecision> Take(std::string_view key, const RateLimit& limit) override {
    JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
    JOBPACT_RETURN_IF_ERROR(limit.Validate());
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    Limiter& l = limiters_[std::string(key)];
    RateDecision d =
        internal::GcraTake(l.gcra, l.override_limit ? *l.override_limit : limit, internal::ToNs(now));
    l.updated_at = now;
    return d;
  }

  Status Backoff(std::string_view key, TimePoint until, std::string_view reason) override {
    JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    Limiter& l = limiters_[std::string(key)];
    if (internal::ToNs(until) > l.gcra.backoff_until_ns) l.backoff_reason = std::string(reason);
    internal::GcraBackoff(l.gcra, internal::ToNs(until));
    l.updated_at = now;
    return Status::Ok();
  }

  Status SetOverride(std::string_view key, std::optional<RateLimit> limit, std::string_view actor,
                     std::string_view reason) override {
    JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
    JOBPACT_RETURN_IF_ERROR(internal::CheckRateOverride(limit, actor, reason));
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    Limiter& l = limiters_[std::string(key)];
    l.override_limit = limit;
    l.override_actor = std::string(actor);
    l.override_reason = std::string(reason);
    l.updated_at = now;
    return Status::Ok();
  }

  Status ClearBackoff(std::string_view key) override {
    JOBPACT_RETURN_IF_ERROR(ValidateRateLimitKey(key));
    const TimePoint now = clock_->Now();
    internal::MutexLock lock(mu_);
    auto it = limiters_.find(key);
    if (it == limiters_.end()) return internal::NoRateLimiter(key);
    internal::GcraClearBackoff(it->second.gcra, internal::ToNs(now));
    it->second.backoff_reason.clear();
    it->second.updated_at = now;
    return Status::Ok();
  }

  Result<std::vector<RateLimiterState>> List(std::size_t limit) override {
    if (limit == 0) return Status::InvalidArgument("List: limit must be >= 1");
    const std::int64_t now_ns = internal::ToNs(clock_->Now());
    internal::MutexLock lock(mu_);
    std::vector<RateLimiterState> out;
    for (const auto& [key, l] : limiters_) {
      if (out.size() >= limit) break;
      RateLimiterState s;
      s.key = key;
      s.tat = internal::TimeFromNs(l.gcra.tat_ns);
      if (l.gcra.backoff_until_ns > now_ns) {
        s.backoff_until = internal::TimeFromNs(l.gcra.backoff_until_ns);
        s.backoff_reason = l.backoff_reason;
      }
      s.override_limit = l.override_limit;
      s.override_actor = l.override_actor;
      s.override_reason = l.override_reason;
      s.updated_at = l.updated_at;
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  const std::shared_ptr<Clock> clock_;
  internal::Mutex mu_;
  std::map<std::string, Limiter, std::less<>> limiters_ JOBPACT_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<RateLimitStore> MakeInMemoryRateLimitStore(std::shared_ptr<Clock> clock) {
  return std::make_shared<InMemoryRateLimitStore>(clock ? std::move(clock)
                                                        : SystemClock::Default());
}

}  // namespace jobpact
