// The JobRunner's threads: the worker pool, the watchdog (hung handlers,
// SPEC 5) and graceful shutdown. Time is a ManualClock moved by the test;
// real time is only used for bounded waits on other threads (generous
// safety timeouts, never a timing assertion).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "jobpact/backend.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend_wrapper.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/runner/runner_test_util.h"
#include "tests/support/wait_for.h"

namespace jobpact {
namespace {

using test_support::WaitFor;

using ::testing::ElementsAre;
using testing::Harness;
using testing::IsOk;

// A handler that blocks (in real time) until released, as a stuck call into
// a dependency would.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<int> entered{0};
  void Block() {
    entered.fetch_add(1);
    WaitFor([&] { return open.load(); });
  }
};

Envelope MakeJob(std::string type) {
  Envelope e;
  e.job_type = std::move(type);
  return e;
}

TEST(RunnerThreadsTest, WorkerPoolDrainsABacklog) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 2;
    o.dequeue_batch = 4;
  });
  std::atomic<int> calls{0};
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { calls.fetch_add(1); return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  EXPECT_THAT(h.runner().Start(), testing::StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(h.runner().RunUntilIdle(), testing::StatusIs(StatusCode::kFailedPrecondition));
  constexpr int kJobs = 200;
  for (int i = 0; i < kJobs; ++i) ASSERT_THAT(h.Enqueue(MakeJob("t")), IsOk());
  EXPECT_TRUE(WaitFor(
      [&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == kJobs; }));
  EXPECT_EQ(calls.load(), kJobs);
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_EQ(h.runner().Stats().deliveries, kJobs);
}

TEST(RunnerThreadsTest, EnqueueBatchWakesIdleWorkers) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 2;
    o.dequeue_batch = 4;
    // The ManualClock never reaches the next poll: only a wake-up helps.
    o.poll_interval = std::chrono::hours(1);
  });
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  // A lease found nothing: the workers are going idle (the other worker
  // waited for that lease, and goes idle with it, without one of its own).
  ASSERT_TRUE(WaitFor([&] { return h.faults().Calls(testing::QueueMethod::kDequeue) >= 1; }));
  constexpr int kJobs = 20;
  ASSERT_THAT(h.EnqueueBatch(std::vector<Envelope>(kJobs, MakeJob("t"))), IsOk());
  EXPECT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == kJobs; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
}

TEST(RunnerThreadsTest, WatchdogRenewsTheLeaseOfALongRunningJob) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 1;
    o.hung_grace = std::chrono::hours(1);  // Long, not hung.
  });
  Gate gate;
  ASSERT_THAT(h.Handle("long", [&](JobContext&) { gate.Block(); return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  const std::string id = h.Enqueue(MakeJob("long"))->job_id;  // Lease 45 s.
  ASSERT_TRUE(WaitFor([&] { return gate.entered.load() == 1; }));
  // Move 200 s forward, one second at a time, never faster than the
  // watchdog renews (every 15 s): the k-th renewal happens at >= 15k s and
  // holds the lease to >= 15k + 45 s, so with k >= t/15 - 1 renewals at time
  // t the lease outlives the next step however slowly the watchdog runs.
  const TimePoint start = h.clock().Now();
  auto step = [&] {
    const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(h.clock().Now() - start);
    const int needed = static_cast<int>(elapsed.count() / 15) - 1;
    if (h.faults().Calls(testing::QueueMethod::kRenew) >= needed) h.clock().Advance(Seconds(1));
  };
  ASSERT_TRUE(WaitFor([&] { return h.clock().Now() - start >= Seconds(200); }, step));
  EXPECT_GE(h.faults().Calls(testing::QueueMethod::kRenew), 12);
  ASSERT_THAT(h.runner().RunMaintenance(), IsOk());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kRunning);
  gate.open = true;
  ASSERT_TRUE(WaitFor([&] { return h.StatusOf(id) == JobStatus::kSucceeded; }));
  EXPECT_EQ(h.Job(id).lease_recoveries, 0);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions), 0);
  EXPECT_THAT(h.runner().Shutdown(Seconds(1)), IsOk());
}

// SPEC 5: a handler that overruns its deadline by hung_grace marks its
// worker hung: the lease is no longer renewed, the job is delivered again to
// a replacement worker, the hook is called, and the hung worker's late
// completion is fenced.
TEST(RunnerThreadsTest, HungHandlerIsReplacedAndItsJobRedelivered) {
  std::atomic<int> hook_calls{0};
  std::string hooked_job;
  std::mutex hooked_mu;
  Harness h([&](JobRunnerOptions& o) {
    o.workers = 1;
    o.max_replacement_workers = 1;
    o.hung_grace = Seconds(10);
    o.on_hung_worker = [&](const HungWorkerInfo& info) {
      std::lock_guard<std::mutex> l(hooked_mu);
      hooked_job = info.job_id;
      hook_calls.fetch_add(1);
    };
  });
  Gate gate;
  std::atomic<int> second_attempt_ran{0};
  ASSERT_THAT(h.Handle("stuck",
                       [&](JobContext& ctx) {
                         if (ctx.attempt() == 1) {
                           gate.Block();  // Ignores cancellation: a stuck call.
                         } else {
                           second_attempt_ran.fetch_add(1);
                         }
                         return Status::Ok();
                       }),
              IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  Envelope e = MakeJob("stuck");
  e.timeout = Seconds(5);
  e.visibility_timeout = Seconds(15);
  const std::string id = h.Enqueue(e)->job_id;
  ASSERT_TRUE(WaitFor([&] { return gate.entered.load() == 1; }));

  // Past deadline (5 s) + grace (10 s): the watchdog declares the worker hung.
  ASSERT_TRUE(WaitFor([&] { return hook_calls.load() == 1; },
                      [&] { h.clock().Advance(Millis(500)); }));
  {
    std::lock_guard<std::mutex> l(hooked_mu);
    EXPECT_EQ(hooked_job, id);
  }
  EXPECT_EQ(h.metrics().CounterTotal(metric::kHungWorkers, "stuck"), 1);
  EXPECT_EQ(h.runner().Stats().hung_workers, 1);
  EXPECT_EQ(h.runner().Stats().hung_workers_total, 1);
  EXPECT_EQ(h.runner().Stats().replacement_workers, 1);
  EXPECT_EQ(h.metrics().Gauge(metric::kHungWorkersNow), 1.0);

  // The lease expires unrenewed; maintenance recovers it; the replacement
  // worker runs attempt 2.
  ASSERT_TRUE(WaitFor([&] { return h.StatusOf(id) == JobStatus::kSucceeded; },
                      [&] { h.clock().Advance(Millis(500)); }));
  EXPECT_EQ(second_attempt_ran.load(), 1);
  JobRecord r = h.Job(id);
  EXPECT_EQ(r.envelope.attempt, 2);
  EXPECT_EQ(r.lease_recoveries, 1);

  // The hung handler finally returns: its completion is refused.
  gate.open = true;
  ASSERT_TRUE(WaitFor(
      [&] { return h.metrics().CounterTotal(metric::kStaleCompletions, "stuck") == 1; }));
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 2);

  // Its thread exits: no worker is hung now, though one was (the gauge and
  // Stats count the present; the counter and hung_workers_total the past).
  // The gauge is published just after the count drops.
  ASSERT_TRUE(WaitFor([&] {
    return h.runner().Stats().hung_workers == 0 &&
           h.metrics().Gauge(metric::kHungWorkersNow) == 0.0;
  }));
  EXPECT_EQ(h.runner().Stats().hung_workers_total, 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kHungWorkers, "stuck"), 1);
  EXPECT_THAT(h.runner().Shutdown(Seconds(1)), IsOk());
}

// Two workers, two duplicates of one effect running at the same time.
TEST(RunnerThreadsTest, TwoConcurrentDuplicatesOnTwoWorkersRunTheEffectOnce) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 2;
    o.dequeue_batch = 1;
  });
  std::atomic<int> effects{0};
  std::atomic<int> entered{0};
  std::vector<std::string> ids;
  ASSERT_THAT(h.Handle("payout",
                       [&](JobContext&) {
                         if (entered.fetch_add(1) == 0) {
                           // Hold the claim until the duplicate has been
                           // turned away by it.
                           WaitFor([&] {
                             for (const auto& id : ids) {
                               JobRecord r = h.Job(id);
                               if (r.reason == reason::kIdempotencyInProgress) return true;
                             }
                             return false;
                           });
                         }
                         effects.fetch_add(1);
                         return Status::Ok();
                       }),
              IsOk());
  Envelope e = MakeJob("payout");
  e.idempotency_key = "payout:acct_1";
  ids.push_back(h.Enqueue(e)->job_id);
  ids.push_back(h.Enqueue(e)->job_id);
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor(
      [&] {
        return h.StatusOf(ids[0]) == JobStatus::kSucceeded &&
               h.StatusOf(ids[1]) == JobStatus::kSucceeded;
      },
      [&] { h.clock().Advance(Millis(100)); }));
  EXPECT_EQ(effects.load(), 1);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kIdempotentSkips, "payout"), 1);
  EXPECT_THAT(h.runner().Shutdown(Seconds(1)), IsOk());
}

// Graceful shutdown: a running job that finishes within the grace period
// completes normally.
TEST(RunnerThreadsTest, GracefulShutdownLetsARunningJobFinish) {
  Harness h([](JobRunnerOptions& o) { o.workers = 1; });
  Gate gate;
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { gate.Block(); return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  const std::string id = h.Enqueue(MakeJob("t"))->job_id;
  ASSERT_TRUE(WaitFor([&] { return gate.entered.load() == 1; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    EXPECT_THAT(h.runner().Shutdown(Seconds(30)), IsOk());
    stopped = true;
  });
  // Shutdown waits for the job (the clock does not move).
  gate.open = true;
  stopper.join();
  EXPECT_TRUE(stopped.load());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  // No new work is taken after shutdown.
  const std::string later = h.Enqueue(MakeJob("t"))->job_id;
  EXPECT_EQ(h.StatusOf(later), JobStatus::kQueued);
}

// Graceful shutdown: a job still running when the grace period ends is
// given back (queued, no attempt spent) and runs again later; the late
// outcome of the abandoned handler is not written.
TEST(RunnerThreadsTest, GracefulShutdownGivesBackAnUnfinishedJob) {
  auto seen = std::make_shared<test_util::RecordingObserver>();
  Harness h([&](JobRunnerOptions& o) {
    o.workers = 1;
    o.transition_observers.push_back(seen);
  });
  Gate gate;
  std::atomic<int> calls{0};
  std::atomic<bool> saw_cancel{false};
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         if (calls.fetch_add(1) == 0) {
                           gate.Block();
                           saw_cancel = ctx.cancelled();
                         }
                         return Status::Ok();
                       }),
              IsOk());
  // Both jobs are leased in one batch: the second waits behind the first.
  const std::string id = h.Enqueue(MakeJob("t"))->job_id;
  const std::string waiting = h.Enqueue(MakeJob("t"))->job_id;
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return gate.entered.load() == 1; }));
  EXPECT_EQ(h.StatusOf(waiting), JobStatus::kRunning);
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
    stopped = true;
  });
  ASSERT_TRUE(WaitFor([&] { return stopped.load(); }, [&] { h.clock().Advance(Seconds(1)); }));
  stopper.join();
  for (const std::string& job : {id, waiting}) {
    JobRecord r = h.Job(job);
    EXPECT_EQ(r.status, JobStatus::kQueued);
    EXPECT_EQ(r.reason, reason::kShutdown);
    EXPECT_EQ(r.envelope.attempt, 0);
  }

  // The abandoned handler returns; its outcome is dropped.
  gate.open = true;
  ASSERT_TRUE(
      WaitFor([&] { return h.metrics().CounterTotal(metric::kStaleCompletions, "t") == 1; }));
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(h.StatusOf(id), JobStatus::kQueued);
  // Each give-back is one transition event (origin shutdown, no attempt
  // spent); the stale late outcome is none. The job that waited in the
  // batch was never started by the pipeline: no "delivered" event.
  EXPECT_THAT(seen->StepsOf(id), ElementsAre("none->queued:enqueued", "queued->running:delivered",
                                             "running->queued:shutdown"));
  EXPECT_THAT(seen->StepsOf(waiting),
              ElementsAre("none->queued:enqueued", "running->queued:shutdown"));
  const test_util::Seen given_back = seen->For(id).back();
  EXPECT_EQ(given_back.origin, TransitionOrigin::kShutdown);
  EXPECT_FALSE(given_back.attempt_spent);
  EXPECT_EQ(given_back.epoch, 1);

  // Another runner on the same queue runs it again.
  JobRunnerOptions o;
  o.queue = h.faults_ptr();
  o.clock = h.clock_ptr();
  o.log_level = LogLevel::kWarn;
  auto second = JobRunner::Create(o);
  ASSERT_THAT(second, IsOk());
  ASSERT_THAT((*second)->Handle("t", [&](JobContext&) { calls.fetch_add(1); return Status::Ok(); }),
              IsOk());
  auto n = (*second)->RunUntilIdle();
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(h.Job(id).envelope.attempt, 1);
  EXPECT_EQ(h.StatusOf(waiting), JobStatus::kSucceeded);
}

// A store whose leases (Dequeue) the test holds: the calls after the first
// `Allow(n)` wait. The calls in flight at once and each call's max_jobs
// are kept.
class HeldLeases : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  Status DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      const int index = static_cast<int>(asked_.size());
      asked_.push_back(request.max_jobs);
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
      cv_.wait(l, [&] { return index < allowed_; });
    }
    Status s = QueueBackendWrapper::DequeueInto(request, out);
    std::lock_guard<std::mutex> l(mu_);
    --in_flight_;
    return s;
  }
  void Allow(int n) {
    std::lock_guard<std::mutex> l(mu_);
    allowed_ = n;
    cv_.notify_all();
  }
  std::vector<int> asked() {
    std::lock_guard<std::mutex> l(mu_);
    return asked_;
  }
  int max_in_flight() {
    std::lock_guard<std::mutex> l(mu_);
    return max_in_flight_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int allowed_ = 0;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  std::vector<int> asked_;
};

struct HeldRunner {
  // A failed assertion must not leave workers held in the store while the
  // runner is destroyed (it would wait for them).
  ~HeldRunner() {
    held->Allow(1 << 30);
    runner.reset();
  }
  BackendBundle store = InMemoryBackend();
  std::shared_ptr<HeldLeases> held = std::make_shared<HeldLeases>(store.queue, store.admin);
  std::unique_ptr<JobRunner> runner;
  std::atomic<int> runs{0};
};

// Four workers, leases of 4, `jobs` jobs enqueued before Start; returns
// once the first lease waits.
void StartHeld(HeldRunner& r, int jobs, const std::string& logger_name = "jobpact") {
  for (int i = 0; i < jobs; ++i) {
    Envelope env = MakeJob("t");
    PrepareForEnqueue(env, SystemClock::Default()->Now());
    ASSERT_THAT(r.store.queue->Enqueue(env, EnqueueOptions{}).status(), IsOk());
  }
  JobRunnerOptions o;
  o.backend = r.store;
  o.backend.queue = r.held;
  o.workers = 4;
  o.dequeue_batch = 4;
  o.logger_name = logger_name;
  o.log_level = LogLevel::kInfo;
  auto created = JobRunner::Create(o);
  ASSERT_THAT(created.status(), IsOk());
  r.runner = std::move(created).value();
  ASSERT_THAT(r.runner->Handle("t",
                               [&r](JobContext&) {
                                 r.runs.fetch_add(1);
                                 return Status::Ok();
                               }),
              IsOk());
  ASSERT_THAT(r.runner->Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return !r.held->asked().empty(); }));
  // Time for the other three workers to come to the lease (threads just
  // started); the assertions hold however many of them came.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

TEST(RunnerThreadsTest, OneLeaseIsInFlightAndItTakesBatchesForTheWorkersWaitingForIt) {
  // Workers leasing each for itself would be four store transactions on
  // the same first ready jobs. The others wait for the one in flight, and
  // the next lease takes a batch for each of them.
  HeldRunner r;
  constexpr int kJobs = 40;
  ASSERT_NO_FATAL_FAILURE(StartHeld(r, kJobs));
  EXPECT_EQ(r.held->asked().size(), 1u);  // Nobody leased beside it.
  r.held->Allow(1000);
  EXPECT_TRUE(WaitFor([&] { return r.runs.load() == kJobs; }));
  EXPECT_THAT(r.runner->Shutdown(std::chrono::seconds(10)), IsOk());
  EXPECT_EQ(r.held->max_in_flight(), 1);
  const std::vector<int> asked = r.held->asked();
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked[0], 4);  // Nobody waited yet.
  // The second: a batch of 4 for its worker and one for each worker that
  // waited (at least one, at most three). No lease asks for more.
  EXPECT_GE(asked[1], 8);
  EXPECT_EQ(asked[1] % 4, 0);
  for (int n : asked) EXPECT_LE(n, 16);
  EXPECT_EQ(r.runner->Stats().deliveries, kJobs);  // Each job once.
}

// Sets a flag once the runner logs that it is stopping.
class StoppingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::atomic<bool> stopping{false};

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find("runner_stopping") !=
        std::string_view::npos) {
      stopping.store(true);
    }
  }
  void flush_() override {}
};

TEST(RunnerThreadsTest, ShutdownGivesBackTheBatchesASharedLeaseTookForOthers) {
  // Shutdown starts while a lease taken for waiting workers too is in
  // flight: every batch it took goes back to the queue, no attempt spent,
  // and no other lease starts.
  auto sink = std::make_shared<StoppingSink>();
  spdlog::register_logger(std::make_shared<spdlog::logger>("jobpact.held", sink));
  HeldRunner r;
  constexpr int kJobs = 40;
  ASSERT_NO_FATAL_FAILURE(StartHeld(r, kJobs, "jobpact.held"));
  r.held->Allow(1);  // The first lease: its worker runs its 4 jobs.
  ASSERT_TRUE(WaitFor([&] { return r.held->asked().size() == 2; }));  // The second waits.
  ASSERT_GE(r.held->asked()[1], 8);
  std::thread stopper([&] { EXPECT_THAT(r.runner->Shutdown(std::chrono::seconds(10)), IsOk()); });
  ASSERT_TRUE(WaitFor([&] { return sink->stopping.load(); }));
  r.held->Allow(1000);
  stopper.join();
  spdlog::drop("jobpact.held");
  EXPECT_EQ(r.runs.load(), 4);
  EXPECT_EQ(r.held->asked().size(), 2u);
  Result<QueueStats> st = r.store.admin->Stats();
  ASSERT_THAT(st.status(), IsOk());
  EXPECT_EQ(st->by_status[JobStatus::kSucceeded], 4);
  EXPECT_EQ(st->by_status[JobStatus::kQueued], kJobs - 4);
  JobFilter queued;
  queued.status = JobStatus::kQueued;
  Result<std::vector<JobRecord>> back = r.store.admin->ListJobs(queued);
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_EQ(back->size(), static_cast<std::size_t>(kJobs - 4));
  for (const JobRecord& rec : *back) EXPECT_EQ(rec.envelope.attempt, 0) << rec.envelope.job_id;
}

}  // namespace
}  // namespace jobpact

namespace jobpact {
namespace {

// A store another process also writes to, that can wake an idle worker
// (QueueBackend::WaitForWork): Poke() stands for the other process's enqueue.
class WakingQueue : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  Result<bool> WaitForWork(Duration timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    waits_.fetch_add(1);
    const bool woken = cv_.wait_for(l, timeout, [&] { return poked_; });
    poked_ = false;
    return woken;
  }
  void Poke() {
    std::lock_guard<std::mutex> l(mu_);
    poked_ = true;
    cv_.notify_all();
  }
  int waits() const { return waits_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;
  std::atomic<int> waits_{0};
};

TEST(RunnerThreadsTest, AnIdleWorkerWaitsInAStoreThatCanWakeIt) {
  // Poll interval one hour: without the store's wake-up the job written by
  // "another process" would not start within the safety timeout.
  BackendBundle store = InMemoryBackend();
  auto waking = std::make_shared<WakingQueue>(store.queue, store.admin);
  JobRunnerOptions o;
  o.backend = store;
  o.backend.queue = waking;
  o.workers = 1;
  o.poll_interval = std::chrono::hours(1);
  o.log_level = LogLevel::kOff;
  auto runner = JobRunner::Create(o);
  ASSERT_THAT(runner.status(), IsOk());
  std::atomic<int> runs{0};
  ASSERT_THAT((*runner)->Handle("email.send",
                                [&](JobContext&) {
                                  runs.fetch_add(1);
                                  return Status::Ok();
                                }),
              IsOk());
  ASSERT_THAT((*runner)->Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return waking->waits() > 0; }));  // Idle, waiting in the store.

  Envelope env = MakeJob("email.send");
  PrepareForEnqueue(env, SystemClock::Default()->Now());
  ASSERT_THAT(store.queue->Enqueue(env, EnqueueOptions{}).status(), IsOk());  // Not the runner's.
  waking->Poke();
  EXPECT_TRUE(WaitFor([&] { return runs.load() == 1; }));
  EXPECT_THAT((*runner)->Shutdown(std::chrono::seconds(10)), IsOk());
}

// A store that is down: the worker logs the failed Dequeue and asks again
// a poll interval later, not at once in a loop (a log line and a call per
// loop, for as long as the store is down). The ManualClock stands still,
// so a second call before the test moves it is the loop.
TEST(RunnerThreadsTest, AFailedDequeueWaitsAPollIntervalBeforeTheNext) {
  Harness h([](JobRunnerOptions& o) {
    o.workers = 1;
    o.poll_interval = std::chrono::seconds(1);
    o.log_level = LogLevel::kOff;
  });
  h.faults().FailNext(testing::QueueMethod::kDequeue, Status::Unavailable("store down"), 1000);
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.faults().Calls(testing::QueueMethod::kDequeue) >= 1; }));
  // Even this runner's own enqueue does not cut the wait short.
  ASSERT_THAT(h.Enqueue("t").status(), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(h.faults().Calls(testing::QueueMethod::kDequeue), 1);
  h.clock().Advance(std::chrono::seconds(1));
  EXPECT_TRUE(WaitFor([&] { return h.faults().Calls(testing::QueueMethod::kDequeue) >= 2; }));
  h.faults().Clear();
  EXPECT_THAT(h.runner().Shutdown(std::chrono::seconds(10)), IsOk());
}

TEST(RunnerThreadsTest, AStoreThatCannotWaitLeavesTheWorkerToItsOwnEnqueues) {
  // The in-memory store cannot wait (kUnimplemented): the runner's own
  // enqueue still wakes its idle worker at once.
  Harness h([](JobRunnerOptions& o) {
    o.workers = 1;
    o.poll_interval = std::chrono::hours(1);
  });
  std::atomic<int> runs{0};
  ASSERT_THAT(h.Handle("email.send",
                       [&](JobContext&) {
                         runs.fetch_add(1);
                         return Status::Ok();
                       }),
              IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_THAT(h.Enqueue("email.send").status(), IsOk());
  EXPECT_TRUE(WaitFor([&] { return runs.load() == 1; }));
  EXPECT_THAT(h.runner().Shutdown(std::chrono::seconds(10)), IsOk());
}

}  // namespace
}  // namespace jobpact
