// What the jobpact command line reads: durations, times, rates, statuses
// and failure classes, each refused with a message that names the flag and
// the bad value (the tool prints it as its one line on stderr and exits 2).
#ifndef JOBPACT_SRC_CLI_ARGS_H_
#define JOBPACT_SRC_CLI_ARGS_H_

#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "jobpact/job_status.h"
#include "jobpact/result.h"
#include "jobpact/retry_policy.h"

namespace jobpact {
namespace cli {

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

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_ARGS_H_
