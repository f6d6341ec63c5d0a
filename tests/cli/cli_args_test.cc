// What the jobpact command reads from its arguments (src/cli/args.h): each
// form accepted, and each bad one refused naming the flag and the value.
#include "src/cli/args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/job.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace cli {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

TEST(ParseDurationTest, ReadsUnitsAndSums) {
  EXPECT_EQ(*ParseDuration("--d", "90s"), Seconds(90));
  EXPECT_EQ(*ParseDuration("--d", "15m"), Seconds(900));
  EXPECT_EQ(*ParseDuration("--d", "2h"), Seconds(7200));
  EXPECT_EQ(*ParseDuration("--d", "7d"), Seconds(7 * 86400));
  EXPECT_EQ(*ParseDuration("--d", "1h30m"), Seconds(5400));
  EXPECT_EQ(*ParseDuration("--d", "250ms"), Millis(250));
  EXPECT_EQ(*ParseDuration("--d", "1.5h"), Seconds(5400));
  EXPECT_EQ(*ParseDuration("--d", "0s"), Duration::zero());
}

TEST(ParseDurationTest, RefusesWhatItWouldHaveToGuess) {
  for (const char* bad : {"", "10", "s", "5x", "1h 30m", "-5s", "1..2s", "3 weeks"}) {
    EXPECT_THAT(ParseDuration("--older-than", bad),
                StatusIs(StatusCode::kInvalidArgument,
                         HasSubstr("--older-than: '" + std::string(bad) + "' is not a duration")))
        << bad;
  }
  EXPECT_THAT(ParseDuration("--d", "999999999d"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("too long")));
}

TEST(ParseTimeTest, ReadsRfc3339OrAnAge) {
  const TimePoint now = *ParseRfc3339("2026-12-03T10:00:00Z");
  EXPECT_EQ(*ParseTime("--since", "2026-12-03T08:00:00Z", now), now - Seconds(7200));
  EXPECT_EQ(*ParseTime("--since", "2026-12-03T09:00:00+01:00", now), now - Seconds(7200));
  EXPECT_EQ(*ParseTime("--since", "2h", now), now - Seconds(7200));
  EXPECT_THAT(ParseTime("--since", "yesterday", now),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("'yesterday' is not a time")));
  EXPECT_THAT(ParseTime("--until", "2026-13-01T00:00:00Z", now),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--until")));
}

TEST(ParseRateTest, ReadsPerSecondAndPerMinute) {
  EXPECT_EQ(*ParseRate("--rate", "5"), 5.0);
  EXPECT_EQ(*ParseRate("--rate", "5/s"), 5.0);
  EXPECT_EQ(*ParseRate("--rate", "300/m"), 5.0);
  EXPECT_EQ(*ParseRate("--rate", "0"), 0.0);
  for (const char* bad : {"", "fast", "5/h", "-1/s", "/s", "inf", "nan"}) {
    EXPECT_THAT(ParseRate("--rate", bad),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("is not a rate")))
        << bad;
  }
}

TEST(ParseNamesTest, StatusesAndClassesByTheirSpecNames) {
  EXPECT_EQ(*ParseStatusArg("--status", "retry_scheduled"), JobStatus::kRetryScheduled);
  EXPECT_THAT(ParseStatusArg("--status", "done"),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("'done' is not a job status (one of queued, running")));
  EXPECT_EQ(*ParseClassArg("--class", "transient"), FailureClass::kTransient);
  EXPECT_THAT(ParseClassArg("--class", "flaky"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("'flaky' is not a failure class")));
}

}  // namespace
}  // namespace cli
}  // namespace jobpact
