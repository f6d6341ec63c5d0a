#include "jobpact/job_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

namespace jobpact {
namespace {

using ::testing::HasSubstr;

// The SPEC 2 table, written out again here on purpose: the test must not read
// the table it checks.
const std::set<std::pair<JobStatus, JobStatus>>& SpecTable() {
  static const auto* table = new std::set<std::pair<JobStatus, JobStatus>>{
      {JobStatus::kQueued, JobStatus::kRunning},
      {JobStatus::kQueued, JobStatus::kDiscarded},
      {JobStatus::kRunning, JobStatus::kSucceeded},
      {JobStatus::kRunning, JobStatus::kRetryScheduled},
      {JobStatus::kRunning, JobStatus::kFailed},
      {JobStatus::kRunning, JobStatus::kDeadLettered},
      {JobStatus::kRunning, JobStatus::kDiscarded},
      {JobStatus::kRunning, JobStatus::kQueued},
      {JobStatus::kRetryScheduled, JobStatus::kRunning},
      {JobStatus::kRetryScheduled, JobStatus::kDiscarded},
      {JobStatus::kDeadLettered, JobStatus::kQueued},
      {JobStatus::kDeadLettered, JobStatus::kDiscarded},
  };
  return *table;
}

TEST(JobStatusTest, AllStatusesListsSevenDistinctStatuses) {
  std::set<JobStatus> seen(std::begin(kAllJobStatuses), std::end(kAllJobStatuses));
  EXPECT_EQ(seen.size(), 7u);
}

TEST(JobStatusTest, NamesAreTheSpecNames) {
  EXPECT_EQ(JobStatusName(JobStatus::kQueued), "queued");
  EXPECT_EQ(JobStatusName(JobStatus::kRunning), "running");
  EXPECT_EQ(JobStatusName(JobStatus::kSucceeded), "succeeded");
  EXPECT_EQ(JobStatusName(JobStatus::kRetryScheduled), "retry_scheduled");
  EXPECT_EQ(JobStatusName(JobStatus::kFailed), "failed");
  EXPECT_EQ(JobStatusName(JobStatus::kDeadLettered), "dead_lettered");
  EXPECT_EQ(JobStatusName(JobStatus::kDiscarded), "discarded");
}

TEST(JobStatusTest, NamesRoundTrip) {
  for (JobStatus s : kAllJobStatuses) {
    Result<JobStatus> parsed = ParseJobStatus(JobStatusName(s));
    ASSERT_TRUE(parsed.ok()) << JobStatusName(s) << ": " << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
}

TEST(JobStatusTest, ParseRejectsUnknownNameNamingIt) {
  for (std::string_view bad : {"queue", "QUEUED", "", "dead-lettered", "running "}) {
    Result<JobStatus> parsed = ParseJobStatus(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("'" + std::string(bad) + "'"));
    // The error lists what would have been accepted.
    EXPECT_THAT(parsed.status().message(), HasSubstr("retry_scheduled"));
  }
}

TEST(JobStatusTest, EveryLegalTransitionIsAccepted) {
  for (const auto& [from, to] : SpecTable()) {
    EXPECT_TRUE(IsLegalTransition(from, to)) << JobStatusName(from) << " -> " << JobStatusName(to);
    EXPECT_TRUE(CheckTransition(from, to).ok())
        << JobStatusName(from) << " -> " << JobStatusName(to);
  }
}

TEST(JobStatusTest, EveryPairNotInTheTableIsRefusedNamingBothStatuses) {
  int checked = 0;
  int refused = 0;
  for (JobStatus from : kAllJobStatuses) {
    for (JobStatus to : kAllJobStatuses) {
      ++checked;
      const bool legal = SpecTable().count({from, to}) > 0;
      EXPECT_EQ(IsLegalTransition(from, to), legal)
          << JobStatusName(from) << " -> " << JobStatusName(to);
      Status s = CheckTransition(from, to);
      if (legal) {
        EXPECT_TRUE(s.ok()) << s;
        continue;
      }
      ++refused;
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition)
          << JobStatusName(from) << " -> " << JobStatusName(to);
      EXPECT_THAT(s.message(), HasSubstr(std::string(JobStatusName(from)) + " -> " +
                                         std::string(JobStatusName(to))));
    }
  }
  EXPECT_EQ(checked, 49);
  EXPECT_EQ(refused, 49 - 12);
}

TEST(JobStatusTest, SelfTransitionsAreIllegal) {
  for (JobStatus s : kAllJobStatuses) {
    EXPECT_FALSE(IsLegalTransition(s, s)) << JobStatusName(s);
  }
}

TEST(JobStatusTest, FinalStatusesAreExactlySucceededFailedDiscarded) {
  std::set<JobStatus> finals;
  for (JobStatus s : kAllJobStatuses) {
    if (IsFinal(s)) finals.insert(s);
  }
  EXPECT_EQ(finals, (std::set<JobStatus>{JobStatus::kSucceeded, JobStatus::kFailed,
                                         JobStatus::kDiscarded}));
}

TEST(JobStatusTest, FinalStatusesHaveNoOutgoingTransitions) {
  for (JobStatus from : kAllJobStatuses) {
    int outgoing = 0;
    for (JobStatus to : kAllJobStatuses) outgoing += IsLegalTransition(from, to) ? 1 : 0;
    if (IsFinal(from)) {
      EXPECT_EQ(outgoing, 0) << JobStatusName(from);
    } else {
      EXPECT_GT(outgoing, 0) << JobStatusName(from);
    }
  }
}

TEST(JobStatusTest, RefusalFromFinalStatusSaysItIsFinal) {
  Status s = CheckTransition(JobStatus::kSucceeded, JobStatus::kRunning);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("succeeded -> running"));
  EXPECT_THAT(s.message(), HasSubstr("final"));
}

TEST(JobStatusTest, ReasonNamesAreStable) {
  // Dashboards and alerts match on these strings; a rename is a breaking change.
  EXPECT_EQ(reason::kMaxAttemptsExceeded, "max_attempts_exceeded");
  EXPECT_EQ(reason::kUnknownNonRetryable, "unknown_non_retryable");
  EXPECT_EQ(reason::kTransientError, "transient_error");
  EXPECT_EQ(reason::kPermanentError, "permanent_error");
  EXPECT_EQ(reason::kLeaseExpiredRepeatedly, "lease_expired_repeatedly");
  EXPECT_EQ(reason::kInvalidEnvelope, "invalid_envelope");
}

}  // namespace
}  // namespace jobpact
