// Completion guards (Completion::guards, SPEC 3 step 9): a store that keeps
// the locks and idempotency claims beside its jobs releases the lock and
// records or drops the claim in the completion's own atomic step, with the
// same outcomes as the separate calls made before the ack; a StoreBackend
// that does not refuses a completion that asks for it, and writes nothing.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/store_backend.h"
#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::GuardsContractAnchor() { return 0; }

namespace {

using ::testing::HasSubstr;
using Claim = CompletionGuards::Claim;

// The job's lock and idempotency keys, named after its id.
Envelope Keyed(Envelope env) {
  env.lock_key = "order:" + env.job_id;
  env.idempotency_key = "charge:" + env.job_id;
  return env;
}

// Takes the delivery's lock and claim as the runner does (owner: the lease
// token), for `ttl`.
void Hold(LockStore& locks, IdempotencyStore& idem, const Delivery& d, Duration ttl) {
  const Envelope& env = d.job.envelope;
  EXPECT_THAT(locks.Acquire(env.lock_key, d.lease.token, ttl).status(), IsOk());
  Result<ClaimOutcome> claim = idem.Claim(env.idempotency_key, d.lease.token, ttl);
  ASSERT_THAT(claim.status(), IsOk());
  ASSERT_EQ(claim->kind, ClaimOutcome::Kind::kClaimed);
}

Completion Succeeded(std::string result) {
  Completion c;
  c.reason = "succeeded";
  c.result = std::move(result);
  c.guards.release_lock = true;
  c.guards.claim = Claim::kRecord;
  c.guards.retention = std::chrono::hours(1);
  return c;
}

bool LockFree(LockStore& locks, const std::string& key) {
  Result<std::optional<LockLease>> l = locks.Inspect(key);
  EXPECT_THAT(l.status(), IsOk());
  return l.ok() && !l->has_value();
}

std::optional<IdempotencyRecord> Record(IdempotencyStore& idem, const std::string& key) {
  Result<std::optional<IdempotencyRecord>> r = idem.Get(key);
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? *r : std::nullopt;
}

#define JOBPACT_SKIP_UNLESS_APPLIED()                                     \
  if (!queue_->CompletesGuards(*locks_, *idem_)) {                        \
    GTEST_SKIP() << "this store does not apply completion guards";       \
  }                                                                       \
  static_assert(true, "require a semicolon")

TEST_P(CompletionGuardsContract, ClaimsToApplyThemOnlyForTheStoresBesideItsJobs) {
  InMemoryLockStore other_locks(clock_);
  InMemoryIdempotencyStore other_idem(clock_);
  EXPECT_FALSE(queue_->CompletesGuards(other_locks, other_idem));
  EXPECT_FALSE(queue_->CompletesGuards(other_locks, *idem_));
  EXPECT_FALSE(queue_->CompletesGuards(*locks_, other_idem));
}

TEST_P(CompletionGuardsContract, AStoreThatDoesNotApplyThemRefusesThemAndWritesNothing) {
  if (queue_->CompletesGuards(*locks_, *idem_)) GTEST_SKIP() << "this store applies them";
  if (dynamic_cast<StoreBackend*>(queue_) == nullptr) GTEST_SKIP() << "not a StoreBackend";
  Put(Keyed(MakeJob("job_1")));
  Delivery d1 = TakeOne("job_1");
  Put(Keyed(MakeJob("job_2")));
  Delivery d2 = TakeOne("job_2");
  Hold(*locks_, *idem_, d1, Seconds(45));

  Status s = queue_->Complete(d1, Succeeded("r1"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("guards"));
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kRunning);
  EXPECT_FALSE(LockFree(*locks_, "order:job_1"));
  std::optional<IdempotencyRecord> rec = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, IdempotencyRecord::State::kInProgress);

  // In a batch, refused alone.
  std::vector<Status> out = queue_->CompleteBatch(
      {CompletionRequest{d1, Succeeded("r1")},
       CompletionRequest{d2, Outcome(JobStatus::kSucceeded, "succeeded")}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].code(), StatusCode::kFailedPrecondition) << out[0];
  EXPECT_THAT(out[1], IsOk());
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kRunning);
  EXPECT_EQ(MustGet("job_2").status, JobStatus::kSucceeded);
}

TEST_P(CompletionGuardsContract, SuccessReleasesTheLockAndRecordsTheResult) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  Put(Keyed(MakeJob("job_1")));
  Delivery d = TakeOne("job_1");
  Hold(*locks_, *idem_, d, Seconds(45));
  EXPECT_THAT(queue_->Complete(d, Succeeded("inv_1")), IsOk());
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kSucceeded);
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  std::optional<IdempotencyRecord> rec = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(rec->result, "inv_1");
  EXPECT_EQ(rec->owner, d.lease.token);
  EXPECT_EQ(rec->expires_at, Now() + std::chrono::hours(1));
  // A later job with the key finds the result.
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome again, idem_->Claim("charge:job_1", "w9", Seconds(45)));
  EXPECT_EQ(again.kind, ClaimOutcome::Kind::kCompleted);
}

// The effect happened: a completion refused as stale still records it (so a
// redelivery is skipped) and gives the lock back, as the separate record
// before the ack and release did.
TEST_P(CompletionGuardsContract, AStaleCompletionStillRecordsTheResultAndReleasesTheLock) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  Put(Keyed(MakeJob("job_1")));
  Delivery d = TakeOne("job_1");
  Hold(*locks_, *idem_, d, Seconds(120));
  Advance(Seconds(46));  // Past the 45 s lease, not the guards.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> rec, queue_->RecoverExpiredLeases(3));
  ASSERT_EQ(rec.size(), 1u);

  Status s = queue_->Complete(d, Succeeded("inv_1"));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kQueued);
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  std::optional<IdempotencyRecord> r = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(r->result, "inv_1");
}

// A claim that expired while the handler ran and was taken by another
// delivery cannot be recorded: the job is not acked (still running, for the
// runner to write a failed attempt), the lock is still released, and the
// other owner's claim is left alone.
TEST_P(CompletionGuardsContract, AClaimNoLongerHeldStopsTheAckButNotTheLockRelease) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  Put(Keyed(MakeJob("job_1")));
  Delivery d = TakeOne("job_1");
  Hold(*locks_, *idem_, d, Seconds(5));
  Advance(Seconds(6));
  EXPECT_THAT(locks_->Acquire("order:job_1", d.lease.token, Seconds(30)).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome other, idem_->Claim("charge:job_1", "w9", Seconds(30)));
  ASSERT_EQ(other.kind, ClaimOutcome::Kind::kClaimed);

  Status s = queue_->Complete(d, Succeeded("inv_1"));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("charge:job_1"));
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kRunning);
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  std::optional<IdempotencyRecord> r = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->state, IdempotencyRecord::State::kInProgress);
  EXPECT_EQ(r->owner, "w9");
}

TEST_P(CompletionGuardsContract, AFailedAttemptReleasesTheClaimForTheRetry) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  Put(Keyed(MakeJob("job_1")));
  Delivery d = TakeOne("job_1");
  Hold(*locks_, *idem_, d, Seconds(45));
  Completion retry = Outcome(JobStatus::kRetryScheduled, "transient_error");
  retry.ready_at = Now() + Seconds(1);
  retry.delay = Seconds(1);
  retry.failure = Failure{FailureClass::kTransient, "timeout", "upstream timed out"};
  retry.guards.release_lock = true;
  retry.guards.claim = Claim::kRelease;
  EXPECT_THAT(queue_->Complete(d, retry), IsOk());
  EXPECT_EQ(MustGet("job_1").status, JobStatus::kRetryScheduled);
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  EXPECT_FALSE(Record(*idem_, "charge:job_1").has_value());
}

TEST_P(CompletionGuardsContract, ABatchAppliesTheGuardsOfEachCompletion) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  Put(Keyed(MakeJob("job_1")));
  Delivery d1 = TakeOne("job_1");
  Put(Keyed(MakeJob("job_2")));
  Delivery d2 = TakeOne("job_2");
  Hold(*locks_, *idem_, d1, Seconds(45));
  Hold(*locks_, *idem_, d2, Seconds(45));
  Completion failed = Outcome(JobStatus::kFailed, "permanent_error");
  failed.failure = Failure{FailureClass::kPermanent, "bad_card", "card declined"};
  failed.guards.release_lock = true;
  failed.guards.claim = Claim::kRelease;
  std::vector<Status> out = queue_->CompleteBatch(
      {CompletionRequest{d1, Succeeded("inv_1")}, CompletionRequest{d2, failed}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0], IsOk());
  EXPECT_THAT(out[1], IsOk());
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  EXPECT_TRUE(LockFree(*locks_, "order:job_2"));
  std::optional<IdempotencyRecord> r = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->state, IdempotencyRecord::State::kCompleted);
  EXPECT_FALSE(Record(*idem_, "charge:job_2").has_value());
}

// Steps 5 and 6 in one write: the same outcomes as Acquire then Claim.
TEST_P(CompletionGuardsContract, AcquireLockAndClaimGivesWhatTheTwoCallsWouldGive) {
  if (!queue_->CompletesGuards(*locks_, *idem_)) {
    ClaimOutcome unused;
    EXPECT_EQ(queue_->AcquireLockAndClaim("order:1", "charge:1", "w1", Seconds(30), &unused)
                  .status()
                  .code(),
              StatusCode::kUnimplemented);
    return;
  }
  // Both free: both taken.
  ClaimOutcome claim;
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      LockLease lease, queue_->AcquireLockAndClaim("order:1", "charge:1", "w1", Seconds(30), &claim));
  EXPECT_EQ(lease.owner, "w1");
  EXPECT_EQ(lease.expires_at, Now() + Seconds(30));
  EXPECT_EQ(claim.kind, ClaimOutcome::Kind::kClaimed);
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease other, locks_->Acquire("order:2", "w2", Seconds(30)));
  EXPECT_GT(other.fencing_token, lease.fencing_token);

  // The lock busy: kAborted naming the holder, and the claim not touched.
  ClaimOutcome untouched;
  Result<LockLease> busy =
      queue_->AcquireLockAndClaim("order:1", "charge:9", "w2", Seconds(30), &untouched);
  EXPECT_EQ(busy.status().code(), StatusCode::kAborted) << busy.status();
  EXPECT_THAT(busy.status().message(), HasSubstr("w1"));
  EXPECT_FALSE(Record(*idem_, "charge:9").has_value());

  // The lock free, the key in progress elsewhere or completed: as Claim says.
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      LockLease l3, queue_->AcquireLockAndClaim("order:3", "charge:1", "w3", Seconds(30), &claim));
  EXPECT_EQ(l3.owner, "w3");
  EXPECT_EQ(claim.kind, ClaimOutcome::Kind::kInProgress);
  EXPECT_EQ(claim.record.owner, "w1");
  EXPECT_THAT(idem_->Complete("charge:1", "w1", "done", std::chrono::hours(1)), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      LockLease l4, queue_->AcquireLockAndClaim("order:4", "charge:1", "w4", Seconds(30), &claim));
  EXPECT_EQ(l4.owner, "w4");
  EXPECT_EQ(claim.kind, ClaimOutcome::Kind::kCompleted);
  EXPECT_EQ(claim.record.result, "done");

  // Bad input is refused before any write.
  EXPECT_EQ(queue_->AcquireLockAndClaim("", "charge:5", "w5", Seconds(30), &claim).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(queue_->AcquireLockAndClaim("order:5", "", "w5", Seconds(30), &claim).status().code(),
            StatusCode::kInvalidArgument);
}

// Steps 5 and 6 in the lease step (DequeueRequest::take_guards): each
// leased job's lock and claim, owned by its lease token until its lease
// expires, as Acquire and a claim answered kClaimed would leave them.
TEST_P(CompletionGuardsContract, TheLeaseStepTakesTheGuardsOfEachLeasedJob) {
  Envelope both = Keyed(MakeJob("job_1"));
  Envelope claim_only = MakeJob("job_2");
  claim_only.idempotency_key = "charge:job_2";
  Envelope lock_only = MakeJob("job_3");
  lock_only.lock_key = "order:job_3";
  Put(both);
  Put(claim_only);
  Put(lock_only);
  Put(MakeJob("job_4"));
  DequeueRequest req;
  req.max_jobs = 4;
  req.take_guards = true;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> ds, queue_->Dequeue(req));
  ASSERT_EQ(ds.size(), 4u);
  if (!queue_->CompletesGuards(*locks_, *idem_)) {
    // A store that keeps no guards beside its jobs takes none.
    for (const Delivery& d : ds) EXPECT_FALSE(d.guards_taken) << d.job.envelope.job_id;
    EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
    EXPECT_FALSE(Record(*idem_, "charge:job_1").has_value());
    return;
  }
  std::map<std::string, Delivery> by_id;
  for (Delivery& d : ds) by_id[d.job.envelope.job_id] = d;
  const Delivery& d1 = by_id["job_1"];
  const Delivery& d2 = by_id["job_2"];
  const Delivery& d3 = by_id["job_3"];
  EXPECT_TRUE(d1.guards_taken);
  EXPECT_TRUE(d2.guards_taken);
  EXPECT_TRUE(d3.guards_taken);
  EXPECT_FALSE(by_id["job_4"].guards_taken);  // Nothing to take.
  for (const Delivery* d : {&d1, &d3}) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> lock,
                                 locks_->Inspect(d->job.envelope.lock_key));
    ASSERT_TRUE(lock.has_value()) << d->job.envelope.job_id;
    EXPECT_EQ(lock->owner, d->lease.token);
    EXPECT_EQ(lock->fencing_token, d->fencing_token);
    EXPECT_EQ(lock->expires_at, d->lease.expires_at);
  }
  EXPECT_NE(d1.fencing_token, d3.fencing_token);
  for (const Delivery* d : {&d1, &d2}) {
    std::optional<IdempotencyRecord> rec = Record(*idem_, d->job.envelope.idempotency_key);
    ASSERT_TRUE(rec.has_value()) << d->job.envelope.job_id;
    EXPECT_EQ(rec->state, IdempotencyRecord::State::kInProgress);
    EXPECT_EQ(rec->owner, d->lease.token);
    EXPECT_EQ(rec->expires_at, d->lease.expires_at);
  }
  EXPECT_FALSE(Record(*idem_, "charge:job_3").has_value());
  // Fencing tokens still grow past the ones the lease step gave.
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease later, locks_->Acquire("order:9", "w9", Seconds(30)));
  EXPECT_GT(later.fencing_token, std::max(d1.fencing_token, d3.fencing_token));
  // They are the delivery's own: renewed by its token, given back with its
  // completion.
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease renewed,
                               locks_->Renew("order:job_1", d1.lease.token, Seconds(60)));
  EXPECT_EQ(renewed.fencing_token, d1.fencing_token);
  EXPECT_THAT(idem_->Extend("charge:job_1", d1.lease.token, Seconds(60)), IsOk());
  EXPECT_THAT(queue_->Complete(d1, Succeeded("inv_1")), IsOk());
  EXPECT_TRUE(LockFree(*locks_, "order:job_1"));
  std::optional<IdempotencyRecord> done = Record(*idem_, "charge:job_1");
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(done->result, "inv_1");

  // Not asked: not taken.
  Put(Keyed(MakeJob("job_5")));
  req.take_guards = false;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> unasked, queue_->Dequeue(req));
  ASSERT_EQ(unasked.size(), 1u);
  EXPECT_FALSE(unasked[0].guards_taken);
  EXPECT_TRUE(LockFree(*locks_, "order:job_5"));
  EXPECT_FALSE(Record(*idem_, "charge:job_5").has_value());
}

// Both or neither: a busy lock, a key claimed elsewhere or completed, or a
// duplicate leaves the job's guards untaken and unwritten, for the caller to
// take the usual way (and hear why).
TEST_P(CompletionGuardsContract, TheLeaseStepTakesNeitherGuardWhenEitherIsUnavailable) {
  JOBPACT_SKIP_UNLESS_APPLIED();
  ASSERT_THAT(locks_->Acquire("order:job_1", "other", Seconds(30)).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome c2, idem_->Claim("charge:job_2", "other", Seconds(30)));
  ASSERT_EQ(c2.kind, ClaimOutcome::Kind::kClaimed);
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome c3, idem_->Claim("charge:job_3", "other", Seconds(30)));
  ASSERT_EQ(c3.kind, ClaimOutcome::Kind::kClaimed);
  ASSERT_THAT(idem_->Complete("charge:job_3", "other", "done", std::chrono::hours(1)), IsOk());
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  for (const char* id : {"job_1", "job_2", "job_3", "job_4", "job_5", "job_6", "job_7"}) {
    Envelope e = Keyed(MakeJob(id));
    const std::string sid = id;
    if (sid == "job_4" || sid == "job_5") e.lock_key = "order:shared";
    if (sid == "job_6" || sid == "job_7") e.dedup_key = "k";
    ASSERT_THAT(queue_->Enqueue(e, no_dedup).status(), IsOk());
  }
  DequeueRequest req;
  req.max_jobs = 7;
  req.take_guards = true;
  req.dedup_window = Seconds(10);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> ds, queue_->Dequeue(req));
  ASSERT_EQ(ds.size(), 7u);
  std::map<std::string, Delivery> by_id;
  for (Delivery& d : ds) by_id[d.job.envelope.job_id] = d;

  // The lock busy: the claim is not taken.
  EXPECT_FALSE(by_id["job_1"].guards_taken);
  EXPECT_FALSE(Record(*idem_, "charge:job_1").has_value());
  // The key claimed elsewhere, or completed: the lock is not taken.
  EXPECT_FALSE(by_id["job_2"].guards_taken);
  EXPECT_TRUE(LockFree(*locks_, "order:job_2"));
  EXPECT_EQ(Record(*idem_, "charge:job_2")->owner, "other");
  EXPECT_FALSE(by_id["job_3"].guards_taken);
  EXPECT_TRUE(LockFree(*locks_, "order:job_3"));
  EXPECT_EQ(Record(*idem_, "charge:job_3")->state, IdempotencyRecord::State::kCompleted);
  // Two jobs of one lock in one step: the first takes it, the second
  // takes nothing (not even its own free claim).
  const bool first4 = by_id["job_4"].guards_taken;
  const Delivery& taker = by_id[first4 ? "job_4" : "job_5"];
  const Delivery& loser = by_id[first4 ? "job_5" : "job_4"];
  EXPECT_TRUE(taker.guards_taken);
  EXPECT_FALSE(loser.guards_taken);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> shared, locks_->Inspect("order:shared"));
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->owner, taker.lease.token);
  EXPECT_FALSE(Record(*idem_, loser.job.envelope.idempotency_key).has_value());
  // A duplicate goes no further than step 4: nothing taken for it.
  const Delivery& d6 = by_id["job_6"];
  const Delivery& d7 = by_id["job_7"];
  if (d6.dedup_checked) {
    const Delivery& dup = d6.duplicate_of.empty() ? d7 : d6;
    const Delivery& orig = d6.duplicate_of.empty() ? d6 : d7;
    ASSERT_FALSE(dup.duplicate_of.empty());
    EXPECT_FALSE(dup.guards_taken);
    EXPECT_TRUE(LockFree(*locks_, dup.job.envelope.lock_key));
    EXPECT_FALSE(Record(*idem_, dup.job.envelope.idempotency_key).has_value());
    EXPECT_TRUE(orig.guards_taken);
  }
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
