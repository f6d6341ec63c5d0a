// The operations facade (jobpact/operations.h): every operator action on a
// backend bundle with no JobRunner -- the control state a runner then obeys,
// the controlled DLQ replay and discard with their audit and metrics, cancel,
// lock listing, published policies, cache invalidation. ManualClock, no
// threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/in_memory.h"
#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::IsOk;
using testing::ManualClock;
using testing::StatusIs;

class OperationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = InMemoryBackend(clock_);
    metrics_ = std::make_shared<InMemoryMetricsSink>();
    OperationsOptions o;
    o.clock = clock_;
    o.metrics = metrics_;
    auto ops = Operations::Open(backend_, o);
    ASSERT_THAT(ops.status(), IsOk());
    ops_ = std::move(*ops);
  }

  std::string Enqueue(std::string id, std::string type, std::string queue = "default") {
    Envelope env;
    env.job_id = std::move(id);
    env.job_type = std::move(type);
    env.queue = std::move(queue);
    env.payload = "{}";
    auto r = backend_.queue->Enqueue(env, {});
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->job_id : "";
  }

  std::vector<Delivery> Take(int n) {
    DequeueRequest req;
    req.max_jobs = n;
    req.worker_id = "w";
    auto r = backend_.queue->Dequeue(req);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? std::move(*r) : std::vector<Delivery>{};
  }

  // Enqueues a job and dead-letters it as a permanent failure.
  void DeadLetter(std::string id, std::string type) {
    Enqueue(id, type);
    std::vector<Delivery> d = Take(1);
    ASSERT_THAT(d, SizeIs(1));
    Completion c;
    c.to = JobStatus::kDeadLettered;
    c.reason = std::string(reason::kPermanentError);
    c.failure = Failure{FailureClass::kPermanent, "bad", "bad payload"};
    ASSERT_THAT(backend_.queue->Complete(d[0], c), IsOk());
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  BackendBundle backend_;
  std::shared_ptr<InMemoryMetricsSink> metrics_;
  std::unique_ptr<Operations> ops_;
};

TEST_F(OperationsTest, OpenRefusesABundleWithoutItsOperatorSide) {
  BackendBundle partial = backend_;
  partial.admin = nullptr;
  EXPECT_THAT(Operations::Open(partial).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("operator side")));
  partial = backend_;
  partial.locks = nullptr;
  EXPECT_THAT(Operations::Open(partial).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("lock store")));
}

TEST_F(OperationsTest, APauseStopsTheTypeInARunnerThatSharesTheStore) {
  JobRunnerOptions ro;
  ro.backend = backend_;
  ro.clock = clock_;
  ro.log_level = LogLevel::kOff;
  auto runner = JobRunner::Create(ro);
  ASSERT_THAT(runner.status(), IsOk());
  int mails = 0, pdfs = 0;
  ASSERT_THAT((*runner)->Handle("mail.send", [&](JobContext&) { ++mails; return Status::Ok(); }),
              IsOk());
  ASSERT_THAT((*runner)->Handle("pdf.render", [&](JobContext&) { ++pdfs; return Status::Ok(); }),
              IsOk());
  Enqueue("job_m1", "mail.send");
  Enqueue("job_p1", "pdf.render");

  ASSERT_THAT(ops_->PauseType("mail.send", "alice", "INC-9: relay down"), IsOk());
  ASSERT_THAT((*runner)->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(mails, 0);
  EXPECT_EQ(pdfs, 1);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord m, ops_->GetJob("job_m1"));
  EXPECT_EQ(m.status, JobStatus::kQueued);
  EXPECT_EQ(m.epoch, 0) << "a paused job is not leased and handed back";

  EXPECT_THAT(ops_->ResumeType("pdf.render", "alice", "oops"),
              StatusIs(StatusCode::kNotFound, HasSubstr("pause_type pdf.render")));
  ASSERT_THAT(ops_->ResumeType("mail.send", "alice", "relay back"), IsOk());
  ASSERT_THAT((*runner)->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(mails, 1);

  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> audit, ops_->ControlAudit());
  ASSERT_THAT(audit, SizeIs(2));
  EXPECT_THAT(audit[0], HasSubstr("set pause_type mail.send by alice: INC-9: relay down"));
  EXPECT_THAT(audit[1], HasSubstr("clear pause_type mail.send by alice: relay back"));
}

TEST_F(OperationsTest, ControlHelpersWriteTheRulesTheyName) {
  ASSERT_THAT(ops_->PauseQueue("bulk", "bob", "drain first"), IsOk());
  ASSERT_THAT(ops_->SetConcurrencyLimit("pdf.render", 2, "bob", "runbook: lower concurrency"),
              IsOk());
  ASSERT_THAT(ops_->RouteToDlq("pdf.render", FailureClass::kUnknown, "bob", "unclassified"),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, ops_->Control());
  EXPECT_TRUE(s.QueuePaused("bulk"));
  EXPECT_EQ(s.ConcurrencyLimit("pdf.render"), 2);
  EXPECT_TRUE(s.RoutesToDlq("pdf.render", FailureClass::kUnknown));
  ASSERT_THAT(ops_->ResumeQueue("bulk", "bob", "drained"), IsOk());
  ASSERT_THAT(ops_->ClearConcurrencyLimit("pdf.render", "bob", "recovered"), IsOk());
  ASSERT_THAT(ops_->ClearRoute("pdf.render", FailureClass::kUnknown, "bob", "classified"), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState none, ops_->Control());
  EXPECT_THAT(none.rules, IsEmpty());
  EXPECT_THAT(ops_->SetConcurrencyLimit("pdf.render", -3, "bob", "x"),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(OperationsTest, ReplaySpacesTheSelectionAndCountsIt) {
  DeadLetter("job_1", "mail.send");
  DeadLetter("job_2", "mail.send");
  DeadLetter("job_3", "pdf.render");
  ReplayRequest req;
  req.selection.job_type = "mail.send";
  req.actor = "carol";
  req.reason = "INC-9 fixed";
  req.max_per_second = 2;
  req.dry_run = true;
  JOBPACT_ASSERT_OK_AND_ASSIGN(ReplayReport dry, ops_->ReplayDeadLetters(req));
  EXPECT_THAT(dry.would_replay, ElementsAre("job_1", "job_2"));
  EXPECT_THAT(dry.replayed, IsEmpty());
  EXPECT_EQ(ops_->GetJob("job_1")->status, JobStatus::kDeadLettered) << "a dry run changes nothing";

  req.dry_run = false;
  const TimePoint now = clock_->Now();
  JOBPACT_ASSERT_OK_AND_ASSIGN(ReplayReport done, ops_->ReplayDeadLetters(req));
  EXPECT_THAT(done.replayed, ElementsAre("job_1", "job_2"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord j1, ops_->GetJob("job_1"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord j2, ops_->GetJob("job_2"));
  EXPECT_EQ(j1.status, JobStatus::kQueued);
  EXPECT_EQ(j1.ready_at, now);
  EXPECT_EQ(j2.ready_at, now + Millis(500));
  EXPECT_THAT(j1.audit.back(), HasSubstr("replay by carol: INC-9 fixed"));
  EXPECT_EQ(ops_->GetJob("job_3")->status, JobStatus::kDeadLettered);
  EXPECT_EQ(metrics_->CounterTotal(metric::kReplayed, "mail.send"), 2);

  ReplayRequest blank;
  EXPECT_THAT(ops_->ReplayDeadLetters(blank).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor and reason")));
}

TEST_F(OperationsTest, DiscardKeepsWhoAndWhyAndCountsIt) {
  DeadLetter("job_1", "mail.send");
  EXPECT_THAT(ops_->DiscardDeadLetter("job_1", "", "x"), StatusIs(StatusCode::kInvalidArgument));
  ASSERT_THAT(ops_->DiscardDeadLetter("job_1", "dave", "superseded by job_9"), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, ops_->GetJob("job_1"));
  EXPECT_EQ(r.status, JobStatus::kDiscarded);
  EXPECT_THAT(r.audit.back(), HasSubstr("discard by dave: superseded by job_9"));
  EXPECT_EQ(metrics_->Counter(metric::kDiscarded,
                             MetricLabels{"mail.send", "default", reason::kOperatorDiscard, {}}),
            1);
  EXPECT_THAT(ops_->DiscardDeadLetter("job_1", "dave", "again"),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(OperationsTest, CancelListLocksAndPolicies) {
  Enqueue("job_1", "mail.send");
  JOBPACT_ASSERT_OK_AND_ASSIGN(CancelOutcome o, ops_->CancelJob("job_1", "erin", "sent twice"));
  EXPECT_EQ(o, CancelOutcome::kDiscarded);
  JobFilter discarded;
  discarded.status = JobStatus::kDiscarded;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> listed, ops_->ListJobs(discarded));
  ASSERT_THAT(listed, SizeIs(1));
  EXPECT_EQ(listed[0].reason, reason::kCancelled);

  ASSERT_THAT(backend_.locks->Acquire("order:1", "w-7", Seconds(30)).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LockLease> locks, ops_->ListLocks());
  ASSERT_THAT(locks, SizeIs(1));
  EXPECT_EQ(locks[0].owner, "w-7");

  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> none, ops_->Policies());
  EXPECT_THAT(none, IsEmpty());
}

// A listener that hears nothing of the DLQ, for tests of the other events.
class NonDlqListener : public OperationsListener {
 public:
  void OnReplayed(const DlqEntry&, const ReplayRequest&, TimePoint) override {}
  void OnReplayFailed(const DlqEntry&, const ReplayRequest&, const Status&) override {}
  void OnDryRun(const ReplayRequest&, const ReplayReport&) override {}
  void OnDiscarded(const DlqEntry&, std::string_view, std::string_view,
                   std::string_view) override {}
};

// A listener that keeps what ReleaseLock told it.
class LockListener : public NonDlqListener {
 public:
  void OnLockReleased(const LockReleaseReport& report, std::string_view actor,
                      std::string_view reason) override {
    released.push_back(report.lock.key + " by " + std::string(actor) + ": " + std::string(reason));
  }
  std::vector<std::string> released;
};

class ReleaseLockTest : public OperationsTest {
 protected:
  // Delivers a new job with `lock_key` and takes its lock as a runner does:
  // owner = the delivery's lease token. The lock outlives the lease (10 min
  // against 45 s), as a stuck lock does.
  Delivery DeliverHoldingLock(std::string id, std::string lock_key) {
    Envelope env;
    env.job_id = std::move(id);
    env.job_type = "order.sync";
    env.lock_key = lock_key;
    env.visibility_timeout = Seconds(45);
    EXPECT_THAT(backend_.queue->Enqueue(env, {}).status(), IsOk());
    std::vector<Delivery> d = Take(1);
    EXPECT_THAT(d, SizeIs(1));
    if (d.empty()) return {};
    EXPECT_THAT(backend_.locks->Acquire(lock_key, d[0].lease.token, Seconds(600)).status(), IsOk());
    return d[0];
  }

  bool Held(const std::string& key) {
    auto r = backend_.locks->Inspect(key);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() && r->has_value();
  }
};

TEST_F(ReleaseLockTest, RefusesWhileTheOwnersLeaseIsLiveAndReleasesOnceItExpired) {
  auto listener = std::make_shared<LockListener>();
  OperationsOptions o;
  o.clock = clock_;
  o.listener = listener;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Operations> ops, Operations::Open(backend_, o));
  Delivery d = DeliverHoldingLock("job_l1", "order:1");

  EXPECT_THAT(ops->ReleaseLock("order:1", d.lease.token, "frank", "INC-7 stuck lock"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("job job_l1 (order.sync) is running with a live lease")));
  EXPECT_TRUE(Held("order:1")) << "a refused release changes nothing";
  EXPECT_THAT(listener->released, IsEmpty());

  clock_->Advance(Seconds(46));  // The worker stopped renewing; the lock (10 min) lives on.
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockReleaseReport r,
                               ops->ReleaseLock("order:1", d.lease.token, "frank", "INC-7"));
  EXPECT_EQ(r.job_id, "job_l1");
  EXPECT_EQ(r.job_status, JobStatus::kRunning);
  EXPECT_EQ(r.lock.owner, d.lease.token);
  EXPECT_THAT(r.verdict, HasSubstr("lease expired at"));
  EXPECT_FALSE(Held("order:1"));
  EXPECT_THAT(listener->released, ElementsAre("order:1 by frank: INC-7"));
}

TEST_F(ReleaseLockTest, ReleasesALockWhoseOwnersJobIsFinal) {
  Delivery d = DeliverHoldingLock("job_l2", "order:2");
  Completion c;
  c.to = JobStatus::kSucceeded;
  c.reason = std::string(reason::kSucceeded);
  ASSERT_THAT(backend_.queue->Complete(d, c), IsOk());  // ...and the release was lost.
  ASSERT_TRUE(Held("order:2"));

  JOBPACT_ASSERT_OK_AND_ASSIGN(LockReleaseReport r,
                               ops_->ReleaseLock("order:2", d.lease.token, "gina", "leaked"));
  EXPECT_EQ(r.job_id, "job_l2");
  EXPECT_EQ(r.job_status, JobStatus::kSucceeded);
  EXPECT_THAT(r.verdict, HasSubstr("is succeeded"));
  EXPECT_FALSE(Held("order:2"));
}

TEST_F(ReleaseLockTest, RefusesWhatItCannotVerify) {
  Delivery d = DeliverHoldingLock("job_l3", "order:3");
  clock_->Advance(Seconds(46));
  EXPECT_THAT(ops_->ReleaseLock("order:3", "w-9#1", "gina", "x"),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("held by '" + d.lease.token + "', not by 'w-9#1'")));
  EXPECT_THAT(ops_->ReleaseLock("order:3", d.lease.token, " ", "x"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor and reason")));
  EXPECT_THAT(ops_->ReleaseLock("order:3", d.lease.token, "gina", ""),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_TRUE(Held("order:3"));
  EXPECT_THAT(ops_->ReleaseLock("order:404", "w-9#1", "gina", "x"),
              StatusIs(StatusCode::kNotFound, HasSubstr("not held")));

  // A lock no job can be tied to: not a runner's, so never verified gone.
  ASSERT_THAT(backend_.locks->Acquire("cache:refill", "app-7", Seconds(600)).status(), IsOk());
  EXPECT_THAT(ops_->ReleaseLock("cache:refill", "app-7", "gina", "x"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("cannot be verified gone")));
  EXPECT_TRUE(Held("cache:refill"));
}

}  // namespace
}  // namespace jobpact

namespace jobpact {
namespace {

// A cache store that records what Operations asked of it and answers what
// the test set: the facade's checks and plumbing, without a store's own
// behaviour (that is the cache store contract's).
class ScriptedCacheStore final : public CacheStore {
 public:
  std::string_view Name() const override { return "scripted"; }
  Result<std::optional<CacheEntry>> Get(std::string_view key) override {
    calls.push_back("Get " + std::string(key));
    return std::optional<CacheEntry>();
  }
  Status Put(std::string_view key, const CacheEntry&) override {
    calls.push_back("Put " + std::string(key));
    return Status::Ok();
  }
  Result<bool> Erase(std::string_view key) override {
    calls.push_back("Erase " + std::string(key));
    return erase_result;
  }
  Result<std::size_t> EraseByPrefix(std::string_view prefix) override {
    calls.push_back("EraseByPrefix " + std::string(prefix));
    return prefix_result;
  }
  Result<std::size_t> CountByPrefix(std::string_view prefix) override {
    calls.push_back("CountByPrefix " + std::string(prefix));
    return prefix_result;
  }

  Result<bool> erase_result = true;
  Result<std::size_t> prefix_result = std::size_t{0};
  std::vector<std::string> calls;
};

// A listener that keeps what the cache invalidations told it.
class CacheListener : public NonDlqListener {
 public:
  void OnCacheInvalidated(const CacheInvalidation& done, std::string_view actor,
                          std::string_view reason) override {
    told.push_back((done.by_prefix ? "prefix " : "key ") + done.what + " -" +
                   std::to_string(done.removed) + " by " + std::string(actor) + ": " +
                   std::string(reason));
  }
  std::vector<std::string> told;
};

class OperationsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendBundle b = InMemoryBackend(clock_);
    b.cache = store_;
    OperationsOptions o;
    o.clock = clock_;
    o.listener = listener_;
    auto ops = Operations::Open(b, o);
    ASSERT_THAT(ops.status(), IsOk());
    ops_ = std::move(*ops);
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<ScriptedCacheStore> store_ = std::make_shared<ScriptedCacheStore>();
  std::shared_ptr<CacheListener> listener_ = std::make_shared<CacheListener>();
  std::unique_ptr<Operations> ops_;
};

TEST_F(OperationsCacheTest, ABackendWithoutACacheStoreIsNamed) {
  BackendBundle b = InMemoryBackend(clock_);
  b.cache = nullptr;
  b.name = "sqlite";
  auto ops = Operations::Open(b);
  ASSERT_THAT(ops.status(), IsOk());
  const auto no_cache =
      StatusIs(StatusCode::kFailedPrecondition, HasSubstr("the sqlite backend has no cache store"));
  EXPECT_THAT((*ops)->CountCacheEntries("user:").status(), no_cache);
  EXPECT_THAT((*ops)->InvalidateCacheKey("user:1", "ann", "INC-1").status(), no_cache);
  EXPECT_THAT((*ops)->InvalidateCachePrefix("user:", "ann", "INC-1").status(), no_cache);
}

TEST_F(OperationsCacheTest, InvalidateKeyNeedsWhoAndWhyAndSaysWhetherItRemovedOne) {
  EXPECT_THAT(ops_->InvalidateCacheKey("user:1", " ", "INC-1").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor and reason")));
  EXPECT_THAT(ops_->InvalidateCacheKey("user:1", "ann", "").status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->calls, IsEmpty()) << "refused before reaching the store";

  JOBPACT_ASSERT_OK_AND_ASSIGN(CacheInvalidation done,
                               ops_->InvalidateCacheKey("user:1", "ann", "INC-1: renamed"));
  EXPECT_EQ(done.what, "user:1");
  EXPECT_FALSE(done.by_prefix);
  EXPECT_EQ(done.removed, 1u);
  store_->erase_result = false;
  EXPECT_THAT(ops_->InvalidateCacheKey("user:2", "ann", "INC-1").status(),
              StatusIs(StatusCode::kNotFound, HasSubstr("user:2")));
  store_->erase_result = Status::Unavailable("redis down");
  EXPECT_THAT(ops_->InvalidateCacheKey("user:3", "ann", "INC-1").status(),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_->calls, ElementsAre("Erase user:1", "Erase user:2", "Erase user:3"));
  EXPECT_THAT(listener_->told, ElementsAre("key user:1 -1 by ann: INC-1: renamed"))
      << "only what was removed is told";
}

TEST_F(OperationsCacheTest, InvalidatePrefixRefusesAFlushAndPassesTheCountThrough) {
  EXPECT_THAT(ops_->InvalidateCachePrefix("", "ann", "INC-2").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("prefix is empty")));
  EXPECT_THAT(ops_->InvalidateCachePrefix("user:", "ann", "\t").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("actor and reason")));
  EXPECT_THAT(store_->calls, IsEmpty()) << "refused before reaching the store";

  store_->prefix_result = std::size_t{42};
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t count, ops_->CountCacheEntries("user:"));
  EXPECT_EQ(count, 42u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t all, ops_->CountCacheEntries(""));
  EXPECT_EQ(all, 42u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(CacheInvalidation done,
                               ops_->InvalidateCachePrefix("user:", "ann", "INC-2: schema"));
  EXPECT_TRUE(done.by_prefix);
  EXPECT_EQ(done.removed, 42u);
  store_->prefix_result = Status::Unavailable("redis down");
  EXPECT_THAT(ops_->InvalidateCachePrefix("user:", "ann", "INC-2").status(),
              StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(store_->calls, ElementsAre("CountByPrefix user:", "CountByPrefix ",
                                         "EraseByPrefix user:", "EraseByPrefix user:"));
  EXPECT_THAT(listener_->told, ElementsAre("prefix user: -42 by ann: INC-2: schema"));
}

}  // namespace
}  // namespace jobpact
