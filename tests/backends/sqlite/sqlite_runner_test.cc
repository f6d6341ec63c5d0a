// The JobRunner on the SQLite bundle: its locks and idempotency claims live
// in the job file, so the runner releases and records them with each
// completion (Completion::guards) instead of in writes of their own. What
// that must not change: a job of the same key right after another still
// finds the lock free and the result recorded (no lock_busy, no
// idempotency_in_progress), and a claim lost while the handler ran still
// fails the attempt instead of acking it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/job_status.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/transition_event.h"
#include "tests/backends/sqlite/sqlite_test_files.h"

namespace jobpact {
namespace sqlite {
namespace {

// Counts the transitions that end a job and wakes a waiter at `want`.
class FinalCounter : public TransitionObserver {
 public:
  void OnTransition(const TransitionEvent& e) override {
    if (!IsFinal(e.to)) return;
    std::lock_guard<std::mutex> l(mu_);
    ++final_;
    cv_.notify_all();
  }
  bool WaitFor(int want) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return final_ >= want; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int final_ = 0;
};

Envelope Job(const std::string& id, const std::string& lock, const std::string& key, TimePoint now) {
  Envelope env;
  env.job_id = id;
  env.job_type = "test.job";
  env.payload = "{}";
  env.lock_key = lock;
  env.idempotency_key = key;
  PrepareForEnqueue(env, now);
  return env;
}

std::string Reasons(const JobRecord& r) {
  std::string out;
  for (const Transition& t : r.history) out += std::string(JobStatusName(t.to)) + ":" + t.reason + " ";
  return out;
}

// One worker, one lease of twelve jobs that all share a lock, in pairs that
// share an idempotency key: each job's lock release and record travel with
// its completion to the writer, and the next job waits for them instead of
// being requeued as lock_busy or idempotency_in_progress.
TEST(SqliteRunnerTest, SameKeyJobsRunBackToBackAsIfReleasedAtOnce) {
  TempDir dir;
  auto clock = SystemClock::Default();
  auto backend = SqliteBackend::Open(dir.File("jobs.db"), {}, clock);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->queue()->CompletesGuards(*(*backend)->locks(), *(*backend)->idempotency()));
  constexpr int kJobs = 12;
  std::vector<Envelope> jobs;
  for (int i = 0; i < kJobs; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "job_%02d", i);
    jobs.push_back(Job(id, "acct:1", "charge:" + std::to_string(i / 2), clock->Now()));
  }
  ASSERT_TRUE((*backend)->queue()->EnqueueBatch(jobs, {}).ok());

  auto finals = std::make_shared<FinalCounter>();
  JobRunnerOptions o;
  o.backend = (*backend)->bundle();
  o.workers = 1;
  o.dequeue_batch = 16;
  o.log_level = LogLevel::kWarn;
  o.transition_observers.push_back(finals);
  auto runner = JobRunner::Create(o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::atomic<int> ran{0};
  ASSERT_TRUE((*runner)->Handle("test.job", [&](JobContext& ctx) {
                          ctx.SetResult("charged");
                          ++ran;
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE((*runner)->Start().ok());
  const bool all = finals->WaitFor(kJobs);
  ASSERT_TRUE((*runner)->Shutdown(Seconds(30)).ok());
  ASSERT_TRUE(all) << "not every job finished within 60 s";

  EXPECT_EQ(ran.load(), kJobs / 2);
  for (const Envelope& env : jobs) {
    auto r = (*backend)->admin()->Get(env.job_id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, JobStatus::kSucceeded) << env.job_id << ": " << Reasons(*r);
    EXPECT_EQ(r->lock_waits, 0) << env.job_id << ": " << Reasons(*r);
    EXPECT_EQ(r->envelope.attempt, 1) << env.job_id << ": " << Reasons(*r);
  }
  auto lock = (*backend)->locks()->Inspect("acct:1");
  ASSERT_TRUE(lock.ok());
  EXPECT_FALSE(lock->has_value()) << "the last job's lock was not released";
  auto rec = (*backend)->idempotency()->Get("charge:5");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ((*rec)->result, "charged");
}

// The handler's claim is taken from it while it runs (here: deleted behind
// the runner's back). The record cannot ride with the ack, so the job is not
// acked as succeeded: the attempt fails as idempotency_record_failed and is
// retried, as when the record was a write of its own.
TEST(SqliteRunnerTest, AClaimLostWhileTheHandlerRanFailsTheAttemptInsteadOfAckingIt) {
  TempDir dir;
  auto clock = std::make_shared<testing::ManualClock>();
  auto backend = SqliteBackend::Open(dir.File("jobs.db"), {}, clock);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->queue()->Enqueue(Job("job_1", "", "charge:1", clock->Now()), {}).ok());

  JobRunnerOptions o;
  o.backend = (*backend)->bundle();
  o.clock = clock;
  o.log_level = LogLevel::kOff;
  auto runner = JobRunner::Create(o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  int runs = 0;
  const std::string path = dir.File("jobs.db");
  ASSERT_TRUE((*runner)->Handle("test.job", [&](JobContext& ctx) {
                          if (++runs == 1) {
                            RawDb raw(path);
                            EXPECT_EQ(raw.Exec("DELETE FROM jobpact_idempotency"), SQLITE_OK);
                          }
                          ctx.SetResult("charged");
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE((*runner)->RunUntilIdle().ok());
  auto r = (*backend)->admin()->Get("job_1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, JobStatus::kRetryScheduled) << Reasons(*r);
  ASSERT_TRUE(r->last_failure.has_value()) << Reasons(*r);
  EXPECT_EQ(r->last_failure->code, reason::kIdempotencyRecordFailed);

  clock->Advance(std::chrono::minutes(10));
  ASSERT_TRUE((*runner)->RunUntilIdle().ok());
  r = (*backend)->admin()->Get("job_1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, JobStatus::kSucceeded) << Reasons(*r);
  EXPECT_EQ(runs, 2);
  auto rec = (*backend)->idempotency()->Get("charge:1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
