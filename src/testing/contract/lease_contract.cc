// QueueBackend contract: leases and fencing -- delivery, renewal, stale
// completions, lease recovery -- and the store-side steps pinned against the
// contract engine (SPEC 5, 9).
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "jobpact/transitions.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::LeaseContractAnchor() { return 0; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// --- Leases ---

TEST_P(QueueBackendContract, DeliveryLeasesTheJob) {
  const TimePoint t0 = Now();
  Put(MakeJob("job_a"));
  Advance(Seconds(2));
  Delivery d = TakeOne("job_a", "worker-7");
  EXPECT_EQ(d.job.status, JobStatus::kRunning);
  EXPECT_EQ(d.job.epoch, 1);
  EXPECT_EQ(d.job.envelope.attempt, 1);
  EXPECT_EQ(d.lease.job_id, "job_a");
  EXPECT_EQ(d.lease.epoch, 1);
  EXPECT_FALSE(d.lease.token.empty());
  EXPECT_EQ(d.lease.expires_at, t0 + Seconds(2) + Seconds(45));
  ASSERT_FALSE(d.job.history.empty());
  EXPECT_EQ(d.job.history.back().from, JobStatus::kQueued);
  EXPECT_EQ(d.job.history.back().to, JobStatus::kRunning);
  EXPECT_EQ(d.job.history.back().at, t0 + Seconds(2));
  EXPECT_EQ(d.job.history.back().reason, reason::kDelivered);
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kRunning);
  EXPECT_EQ(rec.epoch, 1);
  EXPECT_EQ(rec.envelope.attempt, 1);
}

TEST_P(QueueBackendContract, EachDeliveryGrowsEpochAndAttemptWithANewToken) {
  Put(MakeJob("job_a"));
  Delivery d1 = TakeOne("job_a");
  Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
  ASSERT_THAT(queue_->Complete(d1, retry), IsOk());
  Delivery d2 = TakeOne("job_a");
  EXPECT_EQ(d2.lease.epoch, 2);
  EXPECT_EQ(d2.job.epoch, 2);
  EXPECT_EQ(d2.job.envelope.attempt, 2);
  EXPECT_NE(d2.lease.token, d1.lease.token);
}

TEST_P(QueueBackendContract, RunningJobIsNotDeliveredAgain) {
  Put(MakeJob("job_a"));
  TakeOne("job_a");
  EXPECT_THAT(Take(10), IsEmpty());
  Advance(Seconds(3600));  // Even after its lease expired, until recovered.
  EXPECT_THAT(Take(10), IsEmpty());
}

// --- The store-side steps give what the engine gives (SPEC 9) ---

// What a store stores, field by field, against the engine's record (the
// history compared by its last entry; ids and tokens as handed out).
void ExpectSameRecord(const JobRecord& stored, const JobRecord& engine) {
  EXPECT_EQ(stored.status, engine.status);
  EXPECT_EQ(stored.epoch, engine.epoch);
  EXPECT_EQ(stored.envelope.attempt, engine.envelope.attempt);
  EXPECT_EQ(stored.envelope.max_attempts, engine.envelope.max_attempts);
  EXPECT_EQ(stored.lease_token, engine.lease_token);
  EXPECT_EQ(stored.lease_expires_at, engine.lease_expires_at);
  EXPECT_EQ(stored.ready_at, engine.ready_at);
  EXPECT_EQ(stored.updated_at, engine.updated_at);
  EXPECT_EQ(stored.finished_at, engine.finished_at);
  EXPECT_EQ(stored.lease_recoveries, engine.lease_recoveries);
  EXPECT_EQ(stored.lock_waits, engine.lock_waits);
  EXPECT_EQ(stored.reason, engine.reason);
  EXPECT_EQ(stored.last_failure.has_value(), engine.last_failure.has_value());
  if (stored.last_failure && engine.last_failure) {
    EXPECT_EQ(stored.last_failure->failure_class, engine.last_failure->failure_class);
    EXPECT_EQ(stored.last_failure->code, engine.last_failure->code);
    EXPECT_EQ(stored.last_failure->message, engine.last_failure->message);
  }
}

// Leasing runs inside the store (a query, a script); what it stores must be
// engine::Deliver of the record it picked.
TEST_P(QueueBackendContract, LeasingStoresWhatTheEngineDelivers) {
  Put(MakeJob("job_a"));
  Advance(Seconds(3));
  const JobRecord before = MustGet("job_a");
  Delivery d = TakeOne("job_a");
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange want, engine::Deliver(before, d.lease.token, Now()));
  const JobRecord stored = MustGet("job_a");
  ExpectSameRecord(stored, want.record);
  ExpectSameRecord(d.job, want.record);
  ASSERT_FALSE(stored.history.empty());
  EXPECT_EQ(stored.history.back().from, want.append.back().from);
  EXPECT_EQ(stored.history.back().to, want.append.back().to);
  EXPECT_EQ(stored.history.back().at, want.append.back().at);
  EXPECT_EQ(stored.history.back().reason, want.append.back().reason);
  EXPECT_EQ(stored.history.size(), before.history.size() + 1);
}

// So must lease recovery: engine::RecoverLease of each expired record, both
// the requeue and the dead-letter past the cap.
TEST_P(QueueBackendContract, RecoveryStoresWhatTheEngineRecovers) {
  Put(MakeJob("job_a"));
  Put(MakeJob("job_b"));
  TakeOne("job_a");
  TakeOne("job_b");
  Advance(Seconds(45));
  const JobRecord a = MustGet("job_a");
  const JobRecord b = MustGet("job_b");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n, queue_->RecoverExpiredLeases(1));
  ASSERT_EQ(n.size(), 2u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange want_a, engine::RecoverLease(a, 1, Now()));
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange want_b, engine::RecoverLease(b, 1, Now()));
  ExpectSameRecord(MustGet("job_a"), want_a.record);
  ExpectSameRecord(MustGet("job_b"), want_b.record);
  EXPECT_EQ(MustGet("job_a").history.back().reason, want_a.append.back().reason);
  // Twice more past the cap of 1: the second recovery dead-letters.
  TakeOne("job_a");
  Advance(Seconds(45));
  const JobRecord again = MustGet("job_a");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> m, queue_->RecoverExpiredLeases(1));
  ASSERT_EQ(m.size(), 1u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange dead, engine::RecoverLease(again, 1, Now()));
  EXPECT_EQ(dead.record.status, JobStatus::kDeadLettered);
  ExpectSameRecord(MustGet("job_a"), dead.record);
  EXPECT_EQ(m[0].to, JobStatus::kDeadLettered);
  EXPECT_EQ(m[0].reason, dead.record.reason);
}

TEST_P(QueueBackendContract, RenewExtendsTheLeaseAndStoresTheCheckpoint) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Advance(Seconds(10));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Lease renewed, queue_->Renew(d.lease, Seconds(60), "page=3"));
  EXPECT_EQ(renewed.expires_at, Now() + Seconds(60));
  EXPECT_EQ(renewed.epoch, d.lease.epoch);
  EXPECT_EQ(renewed.token, d.lease.token);
  EXPECT_EQ(MustGet("job_a").checkpoint, "page=3");
  // An empty checkpoint keeps the last one.
  ASSERT_THAT(queue_->Renew(renewed, Seconds(60), "").status(), IsOk());
  EXPECT_EQ(MustGet("job_a").checkpoint, "page=3");
  // The renewed lease is what recovery looks at: the first one (45 s) would
  // have expired by now.
  Advance(Seconds(40));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n, queue_->RecoverExpiredLeases(3));
  EXPECT_TRUE(n.empty());
  // The next attempt reads the checkpoint.
  Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
  Delivery current = d;
  current.lease = renewed;
  ASSERT_THAT(queue_->Complete(current, retry), IsOk());
  EXPECT_EQ(TakeOne("job_a").job.checkpoint, "page=3");
}

TEST_P(QueueBackendContract, StaleEpochOrWrongTokenIsAborted) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Delivery old_epoch = d;
  old_epoch.lease.epoch -= 1;
  old_epoch.job.epoch -= 1;
  Delivery wrong_token = d;
  wrong_token.lease.token = "someone-else#1";
  wrong_token.job.lease_token = "someone-else#1";
  Completion done = Outcome(JobStatus::kSucceeded, std::string(reason::kSucceeded));
  EXPECT_THAT(queue_->Renew(old_epoch.lease, Seconds(30), "").status(),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Renew(wrong_token.lease, Seconds(30), "").status(),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Complete(old_epoch, done), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Complete(wrong_token, done), StatusIs(StatusCode::kAborted));
  EXPECT_EQ(MustGet("job_a").status, JobStatus::kRunning);
  EXPECT_THAT(queue_->Complete(d, done), IsOk());
}

TEST_P(QueueBackendContract, LeaseOfUnknownJobIsNotFound) {
  Delivery ghost;
  ghost.job.envelope = MakeJob("job_ghost");
  ghost.job.status = JobStatus::kRunning;
  ghost.job.epoch = 1;
  ghost.job.lease_token = "w#1";
  ghost.lease = Lease{"job_ghost", "w#1", 1, Now() + Seconds(10)};
  EXPECT_THAT(queue_->Renew(ghost.lease, Seconds(10), "").status(),
              StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(queue_->Complete(ghost, Outcome(JobStatus::kSucceeded, "succeeded")),
              StatusIs(StatusCode::kNotFound));
}

TEST_P(QueueBackendContract, CompletionAfterRecoveryAndRedeliveryIsFenced) {
  Put(MakeJob("job_a"));
  Delivery lost = TakeOne("job_a", "worker-lost");
  Advance(Seconds(45));  // Exactly the visibility timeout: expired.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n, queue_->RecoverExpiredLeases(3));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].job_id, "job_a");
  EXPECT_EQ(n[0].to, JobStatus::kQueued);
  EXPECT_EQ(n[0].reason, reason::kLeaseExpired);
  EXPECT_EQ(n[0].lease_recoveries, 1);
  Completion done = Outcome(JobStatus::kSucceeded, std::string(reason::kSucceeded));
  done.result = "from the lost worker";
  // Requeued, not yet redelivered: the old lease is already stale.
  EXPECT_THAT(queue_->Complete(lost, done), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Renew(lost.lease, Seconds(30), "").status(), StatusIs(StatusCode::kAborted));
  Delivery next = TakeOne("job_a", "worker-next");
  EXPECT_EQ(next.lease.epoch, 2);
  EXPECT_EQ(next.job.envelope.attempt, 2);
  // Redelivered to another worker: the old one still cannot write.
  EXPECT_THAT(queue_->Complete(lost, done), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Renew(lost.lease, Seconds(30), "").status(), StatusIs(StatusCode::kAborted));
  Completion mine = Outcome(JobStatus::kSucceeded, std::string(reason::kSucceeded));
  mine.result = "from the successor";
  ASSERT_THAT(queue_->Complete(next, mine), IsOk());
  JobRecord rec = MustGet("job_a");
  EXPECT_EQ(rec.status, JobStatus::kSucceeded);
  EXPECT_EQ(rec.result, "from the successor");
  // And after the successor finished, the old lease still cannot overwrite.
  EXPECT_THAT(queue_->Complete(lost, done), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(queue_->Complete(next, done), StatusIs(StatusCode::kAborted));
  EXPECT_EQ(MustGet("job_a").result, "from the successor");
}

TEST_P(QueueBackendContract, ExpiredButUnrecoveredLeaseStillCompletes) {
  Put(MakeJob("job_a"));
  Delivery d = TakeOne("job_a");
  Advance(Seconds(100));
  EXPECT_THAT(queue_->Complete(d, Outcome(JobStatus::kSucceeded, "succeeded")), IsOk());
  EXPECT_EQ(MustGet("job_a").status, JobStatus::kSucceeded);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n, queue_->RecoverExpiredLeases(3));
  EXPECT_TRUE(n.empty());
}

TEST_P(QueueBackendContract, RecoverExpiredLeasesRequeuesOnlyExpiredOnes) {
  Envelope shortlease = MakeJob("job_short");
  shortlease.timeout = Seconds(5);
  shortlease.visibility_timeout = Seconds(15);
  Put(shortlease);
  Put(MakeJob("job_long"));  // 45 s.
  ASSERT_EQ(Take(2).size(), 2u);
  Advance(Seconds(14));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> none, queue_->RecoverExpiredLeases(3));
  EXPECT_TRUE(none.empty());
  Advance(Seconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> one, queue_->RecoverExpiredLeases(3));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].job_id, "job_short");
  EXPECT_EQ(one[0].to, JobStatus::kQueued);
  EXPECT_EQ(one[0].reason, reason::kLeaseExpired);
  EXPECT_EQ(one[0].lease_recoveries, 1);
  EXPECT_EQ(one[0].envelope.job_id, "job_short");
  EXPECT_EQ(one[0].envelope.job_type, shortlease.job_type);
  EXPECT_EQ(one[0].envelope.attempt, 1);
  JobRecord rec = MustGet("job_short");
  EXPECT_EQ(rec.status, JobStatus::kQueued);
  EXPECT_EQ(rec.lease_recoveries, 1);
  EXPECT_EQ(rec.envelope.attempt, 1);  // The next delivery is attempt 2.
  EXPECT_EQ(rec.ready_at, Now());
  EXPECT_EQ(rec.reason, reason::kLeaseExpired);
  ASSERT_FALSE(rec.history.empty());
  EXPECT_EQ(rec.history.back().from, JobStatus::kRunning);
  EXPECT_EQ(rec.history.back().to, JobStatus::kQueued);
  EXPECT_EQ(rec.history.back().at, Now());
  EXPECT_EQ(rec.history.back().reason, reason::kLeaseExpired);
  EXPECT_EQ(MustGet("job_long").status, JobStatus::kRunning);
  EXPECT_EQ(TakeOne("job_short").job.envelope.attempt, 2);
}

TEST_P(QueueBackendContract, RecoverExpiredLeasesReportsEachJob) {
  Put(MakeJob("job_again"));
  TakeOne("job_again");
  Advance(Seconds(45));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> first, queue_->RecoverExpiredLeases(1));
  ASSERT_EQ(first.size(), 1u);
  Put(MakeJob("job_fresh"));
  ASSERT_EQ(Take(2).size(), 2u);
  Advance(Seconds(45));
  // One call moves both: job_again over the cap, job_fresh back to the queue.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> both, queue_->RecoverExpiredLeases(1));
  ASSERT_EQ(both.size(), 2u);
  std::sort(both.begin(), both.end(),
            [](const LeaseRecovery& a, const LeaseRecovery& b) { return a.job_id < b.job_id; });
  EXPECT_EQ(both[0].job_id, "job_again");
  EXPECT_EQ(both[0].to, JobStatus::kDeadLettered);
  EXPECT_EQ(both[0].reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(both[0].lease_recoveries, 2);
  EXPECT_EQ(both[0].envelope.job_id, "job_again");
  EXPECT_EQ(both[1].job_id, "job_fresh");
  EXPECT_EQ(both[1].to, JobStatus::kQueued);
  EXPECT_EQ(both[1].reason, reason::kLeaseExpired);
  EXPECT_EQ(both[1].lease_recoveries, 1);
  EXPECT_EQ(both[1].envelope.job_id, "job_fresh");
  EXPECT_EQ(MustGet("job_again").status, JobStatus::kDeadLettered);
  EXPECT_EQ(MustGet("job_fresh").status, JobStatus::kQueued);
}

TEST_P(QueueBackendContract, RepeatedLeaseExpiryDeadLettersTheJob) {
  Put(MakeJob("job_crashy"));
  const int max_recoveries = 2;
  for (int i = 1; i <= max_recoveries; ++i) {
    TakeOne("job_crashy");
    Advance(Seconds(45));
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n,
                                 queue_->RecoverExpiredLeases(max_recoveries));
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].job_id, "job_crashy");
    EXPECT_EQ(n[0].to, JobStatus::kQueued);
    EXPECT_EQ(n[0].reason, reason::kLeaseExpired);
    EXPECT_EQ(n[0].lease_recoveries, i);
    JobRecord rec = MustGet("job_crashy");
    EXPECT_EQ(rec.status, JobStatus::kQueued) << "recovery " << i;
    EXPECT_EQ(rec.lease_recoveries, i);
  }
  TakeOne("job_crashy");
  Advance(Seconds(45));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> n,
                               queue_->RecoverExpiredLeases(max_recoveries));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].job_id, "job_crashy");
  EXPECT_EQ(n[0].to, JobStatus::kDeadLettered);
  EXPECT_EQ(n[0].reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(n[0].lease_recoveries, max_recoveries + 1);
  EXPECT_EQ(n[0].envelope.job_id, "job_crashy");
  EXPECT_EQ(n[0].envelope.attempt, max_recoveries + 1);
  JobRecord rec = MustGet("job_crashy");
  EXPECT_EQ(rec.status, JobStatus::kDeadLettered);
  EXPECT_EQ(rec.reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(rec.history.back().reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(rec.history.back().from, JobStatus::kRunning);
  EXPECT_TRUE(rec.finished_at.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter("job_crashy"));
  EXPECT_EQ(e.reason, reason::kLeaseExpiredRepeatedly);
  EXPECT_EQ(e.attempts, 3);
  EXPECT_THAT(Take(10), IsEmpty());
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
