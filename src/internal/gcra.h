// Private: the rate limiter's step (jobpact/rate_limit_store.h), one pure
// function every RateLimitStore applies inside its own atomic step, so the
// stores differ only in where they keep the state.
#ifndef JOBPACT_SRC_INTERNAL_GCRA_H_
#define JOBPACT_SRC_INTERNAL_GCRA_H_

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "jobpact/rate_limit_store.h"

namespace jobpact::internal {

// A limiter's stored timing state, in nanoseconds since the epoch (0: never
// set).
struct GcraState {
  std::int64_t tat_ns = 0;
  // The end of the current backoff (Backoff), 0 for none.
  std::int64_t backoff_until_ns = 0;
  // Where the next refused start is told to come back (see GcraTake).
  std::int64_t hint_ns = 0;
};

// One Take at `now_ns` under `limit`. Allowed when both the backoff is over
// and tat - tau <= now; then tat = max(tat, now) + T. Refused starts are
// told to come back one emission interval apart (hint), not all at the
// same instant: N refused jobs return over N * T, each finding its slot,
// instead of N returning at once and N - 1 being refused again.
RateDecision GcraTake(GcraState& state, const RateLimit& limit, std::int64_t now_ns);

// A backoff to `until_ns`: kept if it ends later than the current one.
inline void GcraBackoff(GcraState& state, std::int64_t until_ns) {
  if (until_ns > state.backoff_until_ns) state.backoff_until_ns = until_ns;
}

// An operator's ClearBackoff at `now_ns`: the backoff ends now, and the
// rate starts afresh (no debt from before).
inline void GcraClearBackoff(GcraState& state, std::int64_t now_ns) {
  state.backoff_until_ns = 0;
  state.hint_ns = 0;
  if (state.tat_ns > now_ns) state.tat_ns = now_ns;
}

// SetOverride's arguments: a valid limit (or none), an actor and a reason.
inline Status CheckRateOverride(const std::optional<RateLimit>& limit, std::string_view actor,
                                std::string_view reason) {
  if (limit) JOBPACT_RETURN_IF_ERROR(limit->Validate());
  if (actor.empty() || reason.empty()) {
    return Status::InvalidArgument("SetOverride: an actor and a reason are required");
  }
  return Status::Ok();
}

// `per_second` as the shortest text that parses back to the same double
// (std::to_chars), for the stores that keep a rate as text (Redis hashes)
// or send it as a text parameter (PostgreSQL).
inline std::string RateText(double per_second) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, per_second);
  return ec == std::errc() ? std::string(buf, end) : std::string("0");
}

// ClearBackoff of a key no store has state for.
inline Status NoRateLimiter(std::string_view key) {
  return Status::NotFound("no rate limiter " + std::string(key));
}

}  // namespace jobpact::internal

#endif  // JOBPACT_SRC_INTERNAL_GCRA_H_
