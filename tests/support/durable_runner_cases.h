// The JobRunner on a durable store that processes share (SQLite,
// PostgreSQL), checked the same way on each:
//   - its locks and idempotency claims live beside its jobs
//     (QueueBackend::CompletesGuards), so the runner releases and records
//     them with each completion (Completion::guards) instead of in writes of
//     their own. What that must not change: a job of the same key right
//     after another still finds the lock free and the result recorded (no
//     lock_busy, no idempotency_in_progress), and a claim lost while the
//     handler ran still fails the attempt instead of acking it;
//   - its idle workers are woken by other processes' enqueues
//     (QueueBackend::WaitForWork): one worker per wake-up, not all of them,
//     and a worker whose lease came back full wakes the next;
//   - its lease answers the delivery-time dedup check (DequeueRequest::
//     dedup_window), sparing the worker a FindDuplicate per job (the
//     contract suite checks the answers of a store that gives them; this,
//     that these stores give them);
//   - its lease takes each job's lock and claim (DequeueRequest::
//     take_guards), sparing the worker a write per keyed job: the handler
//     still runs holding both, a delivery that waits renews them with its
//     lease, and shutdown gives back those of jobs that never started.
// Header-only: each backend's test program calls these from a TEST of its
// own, with its way of opening a store.
#ifndef JOBPACT_TESTS_SUPPORT_DURABLE_RUNNER_CASES_H_
#define JOBPACT_TESTS_SUPPORT_DURABLE_RUNNER_CASES_H_

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend_wrapper.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/transition_event.h"

namespace jobpact {
namespace durable_runner_testing {

// How a backend's test reaches a fresh, empty store.
struct StoreTarget {
  // Opens the store on `clock`; each call of one test opens the same store
  // anew, as another process would (a bundle of its own).
  std::function<Result<BackendBundle>(std::shared_ptr<Clock> clock)> open;
  // Deletes every idempotency record behind the runner's back (the
  // backend's own SQL), from inside a handler.
  std::function<void()> drop_claims;
};

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

inline Envelope GuardedJob(const std::string& id, const std::string& lock, const std::string& key,
                           TimePoint now) {
  Envelope env;
  env.job_id = id;
  env.job_type = "test.job";
  env.payload = "{}";
  env.lock_key = lock;
  env.idempotency_key = key;
  PrepareForEnqueue(env, now);
  return env;
}

inline std::string Reasons(const JobRecord& r) {
  std::string out;
  for (const Transition& t : r.history) out += std::string(JobStatusName(t.to)) + ":" + t.reason + " ";
  return out;
}

// One worker, one lease of twelve jobs that all share a lock, in pairs that
// share an idempotency key: each job's lock release and record travel with
// its completion to the writer, and the next job waits for them instead of
// being requeued as lock_busy or idempotency_in_progress.
inline void ExpectSameKeyJobsRunBackToBack(const StoreTarget& target) {
  auto clock = SystemClock::Default();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const BackendBundle& b = *opened;
  ASSERT_TRUE(b.queue->CompletesGuards(*b.locks, *b.idempotency));
  constexpr int kJobs = 12;
  std::vector<Envelope> jobs;
  for (int i = 0; i < kJobs; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "job_%02d", i);
    jobs.push_back(GuardedJob(id, "acct:1", "charge:" + std::to_string(i / 2), clock->Now()));
  }
  ASSERT_TRUE(b.queue->EnqueueBatch(jobs, {}).ok());

  auto finals = std::make_shared<FinalCounter>();
  JobRunnerOptions o;
  o.backend = b;
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
    auto r = b.admin->Get(env.job_id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, JobStatus::kSucceeded) << env.job_id << ": " << Reasons(*r);
    EXPECT_EQ(r->lock_waits, 0) << env.job_id << ": " << Reasons(*r);
    EXPECT_EQ(r->envelope.attempt, 1) << env.job_id << ": " << Reasons(*r);
  }
  auto lock = b.locks->Inspect("acct:1");
  ASSERT_TRUE(lock.ok());
  EXPECT_FALSE(lock->has_value()) << "the last job's lock was not released";
  auto rec = b.idempotency->Get("charge:5");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ((*rec)->result, "charged");
}

// The handler's claim is taken from it while it runs (deleted behind the
// runner's back). The record cannot ride with the ack, so the job is not
// acked as succeeded: the attempt fails as idempotency_record_failed and is
// retried, as when the record was a write of its own.
inline void ExpectAClaimLostFailsTheAttemptInsteadOfAckingIt(const StoreTarget& target) {
  auto clock = std::make_shared<testing::ManualClock>();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const BackendBundle& b = *opened;
  ASSERT_TRUE(b.queue->Enqueue(GuardedJob("job_1", "", "charge:1", clock->Now()), {}).ok());

  JobRunnerOptions o;
  o.backend = b;
  o.clock = clock;
  o.log_level = LogLevel::kOff;
  auto runner = JobRunner::Create(o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  int runs = 0;
  ASSERT_TRUE((*runner)->Handle("test.job", [&](JobContext& ctx) {
                          if (++runs == 1) target.drop_claims();
                          ctx.SetResult("charged");
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE((*runner)->RunUntilIdle().ok());
  auto r = b.admin->Get("job_1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, JobStatus::kRetryScheduled) << Reasons(*r);
  ASSERT_TRUE(r->last_failure.has_value()) << Reasons(*r);
  EXPECT_EQ(r->last_failure->code, reason::kIdempotencyRecordFailed);

  clock->Advance(std::chrono::minutes(10));
  ASSERT_TRUE((*runner)->RunUntilIdle().ok());
  r = b.admin->Get("job_1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, JobStatus::kSucceeded) << Reasons(*r);
  EXPECT_EQ(runs, 2);
  auto rec = b.idempotency->Get("charge:1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
}

// Counts the runner's Dequeue calls.
class DequeueCounter : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  std::atomic<int> dequeues{0};

  // Waits until no Dequeue came for 300 ms (the workers are idle), up to
  // 15 s; the count then.
  int Settled() {
    int last = -1;
    for (int i = 0; i < 50 && dequeues.load() != last; ++i) {
      last = dequeues.load();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return dequeues.load();
  }

 protected:
  Status Intercept(QueueMethod m, const std::function<Status()>& call) override {
    if (m == QueueMethod::kDequeue) ++dequeues;
    return call();
  }
};

// A runner of four idle workers, leases of `batch`, polling only once an
// hour: only the store's wake-ups bring them. Jobs come from `producer`,
// a bundle of its own, as from another process.
struct IdleRunner {
  std::shared_ptr<DequeueCounter> counted;
  std::unique_ptr<JobRunner> runner;
  BackendBundle producer;
};

inline IdleRunner StartIdleRunner(const StoreTarget& target, int batch,
                                  const std::function<Status(JobContext&)>& handler) {
  IdleRunner out;
  Result<BackendBundle> b = target.open(SystemClock::Default());
  Result<BackendBundle> producer = target.open(SystemClock::Default());
  EXPECT_TRUE(b.ok() && producer.ok());
  if (!b.ok() || !producer.ok()) return out;
  out.producer = *producer;
  out.counted = std::make_shared<DequeueCounter>(b->queue);
  b->queue = out.counted;
  JobRunnerOptions o;
  o.backend = *b;
  o.workers = 4;
  o.dequeue_batch = batch;
  o.poll_interval = std::chrono::hours(1);
  o.log_level = LogLevel::kWarn;
  auto runner = JobRunner::Create(o);
  EXPECT_TRUE(runner.ok()) << runner.status();
  if (!runner.ok()) return out;
  out.runner = std::move(*runner);
  EXPECT_TRUE(out.runner->Handle("test.job", handler).ok());
  EXPECT_TRUE(out.runner->Start().ok());
  return out;
}

// One job enqueued by another process: one idle worker leases it (and
// looks once more after it), not all four (a herd of lease transactions of
// which three find nothing). For a store whose wake-ups are enqueues only
// (PostgreSQL's NOTIFY; SQLite's watch wakes on every commit to the file).
inline void ExpectAWakeUpBringsOneIdleWorkerNotAll(const StoreTarget& target) {
  std::atomic<int> ran{0};
  IdleRunner r = StartIdleRunner(target, 2, [&](JobContext&) {
    ++ran;
    return Status::Ok();
  });
  ASSERT_NE(r.runner, nullptr);
  const int before = r.counted->Settled();
  ASSERT_TRUE(
      r.producer.queue->Enqueue(GuardedJob("job_1", "", "", SystemClock::Default()->Now()), {}).ok());
  const int after = r.counted->Settled();
  ASSERT_TRUE(r.runner->Shutdown(Seconds(10)).ok());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_LE(after - before, 2) << "Dequeue calls for one job; a herd makes one per idle worker";
}

// Eight jobs enqueued at once by another process, leases of two: the worker
// woken leases a full batch and wakes the next, and so on, so all four run
// at once (each handler waits until four run, or 20 s).
inline void ExpectAFullLeaseWakesTheNextIdleWorker(const StoreTarget& target) {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  int most = 0;
  IdleRunner r = StartIdleRunner(target, 2, [&](JobContext&) {
    std::unique_lock<std::mutex> l(mu);
    most = std::max(most, ++running);
    cv.notify_all();
    cv.wait_for(l, std::chrono::seconds(20), [&] { return most >= 4; });
    --running;
    return Status::Ok();
  });
  ASSERT_NE(r.runner, nullptr);
  r.counted->Settled();
  std::vector<Envelope> jobs;
  for (int i = 0; i < 8; ++i) {
    jobs.push_back(GuardedJob("job_" + std::to_string(i), "", "", SystemClock::Default()->Now()));
  }
  ASSERT_TRUE(r.producer.queue->EnqueueBatch(jobs, {}).ok());
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(20), [&] { return most >= 4; });
  }
  ASSERT_TRUE(r.runner->Shutdown(Seconds(30)).ok());
  EXPECT_EQ(most, 4) << "workers running at once";
}

// The lease step answers the dedup check in rounds: a job leased by an
// earlier Dequeue, one earlier in the same Dequeue, and a succeeded one are
// each found.
inline void ExpectTheLeaseStepAnswersTheDedupCheck(const StoreTarget& target) {
  auto clock = SystemClock::Default();
  Result<BackendBundle> b = target.open(clock);
  ASSERT_TRUE(b.ok()) << b.status();
  QueueBackend& q = *b->queue;
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  for (const char* id : {"job_1", "job_2", "job_3", "job_4"}) {
    Envelope e = GuardedJob(id, "", "", clock->Now());
    e.dedup_key = std::string(id) == "job_4" ? "other" : "k";
    ASSERT_TRUE(q.Enqueue(e, no_dedup).ok());
  }
  DequeueRequest req;
  req.worker_id = "w1";
  req.dedup_window = Seconds(60);
  req.max_jobs = 1;
  auto first = q.Dequeue(req);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_TRUE((*first)[0].dedup_checked);
  EXPECT_EQ((*first)[0].duplicate_of, "");
  req.max_jobs = 3;
  auto rest = q.Dequeue(req);
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), 3u);
  for (const Delivery& d : *rest) EXPECT_TRUE(d.dedup_checked) << d.job.envelope.job_id;
  EXPECT_EQ((*rest)[0].duplicate_of, "job_1");
  EXPECT_EQ((*rest)[1].duplicate_of, "job_1");
  EXPECT_EQ((*rest)[2].duplicate_of, "");
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  ASSERT_TRUE(q.Complete((*first)[0], done).ok());
  ASSERT_TRUE(q.Complete((*rest)[0], done).ok());
  ASSERT_TRUE(q.Complete((*rest)[1], done).ok());
  Envelope again = GuardedJob("job_5", "", "", clock->Now());
  again.dedup_key = "k";
  ASSERT_TRUE(q.Enqueue(again, no_dedup).ok());
  auto fifth = q.Dequeue(req);
  ASSERT_TRUE(fifth.ok()) << fifth.status();
  ASSERT_EQ(fifth->size(), 1u);
  EXPECT_TRUE((*fifth)[0].dedup_checked);
  EXPECT_EQ((*fifth)[0].duplicate_of, "job_1");
}

// Counts the runner's calls of AcquireLockAndClaim (SPEC 3 steps 5 and 6
// in one write of their own).
class GuardCallCounter : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  std::atomic<int> lock_and_claims{0};

  Result<LockLease> AcquireLockAndClaim(std::string_view lock_key, std::string_view idempotency_key,
                                        std::string_view owner, Duration ttl,
                                        ClaimOutcome* claim) override {
    ++lock_and_claims;
    return QueueBackendWrapper::AcquireLockAndClaim(lock_key, idempotency_key, owner, ttl, claim);
  }
};

// Jobs job_<i> with lock key order:<i> and idempotency key charge:<i>, for
// i in [first, last], enqueued in one batch.
inline std::vector<Envelope> EnqueueKeyedJobs(const BackendBundle& b, int first, int last,
                                              TimePoint now) {
  std::vector<Envelope> jobs;
  for (int i = first; i <= last; ++i) {
    const std::string n = std::to_string(i);
    jobs.push_back(GuardedJob("job_" + n, "order:" + n, "charge:" + n, now));
  }
  EXPECT_TRUE(b.queue->EnqueueBatch(jobs, {}).ok());
  return jobs;
}

// Each of `jobs` succeeded, and its lock was released.
inline void ExpectSucceededWithLocksFree(const BackendBundle& b, const std::vector<Envelope>& jobs) {
  for (const Envelope& env : jobs) {
    auto r = b.admin->Get(env.job_id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, JobStatus::kSucceeded) << env.job_id << ": " << Reasons(*r);
    auto lock = b.locks->Inspect(env.lock_key);
    ASSERT_TRUE(lock.ok());
    EXPECT_FALSE(lock->has_value()) << env.lock_key << " was not released";
  }
}

// A runner on `b` for RunUntilIdle on a manual clock, leases of `batch`.
inline std::unique_ptr<JobRunner> ManualClockRunner(const BackendBundle& b,
                                                    std::shared_ptr<Clock> clock, int batch) {
  JobRunnerOptions o;
  o.backend = b;
  o.clock = std::move(clock);
  o.dequeue_batch = batch;
  o.log_level = LogLevel::kOff;
  auto runner = JobRunner::Create(o);
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? std::move(*runner) : nullptr;
}

// The lease step takes each job's lock and claim (DequeueRequest::
// take_guards): the runner writes nothing of its own for them, the handler
// runs holding both (the lock's fencing token is its context's), and each
// job still ends with its lock released and its result recorded.
inline void ExpectTheLeaseStepTakesTheGuardsTheRunnerNeeds(const StoreTarget& target) {
  auto clock = std::make_shared<testing::ManualClock>();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BackendBundle b = *opened;
  auto counted = std::make_shared<GuardCallCounter>(b.queue);
  b.queue = counted;
  constexpr int kJobs = 6;
  const std::vector<Envelope> jobs = EnqueueKeyedJobs(b, 1, kJobs, clock->Now());
  std::unique_ptr<JobRunner> runner = ManualClockRunner(b, clock, 8);
  ASSERT_NE(runner, nullptr);
  int held = 0;
  ASSERT_TRUE(runner->Handle("test.job", [&](JobContext& ctx) {
                          const Envelope& env = ctx.envelope();
                          auto lock = b.locks->Inspect(env.lock_key);
                          auto claim = b.idempotency->Get(env.idempotency_key);
                          if (lock.ok() && lock->has_value() &&
                              (*lock)->fencing_token == ctx.fencing_token() && claim.ok() &&
                              claim->has_value() &&
                              (*claim)->state == IdempotencyRecord::State::kInProgress &&
                              (*claim)->owner == (*lock)->owner) {
                            ++held;
                          }
                          ctx.SetResult("charged " + env.job_id);
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE(runner->RunUntilIdle().ok());
  EXPECT_EQ(held, kJobs) << "handlers that ran holding their lock and claim";
  EXPECT_EQ(counted->lock_and_claims.load(), 0) << "the runner took guards the lease took";
  ExpectSucceededWithLocksFree(b, jobs);
  for (const Envelope& env : jobs) {
    auto rec = b.idempotency->Get(env.idempotency_key);
    ASSERT_TRUE(rec.ok() && rec->has_value()) << env.idempotency_key;
    EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
    EXPECT_EQ((*rec)->result, "charged " + env.job_id);
  }
}

// Asks the store to take the guards but not to check dedup in the lease:
// so a duplicate is leased with its guards taken, and found by the runner.
class NoLeaseDedup : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) override {
    DequeueRequest r = request;
    r.dedup_window.reset();
    return QueueBackendWrapper::Dequeue(r);
  }
};

// A delivery that ends as succeeded without its handler (a duplicate, SPEC
// 3 step 4) gives back the claim its lease took: the key is not recorded
// with the duplicate's result, so a later job of that key still runs.
inline void ExpectADuplicateDropsTheClaimItsLeaseTook(const StoreTarget& target) {
  auto clock = std::make_shared<testing::ManualClock>();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BackendBundle b = *opened;
  b.queue = std::make_shared<NoLeaseDedup>(b.queue);
  EnqueueOptions no_dedup;
  no_dedup.dedup_window = Duration::zero();
  for (const char* id : {"job_1", "job_2"}) {
    Envelope e = GuardedJob(id, std::string("order:") + id, std::string("charge:") + id,
                            clock->Now());
    e.dedup_key = "k";
    ASSERT_TRUE(b.queue->Enqueue(e, no_dedup).ok());
  }
  std::unique_ptr<JobRunner> runner = ManualClockRunner(b, clock, 1);
  ASSERT_NE(runner, nullptr);
  int runs = 0;
  ASSERT_TRUE(runner->Handle("test.job", [&](JobContext& ctx) {
                      ++runs;
                      ctx.SetResult("charged");
                      return Status::Ok();
                    }).ok());
  ASSERT_TRUE(runner->RunUntilIdle().ok());
  EXPECT_EQ(runs, 1);
  auto second = b.admin->Get("job_2");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->status, JobStatus::kSucceeded) << Reasons(*second);
  EXPECT_EQ(second->reason, reason::kDuplicate) << Reasons(*second);
  auto rec = b.idempotency->Get("charge:job_2");
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_FALSE(rec->has_value()) << "the duplicate recorded its key: " << (*rec)->result;
  auto lock = b.locks->Inspect("order:job_2");
  ASSERT_TRUE(lock.ok());
  EXPECT_FALSE(lock->has_value()) << "the duplicate kept its lock";
}

// Guards taken with the lease expire with it, so a delivery that waits in
// its batch renews them with its lease: the second job of a batch, whose
// lease is renewed at its start, runs holding a lock renewed as far; the
// third, whose lease and guards expired while it waited, takes them again
// the usual way and runs holding them.
inline void ExpectGuardsTakenWithTheLeaseAreRenewedWithIt(const StoreTarget& target) {
  auto clock = std::make_shared<testing::ManualClock>();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const BackendBundle& b = *opened;
  const TimePoint t0 = clock->Now();
  const std::vector<Envelope> jobs = EnqueueKeyedJobs(b, 1, 3, t0);
  const Duration vis = jobs[0].visibility_timeout;
  std::unique_ptr<JobRunner> runner = ManualClockRunner(b, clock, 3);
  ASSERT_NE(runner, nullptr);
  std::vector<std::string> seen;
  ASSERT_TRUE(runner->Handle("test.job", [&](JobContext& ctx) {
                          const Envelope& env = ctx.envelope();
                          auto lock = b.locks->Inspect(env.lock_key);
                          auto claim = b.idempotency->Get(env.idempotency_key);
                          const bool live = lock.ok() && lock->has_value() &&
                                            (*lock)->expires_at > clock->Now() && claim.ok() &&
                                            claim->has_value() &&
                                            (*claim)->expires_at > clock->Now();
                          std::string line = env.job_id + (live ? " held" : " NOT held");
                          if (env.job_id == "job_2" && live) {
                            line += (*lock)->expires_at > t0 + vis ? " renewed" : " NOT renewed";
                            line += (*claim)->expires_at > t0 + vis ? " renewed" : " NOT renewed";
                          }
                          seen.push_back(line);
                          if (env.job_id == "job_1") clock->Advance(vis / 2);
                          if (env.job_id == "job_2") clock->Advance(vis * 6 / 10);
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE(runner->RunUntilIdle().ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"job_1 held", "job_2 held renewed renewed",
                                            "job_3 held"}));
  ExpectSucceededWithLocksFree(b, jobs);
}

// Shutdown gives back the jobs still waiting in a worker's batch with the
// guards their lease took, in the same write: their locks are free and
// their keys unclaimed at once, not held until the TTL runs out.
inline void ExpectShutdownGivesBackTheGuardsOfJobsThatDidNotStart(const StoreTarget& target) {
  auto clock = SystemClock::Default();
  Result<BackendBundle> opened = target.open(clock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const BackendBundle& b = *opened;
  EnqueueKeyedJobs(b, 1, 4, clock->Now());
  JobRunnerOptions o;
  o.backend = b;
  o.workers = 1;
  o.dequeue_batch = 4;
  o.log_level = LogLevel::kOff;
  // The references to the queue outside the runner (the bundle's, its
  // admin side's, these options').
  const long own_refs = b.queue.use_count();
  auto runner = JobRunner::Create(o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto started = std::make_shared<std::atomic<bool>>(false);
  auto release = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE((*runner)->Handle("test.job", [started, release](JobContext&) {
                          started->store(true);
                          for (int i = 0; i < 2000 && !release->load(); ++i) {
                            std::this_thread::sleep_for(std::chrono::milliseconds(5));
                          }
                          return Status::Ok();
                        }).ok());
  ASSERT_TRUE((*runner)->Start().ok());
  for (int i = 0; i < 2000 && !started->load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(started->load());
  (*runner)->Shutdown(std::chrono::milliseconds(100)).IgnoreError();
  for (int i = 2; i <= 4; ++i) {
    const std::string n = std::to_string(i);
    auto r = b.admin->Get("job_" + n);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, JobStatus::kQueued) << "job_" << n << ": " << Reasons(*r);
    auto lock = b.locks->Inspect("order:" + n);
    ASSERT_TRUE(lock.ok());
    EXPECT_FALSE(lock->has_value()) << "order:" << n << " is still held";
    auto rec = b.idempotency->Get("charge:" + n);
    ASSERT_TRUE(rec.ok());
    EXPECT_FALSE(rec->has_value()) << "charge:" << n << " is still claimed";
  }
  // The runner left the handler's worker running, detached (it writes the
  // job's late outcome when the handler returns). Let it return, and wait
  // until that worker has let go of the runner's core (which holds the only
  // other references to the stores), so that it is done with the stores and
  // the library's statics before the test, and maybe the process, ends.
  release->store(true);
  runner->reset();
  for (int i = 0; i < 2000 && b.queue.use_count() > own_refs; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(b.queue.use_count(), own_refs) << "the detached worker still holds the runner";
}

}  // namespace durable_runner_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_DURABLE_RUNNER_CASES_H_
