// The operator side as JSON: what `jobpact --json` prints and the
// dashboard's API (src/http) serves, written once. Times are exact RFC 3339
// in UTC (null for the epoch, i.e. unset); durations are seconds, in fields
// ending in _seconds. nlohmann's ordered_json keeps fields in the order
// written here, so a document reads the same every time.
#ifndef JOBPACT_SRC_INTERNAL_OPERATOR_JSON_H_
#define JOBPACT_SRC_INTERNAL_OPERATOR_JSON_H_

#include <optional>

#include <nlohmann/json.hpp>

#include "jobpact/clock.h"
#include "jobpact/failure.h"
#include "jobpact/lock_store.h"
#include "jobpact/operations.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/rate_limit_store.h"

namespace jobpact {
namespace internal {

using Json = nlohmann::ordered_json;

// Exact RFC 3339, or null for the epoch (unset).
Json TimeJson(TimePoint t);
double SecondsOf(Duration d);

// {"queues": {name: {depth, running, oldest_ready_age_seconds}},
//  "by_status": {status: n, ...every status}, "dead_letters": n}.
Json StatsToJson(const QueueStats& s);
// The record with its history and audit trail.
Json JobToJson(const JobRecord& r);
// Without the history (listings); JobToJson has it.
Json JobSummaryToJson(const JobRecord& r);
// With the payload, raw envelope, history and audit when `with_history`.
Json DlqToJson(const DlqEntry& e, bool with_history);
Json LockToJson(const LockLease& l, TimePoint now);
Json PolicyToJson(const PublishedPolicy& p);
// {"rules": [{kind, subject, [limit], [failure_class], actor, reason, set_at}]}.
Json ControlToJson(const ControlState& s);
// {key, backoff_until (null: none), backoff_reason, updated_at, override:
// {per_second, burst, actor, reason} or null}.
Json RateLimiterToJson(const RateLimiterState& r);
// {class, code, message}, or null.
Json FailureToJson(const std::optional<Failure>& f);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_OPERATOR_JSON_H_
