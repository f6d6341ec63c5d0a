// What an operator types: durations, times, rates, statuses, failure
// classes and DLQ filters, each refused (kInvalidArgument) with a message
// that names the flag or field and the bad value. Shared by the jobpact
// command (src/cli: it prints the message as its one line on stderr and
// exits 2) and the dashboard's API (src/http: a 400 with the message), so
// that both read the same words the same way.
#ifndef JOBPACT_SRC_INTERNAL_OPERATOR_INPUT_H_
#define JOBPACT_SRC_INTERNAL_OPERATOR_INPUT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend.h"
#include "jobpact/result.h"
#include "jobpact/retry_policy.h"

namespace jobpact {
namespace internal {

// "90s", "15m", "2h", "7d", "250ms", "1h30m": one or more <number><unit>
// parts (units ms, s, m, h, d; numbers may have a fraction: "1.5h"). A bare
// number is refused: the unit is never guessed. `flag` names the option in
// the message ("--older-than").
Result<Duration> ParseDuration(std::string_view flag, std::string_view text);

// A point in time: RFC 3339 / ISO 8601 ("2026-12-03T10:00:00Z", an offset
// allowed), or a duration meaning that long before `now` ("2h": two hours
// ago).
Result<TimePoint> ParseTime(std::string_view flag, std::string_view text, TimePoint now);

// Jobs per second: "5", "5/s", "300/m", "0.5/s". >= 0; 0 means no limit.
Result<double> ParseRate(std::string_view flag, std::string_view text);

// A status or failure class by its SPEC name, with the list of valid names
// in the message otherwise.
Result<JobStatus> ParseStatusArg(std::string_view flag, std::string_view text);
Result<FailureClass> ParseClassArg(std::string_view flag, std::string_view text);

// The most entries one DLQ listing or selection may name.
inline constexpr int kMaxDlqFilterLimit = 100000;

// A DLQ selection as typed: each field empty when not given.
struct DlqFilterText {
  std::string type;           // The job type.
  std::string reason;         // The DLQ reason (max_attempts_exceeded, ...).
  std::string failure_class;  // The last failure's class (transient, ...).
  std::string since, until;   // Dead-lettered at or after / before (ParseTime).
  int limit = 1000;           // 1..kMaxDlqFilterLimit.
};

// The DlqFilter of `text`, with since and until read relative to `now`.
// kInvalidArgument naming the bad field as `prefix` + its name: the command
// line passes "--" ("--class: 'x' is not a failure class ..."), the
// dashboard's API "" (its query parameters are class, since, ...).
Result<DlqFilter> ParseDlqFilter(const DlqFilterText& text, TimePoint now,
                                 std::string_view prefix);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_OPERATOR_INPUT_H_
