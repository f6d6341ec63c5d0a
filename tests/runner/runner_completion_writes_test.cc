// Grouped completion writes (JobRunnerOptions::completion_writes): a started
// runner's workers hand their outcomes to one writer, which stores whatever
// accumulated in one CompleteBatch. Time is a ManualClock; real time only
// bounds waits on other threads (safety timeouts, never an assertion).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
using test_util::MakeJob;

// Between the runner and the harness's queue: says whether grouping pays,
// records the size of every CompleteBatch and every single Complete, can
// hold the first CompleteBatch until Release(), and can make the lease of
// one job stale on its way to the store.
class GroupRecorder : public QueueBackendWrapper {
 public:
  GroupRecorder(std::shared_ptr<QueueBackend> target, bool groups)
      : QueueBackendWrapper(std::move(target)), groups_(groups) {}

  bool GroupsCompletions() const override { return groups_; }

  std::vector<Status> CompleteBatch(const std::vector<CompletionRequest>& requests) override {
    bool hold;
    {
      std::unique_lock<std::mutex> l(mu_);
      sizes_.push_back(requests.size());
      hold = hold_first_ && sizes_.size() == 1;
      held_.store(hold);
      if (hold) released_cv_.wait(l, [&] { return released_; });
    }
    held_.store(false);
    std::vector<CompletionRequest> sent = requests;
    for (CompletionRequest& r : sent) {
      if (r.delivery.lease.job_id == stale_job_) r.delivery.lease.token = "someone-else";
    }
    return QueueBackendWrapper::CompleteBatch(sent);
  }

  void HoldFirstGroup() { hold_first_ = true; }
  bool holding() const { return held_.load(); }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    released_cv_.notify_all();
  }
  void MakeStale(std::string job_id) { stale_job_ = std::move(job_id); }
  std::vector<std::size_t> sizes() const {
    std::lock_guard<std::mutex> l(mu_);
    return sizes_;
  }
  int singles() const { return singles_.load(); }

 protected:
  Status Intercept(QueueMethod method, const std::function<Status()>& call) override {
    if (method == QueueMethod::kComplete) singles_.fetch_add(1);
    return call();
  }

 private:
  const bool groups_;
  bool hold_first_ = false;  // Set before Start.
  std::string stale_job_;    // Set before Start.
  mutable std::mutex mu_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::vector<std::size_t> sizes_;
  std::atomic<bool> held_{false};
  std::atomic<int> singles_{0};
};

// A harness whose runner writes through a GroupRecorder.
struct GroupedHarness {
  explicit GroupedHarness(JobRunnerOptions::CompletionWrites writes, bool store_groups = false,
                          int workers = 2)
      : h([&](JobRunnerOptions& o) {
          recorder = std::make_shared<GroupRecorder>(o.queue, store_groups);
          o.queue = recorder;
          o.workers = workers;
          o.dequeue_batch = 8;
          o.completion_writes = writes;
          o.log_level = LogLevel::kOff;
        }) {}
  std::shared_ptr<GroupRecorder> recorder;  // Set by h's constructor.
  Harness h;
};

// A no-op handler that lets the job `first` run at once and every other one
// only once the recorder holds the first write, so that the first group is
// exactly that job's outcome and every other outcome arrives during the write.
Handler AfterTheHeldWrite(GroupRecorder& recorder, const std::string& first,
                          std::atomic<int>& runs) {
  return [&recorder, first, &runs](JobContext& ctx) {
    if (ctx.envelope().job_id != first) WaitFor([&] { return recorder.holding(); });
    runs.fetch_add(1);
    return Status::Ok();
  };
}

// Every handler ran and no worker is inside a batch any more, so every
// outcome was handed over.
bool AllHandedOver(Harness& h, const std::atomic<int>& runs, int jobs) {
  return runs.load() == jobs && h.runner().Stats().busy_workers == 0;
}

std::vector<std::string> EnqueueN(Harness& h, int n, const std::string& type,
                                  const std::function<void(Envelope&, int)>& shape = nullptr) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    Envelope env = MakeJob(type);
    if (shape) shape(env, i);
    ids.push_back(test_util::EnqueueOk(h, std::move(env)));
  }
  return ids;
}

TEST(RunnerCompletionWritesTest, OutcomesThatArriveDuringAWriteGoInTheNextGroup) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kGrouped);
  Harness& h = g.h;
  g.recorder->HoldFirstGroup();
  constexpr int kJobs = 20;
  const std::vector<std::string> ids = EnqueueN(h, kJobs, "t");
  std::atomic<int> runs{0};
  ASSERT_THAT(h.Handle("t", AfterTheHeldWrite(*g.recorder, ids[0], runs)), IsOk());
  ASSERT_THAT(h.runner().Start(), IsOk());
  // The first outcome's write is held; the workers go on without waiting
  // for it, so every handler runs meanwhile.
  ASSERT_TRUE(WaitFor([&] { return g.recorder->holding(); }));
  ASSERT_TRUE(WaitFor([&] { return AllHandedOver(h, runs, kJobs); }));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kSucceeded, "t"), 0);  // Reported once written.
  g.recorder->Release();
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == kJobs; }));
  // One write for the first outcome, one for all the others.
  EXPECT_THAT(g.recorder->sizes(), ElementsAre(1u, static_cast<std::size_t>(kJobs - 1)));
  EXPECT_EQ(g.recorder->singles(), 0);
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  for (const std::string& id : ids) EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded) << id;
}

TEST(RunnerCompletionWritesTest, AStaleOutcomeInAGroupIsRefusedAlone) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kGrouped, false, /*workers=*/1);
  Harness& h = g.h;
  g.recorder->HoldFirstGroup();
  const std::vector<std::string> ids = EnqueueN(h, 6, "t");
  std::atomic<int> runs{0};
  ASSERT_THAT(h.Handle("t", AfterTheHeldWrite(*g.recorder, ids[0], runs)), IsOk());
  g.recorder->MakeStale(ids[3]);
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return AllHandedOver(h, runs, 6); }));
  g.recorder->Release();
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 5; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_THAT(g.recorder->sizes(), ElementsAre(1u, 5u));  // ids[3] shared the second group.
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions, "t"), 1);
  for (int i = 0; i < 6; ++i) {
    // The refused one is not overwritten: it stays running until its lease
    // is recovered.
    EXPECT_EQ(h.StatusOf(ids[i]), i == 3 ? JobStatus::kRunning : JobStatus::kSucceeded) << i;
  }
}

TEST(RunnerCompletionWritesTest, ShutdownReturnsOnlyOnceEveryHandedOverOutcomeIsWritten) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kGrouped);
  Harness& h = g.h;
  g.recorder->HoldFirstGroup();
  std::atomic<int> runs{0};
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { runs.fetch_add(1); return Status::Ok(); }), IsOk());
  const std::vector<std::string> ids = EnqueueN(h, 10, "t");
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return g.recorder->holding() && AllHandedOver(h, runs, 10); }));
  EXPECT_EQ(h.metrics().CounterTotal(metric::kSucceeded, "t"), 0);
  std::atomic<bool> returned{false};
  std::thread stopper([&] {
    EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
    returned.store(true);
  });
  // Every worker is idle, so Shutdown is left waiting for the writer alone.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  g.recorder->Release();
  stopper.join();
  for (const std::string& id : ids) EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded) << id;
  EXPECT_EQ(h.metrics().CounterTotal(metric::kSucceeded, "t"), 10);
}

TEST(RunnerCompletionWritesTest, TheLockIsKeptAcrossTheWriteOnlyForATransactionalEffect) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kGrouped, false, /*workers=*/1);
  Harness& h = g.h;
  g.recorder->HoldFirstGroup();
  std::atomic<int> effects{0};
  ASSERT_THAT(h.Handle("plain", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope plain = MakeJob("plain");
  plain.lock_key = "account:1";
  const std::string plain_id = test_util::EnqueueOk(h, std::move(plain));
  ASSERT_THAT(h.runner().Start(), IsOk());
  // The plain job's write is held: its handler's work is done, so its lock
  // is free already.
  ASSERT_TRUE(WaitFor([&] { return g.recorder->holding(); }));
  Result<std::optional<LockLease>> lock = h.locks().Inspect("account:1");
  ASSERT_THAT(lock, IsOk());
  EXPECT_FALSE(lock->has_value());
  g.recorder->Release();
  ASSERT_TRUE(WaitFor([&] { return h.StatusOf(plain_id) == JobStatus::kSucceeded; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());

  // The same with a transactional effect, which commits with the write: the
  // lock is held until the write is done.
  GroupedHarness g2(JobRunnerOptions::CompletionWrites::kGrouped, false, /*workers=*/1);
  Harness& h2 = g2.h;
  g2.recorder->HoldFirstGroup();
  ASSERT_THAT(h2.Handle("tx",
                        [&](JobContext& ctx) {
                          ctx.SetTransactionalEffect([&](void*) {
                            effects.fetch_add(1);
                            return Status::Ok();
                          });
                          return Status::Ok();
                        }),
              IsOk());
  Envelope tx = MakeJob("tx");
  tx.lock_key = "account:1";
  const std::string tx_id = test_util::EnqueueOk(h2, std::move(tx));
  ASSERT_THAT(h2.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return g2.recorder->holding(); }));
  lock = h2.locks().Inspect("account:1");
  ASSERT_THAT(lock, IsOk());
  EXPECT_TRUE(lock->has_value());
  EXPECT_EQ(effects.load(), 0);
  g2.recorder->Release();
  ASSERT_TRUE(WaitFor([&] { return h2.StatusOf(tx_id) == JobStatus::kSucceeded; }));
  EXPECT_THAT(h2.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_EQ(effects.load(), 1);
  lock = h2.locks().Inspect("account:1");
  ASSERT_THAT(lock, IsOk());
  EXPECT_FALSE(lock->has_value());
}

TEST(RunnerCompletionWritesTest, AutoGroupsInTheWriterWhereTheStoreSaysItPaysElsePerWorker) {
  for (const bool store_groups : {false, true}) {
    SCOPED_TRACE(store_groups ? "a store that groups" : "a store that does not");
    GroupedHarness g(JobRunnerOptions::CompletionWrites::kAuto, store_groups, /*workers=*/1);
    Harness& h = g.h;
    ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
    EnqueueN(h, 8, "t");
    ASSERT_THAT(h.runner().Start(), IsOk());
    ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 8; }));
    EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
    std::size_t grouped = 0;
    for (std::size_t n : g.recorder->sizes()) grouped += n;
    EXPECT_EQ(grouped, 8u);
    EXPECT_EQ(g.recorder->singles(), 0);
    if (!store_groups) {
      // Per worker: the batch's eight quick outcomes in one write.
      EXPECT_THAT(g.recorder->sizes(), ElementsAre(8u));
    }
  }
}

// CompletionWrites::kPerWorker. One worker, batches of 8, a ManualClock:
// "quick" is measured on it, so a handler is quick unless it moves it.

TEST(RunnerCompletionWritesTest, PerWorkerWritesABatchOfQuickJobsInOneWrite) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  const std::vector<std::string> ids = EnqueueN(h, 12, "t");
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 12; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_THAT(g.recorder->sizes(), ElementsAre(8u, 4u));
  EXPECT_EQ(g.recorder->singles(), 0);
  for (const std::string& id : ids) EXPECT_EQ(h.StatusOf(id), JobStatus::kSucceeded);
}

// What a handler saw of the job that ran before it in its batch.
struct SeenBefore {
  void Look(Harness& h, const std::string& job_id) {
    status.store(static_cast<int>(*h.StatusOf(job_id)));
    looked.store(true);
  }
  // The earlier job's outcome was stored before this handler ran.
  bool SawItSucceeded() const {
    return looked.load() && status.load() == static_cast<int>(JobStatus::kSucceeded);
  }
  std::atomic<bool> looked{false};
  std::atomic<int> status{-1};
};

// Enqueues a job of `type` that runs before the others (higher priority).
std::string EnqueueFirst(Harness& h, const std::string& type) {
  return test_util::EnqueueOk(h, [&] {
    Envelope env = MakeJob(type);
    env.priority = 1;
    return env;
  }());
}

// Two jobs of type "t": `*first` (quick, runs first) and a second one,
// whose handler runs `second`. Returns the second job's id.
std::string QuickThenSecond(Harness& h, std::string* first, std::function<void()> second) {
  Status handled = h.Handle("t", [first, second](JobContext& ctx) {
    if (ctx.envelope().job_id != *first) second();
    return Status::Ok();
  });
  EXPECT_THAT(handled, IsOk());
  *first = EnqueueFirst(h, "t");
  return EnqueueN(h, 1, "t").front();
}

TEST(RunnerCompletionWritesTest, PerWorkerWritesKeptOutcomesBeforeAJobOfAnotherType) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  SeenBefore seen;
  std::string first;
  ASSERT_THAT(h.Handle("quick", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_THAT(h.Handle("other",
                       [&](JobContext&) {
                         seen.Look(h, first);
                         return Status::Ok();
                       }),
              IsOk());
  first = EnqueueFirst(h, "quick");
  EnqueueN(h, 1, "other");
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded) == 2; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  // A job of another type may not be quick: the kept outcome went first.
  EXPECT_TRUE(seen.SawItSucceeded());
  EXPECT_THAT(g.recorder->sizes(), ElementsAre(1u, 1u));
}

TEST(RunnerCompletionWritesTest, PerWorkerWritesAtOnceAfterAJobThatWasNotQuick) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  SeenBefore seen;
  std::string first;
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         if (ctx.envelope().job_id == first) {
                           h.clock().Advance(Millis(5));  // Not quick.
                         } else {
                           seen.Look(h, first);
                         }
                         return Status::Ok();
                       }),
              IsOk());
  first = EnqueueFirst(h, "t");
  EnqueueN(h, 1, "t");
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 2; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_TRUE(seen.SawItSucceeded());
}

TEST(RunnerCompletionWritesTest, TheWatchdogWritesOutcomesKeptWhileAJobRunsLong) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  std::string first;
  std::atomic<bool> written_while_running{false};
  // Predicted quick (its type's last run was), the second job runs long:
  // the kept outcome is written at the watchdog's next tick, while it runs.
  QuickThenSecond(h, &first, [&] {
    written_while_running.store(WaitFor([&] {
      h.clock().Advance(Millis(50));
      return h.StatusOf(first) == JobStatus::kSucceeded;
    }));
  });
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 2; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_TRUE(written_while_running.load());
}

TEST(RunnerCompletionWritesTest, ShutdownWritesTheOutcomesAWorkerStillInAHandlerKept) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  std::string first;
  std::atomic<bool> second_started{false};
  std::atomic<bool> release{false};
  std::atomic<bool> second_returned{false};
  const std::string second = QuickThenSecond(h, &first, [&] {
    second_started.store(true);
    WaitFor([&] { return release.load(); });
    second_returned.store(true);
  });
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return second_started.load(); }));
  // The clock does not move, so the watchdog does not tick: only Shutdown
  // can write the first job's kept outcome. No grace: the second job's
  // lease goes back.
  EXPECT_THAT(h.runner().Shutdown(Seconds(0)), IsOk());
  EXPECT_EQ(h.StatusOf(first), JobStatus::kSucceeded);
  EXPECT_EQ(h.StatusOf(second), JobStatus::kQueued);
  release.store(true);
  // The detached handler reads this test's variables until it returns.
  ASSERT_TRUE(WaitFor([&] { return second_returned.load(); }));
}

TEST(RunnerCompletionWritesTest, PerWorkerWritesAnOutcomeWithATransactionalEffectAtOnce) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kPerWorker, false, /*workers=*/1);
  Harness& h = g.h;
  std::string first;
  std::atomic<int> effects{0};
  std::atomic<bool> seen_first_running{false};
  // The effect commits with its own job's write, so that write cannot wait
  // for the batch; the quick job before it stays kept meanwhile.
  ASSERT_THAT(h.Handle("t",
                       [&](JobContext& ctx) {
                         if (ctx.envelope().payload == "{\"tx\":true}") {
                           seen_first_running.store(h.StatusOf(first) == JobStatus::kRunning);
                           ctx.SetTransactionalEffect([&](void*) {
                             effects.fetch_add(1);
                             return Status::Ok();
                           });
                         }
                         return Status::Ok();
                       }),
              IsOk());
  first = EnqueueFirst(h, "t");
  EnqueueN(h, 1, "t", [](Envelope& env, int) { env.payload = "{\"tx\":true}"; });
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 2; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_TRUE(seen_first_running.load());
  EXPECT_EQ(effects.load(), 1);
  EXPECT_EQ(g.recorder->singles(), 1);                  // The effect's job, at once.
  EXPECT_THAT(g.recorder->sizes(), ElementsAre(1u));  // The kept one, at batch end.
}

TEST(RunnerCompletionWritesTest, OneByOneAndRunUntilIdleNeverGroup) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kOneByOne, /*store_groups=*/true);
  Harness& h = g.h;
  ASSERT_THAT(h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  EnqueueN(h, 5, "t");
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return h.metrics().CounterTotal(metric::kSucceeded, "t") == 5; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_TRUE(g.recorder->sizes().empty());
  EXPECT_EQ(g.recorder->singles(), 5);

  // RunUntilIdle (no threads) writes each outcome itself, even when grouped.
  GroupedHarness g2(JobRunnerOptions::CompletionWrites::kGrouped);
  ASSERT_THAT(g2.h.Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  EnqueueN(g2.h, 5, "t");
  EXPECT_EQ(g2.h.RunUntilIdle().value(), 5);
  EXPECT_TRUE(g2.recorder->sizes().empty());
  EXPECT_EQ(g2.recorder->singles(), 5);
}

TEST(RunnerCompletionWritesTest, AFailedGroupWriteLeavesEveryJobToBeDeliveredAgain) {
  GroupedHarness g(JobRunnerOptions::CompletionWrites::kGrouped, false, /*workers=*/1);
  Harness& h = g.h;
  std::atomic<int> runs{0};
  ASSERT_THAT(h.Handle("t", [&](JobContext&) { runs.fetch_add(1); return Status::Ok(); }), IsOk());
  const std::vector<std::string> ids = EnqueueN(h, 3, "t");
  h.faults().FailNext(testing::QueueMethod::kCompleteBatch, Status::Unavailable("store down"), 100);
  ASSERT_THAT(h.runner().Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return runs.load() == 3; }));
  EXPECT_THAT(h.runner().Shutdown(Seconds(5)), IsOk());
  EXPECT_EQ(h.metrics().CounterTotal(metric::kSucceeded, "t"), 0);
  EXPECT_EQ(h.metrics().CounterTotal(metric::kStaleCompletions, "t"), 0);
  for (const std::string& id : ids) {
    // Still running: delivered again once its lease expires (at least once).
    EXPECT_EQ(h.StatusOf(id), JobStatus::kRunning) << id;
  }
}

}  // namespace
}  // namespace jobpact
