// The contract engine's pure transitions (jobpact/transitions.h), table by
// table: every (from, to) pair each function is asked for, legal or not, and
// what each legal change does to the record, its indexes and its history.
#include "jobpact/transitions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::HasSubstr;

const TimePoint kT0 = TimePoint{} + std::chrono::hours(24 * 365 * 56);

Envelope MakeEnvelope() {
  Envelope env;
  env.job_id = "job_1";
  env.job_type = "invoice.generate";
  env.payload = R"({"order_id":"ord_987"})";
  env.max_attempts = 5;
  return env;
}

// A record in status `s`, as a store would hold it.
JobRecord RecordIn(JobStatus s) {
  JobRecord r;
  r.envelope = MakeEnvelope();
  r.status = s;
  r.enqueued_at = r.updated_at = r.ready_at = kT0;
  r.epoch = 2;
  r.envelope.attempt = 2;
  if (s == JobStatus::kRunning) {
    r.lease_token = "w1#7";
    r.lease_expires_at = kT0 + Seconds(45);
  }
  if (s == JobStatus::kDeadLettered || IsFinal(s)) r.finished_at = kT0;
  return r;
}

Delivery DeliveryOf(const JobRecord& r) {
  return Delivery{r, Lease{r.envelope.job_id, r.lease_token, r.epoch, r.lease_expires_at}};
}

Completion To(JobStatus to, std::string why = "because") {
  Completion c;
  c.to = to;
  c.reason = std::move(why);
  if (to == JobStatus::kRetryScheduled || to == JobStatus::kQueued) c.ready_at = kT0 + Seconds(10);
  return c;
}

const DlqAction kOperator{"alice", "upstream fixed", true, 0, std::nullopt};

// Runs every engine function on a record of every status and collects the
// (from, to) pairs it accepted.
std::set<std::pair<JobStatus, JobStatus>> AcceptedPairs() {
  std::set<std::pair<JobStatus, JobStatus>> accepted;
  auto note = [&](const Result<JobChange>& c) {
    if (!c.ok()) return;
    for (const Transition& t : c->append) accepted.emplace(t.from, t.to);
  };
  for (JobStatus from : kAllJobStatuses) {
    const JobRecord r = RecordIn(from);
    note(engine::Deliver(r, "w2#1", kT0 + Seconds(1)));
    for (JobStatus to : kAllJobStatuses) note(engine::Complete(DeliveryOf(r), To(to), kT0));
    note(engine::RecoverLease(r, 3, kT0 + Seconds(60)));
    note(engine::Replay(r, kOperator, kT0));
    note(engine::Discard(r, kOperator, kT0));
    note(engine::Cancel(r, kOperator, kT0));
  }
  return accepted;
}

TEST(TransitionsTest, EngineProducesExactlyTheSpecTable) {
  std::set<std::pair<JobStatus, JobStatus>> legal;
  for (JobStatus from : kAllJobStatuses) {
    for (JobStatus to : kAllJobStatuses) {
      if (IsLegalTransition(from, to)) legal.emplace(from, to);
    }
  }
  EXPECT_EQ(AcceptedPairs(), legal);
}

TEST(TransitionsTest, DeliverOnlyFromQueuedOrRetryScheduled) {
  for (JobStatus from : kAllJobStatuses) {
    Result<JobChange> c = engine::Deliver(RecordIn(from), "w2#1", kT0 + Seconds(1));
    if (from == JobStatus::kQueued || from == JobStatus::kRetryScheduled) {
      EXPECT_THAT(c.status(), IsOk()) << JobStatusName(from);
    } else {
      EXPECT_THAT(c.status(), StatusIs(StatusCode::kFailedPrecondition)) << JobStatusName(from);
    }
  }
}

TEST(TransitionsTest, DeliverRefusesAJobThatIsNotReadyYet) {
  JobRecord r = RecordIn(JobStatus::kRetryScheduled);
  r.ready_at = kT0 + Seconds(5);
  EXPECT_THAT(engine::Deliver(r, "w#1", kT0 + Seconds(4)).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("not ready")));
  EXPECT_THAT(engine::Deliver(r, "w#1", kT0 + Seconds(5)).status(), IsOk());
}

TEST(TransitionsTest, DeliverStartsANewLeaseAndAttempt) {
  const JobRecord before = RecordIn(JobStatus::kQueued);
  const TimePoint now = kT0 + Seconds(3);
  JobChange c = engine::Deliver(before, "w2#9", now).value();
  EXPECT_EQ(c.record.status, JobStatus::kRunning);
  EXPECT_EQ(c.record.epoch, before.epoch + 1);
  EXPECT_EQ(c.record.envelope.attempt, before.envelope.attempt + 1);
  EXPECT_EQ(c.record.lease_token, "w2#9");
  EXPECT_EQ(c.record.lease_expires_at, now + before.envelope.visibility_timeout);
  EXPECT_EQ(c.record.updated_at, now);
  EXPECT_EQ(c.placement, JobPlacement::kLeased);
  // Written only over the record as the engine saw it.
  EXPECT_FALSE(c.expect.new_job);
  EXPECT_EQ(c.expect.status, JobStatus::kQueued);
  EXPECT_EQ(c.expect.epoch, before.epoch);
  EXPECT_EQ(c.expect.lease_token, "");
  ASSERT_EQ(c.append.size(), 1u);
  EXPECT_EQ(c.append[0].from, JobStatus::kQueued);
  EXPECT_EQ(c.append[0].to, JobStatus::kRunning);
  EXPECT_EQ(c.append[0].reason, reason::kDelivered);
  EXPECT_EQ(c.append[0].at, now);
}

// Every target of a completion from running: legal ones per the SPEC table,
// the others refused as illegal.
TEST(TransitionsTest, CompleteEveryTarget) {
  struct Row {
    JobStatus to;
    bool legal;
    JobPlacement placement;
  };
  const Row table[] = {
      {JobStatus::kSucceeded, true, JobPlacement::kFinal},
      {JobStatus::kRetryScheduled, true, JobPlacement::kScheduled},
      {JobStatus::kFailed, true, JobPlacement::kFinal},
      {JobStatus::kDeadLettered, true, JobPlacement::kDeadLettered},
      {JobStatus::kDiscarded, true, JobPlacement::kFinal},
      {JobStatus::kQueued, true, JobPlacement::kScheduled},
      {JobStatus::kRunning, false, JobPlacement::kLeased},
  };
  for (const Row& row : table) {
    const JobRecord r = RecordIn(JobStatus::kRunning);
    Result<JobChange> c = engine::Complete(DeliveryOf(r), To(row.to), kT0 + Seconds(1));
    if (!row.legal) {
      EXPECT_THAT(c.status(), StatusIs(StatusCode::kFailedPrecondition)) << JobStatusName(row.to);
      continue;
    }
    ASSERT_THAT(c.status(), IsOk()) << JobStatusName(row.to);
    EXPECT_EQ(c->record.status, row.to);
    EXPECT_EQ(c->placement, row.placement) << JobStatusName(row.to);
    EXPECT_EQ(c->record.reason, "because");
    EXPECT_EQ(c->record.lease_token, "");
    EXPECT_EQ(c->expect.status, JobStatus::kRunning);
    EXPECT_EQ(c->expect.epoch, r.epoch);
    EXPECT_EQ(c->expect.lease_token, r.lease_token);
    const bool finished = row.to != JobStatus::kRetryScheduled && row.to != JobStatus::kQueued;
    EXPECT_EQ(c->record.finished_at.has_value(), finished) << JobStatusName(row.to);
  }
}

TEST(TransitionsTest, CompleteWithAStaleLeaseIsAborted) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  Delivery stale_epoch = DeliveryOf(r);
  stale_epoch.lease.epoch = r.epoch - 1;
  EXPECT_THAT(engine::Complete(stale_epoch, To(JobStatus::kSucceeded), kT0).status(),
              StatusIs(StatusCode::kAborted, HasSubstr("superseded")));
  Delivery stale_token = DeliveryOf(r);
  stale_token.lease.token = "someone-else";
  EXPECT_THAT(engine::Complete(stale_token, To(JobStatus::kSucceeded), kT0).status(),
              StatusIs(StatusCode::kAborted));
  for (JobStatus s : kAllJobStatuses) {
    if (s == JobStatus::kRunning) continue;
    EXPECT_THAT(engine::Complete(DeliveryOf(RecordIn(s)), To(JobStatus::kSucceeded), kT0).status(),
                StatusIs(StatusCode::kAborted))
        << JobStatusName(s);
  }
}

TEST(TransitionsTest, CompleteKeepsWhatTheOutcomeCarries) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  Completion ok = To(JobStatus::kSucceeded, "succeeded");
  ok.result = R"({"invoice":"inv_1"})";
  JobChange done = engine::Complete(DeliveryOf(r), ok, kT0 + Seconds(2)).value();
  EXPECT_EQ(done.record.result, ok.result);
  EXPECT_EQ(done.record.finished_at, kT0 + Seconds(2));

  Completion retry = To(JobStatus::kRetryScheduled, "transient_error");
  retry.delay = Seconds(7);
  retry.failure = Failure{FailureClass::kTransient, "UNAVAILABLE", "upstream 503"};
  retry.checkpoint = "page=3";
  JobChange again = engine::Complete(DeliveryOf(r), retry, kT0 + Seconds(2)).value();
  EXPECT_EQ(again.record.previous_delay, Seconds(7));
  EXPECT_EQ(again.record.ready_at, kT0 + Seconds(10));
  EXPECT_EQ(again.record.checkpoint, "page=3");
  // Without one, the change leaves the stored checkpoint alone (a heartbeat
  // may have stored a newer one than the delivered record has).
  JobRecord checkpointed = r;
  checkpointed.checkpoint = "page=1";
  EXPECT_EQ(engine::Complete(DeliveryOf(checkpointed), To(JobStatus::kSucceeded), kT0)
                .value()
                .record.checkpoint,
            "");
  ASSERT_TRUE(again.record.last_failure.has_value());
  EXPECT_EQ(again.record.last_failure->message, "upstream 503");
  EXPECT_EQ(again.record.result, "");  // Only a success stores a result.
  EXPECT_EQ(again.record.envelope.attempt, r.envelope.attempt);  // Spent.
}

TEST(TransitionsTest, RequeueWithoutSpendingGivesTheAttemptBackAndCountsLockWaits) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  Completion busy = To(JobStatus::kRetryScheduled, "lock_busy");
  busy.spend_attempt = false;
  busy.lock_wait = true;
  JobChange c = engine::Complete(DeliveryOf(r), busy, kT0).value();
  EXPECT_EQ(c.record.envelope.attempt, r.envelope.attempt - 1);
  EXPECT_EQ(c.record.lock_waits, r.lock_waits + 1);
}

TEST(TransitionsTest, ARetryIsNeverReadyBeforeTheEnqueue) {
  JobRecord r = RecordIn(JobStatus::kRunning);
  r.enqueued_at = kT0 + Seconds(100);
  Completion c = To(JobStatus::kRetryScheduled);
  c.ready_at = kT0;
  EXPECT_EQ(engine::Complete(DeliveryOf(r), c, kT0).value().record.ready_at, r.enqueued_at);
}

TEST(TransitionsTest, CompleteConsumingTheDeliveryGivesTheSameChange) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  JobChange copied = engine::Complete(DeliveryOf(r), To(JobStatus::kSucceeded), kT0).value();
  JobChange moved = engine::Complete(Delivery(DeliveryOf(r)), To(JobStatus::kSucceeded), kT0).value();
  EXPECT_EQ(SerializeEnvelope(copied.record.envelope), SerializeEnvelope(moved.record.envelope));
  EXPECT_EQ(copied.record.status, moved.record.status);
  EXPECT_EQ(copied.append.size(), moved.append.size());
}

TEST(TransitionsTest, RenewExtendsTheLeaseOnlyForItsHolder) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  const Lease lease = DeliveryOf(r).lease;
  JobChange c = engine::Renew(r, lease, Seconds(45), "page=4", kT0 + Seconds(20)).value();
  EXPECT_EQ(c.record.lease_expires_at, kT0 + Seconds(65));
  EXPECT_EQ(c.record.checkpoint, "page=4");
  EXPECT_TRUE(c.append.empty());  // Not a transition.
  EXPECT_EQ(c.record.status, JobStatus::kRunning);
  Lease stale = lease;
  stale.epoch = 1;
  EXPECT_THAT(engine::Renew(r, stale, Seconds(45), "", kT0).status(),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(engine::Renew(r, lease, Seconds(0), "", kT0).status(),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(TransitionsTest, RecoverLeaseRequeuesThenDeadLettersPastTheCap) {
  JobRecord r = RecordIn(JobStatus::kRunning);
  const TimePoint now = r.lease_expires_at;  // Expired at its expiry.
  EXPECT_THAT(engine::RecoverLease(r, 3, now - Duration(1)).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("not expired")));
  r.lease_recoveries = 2;
  JobChange back = engine::RecoverLease(r, 3, now).value();
  EXPECT_EQ(back.record.status, JobStatus::kQueued);
  EXPECT_EQ(back.record.reason, reason::kLeaseExpired);
  EXPECT_EQ(back.record.lease_recoveries, 3);
  EXPECT_EQ(back.record.ready_at, now);
  EXPECT_EQ(back.record.lease_token, "");
  EXPECT_EQ(back.placement, JobPlacement::kReady);
  EXPECT_EQ(back.expect.lease_token, r.lease_token);
  LeaseRecovery report = engine::RecoveryReport(back);
  EXPECT_EQ(report.to, JobStatus::kQueued);
  EXPECT_EQ(report.lease_recoveries, 3);
  EXPECT_EQ(report.job_id, "job_1");

  r.lease_recoveries = 3;
  JobChange dead = engine::RecoverLease(r, 3, now).value();
  EXPECT_EQ(dead.record.status, JobStatus::kDeadLettered);
  EXPECT_EQ(dead.record.reason, reason::kLeaseExpiredRepeatedly);
  ASSERT_TRUE(dead.record.last_failure.has_value());
  EXPECT_THAT(dead.record.last_failure->message, HasSubstr("lease expired 4 times"));
  EXPECT_EQ(dead.placement, JobPlacement::kDeadLettered);
  EXPECT_EQ(dead.record.finished_at, now);
}

TEST(TransitionsTest, ReplayResetsOrExtendsTheBudgetWithAnAudit) {
  JobRecord r = RecordIn(JobStatus::kDeadLettered);
  r.lease_recoveries = 2;
  r.lock_waits = 4;
  r.previous_delay = Seconds(30);
  JobChange reset = engine::Replay(r, kOperator, kT0 + Seconds(5)).value();
  EXPECT_EQ(reset.record.status, JobStatus::kQueued);
  EXPECT_EQ(reset.record.envelope.attempt, 0);
  EXPECT_EQ(reset.record.lease_recoveries, 0);
  EXPECT_EQ(reset.record.lock_waits, 0);
  EXPECT_EQ(reset.record.previous_delay, Duration::zero());
  EXPECT_FALSE(reset.record.finished_at.has_value());
  EXPECT_EQ(reset.record.reason, reason::kReplay);
  ASSERT_EQ(reset.record.audit.size(), 1u);
  EXPECT_THAT(reset.record.audit[0],
              HasSubstr("replay by alice: upstream fixed (attempts reset)"));

  DlqAction extra = kOperator;
  extra.reset_attempts = false;
  extra.extra_attempts = 2;
  extra.ready_at = kT0 + Seconds(60);
  JobChange more = engine::Replay(r, extra, kT0 + Seconds(5)).value();
  EXPECT_EQ(more.record.envelope.attempt, r.envelope.attempt);
  EXPECT_EQ(more.record.envelope.max_attempts, r.envelope.max_attempts + 2);
  EXPECT_EQ(more.record.ready_at, kT0 + Seconds(60));
  EXPECT_EQ(more.placement, JobPlacement::kScheduled);
  EXPECT_THAT(more.record.audit.back(), HasSubstr("(extra_attempts 2)"));
}

// Found by the hostile-input conformance case: an actor of bytes that are
// not UTF-8 ("\xff\xfe\xc3(") was accepted, and the SQLite store's audit
// trail (JSON) kept U+FFFD in their place, so the trail no longer said who
// acted. Such text is refused on every store, before anything changes.
TEST(TransitionsTest, OperatorTextMustBeValidUtf8) {
  const JobRecord dead = RecordIn(JobStatus::kDeadLettered);
  DlqAction bad_actor = kOperator;
  bad_actor.actor = "\xff\xfe\xc3(";
  DlqAction bad_reason = kOperator;
  bad_reason.reason = "ok \xed\xa0\x80";  // A UTF-16 surrogate, encoded.
  EXPECT_THAT(engine::Replay(dead, bad_actor, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_THAT(engine::Discard(dead, bad_reason, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  DlqAction nul_actor = kOperator;
  nul_actor.actor = std::string("ops\0root", 8);  // PostgreSQL's jsonb cannot hold it.
  EXPECT_THAT(engine::Replay(dead, nul_actor, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("NUL")));
  DlqAction accented = kOperator;
  accented.actor = "Zo\xc3\xab";  // "Zoë": UTF-8 is fine.
  accented.reason = "r\xc3\xa9" "essai \xf0\x9f\x94\x81";  // "réessai 🔁"
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange replay, engine::Replay(dead, accented, kT0));
  ASSERT_FALSE(replay.record.audit.empty());
  EXPECT_THAT(replay.record.audit.back(), HasSubstr(" by Zo\xc3\xab: r\xc3\xa9" "essai"));
}

// A handler's error text may quote binary input. It is a diagnostic, kept
// as text every store can hold: PostgreSQL refused a NUL byte, and with it
// the whole outcome, which left the job leased until its lease expired.
TEST(TransitionsTest, AFailureMessageWithNulOrBrokenUtf8IsKeptAsEscapedText) {
  const JobRecord running = RecordIn(JobStatus::kRunning);
  Completion c = To(JobStatus::kRetryScheduled);
  static constexpr char kMessage[] = "bad byte \0 and \xff, caf\xc3\xa9";
  c.failure = Failure{FailureClass::kTransient, std::string("E\0", 2),
                      std::string(kMessage, sizeof kMessage - 1)};
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobChange ch, engine::Complete(DeliveryOf(running), c, kT0));
  ASSERT_TRUE(ch.record.last_failure.has_value());
  EXPECT_EQ(ch.record.last_failure->code, "E\\x00");
  EXPECT_EQ(ch.record.last_failure->message, "bad byte \\x00 and \\xff, caf\\xc3\\xa9");
  // Valid UTF-8 is kept as it is.
  c.failure->message = "caf\xc3\xa9";
  JOBPACT_ASSERT_OK_AND_ASSIGN(ch, engine::Complete(DeliveryOf(running), c, kT0));
  EXPECT_EQ(ch.record.last_failure->message, "caf\xc3\xa9");
}

TEST(TransitionsTest, OperatorActionsNeedWhoAndWhyAndADlqEntry) {
  const JobRecord dead = RecordIn(JobStatus::kDeadLettered);
  DlqAction nobody = kOperator;
  nobody.actor.clear();
  DlqAction no_reason = kOperator;
  no_reason.reason.clear();
  DlqAction negative = kOperator;
  negative.reset_attempts = false;
  negative.extra_attempts = -1;
  EXPECT_THAT(engine::Replay(dead, nobody, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor")));
  EXPECT_THAT(engine::Replay(dead, no_reason, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("reason")));
  EXPECT_THAT(engine::Replay(dead, negative, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(engine::Discard(dead, nobody, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument));
  for (JobStatus s : kAllJobStatuses) {
    if (s == JobStatus::kDeadLettered) continue;
    EXPECT_THAT(engine::Replay(RecordIn(s), kOperator, kT0).status(),
                StatusIs(StatusCode::kNotFound))
        << JobStatusName(s);
    EXPECT_THAT(engine::Discard(RecordIn(s), kOperator, kT0).status(),
                StatusIs(StatusCode::kNotFound))
        << JobStatusName(s);
  }
}

TEST(TransitionsTest, DiscardKeepsWhoAndWhy) {
  JobChange c = engine::Discard(RecordIn(JobStatus::kDeadLettered), kOperator, kT0).value();
  EXPECT_EQ(c.record.status, JobStatus::kDiscarded);
  EXPECT_EQ(c.record.reason, reason::kOperatorDiscard);
  EXPECT_EQ(c.placement, JobPlacement::kFinal);
  ASSERT_EQ(c.record.audit.size(), 1u);
  EXPECT_THAT(c.record.audit[0], HasSubstr("discard by alice: upstream fixed"));
}

TEST(TransitionsTest, CancelDiscardsAWaitingJobAndFlagsARunningOne) {
  for (JobStatus s : {JobStatus::kQueued, JobStatus::kRetryScheduled}) {
    JobChange c = engine::Cancel(RecordIn(s), kOperator, kT0).value();
    EXPECT_EQ(c.record.status, JobStatus::kDiscarded);
    EXPECT_EQ(c.record.reason, reason::kCancelled);
    EXPECT_EQ(c.placement, JobPlacement::kFinal);
    EXPECT_THAT(c.record.audit.back(), HasSubstr("cancel by alice: upstream fixed"));
  }
  const JobRecord running = RecordIn(JobStatus::kRunning);
  JobChange flagged = engine::Cancel(running, kOperator, kT0).value();
  EXPECT_EQ(flagged.record.status, JobStatus::kRunning);
  EXPECT_TRUE(flagged.record.cancel_requested);
  EXPECT_TRUE(flagged.append.empty());
  EXPECT_EQ(flagged.expect.lease_token, running.lease_token);
  EXPECT_EQ(flagged.record.lease_token, running.lease_token);
  EXPECT_THAT(engine::Cancel(RecordIn(JobStatus::kDeadLettered), kOperator, kT0).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("discard it instead")));
  for (JobStatus s : {JobStatus::kSucceeded, JobStatus::kFailed, JobStatus::kDiscarded}) {
    EXPECT_THAT(engine::Cancel(RecordIn(s), kOperator, kT0).status(),
                StatusIs(StatusCode::kFailedPrecondition, HasSubstr("already")));
  }
  // The outcome written after a cancel request clears it.
  Delivery d = DeliveryOf(flagged.record);
  EXPECT_FALSE(engine::Complete(d, To(JobStatus::kDiscarded), kT0).value().record.cancel_requested);
}

TEST(TransitionsTest, NewJobIsQueuedWithItsCreationEntry) {
  Envelope env = MakeEnvelope();
  env.attempt = 9;  // A producer's value is never trusted.
  env.scheduled_at = kT0 - Seconds(30);
  JobChange c = engine::NewJob(env, kT0).value();
  EXPECT_TRUE(c.expect.new_job);
  EXPECT_EQ(c.record.status, JobStatus::kQueued);
  EXPECT_EQ(c.record.envelope.attempt, 0);
  EXPECT_EQ(c.record.envelope.created_at, kT0);
  EXPECT_EQ(c.record.ready_at, kT0);  // Never before the enqueue.
  EXPECT_EQ(c.record.epoch, 0);
  EXPECT_EQ(c.placement, JobPlacement::kReady);
  ASSERT_EQ(c.append.size(), 1u);
  EXPECT_EQ(c.append[0].from, JobStatus::kQueued);
  EXPECT_EQ(c.append[0].to, JobStatus::kQueued);
  EXPECT_EQ(c.append[0].reason, reason::kEnqueued);

  env.scheduled_at = kT0 + Seconds(30);
  EXPECT_EQ(engine::NewJob(env, kT0).value().placement, JobPlacement::kScheduled);
}

TEST(TransitionsTest, NewJobRefusesWhatCouldNotBeReadBack) {
  Envelope no_id = MakeEnvelope();
  no_id.job_id.clear();
  EXPECT_THAT(engine::NewJob(no_id, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("job_id")));
  Envelope bad_tenant = MakeEnvelope();
  bad_tenant.tenant_id = "acme corp";
  EXPECT_THAT(engine::NewJob(bad_tenant, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("tenant_id")));
  Envelope no_queue = MakeEnvelope();
  no_queue.queue.clear();
  EXPECT_THAT(engine::NewJob(no_queue, kT0).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("queue")));
  // The producer's own, looser bounds are not applied again.
  Envelope big = MakeEnvelope();
  big.payload = "\"" + std::string(300 * 1024, 'x') + "\"";
  EXPECT_THAT(engine::NewJob(big, kT0).status(), IsOk());
}

TEST(TransitionsTest, InvalidEnvelopeIsBornDeadLetteredWithItsRawForm) {
  const std::string raw = R"({"job_id":"job_9","job_type":"x","trace_id":"t1","timeout_seconds":-3})";
  EXPECT_EQ(engine::InvalidEnvelopeId(raw), "job_9");
  EXPECT_EQ(engine::InvalidEnvelopeId(R"({"job_id":"bad id"})"), "");
  EXPECT_EQ(engine::InvalidEnvelopeId("not json"), "");
  JobChange c = engine::InvalidEnvelope(raw, {{"timeout_seconds", "must be > 0"}}, "job_9", kT0);
  EXPECT_TRUE(c.expect.new_job);
  EXPECT_EQ(c.record.status, JobStatus::kDeadLettered);
  EXPECT_EQ(c.record.reason, reason::kInvalidEnvelope);
  EXPECT_EQ(c.record.raw_input, raw);
  EXPECT_TRUE(IsQuarantined(c.record));
  EXPECT_EQ(c.record.envelope.job_type, "x");
  EXPECT_EQ(c.record.envelope.trace_id, "t1");
  EXPECT_EQ(c.placement, JobPlacement::kDeadLettered);
  ASSERT_TRUE(c.record.last_failure.has_value());
  EXPECT_EQ(c.record.last_failure->failure_class, FailureClass::kPermanent);
  EXPECT_THAT(c.record.last_failure->message, HasSubstr("timeout_seconds: must be > 0"));
  ASSERT_EQ(c.append.size(), 1u);
  EXPECT_EQ(c.append[0].from, JobStatus::kDeadLettered);
  EXPECT_EQ(c.append[0].to, JobStatus::kDeadLettered);
  // It can be discarded, never replayed.
  EXPECT_THAT(engine::Replay(c.record, kOperator, kT0).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("invalid envelope")));
  EXPECT_THAT(engine::Discard(c.record, kOperator, kT0).status(), IsOk());
}

TEST(TransitionsTest, QuarantineKeepsTheUndecodableRecord) {
  JobChange c = engine::Quarantine("job_5", "{garbage", "envelope does not parse", kT0);
  EXPECT_EQ(c.record.status, JobStatus::kDeadLettered);
  EXPECT_EQ(c.record.reason, kUndecodableRecord);
  EXPECT_EQ(c.record.raw_input, "{garbage");
  EXPECT_THAT(c.record.last_failure->message, HasSubstr("envelope does not parse"));
  EXPECT_THAT(engine::Replay(c.record, kOperator, kT0).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("undecodable")));
}

TEST(TransitionsTest, PlacementFollowsStatusAndReadyTime) {
  for (JobStatus s : kAllJobStatuses) {
    JobRecord r = RecordIn(s);
    r.ready_at = kT0 + Seconds(1);
    const JobPlacement before = PlacementOf(r, kT0);
    const JobPlacement at = PlacementOf(r, kT0 + Seconds(1));
    switch (s) {
      case JobStatus::kQueued:
      case JobStatus::kRetryScheduled:
        EXPECT_EQ(before, JobPlacement::kScheduled);
        EXPECT_EQ(at, JobPlacement::kReady);
        break;
      case JobStatus::kRunning:
        EXPECT_EQ(at, JobPlacement::kLeased);
        break;
      case JobStatus::kDeadLettered:
        EXPECT_EQ(at, JobPlacement::kDeadLettered);
        break;
      default:
        EXPECT_EQ(at, JobPlacement::kFinal);
        break;
    }
  }
  EXPECT_EQ(JobPlacementName(JobPlacement::kDeadLettered), "dead_lettered");
}

TEST(TransitionsTest, HistoryKeepsTheNewestEntriesOnly) {
  std::vector<Transition> history;
  for (std::size_t i = 0; i < kMaxHistory + 10; ++i) {
    AppendHistory(history, {Transition{JobStatus::kQueued, JobStatus::kRunning,
                                       kT0 + Seconds(static_cast<int>(i)), "delivered"}});
  }
  ASSERT_EQ(history.size(), kMaxHistory);
  EXPECT_EQ(history.front().at, kT0 + Seconds(10));
  EXPECT_EQ(history.back().at, kT0 + Seconds(static_cast<int>(kMaxHistory) + 9));
}

// Every member of two records but their histories.
void ExpectSameButHistory(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(SerializeEnvelope(a.envelope), SerializeEnvelope(b.envelope));
  EXPECT_EQ(a.envelope.ttl, b.envelope.ttl);  // Not serialised when expires_at is set.
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.enqueued_at, b.enqueued_at);
  EXPECT_EQ(a.ready_at, b.ready_at);
  EXPECT_EQ(a.updated_at, b.updated_at);
  EXPECT_EQ(a.finished_at, b.finished_at);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.lease_recoveries, b.lease_recoveries);
  EXPECT_EQ(a.lock_waits, b.lock_waits);
  EXPECT_EQ(a.previous_delay, b.previous_delay);
  EXPECT_EQ(a.checkpoint, b.checkpoint);
  ASSERT_EQ(a.last_failure.has_value(), b.last_failure.has_value());
  if (a.last_failure) {
    EXPECT_EQ(a.last_failure->failure_class, b.last_failure->failure_class);
    EXPECT_EQ(a.last_failure->code, b.last_failure->code);
    EXPECT_EQ(a.last_failure->message, b.last_failure->message);
  }
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.result, b.result);
  EXPECT_EQ(a.lease_token, b.lease_token);
  EXPECT_EQ(a.lease_expires_at, b.lease_expires_at);
  EXPECT_EQ(a.raw_input, b.raw_input);
  EXPECT_EQ(a.audit, b.audit);
  EXPECT_EQ(a.cancel_requested, b.cancel_requested);
}

void ExpectSameChange(const JobChange& a, const JobChange& b) {
  ExpectSameButHistory(a.record, b.record);
  EXPECT_EQ(a.record.history.size(), b.record.history.size());
  ASSERT_EQ(a.append.size(), b.append.size());
  for (std::size_t i = 0; i < a.append.size(); ++i) {
    EXPECT_EQ(a.append[i].from, b.append[i].from);
    EXPECT_EQ(a.append[i].to, b.append[i].to);
    EXPECT_EQ(a.append[i].at, b.append[i].at);
    EXPECT_EQ(a.append[i].reason, b.append[i].reason);
  }
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.expect.new_job, b.expect.new_job);
  EXPECT_EQ(a.expect.status, b.expect.status);
  EXPECT_EQ(a.expect.epoch, b.expect.epoch);
  EXPECT_EQ(a.expect.lease_token, b.expect.lease_token);
}

// A record with every member set to something other than its default.
JobRecord FullRecord() {
  JobRecord r = RecordIn(JobStatus::kRunning);
  r.envelope.tenant_id = "acme";
  r.envelope.idempotency_key = "invoice:ord_987";
  r.envelope.lock_key = "order:ord_987";
  r.envelope.dedup_key = "dedup:ord_987";
  r.envelope.trace_id = "trace-1";
  r.envelope.scheduled_at = r.envelope.created_at = kT0 - Seconds(5);
  r.envelope.expires_at = r.envelope.start_by = r.envelope.deadline = kT0 + Seconds(3600);
  r.envelope.ttl = Seconds(60);
  r.envelope.retry_policy = BackoffSpec{};
  r.envelope.queue = "billing";
  r.envelope.priority = 7;
  r.finished_at = kT0 + Seconds(1);
  r.lease_recoveries = 1;
  r.lock_waits = 2;
  r.previous_delay = Seconds(3);
  r.checkpoint = "page=3";
  r.last_failure = Failure{FailureClass::kTransient, "unavailable", "try later"};
  r.reason = "lease_expired";
  r.result = "{}";
  r.history = {Transition{JobStatus::kQueued, JobStatus::kQueued, kT0, "enqueued"},
               Transition{JobStatus::kQueued, JobStatus::kRunning, kT0, "delivered"}};
  r.raw_input = "{raw}";
  r.audit = {"a line"};
  r.cancel_requested = true;
  return r;
}

TEST(TransitionsTest, CopyWithoutHistoryCopiesEveryOtherMember) {
  const JobRecord r = FullRecord();
  JobRecord copy;
  copy.history = r.history;  // Left empty whatever it held.
  CopyWithoutHistory(r, &copy);
  ExpectSameButHistory(copy, r);
  EXPECT_TRUE(copy.history.empty());
}

TEST(TransitionsTest, MovingHistoryAppendsLikeCopying) {
  std::vector<Transition> copied, moved;
  for (std::size_t i = 0; i < kMaxHistory + 3; ++i) {
    const std::vector<Transition> entries{Transition{JobStatus::kQueued, JobStatus::kRunning,
                                                     kT0 + Seconds(static_cast<int>(i)), "delivered"}};
    AppendHistory(copied, entries);
    AppendHistory(moved, std::vector<Transition>(entries));
  }
  ASSERT_EQ(moved.size(), copied.size());
  for (std::size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].at, copied[i].at);
    EXPECT_EQ(moved[i].reason, copied[i].reason);
  }
}

TEST(TransitionsTest, DeliverInPlaceGivesWhatDeliverGives) {
  JobRecord r = FullRecord();
  r.status = JobStatus::kRetryScheduled;
  r.lease_token.clear();
  const JobChange expected = engine::Deliver(r, "w2#1", kT0 + Seconds(1)).value();
  JobRecord stored = r;
  JobChange rest;
  ASSERT_THAT(engine::DeliverInPlace(stored, "w2#1", kT0 + Seconds(1), &rest), IsOk());
  ExpectSameButHistory(stored, expected.record);
  EXPECT_EQ(stored.history.size(), r.history.size());  // Untouched: the entry is in rest.
  rest.record = expected.record;
  ExpectSameChange(rest, expected);
}

TEST(TransitionsTest, DeliverInPlaceLeavesTheRecordAloneOnAnError) {
  JobRecord r = FullRecord();  // Running: cannot be delivered.
  JobRecord stored = r;
  JobChange rest;
  EXPECT_THAT(engine::DeliverInPlace(stored, "w2#1", kT0, &rest),
              StatusIs(StatusCode::kFailedPrecondition));
  ExpectSameButHistory(stored, r);
  EXPECT_TRUE(rest.append.empty());
}

// What a store writing `change` over `stored` holds afterwards, by
// JobChange's rules (the reference for the in-place forms).
JobRecord WrittenOver(const JobRecord& stored, const JobChange& change) {
  JobRecord to = stored;
  const JobRecord& from = change.record;
  to.envelope.attempt = from.envelope.attempt;
  to.envelope.max_attempts = from.envelope.max_attempts;
  to.status = from.status;
  to.enqueued_at = from.enqueued_at;
  to.ready_at = from.ready_at;
  to.updated_at = from.updated_at;
  to.finished_at = from.finished_at;
  to.epoch = from.epoch;
  to.lease_recoveries = from.lease_recoveries;
  to.lock_waits = from.lock_waits;
  to.previous_delay = from.previous_delay;
  if (!from.checkpoint.empty()) to.checkpoint = from.checkpoint;
  to.last_failure = from.last_failure;
  to.reason = from.reason;
  to.result = from.result;
  to.lease_token = from.lease_token;
  to.lease_expires_at = from.lease_expires_at;
  to.raw_input = from.raw_input;
  if (change.expect.status == JobStatus::kRunning) {
    to.cancel_requested = to.cancel_requested || from.cancel_requested;
  } else {
    to.audit = from.audit;
    to.cancel_requested = from.cancel_requested;
  }
  return to;
}

TEST(TransitionsTest, CompleteInPlaceGivesWhatWritingCompletesChangeGives) {
  // The delivered copy is older than the stored record: a heartbeat stored
  // a newer checkpoint, an operator's cancel added an audit line and the
  // cancel request since the delivery.
  JobRecord delivered = FullRecord();
  delivered.cancel_requested = false;
  delivered.audit.clear();
  delivered.checkpoint = "page=1";
  JobRecord stored = delivered;
  stored.checkpoint = "page=3";
  stored.cancel_requested = true;
  stored.audit = {"cancel by bob: wrong order"};
  const Delivery d = DeliveryOf(delivered);

  for (JobStatus to : {JobStatus::kSucceeded, JobStatus::kRetryScheduled, JobStatus::kQueued,
                       JobStatus::kFailed, JobStatus::kDeadLettered, JobStatus::kDiscarded}) {
    for (bool with_checkpoint : {false, true}) {
      for (bool spend : {false, true}) {
        SCOPED_TRACE(std::string(JobStatusName(to)) + (with_checkpoint ? " checkpoint" : "") +
                     (spend ? " spent" : " given back"));
        Completion c = To(to);
        c.spend_attempt = spend;
        c.lock_wait = !spend;
        c.result = "{\"ok\":true}";
        c.failure = Failure{FailureClass::kTransient, "timeout", "slow"};
        c.delay = Seconds(4);
        if (with_checkpoint) c.checkpoint = "page=9";
        const JobChange change = engine::Complete(d, c, kT0 + Seconds(2)).value();
        const JobRecord expected = WrittenOver(stored, change);

        JobRecord in_place = stored;
        JobChange rest;
        ASSERT_THAT(engine::CompleteInPlace(in_place, d.lease, c, kT0 + Seconds(2), &rest),
                    IsOk());
        ExpectSameButHistory(in_place, expected);
        EXPECT_EQ(in_place.history.size(), stored.history.size());  // The entry is in rest.
        rest.record = change.record;
        ExpectSameChange(rest, change);
      }
    }
  }
}

TEST(TransitionsTest, CompleteInPlaceRefusesAStaleLeaseOrAnIllegalTarget) {
  const JobRecord r = FullRecord();
  Lease stale = DeliveryOf(r).lease;
  stale.epoch = r.epoch - 1;
  JobRecord stored = r;
  JobChange rest;
  EXPECT_THAT(engine::CompleteInPlace(stored, stale, To(JobStatus::kSucceeded), kT0, &rest),
              StatusIs(StatusCode::kAborted));
  Lease other_token = DeliveryOf(r).lease;
  other_token.token = "w9#1";
  EXPECT_THAT(engine::CompleteInPlace(stored, other_token, To(JobStatus::kSucceeded), kT0, &rest),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(
      engine::CompleteInPlace(stored, DeliveryOf(r).lease, To(JobStatus::kRunning), kT0, &rest),
      StatusIs(StatusCode::kFailedPrecondition));
  ExpectSameButHistory(stored, r);
  EXPECT_TRUE(rest.append.empty());

  JobRecord done = RecordIn(JobStatus::kSucceeded);
  EXPECT_THAT(engine::CompleteInPlace(done, DeliveryOf(r).lease, To(JobStatus::kSucceeded), kT0,
                                      &rest),
              StatusIs(StatusCode::kAborted));
}

TEST(TransitionsTest, OutParameterFormsGiveTheResultForms) {
  JobRecord r = FullRecord();
  r.cancel_requested = false;
  Completion done = To(JobStatus::kRetryScheduled);
  done.failure = Failure{FailureClass::kTransient, "x", "y"};
  done.delay = Seconds(4);
  JobChange out;
  ASSERT_THAT(engine::Complete(DeliveryOf(r), done, kT0, &out), IsOk());
  ExpectSameChange(out, engine::Complete(DeliveryOf(r), done, kT0).value());
  // The consuming form (the runner hands its delivery over): the same change.
  JobChange consumed;
  ASSERT_THAT(engine::Complete(Delivery(DeliveryOf(r)), done, kT0, &consumed), IsOk());
  ExpectSameChange(consumed, out);
  EXPECT_TRUE(consumed.record.history.empty());

  Envelope env = MakeEnvelope();
  env.dedup_key = "d1";
  env.scheduled_at = kT0 + Seconds(9);
  JobChange job;
  ASSERT_THAT(engine::NewJob(env, kT0, &job), IsOk());
  ExpectSameChange(job, engine::NewJob(env, kT0).value());

  Delivery stale = DeliveryOf(r);
  stale.lease.epoch = 1;
  JobChange refused;
  EXPECT_THAT(engine::Complete(stale, done, kT0, &refused), StatusIs(StatusCode::kAborted));
  // On an error the consuming form leaves the delivery as it was.
  EXPECT_THAT(engine::Complete(std::move(stale), done, kT0, &refused),
              StatusIs(StatusCode::kAborted));
  ExpectSameButHistory(stale.job, r);
  EXPECT_EQ(stale.job.history.size(), r.history.size());
  env.job_id.clear();
  EXPECT_THAT(engine::NewJob(env, kT0, &refused), StatusIs(StatusCode::kInvalidArgument));
}

TEST(TransitionsTest, SameInputsGiveTheSameChange) {
  const JobRecord r = RecordIn(JobStatus::kRunning);
  JobChange a = engine::Complete(DeliveryOf(r), To(JobStatus::kFailed), kT0).value();
  JobChange b = engine::Complete(DeliveryOf(r), To(JobStatus::kFailed), kT0).value();
  EXPECT_EQ(SerializeEnvelope(a.record.envelope), SerializeEnvelope(b.record.envelope));
  EXPECT_EQ(a.record.updated_at, b.record.updated_at);
  EXPECT_EQ(a.append[0].at, b.append[0].at);
}

}  // namespace
}  // namespace jobpact
