// The rate limiter's values and its GCRA step (jobpact/rate_limit_store.h,
// src/internal/gcra.h).
#include "jobpact/rate_limit_store.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "src/internal/gcra.h"
#include "src/internal/names.h"
#include "src/internal/time_ns.h"

namespace jobpact {

RateLimitStore::~RateLimitStore() = default;

Status RateLimit::Validate() const {
  if (!std::isfinite(per_second) || per_second < 0 || per_second > 1e6) {
    return Status::InvalidArgument("rate limit: per_second must be in 0..1000000, not " +
                                   std::to_string(per_second));
  }
  if (burst < 1 || burst > 1000000) {
    return Status::InvalidArgument("rate limit: burst must be in 1..1000000, not " +
                                   std::to_string(burst));
  }
  return Status::Ok();
}

std::string RateLimitKeyForType(std::string_view job_type) {
  return "type:" + std::string(job_type);
}

std::string RateLimitKeyForDependency(std::string_view dependency) {
  return "dependency:" + std::string(dependency);
}

Status ValidateRateLimitKey(std::string_view key) {
  for (std::string_view prefix : {std::string_view("type:"), std::string_view("dependency:")}) {
    if (key.substr(0, prefix.size()) != prefix) continue;
    std::string_view name = key.substr(prefix.size());
    if (internal::IsSafeName(name)) return Status::Ok();
    return Status::InvalidArgument("rate limit key '" + std::string(key) + "': the name after '" +
                                   std::string(prefix) +
                                   "' must be 1..255 characters of [A-Za-z0-9._:-]");
  }
  return Status::InvalidArgument("rate limit key '" + std::string(key) +
                                 "' must start with 'type:' or 'dependency:'");
}

namespace internal {

RateDecision GcraTake(GcraState& s, const RateLimit& limit, std::int64_t now_ns) {
  RateDecision d;
  d.applied = limit;
  // T and tau in whole nanoseconds (a rate of at most 1e6/s: T >= 1000).
  const std::int64_t t =
      limit.per_second > 0 ? static_cast<std::int64_t>(std::llround(1e9 / limit.per_second)) : 0;
  const std::int64_t tau = t * (limit.burst - 1);
  const std::int64_t earliest = std::max(s.tat_ns - tau, s.backoff_until_ns);
  if (earliest <= now_ns) {
    d.allowed = true;
    d.retry_at = TimeFromNs(now_ns);
    s.tat_ns = std::max(s.tat_ns, now_ns) + t;
    return d;
  }
  const std::int64_t at = std::max(earliest, s.hint_ns);
  s.hint_ns = at + t;
  d.retry_at = TimeFromNs(at);
  return d;
}

}  // namespace internal
}  // namespace jobpact
