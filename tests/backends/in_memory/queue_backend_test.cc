// InMemoryQueueBackend beyond the conformance suite: the store writes a
// change field by field and indexes jobs by views of the stored envelope, so
// these pin that what it keeps is exactly what the engine computed, and that
// the indexes survive the deletion of the job whose strings a key came from.
#include "jobpact/in_memory/queue_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "jobpact/transitions.h"

namespace jobpact {
namespace {

using ::jobpact::testing::IsOk;

Envelope FullEnvelope(std::string id) {
  Envelope env;
  env.job_id = std::move(id);
  env.job_type = "invoice.generate";
  env.tenant_id = "acme-corporation-eu";
  env.payload = R"({"order_id":"ord_000000987","lines":[1,2,3]})";
  env.idempotency_key = "invoice.generate:ord_000000987";
  env.lock_key = "order:ord_000000987";
  env.dedup_key = "invoice.generate:ord_000000987";
  env.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  env.max_attempts = 4;
  env.queue = "billing";
  env.priority = 3;
  return env;
}

class InMemoryQueueBackendTest : public ::testing::Test {
 protected:
  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  InMemoryQueueBackend queue_{clock_};

  Delivery DequeueOne() {
    DequeueRequest req;
    req.worker_id = "a-worker-id-longer-than-sso";
    Result<std::vector<Delivery>> got = queue_.Dequeue(req);
    EXPECT_THAT(got.status(), IsOk());
    EXPECT_EQ(got->size(), 1u);
    return got->front();
  }
};

TEST_F(InMemoryQueueBackendTest, StoresWhatTheEngineComputesForEachChange) {
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_full_record_0001"), {}).status(), IsOk());
  const JobRecord enqueued = queue_.Get("job_full_record_0001").value();

  Delivery d = DequeueOne();
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "transient_failure";
  retry.ready_at = clock_->Now() + Seconds(3);
  retry.delay = Seconds(3);
  retry.failure = Failure{FailureClass::kTransient, "unavailable", "upstream is down for now"};
  retry.checkpoint = "page=4 of a long export";
  const JobChange expected = engine::Complete(d, retry, clock_->Now()).value();
  ASSERT_THAT(queue_.Complete(d, retry), IsOk());

  const JobRecord stored = queue_.Get("job_full_record_0001").value();
  EXPECT_EQ(SerializeEnvelope(stored.envelope), SerializeEnvelope(expected.record.envelope));
  EXPECT_EQ(stored.envelope.attempt, 1);
  EXPECT_EQ(stored.status, JobStatus::kRetryScheduled);
  EXPECT_EQ(stored.ready_at, expected.record.ready_at);
  EXPECT_EQ(stored.updated_at, expected.record.updated_at);
  EXPECT_EQ(stored.epoch, expected.record.epoch);
  EXPECT_EQ(stored.previous_delay, Seconds(3));
  EXPECT_EQ(stored.checkpoint, "page=4 of a long export");
  ASSERT_TRUE(stored.last_failure.has_value());
  EXPECT_EQ(stored.last_failure->message, "upstream is down for now");
  EXPECT_EQ(stored.reason, "transient_failure");
  EXPECT_TRUE(stored.lease_token.empty());
  EXPECT_EQ(stored.lease_expires_at, TimePoint{});
  EXPECT_EQ(stored.enqueued_at, enqueued.enqueued_at);
  ASSERT_EQ(stored.history.size(), 3u);
  EXPECT_EQ(stored.history.back().reason, "transient_failure");

  // A completion without a checkpoint keeps the stored one (JobChange).
  clock_->Advance(Seconds(3));
  Delivery again = DequeueOne();
  Completion ok;
  ok.to = JobStatus::kSucceeded;
  ok.reason = "succeeded";
  ok.result = R"({"invoice":"inv_1"})";
  ASSERT_THAT(queue_.Complete(again, ok), IsOk());
  const JobRecord done = queue_.Get("job_full_record_0001").value();
  EXPECT_EQ(done.checkpoint, "page=4 of a long export");
  EXPECT_EQ(done.result, R"({"invoice":"inv_1"})");
  EXPECT_EQ(done.envelope.attempt, 2);
  EXPECT_EQ(done.finished_at, clock_->Now());
  EXPECT_EQ(done.history.size(), 5u);
}

// The runner hands its delivery over (Complete(Delivery&&)): the store
// completes its own record in place, stores the same as the const& form,
// and leaves the caller's lease and envelope as they were.
TEST_F(InMemoryQueueBackendTest, CompletingAnRvalueStoresTheSameAndGivesTheEnvelopeBack) {
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_rvalue_0001"), {}).status(), IsOk());
  Envelope second = FullEnvelope("job_rvalue_0002");
  second.dedup_key += ":2";  // Not a duplicate of the first.
  ASSERT_THAT(queue_.Enqueue(second, {}).status(), IsOk());
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "lock_busy";
  retry.ready_at = clock_->Now() + Seconds(2);
  retry.delay = Seconds(2);
  retry.spend_attempt = false;  // The engine changes the attempt: it must come back unchanged.
  retry.lock_wait = true;
  retry.checkpoint = "a checkpoint longer than the small buffer";

  Delivery by_ref = DequeueOne();
  ASSERT_THAT(queue_.Complete(by_ref, retry), IsOk());
  Delivery by_value = DequeueOne();
  const Delivery before = by_value;
  QueueBackend& base = queue_;
  ASSERT_THAT(base.Complete(std::move(by_value), retry), IsOk());

  EXPECT_EQ(SerializeEnvelope(by_value.job.envelope), SerializeEnvelope(before.job.envelope));
  EXPECT_EQ(by_value.job.envelope.attempt, before.job.envelope.attempt);
  EXPECT_EQ(by_value.lease.job_id, before.lease.job_id);
  EXPECT_EQ(by_value.lease.token, before.lease.token);
  EXPECT_EQ(by_value.lease.epoch, before.lease.epoch);

  // What a completion writes, of the job completed by reference and of the
  // one completed by value.
  const auto written = [](const JobRecord& r) {
    return std::make_tuple(r.status, r.envelope.attempt, r.lock_waits, r.checkpoint, r.reason,
                           r.ready_at, r.previous_delay, r.epoch, r.lease_token, r.history.size());
  };
  EXPECT_EQ(written(queue_.Get("job_rvalue_0002").value()),
            written(queue_.Get("job_rvalue_0001").value()));

  // A stale completion is refused, and leaves the delivery as it was.
  Delivery stale = before;
  EXPECT_EQ(base.Complete(std::move(stale), retry).code(), StatusCode::kAborted);
  EXPECT_EQ(SerializeEnvelope(stale.job.envelope), SerializeEnvelope(before.job.envelope));
  EXPECT_EQ(stale.job.envelope.attempt, before.job.envelope.attempt);
  EXPECT_EQ(stale.lease.token, before.lease.token);
}

TEST_F(InMemoryQueueBackendTest, DedupKeySurvivesThePurgeOfTheJobItCameFrom) {
  EnqueueOptions no_window;
  no_window.dedup_window = Duration::zero();  // Both are stored.
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_dedup_first_00001"), no_window).status(), IsOk());
  clock_->Advance(Seconds(1));
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_dedup_second_0001"), no_window).status(), IsOk());
  Completion ok;
  ok.to = JobStatus::kSucceeded;
  ok.reason = "succeeded";
  Delivery first = DequeueOne();
  ASSERT_EQ(first.job.envelope.job_id, "job_dedup_first_00001");
  ASSERT_THAT(queue_.Complete(first, ok), IsOk());
  clock_->Advance(Seconds(1));
  ASSERT_EQ(queue_.PurgeFinished(clock_->Now()).value(), 1);

  // The second job still counts for dedup, under the key the first brought.
  const std::string key = FullEnvelope("").dedup_key;
  Delivery second = DequeueOne();
  EXPECT_EQ(queue_.FindDuplicate(key, "someone_else", clock_->Now()).value(),
            "job_dedup_second_0001");
  Result<EnqueueResult> dup = queue_.Enqueue(FullEnvelope("job_dedup_third_00001"), {});
  ASSERT_THAT(dup.status(), IsOk());
  EXPECT_TRUE(dup->duplicate);
  EXPECT_EQ(dup->job_id, "job_dedup_second_0001");
  EXPECT_EQ(queue_.Size(), 1u);
  (void)second;
}

// The lease step notes where it keeps each job (Delivery::store_note), so
// the completion finds the record without a lookup by id. A note is used only
// while it holds: not once an entry was erased since the lease (here the very
// entry it points to: ASan reports the use of the freed entry), and never by
// another store.
TEST_F(InMemoryQueueBackendTest, ACompletionDoesNotUseAStoreNoteAfterAnEntryWasErased) {
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_note_purged_0001"), {}).status(), IsOk());
  const Delivery first = DequeueOne();
  ASSERT_NE(first.store_note.record, nullptr);
  ASSERT_THAT(queue_.ForceExpireLease("job_note_purged_0001"), IsOk());
  ASSERT_THAT(queue_.RecoverExpiredLeases(10).status(), IsOk());
  const Delivery second = DequeueOne();
  ASSERT_EQ(second.store_note.record, first.store_note.record);  // The same entry.
  Completion ok;
  ok.to = JobStatus::kSucceeded;
  ok.reason = "succeeded";
  ASSERT_THAT(queue_.Complete(second, ok), IsOk());
  clock_->Advance(Seconds(1));
  ASSERT_EQ(queue_.PurgeFinished(clock_->Now()).value(), 1);  // Its entry is freed.
  EXPECT_EQ(queue_.Complete(first, ok).code(), StatusCode::kNotFound);
}

TEST_F(InMemoryQueueBackendTest, ACompletionDoesNotUseAnotherStoresNote) {
  // Two stores, each with a job of one id leased by a worker of one name:
  // the same epoch and token. The first store's note must not let the
  // second complete the first store's job.
  InMemoryQueueBackend other(clock_);
  ASSERT_THAT(queue_.Enqueue(FullEnvelope("job_note_shared_0001"), {}).status(), IsOk());
  ASSERT_THAT(other.Enqueue(FullEnvelope("job_note_shared_0001"), {}).status(), IsOk());
  const Delivery here = DequeueOne();
  DequeueRequest req;
  req.worker_id = "a-worker-id-longer-than-sso";
  Result<std::vector<Delivery>> there = other.Dequeue(req);
  ASSERT_THAT(there.status(), IsOk());
  ASSERT_EQ(there->size(), 1u);
  ASSERT_EQ(there->front().lease.token, here.lease.token);
  Completion ok;
  ok.to = JobStatus::kSucceeded;
  ok.reason = "succeeded";
  Completion failed;
  failed.to = JobStatus::kFailed;
  failed.reason = "permanent_failure";
  failed.failure = Failure{FailureClass::kPermanent, "invalid", "bad input"};
  // Same id, epoch and token: other's own record completes, not queue_'s.
  EXPECT_THAT(other.Complete(here, failed), IsOk());
  EXPECT_EQ(queue_.Get("job_note_shared_0001")->status, JobStatus::kRunning);
  EXPECT_EQ(other.Get("job_note_shared_0001")->status, JobStatus::kFailed);
  EXPECT_THAT(queue_.Complete(here, ok), IsOk());
  EXPECT_EQ(queue_.Get("job_note_shared_0001")->status, JobStatus::kSucceeded);
}

// A trim larger than one chunk (FinishedRetention::kTrimChunk jobs per hold
// of the mutex) goes on chunk after chunk to the end, and the trimmed jobs
// leave every index: the store holds exactly the kept ones, a job trimmed
// between a lease and its completion is not found through a stale note,
// and a trimmed dedup key no longer matches.
// A producer's enqueue can land between a leasing caller's clock read and
// its lock: the job is ready a hair after the lease's `now`. The lease
// passes over it (the next one takes it) instead of failing whole, which it
// did ("dequeue_failed ... not ready until", seen by bench/sustained_bench).
TEST_F(InMemoryQueueBackendTest, AJobEnqueuedAfterTheLeasesClockReadWaitsForTheNextLease) {
  Envelope early = FullEnvelope("job_early");
  early.priority = 0;
  PrepareForEnqueue(early, clock_->Now());
  ASSERT_THAT(queue_.Enqueue(early, {}).status(), IsOk());
  const TimePoint t = clock_->Now();
  clock_->Advance(Millis(1));
  Envelope late = FullEnvelope("job_late");  // Priority 3: the head.
  late.dedup_key.clear();
  late.queue = "other";
  PrepareForEnqueue(late, clock_->Now());
  ASSERT_THAT(queue_.Enqueue(late, {}).status(), IsOk());
  clock_->SetTime(t);  // The lease read the clock before that enqueue.
  DequeueRequest req;
  req.worker_id = "w1";
  req.max_jobs = 4;
  Result<std::vector<Delivery>> got = queue_.Dequeue(req);
  ASSERT_THAT(got.status(), IsOk());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].job.envelope.job_id, "job_early");
  clock_->Advance(Millis(1));
  got = queue_.Dequeue(req);
  ASSERT_THAT(got.status(), IsOk());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].job.envelope.job_id, "job_late");
}

TEST_F(InMemoryQueueBackendTest, ATrimOfManyChunksDeletesEverySurplusJob) {
  constexpr int kJobs = 2 * FinishedRetention::kTrimChunk + 500;
  std::vector<Envelope> envs;
  for (int i = 0; i < kJobs; ++i) {
    Envelope env = FullEnvelope("job_chunk_" + std::to_string(100000 + i));
    env.dedup_key = "k" + std::to_string(i);
    envs.push_back(std::move(env));
  }
  ASSERT_THAT(queue_.EnqueueBatch(envs, {}).status(), IsOk());
  Completion ok;
  ok.to = JobStatus::kSucceeded;
  ok.reason = "succeeded";
  DequeueRequest req;
  req.worker_id = "w";
  req.max_jobs = kJobs;
  std::vector<Delivery> ds = queue_.Dequeue(req).value();
  ASSERT_EQ(ds.size(), static_cast<std::size_t>(kJobs));
  for (int i = 0; i + 1 < kJobs; ++i) ASSERT_THAT(queue_.Complete(ds[i], ok), IsOk());
  FinishedRetention keep;
  keep.succeeded = 10;
  ASSERT_EQ(queue_.TrimFinished(keep).value(), kJobs - 1 - 10);
  EXPECT_EQ(queue_.Size(), 11u);                        // The ten newest and the running one.
  EXPECT_THAT(queue_.Complete(ds.back(), ok), IsOk());  // Its note is void: found by id.
  EXPECT_FALSE(queue_.FindDuplicate("k0", "x", TimePoint{}).value().has_value());
  EXPECT_TRUE(
      queue_.FindDuplicate("k" + std::to_string(kJobs - 2), "x", TimePoint{}).value().has_value());
}

}  // namespace
}  // namespace jobpact
