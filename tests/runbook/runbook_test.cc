// docs/runbook.md, incident by incident, as an on-call engineer meets it: a
// runner on a SQLite file gets into the incident, the metric the runbook
// names moves, and the runbook's action -- the exact `jobpact` command, run
// as a child process against the same file, as from a shell on the host --
// works: the workers obey it and the jobs end where the runbook says.
//
// The runner's time is a ManualClock that starts at the real "now", so that
// the command (which reads the real clock) and the runner agree on what is
// live; the runner's time only moves forward from there. The two cache
// incidents (stampede, stale cache) act on a store with a cache, Redis's
// (skipped without a Redis server, like the other Redis tests); the cache
// guard that moves their metrics is jobpact/cache.h.
#include <sqlite3.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/cache.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/job_runner.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/support/run_program.h"
#include "tests/support/wait_for.h"

#ifdef JOBPACT_RUNBOOK_TEST_WITH_REDIS
#include "jobpact/redis/redis_backend.h"
#include "tests/backends/redis/redis_test_server.h"
#endif

namespace jobpact {
namespace {

using test_support::WaitFor;

using ::testing::Contains;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using testing::IsOk;
using testing::Ran;
using testing::StatusIs;
using Json = nlohmann::json;
using sqlite::SqliteBackend;

Envelope Job(std::string type) {
  Envelope e;
  e.job_type = std::move(type);
  return e;
}

class RunbookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "jobpact_runbook_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/jobs.db";
    url_ = "sqlite://" + path_;
    clock_ = std::make_shared<testing::ManualClock>(std::chrono::system_clock::now());
    auto opened = SqliteBackend::Open(path_, {}, clock_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    backend_ = *opened;
  }
  void TearDown() override {
    if (runner_ != nullptr) {
      EXPECT_THAT(runner_->Shutdown(Seconds(5)), IsOk());
    }
    runner_.reset();
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The runner of the service: the file's stores, the manual clock, and
  // an in-memory sink standing for the metrics the alerts read.
  JobRunner& Runner(const std::function<void(JobRunnerOptions&)>& configure = nullptr) {
    if (runner_ == nullptr) {
      JobRunnerOptions o;
      o.backend = backend_->bundle();
      o.clock = clock_;
      o.metrics = metrics_;
      o.log_level = LogLevel::kOff;
      o.runner_id = "orders-1";
      o.workers = 1;
      if (configure) configure(o);
      auto r = JobRunner::Create(std::move(o));
      EXPECT_TRUE(r.ok()) << r.status();
      runner_ = std::move(*r);
    }
    return *runner_;
  }

  std::string Enqueue(Envelope e) {
    auto r = Runner().Enqueue(std::move(e));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id : "";
  }

  int Run() {
    auto r = Runner().RunUntilIdle();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }

  // The jobpact command on this file, as the runbook writes it.
  Ran Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--backend", url_});
    return testing::RunProgram(JOBPACT_CLI_BUILT, args, {{"USER", "oncall"}});
  }
  Json CliJson(std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    Ran r = Cli(std::move(args));
    EXPECT_EQ(r.rc, 0) << r;
    return r.json();
  }

  JobStatus StatusOf(const std::string& id) {
    auto r = backend_->bundle().admin->Get(id);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->status : JobStatus::kQueued;
  }

  std::int64_t Count(std::string_view name, std::string_view type = {}) const {
    return metrics_->CounterTotal(name, type);
  }

  std::string dir_, path_, url_;
  std::shared_ptr<testing::ManualClock> clock_;
  std::shared_ptr<SqliteBackend> backend_;
  std::shared_ptr<InMemoryMetricsSink> metrics_ = std::make_shared<InMemoryMetricsSink>();
  std::unique_ptr<JobRunner> runner_;
};

// Backlog growth: the oldest ready job ages and the depth stays up
// (JobpactBacklogGrowing). Safe action: pause the type that can wait, so
// the workers serve the one that cannot; resume when it drained. Paused
// jobs are not lost and spend no attempt.
TEST_F(RunbookTest, BacklogGrowthPauseTheTypeThatCanWait) {
  std::atomic<int> bulk{0}, payments{0};
  ASSERT_THAT(Runner().Handle("report.bulk", [&](JobContext&) { ++bulk; return Status::Ok(); }),
              IsOk());
  ASSERT_THAT(Runner().Handle("payment.charge",
                              [&](JobContext&) { ++payments; return Status::Ok(); }),
              IsOk());
  std::vector<std::string> bulk_ids;
  for (int i = 0; i < 40; ++i) bulk_ids.push_back(Enqueue(Job("report.bulk")));
  for (int i = 0; i < 5; ++i) Enqueue(Job("payment.charge"));

  // Ten minutes with no capacity: the gauges the alert reads climb.
  clock_->Advance(std::chrono::minutes(10));
  ASSERT_THAT(Runner().RunMaintenance(), IsOk());
  const MetricLabels q{{}, "default", {}, {}};
  EXPECT_EQ(metrics_->Gauge(metric::kQueueDepth, q), 45);
  EXPECT_THAT(metrics_->Gauge(metric::kOldestJobAge, q).value_or(0), Ge(600));
  EXPECT_EQ(CliJson({"stats"})["queues"]["default"]["depth"], 45);

  // The runbook's safe action.
  Ran paused = Cli({"pause", "report.bulk", "--reason", "INC-1: payments first"});
  ASSERT_EQ(paused.rc, 0) << paused;
  EXPECT_EQ(Run(), 5);
  EXPECT_EQ(payments.load(), 5);
  EXPECT_EQ(bulk.load(), 0);
  for (const std::string& id : bulk_ids) {
    ASSERT_EQ(StatusOf(id), JobStatus::kQueued);
    EXPECT_EQ(backend_->bundle().admin->Get(id)->envelope.attempt, 0);  // Nothing spent.
  }
  // The pause is audited with who and why.
  Json control = CliJson({"control", "show"});
  EXPECT_THAT(control.dump(), HasSubstr("INC-1: payments first"));
  EXPECT_THAT(control.dump(), HasSubstr("oncall"));

  Ran resumed = Cli({"resume", "report.bulk", "--reason", "INC-1: payments drained"});
  ASSERT_EQ(resumed.rc, 0) << resumed;
  EXPECT_EQ(Run(), 40);
  ASSERT_THAT(Runner().RunMaintenance(), IsOk());
  EXPECT_EQ(metrics_->Gauge(metric::kQueueDepth, q), 0);
  EXPECT_EQ(Count(metric::kSucceeded), 45);
}

// Backlog growth past what the workers can drain: the runbook caps the
// queue (`jobpact depth-limit`), producers are refused with a clear error
// and nothing stored (JobpactEnqueueRefused reads the counter), and the
// cap is lifted once the backlog drained.
TEST_F(RunbookTest, BacklogGrowthCapTheQueueSoProducersBackOff) {
  std::atomic<int> ran{0};
  ASSERT_THAT(Runner().Handle("report.bulk", [&](JobContext&) { ++ran; return Status::Ok(); }),
              IsOk());
  for (int i = 0; i < 3; ++i) Enqueue(Job("report.bulk"));
  Ran capped = Cli({"depth-limit", "default", "3", "--reason", "INC-1: producers back off"});
  ASSERT_EQ(capped.rc, 0) << capped;

  Result<EnqueueResult> refused = Runner().Enqueue(Job("report.bulk"));
  EXPECT_THAT(refused.status(), StatusIs(StatusCode::kResourceExhausted,
                                         HasSubstr("queue default is at depth 3 of its maximum 3")));
  EXPECT_EQ(Count(metric::kEnqueueRefused, "report.bulk"), 1);
  EXPECT_EQ(CliJson({"stats"})["queues"]["default"]["depth"], 3) << "nothing half-stored";
  EXPECT_THAT(CliJson({"control", "show"}).dump(), HasSubstr("max_queue_depth"));

  EXPECT_EQ(Run(), 3);  // The workers drain; producers get room again.
  Enqueue(Job("report.bulk"));
  Ran lifted = Cli({"depth-limit", "default", "--clear", "--reason", "INC-1: drained"});
  ASSERT_EQ(lifted.rc, 0) << lifted;
  for (int i = 0; i < 5; ++i) Enqueue(Job("report.bulk"));
  EXPECT_EQ(Run(), 6);
  EXPECT_EQ(ran.load(), 9);
}

// Backlog growth from one tenant's flood: the per-tenant cap (set with the
// CLI, listed by `control show`) keeps the flood from taking every worker:
// a lease hands out at most the cap of each tenant's jobs, the others'
// besides.
TEST_F(RunbookTest, BacklogGrowthFromOneTenantCapEachTenant) {
  for (int i = 0; i < 20; ++i) {
    Envelope e = Job("report.bulk");
    e.tenant_id = "acme";
    Enqueue(e);
  }
  for (int i = 0; i < 2; ++i) {
    Envelope e = Job("report.bulk");
    e.tenant_id = "bolt";
    Enqueue(e);
  }
  Ran capped = Cli({"concurrency", "default", "1", "--per-tenant", "--reason",
                    "INC-1: acme's import takes every worker"});
  ASSERT_EQ(capped.rc, 0) << capped;
  EXPECT_THAT(CliJson({"control", "show"}).dump(), HasSubstr("tenant_concurrency_limit"));

  DequeueRequest req;
  req.max_jobs = 16;
  req.worker_id = "w1";
  Result<std::vector<Delivery>> got = backend_->queue()->Dequeue(req);
  ASSERT_THAT(got.status(), IsOk());
  std::map<std::string, int> by_tenant;
  for (const Delivery& d : *got) ++by_tenant[d.job.envelope.tenant_id];
  EXPECT_EQ(by_tenant["acme"], 1);
  EXPECT_EQ(by_tenant["bolt"], 1);

  Ran lifted = Cli({"concurrency", "default", "--per-tenant", "--clear", "--reason",
                    "INC-1: import done"});
  ASSERT_EQ(lifted.rc, 0) << lifted;
  got = backend_->queue()->Dequeue(req);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->size(), 16u) << "the cap lifted, a lease fills up again";
}

// Retry storm from an overloaded dependency: the operator holds its calls
// (`concurrency DEP 0 --dependency`), the held jobs wait without spending
// attempts and jobpact_concurrency_limited_total moves; a limit of 1 lets
// them through one at a time.
TEST_F(RunbookTest, RetryStormFromAnOverloadedDependencyHoldItsConcurrency) {
  std::atomic<int> charged{0};
  HandlerOptions psp;
  psp.dependency = "psp";
  ASSERT_THAT(Runner().Handle("payment.charge", [&](JobContext&) { ++charged; return Status::Ok(); },
                              psp),
              IsOk());
  Ran held = Cli({"concurrency", "psp", "0", "--dependency", "--reason",
                  "INC-2: PSP times out under load"});
  ASSERT_EQ(held.rc, 0) << held;
  const std::string id = Enqueue(Job("payment.charge"));
  EXPECT_EQ(Run(), 1);
  EXPECT_EQ(charged.load(), 0);
  EXPECT_EQ(StatusOf(id), JobStatus::kRetryScheduled);
  EXPECT_EQ(Count(metric::kConcurrencyLimited, "payment.charge"), 1);
  EXPECT_THAT(CliJson({"jobs", "show", id}).dump(), HasSubstr("concurrency_limited"));

  Ran one = Cli({"concurrency", "psp", "1", "--dependency", "--reason", "INC-2: recovering"});
  ASSERT_EQ(one.rc, 0) << one;
  clock_->Advance(Seconds(2));
  EXPECT_EQ(Run(), 1);
  EXPECT_EQ(charged.load(), 1);
  EXPECT_EQ(StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(CliJson({"jobs", "show", id})["attempt"], 1) << "the wait spent nothing";
}

// Retry storm from a rate-limiting upstream: one 429 with Retry-After holds
// every job that calls the dependency (jobpact_rate_limited_total moves),
// `jobpact ratelimit list` shows the backoff and why, and `ratelimit lift`
// lets new deliveries through once the upstream is back.
TEST_F(RunbookTest, RetryStormFromA429HoldsTheDependencyUntilLifted) {
  std::atomic<int> limited{0}, charged{0};
  HandlerOptions psp;
  psp.dependency = "psp";
  ASSERT_THAT(Runner().Handle("payment.charge",
                              [&](JobContext& ctx) {
                                if (limited++ == 0) {
                                  return ctx.RateLimited(std::chrono::minutes(10),
                                                         "http 429, Retry-After: 600");
                                }
                                ++charged;
                                return Status::Ok();
                              },
                              psp),
              IsOk());
  Enqueue(Job("payment.charge"));
  EXPECT_EQ(Run(), 1);
  const std::string held = Enqueue(Job("payment.charge"));
  EXPECT_EQ(Run(), 1);
  EXPECT_EQ(charged.load(), 0) << "the second job was held, not run";
  EXPECT_EQ(backend_->bundle().admin->Get(held)->history.back().reason, reason::kRateLimited);
  EXPECT_EQ(Count(metric::kRateLimited, "payment.charge"), 2) << "the 429 and the held job";

  Json limiters = CliJson({"ratelimit", "list"});
  ASSERT_EQ(limiters.size(), 1u) << limiters.dump();
  EXPECT_EQ(limiters[0]["key"], "dependency:psp");
  EXPECT_FALSE(limiters[0]["backoff_until"].is_null());
  EXPECT_THAT(limiters[0]["backoff_reason"].get<std::string>(), HasSubstr("payment.charge"));

  Ran lifted = Cli({"ratelimit", "lift", "dependency:psp", "--reason", "INC-2: PSP is back"});
  ASSERT_EQ(lifted.rc, 0) << lifted;
  Enqueue(Job("payment.charge"));
  EXPECT_EQ(Run(), 1);
  EXPECT_EQ(charged.load(), 1) << "a new delivery passes once the backoff is lifted";
  EXPECT_TRUE(CliJson({"ratelimit", "list"})[0]["backoff_until"].is_null());
}

// Retry storm: a dependency is down, retries outgrow first attempts
// (JobpactRetryStorm). Safe action: route the failing class to the DLQ, so
// the jobs are parked instead of retried. Guard-railed, once it is healthy:
// a dry-run replay, then the replay at a rate.
TEST_F(RunbookTest, RetryStormRouteToDlqThenReplayAtARate) {
  std::atomic<bool> psp_up{false};
  ASSERT_THAT(Runner().Handle("payment.charge",
                              [&](JobContext&) {
                                return psp_up ? Status::Ok() : Status::Unavailable("PSP 503");
                              }),
              IsOk());
  constexpr int kJobs = 30;
  for (int i = 0; i < kJobs; ++i) Enqueue(Job("payment.charge"));
  EXPECT_EQ(Run(), kJobs);
  clock_->Advance(Seconds(10));  // Past every first backoff (at most 1 s).
  EXPECT_EQ(Run(), kJobs);
  const MetricLabels transient{"payment.charge", "default", {}, "transient"};
  EXPECT_EQ(metrics_->Counter(metric::kRetries, transient), 2 * kJobs);
  EXPECT_EQ(Count(metric::kStarted, "payment.charge"), 2 * kJobs);

  Ran routed = Cli({"route", "payment.charge", "--class", "transient", "--to", "dlq", "--reason",
                    "INC-2: PSP down, park the charges"});
  ASSERT_EQ(routed.rc, 0) << routed;
  clock_->Advance(Seconds(10));
  EXPECT_EQ(Run(), kJobs);  // One more failure each, parked at once.
  EXPECT_EQ(metrics_->Counter(metric::kRetries, transient), 2 * kJobs);  // No more retries.
  EXPECT_EQ(metrics_->Counter(metric::kDeadLettered, {"payment.charge", "default",
                                                      reason::kRoutedToDlq, {}}),
            kJobs);
  Json parked = CliJson({"dlq", "list", "--type", "payment.charge"});
  ASSERT_THAT(parked, SizeIs(kJobs));

  // The PSP is back: lift the route, review the replay, then replay paced.
  psp_up = true;
  ASSERT_EQ(Cli({"route", "payment.charge", "--class", "transient", "--clear", "--reason",
                 "INC-2: PSP healthy"})
                .rc,
            0);
  Json dry = CliJson({"dlq", "replay", "--type", "payment.charge", "--dlq-reason",
                      std::string(reason::kRoutedToDlq), "--dry-run", "--reason",
                      "INC-2: PSP healthy"});
  EXPECT_THAT(dry.dump(), HasSubstr("would_replay"));
  EXPECT_THAT(CliJson({"dlq", "list", "--type", "payment.charge"}), SizeIs(kJobs));  // Unchanged.
  Ran replayed = Cli({"dlq", "replay", "--type", "payment.charge", "--dlq-reason",
                      std::string(reason::kRoutedToDlq), "--rate", "10/s", "--reason",
                      "INC-2: PSP healthy"});
  ASSERT_EQ(replayed.rc, 0) << replayed;
  EXPECT_THAT(CliJson({"dlq", "list", "--type", "payment.charge"}), SizeIs(0));
  clock_->Advance(Seconds(60));  // Past the last paced ready time (30 jobs at 10/s).
  EXPECT_EQ(Run(), kJobs);
  EXPECT_EQ(Count(metric::kSucceeded, "payment.charge"), kJobs);
  // Each replayed job's audit names who and why.
  const std::string one = parked[0]["job_id"];
  EXPECT_THAT(CliJson({"jobs", "show", one}).dump(), HasSubstr("INC-2: PSP healthy"));
}

// A dead process still "holds" the lock of customer 42 (its TTL outlives its
// lease): every job on that key waits (JobpactLockContention). The lock is
// released by hand only once its owner is verified gone; the command refuses
// while the owner's lease is live.
TEST_F(RunbookTest, StuckLockReleasedOnlyOnceItsOwnerIsGone) {
  std::atomic<int> ran{0};
  ASSERT_THAT(Runner().Handle("invoice.generate", [&](JobContext&) { ++ran; return Status::Ok(); }),
              IsOk());
  // The process that died: it leased a job and took its lock, for an hour.
  Envelope holder = Job("invoice.generate");
  holder.lock_key = "customer:42";
  const std::string holder_id = Enqueue(holder);
  DequeueRequest req;
  req.worker_id = "orders-2/w1";
  req.max_jobs = 1;
  auto leased = backend_->bundle().queue->Dequeue(req);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_THAT(*leased, SizeIs(1));
  const std::string owner = (*leased)[0].lease.token;
  ASSERT_TRUE(backend_->bundle().locks->Acquire("customer:42", owner, std::chrono::hours(1)).ok());

  std::vector<std::string> waiting;
  for (int i = 0; i < 3; ++i) {
    Envelope e = Job("invoice.generate");
    e.lock_key = "customer:42";
    waiting.push_back(Enqueue(e));
  }
  EXPECT_EQ(Run(), 3);
  EXPECT_EQ(Count(metric::kLockContention, "invoice.generate"), 3);
  EXPECT_EQ(ran.load(), 0);
  for (const std::string& id : waiting) EXPECT_EQ(StatusOf(id), JobStatus::kRetryScheduled);

  // Who holds it: the dead process's delivery. Its lease is still live, so
  // the release is refused (exit 3) and says why.
  Json locks = CliJson({"locks", "list"});
  EXPECT_THAT(locks.dump(), HasSubstr(owner));
  Ran refused = Cli({"locks", "release", "customer:42", "--owner", owner, "--reason", "INC-3"});
  EXPECT_EQ(refused.rc, 3) << refused;
  EXPECT_TRUE(refused.one_line_error()) << refused;
  EXPECT_THAT(refused.err, HasSubstr(holder_id));

  // Its lease expires and a maintenance pass recovers the job: the owner is
  // verified gone, but the lock still blocks the key until its TTL.
  clock_->Advance(Seconds(60));
  EXPECT_EQ(Run(), 4);
  EXPECT_EQ(Count(metric::kLeaseRecoveries, "invoice.generate"), 1);
  EXPECT_EQ(Count(metric::kLockContention, "invoice.generate"), 7);
  Ran released = Cli({"locks", "release", "customer:42", "--owner", owner, "--reason",
                      "INC-3: orders-2 is gone"});
  ASSERT_EQ(released.rc, 0) << released;
  clock_->Advance(Seconds(2));  // Past the lock-busy delays (at most 1 s).
  EXPECT_EQ(Run(), 4);
  EXPECT_EQ(ran.load(), 4);
  for (const std::string& id : waiting) EXPECT_EQ(StatusOf(id), JobStatus::kSucceeded);
  EXPECT_EQ(StatusOf(holder_id), JobStatus::kSucceeded);
}

// Duplicate side effects: a handler outlives its lease, another worker runs
// the job again, the first one's late completion is refused
// (JobpactStaleCompletions: lease recoveries and stale completions move).
// A plain effect ran twice; the same effect as a transactional effect
// commits once, whichever worker finishes. The runbook's first step is
// `jobs show` (two deliveries in the history); the safe action pauses the
// type while the lease is fixed.
TEST_F(RunbookTest, DuplicateSideEffectsShowInTheMetricsAndTheHistory) {
  ASSERT_THAT(backend_->RunInTransaction([](sqlite3* db) -> Status {
                return sqlite3_exec(db, "CREATE TABLE sent (job_id TEXT)", nullptr, nullptr,
                                    nullptr) == SQLITE_OK
                           ? Status::Ok()
                           : Status::Internal(sqlite3_errmsg(db));
              }),
              IsOk());
  std::atomic<int> calls{0};
  std::atomic<int> plain_effects{0};
  ASSERT_THAT(
      Runner().Handle("email.send",
                      [&](JobContext& ctx) -> Status {
                        ++plain_effects;  // An effect outside the store (an SMTP call).
                        const std::string id = ctx.envelope().job_id;
                        ctx.SetTransactionalEffect([id](void* native) -> Status {
                          auto* db = static_cast<sqlite3*>(native);
                          const std::string sql = "INSERT INTO sent VALUES ('" + id + "')";
                          return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) ==
                                         SQLITE_OK
                                     ? Status::Ok()
                                     : Status::Internal(sqlite3_errmsg(db));
                        });
                        if (++calls == 1) {
                          // The first worker stalls past its 45 s lease; a
                          // second worker takes the job over meanwhile.
                          clock_->Advance(Seconds(50));
                          EXPECT_EQ(Run(), 1);
                        }
                        return Status::Ok();
                      }),
      IsOk());
  Envelope e = Job("email.send");
  e.idempotency_key = "welcome:user-7";
  const std::string id = Enqueue(e);
  EXPECT_EQ(Run(), 1);

  EXPECT_EQ(Count(metric::kLeaseRecoveries, "email.send"), 1);
  EXPECT_EQ(Count(metric::kStaleCompletions, "email.send"), 1);
  EXPECT_EQ(plain_effects.load(), 2);  // What the alert is about.
  int rows = -1;
  ASSERT_THAT(backend_->RunInTransaction([&](sqlite3* db) -> Status {
                sqlite3_stmt* st = nullptr;
                sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM sent", -1, &st, nullptr);
                if (sqlite3_step(st) == SQLITE_ROW) rows = sqlite3_column_int(st, 0);
                sqlite3_finalize(st);
                return Status::Ok();
              }),
              IsOk());
  EXPECT_EQ(rows, 1);  // The transactional effect committed once.
  EXPECT_EQ(StatusOf(id), JobStatus::kSucceeded);

  // The runbook's diagnosis: two deliveries, a lease lost in between.
  const std::string history = CliJson({"jobs", "show", id}).dump();
  EXPECT_THAT(history, HasSubstr(reason::kLeaseExpired));
  // The safe action while the handler's lease is fixed.
  ASSERT_EQ(Cli({"pause", "email.send", "--reason", "INC-4: lease too short"}).rc, 0);
  const std::string next = Enqueue(Job("email.send"));
  EXPECT_EQ(Run(), 0);
  EXPECT_EQ(StatusOf(next), JobStatus::kQueued);
}

// Hung workers: a handler blocks in a dependency past its deadline and the
// grace (JobpactHungWorkers). jobpact replaces the worker and redelivers the
// job by itself; the safe action pauses the type so no other worker gets
// stuck on it while the other types keep running.
TEST_F(RunbookTest, HungWorkersAreReplacedAndThePauseKeepsTheOthersRunning) {
  std::atomic<bool> release{false};
  std::atomic<int> pdf_calls{0}, mail{0};
  JobRunner& runner = Runner([](JobRunnerOptions& o) {
    o.workers = 1;
    o.hung_grace = Seconds(10);
    o.maintenance_interval = Seconds(1);
  });
  ASSERT_THAT(runner.Handle("pdf.render",
                            [&](JobContext&) {
                              if (++pdf_calls == 1) {
                                WaitFor([&] { return release.load(); });
                              }
                              return Status::Ok();
                            }),
              IsOk());
  ASSERT_THAT(runner.Handle("mail.send", [&](JobContext&) { ++mail; return Status::Ok(); }),
              IsOk());
  Envelope stuck = Job("pdf.render");
  stuck.timeout = Seconds(5);
  stuck.visibility_timeout = Seconds(20);
  const std::string stuck_id = Enqueue(stuck);
  ASSERT_THAT(runner.Start(), IsOk());
  ASSERT_TRUE(WaitFor([&] { return pdf_calls.load() == 1; }));

  // Past the deadline (5 s) and the grace (10 s), then past the lease: the
  // watchdog declares the worker hung and the job comes back to a
  // replacement worker.
  ASSERT_TRUE(WaitFor([&] { return metrics_->Gauge(metric::kHungWorkersNow).value_or(0) == 1; },
                      [&] { clock_->Advance(Seconds(1)); }));
  EXPECT_EQ(Count(metric::kHungWorkers), 1);
  ASSERT_TRUE(WaitFor([&] { return pdf_calls.load() == 2; }, [&] { clock_->Advance(Seconds(1)); }));
  ASSERT_TRUE(WaitFor([&] { return StatusOf(stuck_id) == JobStatus::kSucceeded; },
                      [&] { clock_->Advance(Millis(100)); }));
  EXPECT_EQ(runner.Stats().replacement_workers, 1);

  // The safe action: pause the type whose handler hangs; the rest runs.
  ASSERT_EQ(Cli({"pause", "pdf.render", "--reason", "INC-5: renderer hangs"}).rc, 0);
  const std::string held = Enqueue(Job("pdf.render"));
  for (int i = 0; i < 3; ++i) Enqueue(Job("mail.send"));
  ASSERT_TRUE(WaitFor([&] { return mail.load() == 3; }, [&] { clock_->Advance(Millis(100)); }));
  EXPECT_EQ(StatusOf(held), JobStatus::kQueued);
  EXPECT_EQ(pdf_calls.load(), 2);

  // The stuck call returns at last: its late completion is refused, its
  // thread exits and the gauge drops back. (Two separate events: the
  // refusal is counted when the completion writer stores the outcome the
  // thread handed it, which may be after the thread has gone.)
  release = true;
  ASSERT_TRUE(WaitFor([&] { return metrics_->Gauge(metric::kHungWorkersNow).value_or(1) == 0; },
                      [&] { clock_->Advance(Millis(100)); }));
  ASSERT_TRUE(WaitFor([&] { return Count(metric::kStaleCompletions, "pdf.render") >= 1; },
                      [&] { clock_->Advance(Millis(100)); }));
  EXPECT_EQ(Count(metric::kStaleCompletions, "pdf.render"), 1);
  ASSERT_EQ(Cli({"resume", "pdf.render", "--reason", "INC-5: renderer fixed"}).rc, 0);
  ASSERT_TRUE(WaitFor([&] { return StatusOf(held) == JobStatus::kSucceeded; },
                      [&] { clock_->Advance(Millis(100)); }));
}

#ifdef JOBPACT_RUNBOOK_TEST_WITH_REDIS
// The cache incidents on a Redis namespace of their own, whose cache store
// the service's cache guard fills (here: Put, as the guard stores a load),
// on the same manual clock at the real "now" as the runner above.
class RunbookCacheTest : public RunbookTest {
 protected:
  void SetUp() override {
    RunbookTest::SetUp();
    JOBPACT_REDIS_URL_OR_SKIP(server);
    redis::RedisOptions options = redis_testing::TestOptions();
    redis_url_ = server + (server.find('?') == std::string::npos ? "?" : "&") +
                 "namespace=" + options.key_namespace;
    auto opened = redis::RedisBackend::Open(options, clock_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    redis_ = *opened;
    cache_ = redis_->cache();
    ASSERT_NE(cache_, nullptr);
  }
  void TearDown() override {
    if (cache_ != nullptr) {
      for (const char* p : {"user:", "product:", "account:"}) (void)cache_->EraseByPrefix(p);
    }
    RunbookTest::TearDown();
  }

  // What the guard stores after a load: fresh for a minute, servable stale
  // for five more (and on errors for an hour), data `age` old.
  void Cached(const std::string& key, Duration age = Seconds(0)) {
    CacheEntry e;
    e.value = R"({"key":")" + key + R"("})";
    e.fresh_until = clock_->Now() + Seconds(60);
    e.stale_until = e.fresh_until + Seconds(300);
    e.error_until = e.fresh_until + Seconds(3600);
    e.as_of = clock_->Now() - age;
    e.stored_at = clock_->Now();
    e.load_duration = Millis(40);
    ASSERT_THAT(cache_->Put(key, e), IsOk());
  }
  std::optional<CacheEntry> Lookup(const std::string& key) {
    auto r = cache_->Get(key);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::nullopt;
  }
  std::size_t Live(const std::string& prefix) {
    auto r = cache_->CountByPrefix(prefix);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : 0;
  }
  // The jobpact command on the Redis namespace, as the runbook writes it.
  Ran CacheCli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--backend", redis_url_});
    return testing::RunProgram(JOBPACT_CLI_BUILT, args, {{"USER", "oncall"}});
  }

  std::string redis_url_;
  std::shared_ptr<redis::RedisBackend> redis_;
  std::shared_ptr<CacheStore> cache_;
};

// Cache stampede: the safe read shows what the cache still holds; a prefix
// invalidation (after the origin recovered, to drop entries loaded wrong)
// is guard-railed: without --yes it shows the count and removes nothing;
// with it, it removes exactly the keys starting with the prefix -- not
// "users:" or "account:user:", which merely contain it.
TEST_F(RunbookCacheTest, CacheStampedePrefixInvalidationIsGuardRailed) {
  for (int i = 0; i < 150; ++i) Cached("user:" + std::to_string(i));
  for (const char* k : {"users:1", "account:user:1", "product:1"}) Cached(k);

  Ran count = CacheCli({"--json", "cache", "count", "--prefix", "user:"});
  ASSERT_EQ(count.rc, 0) << count;
  EXPECT_EQ(count.json()["entries"], 150);

  Ran refused = CacheCli({"cache", "invalidate", "--prefix", "user:", "--reason",
                          "INC-11: bad rows loaded during the outage"});
  EXPECT_EQ(refused.rc, 3) << refused;
  EXPECT_THAT(refused.err, HasSubstr("would remove 150 cache entries"));
  EXPECT_EQ(Live(""), 153u) << "a refusal removes nothing";

  Ran done = CacheCli({"cache", "invalidate", "--prefix", "user:", "--yes", "--reason",
                       "INC-11: bad rows loaded during the outage"});
  ASSERT_EQ(done.rc, 0) << done;
  EXPECT_THAT(done.out, HasSubstr("removed 150 cache entries"));
  EXPECT_EQ(Live("user:"), 0u);
  EXPECT_FALSE(Lookup("user:7").has_value()) << "the next read is a miss, loaded again";
  for (const char* k : {"users:1", "account:user:1", "product:1"}) {
    EXPECT_TRUE(Lookup(k).has_value()) << k;
  }
  // A whole flush is escalate-only: the tool refuses an empty prefix.
  Ran flush = CacheCli({"cache", "invalidate", "--prefix", "", "--yes", "--reason", "INC-11"});
  EXPECT_EQ(flush.rc, 2) << flush;
  EXPECT_EQ(Live(""), 3u);
}

// Stale data in a cache: one entry holds data an hour old (its as_of);
// removing that one key makes its next read a miss, loaded from the origin,
// and leaves every other entry served from the cache.
TEST_F(RunbookCacheTest, StaleCacheEntryInvalidatedByKey) {
  Cached("user:42", Seconds(3600));
  Cached("user:43");
  auto old = Lookup("user:42");
  ASSERT_TRUE(old.has_value());
  // The data age a service shows (a store keeps times to the microsecond).
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::microseconds>(clock_->Now() - old->as_of),
            std::chrono::seconds(3600));

  Ran r = CacheCli({"cache", "invalidate", "--key", "user:42", "--reason",
                    "INC-12: user 42 sees the old address"});
  ASSERT_EQ(r.rc, 0) << r;
  EXPECT_FALSE(Lookup("user:42").has_value());
  EXPECT_TRUE(Lookup("user:43").has_value());
  // Again: nothing left to remove, said so (exit 1), nothing else touched.
  Ran again = CacheCli({"cache", "invalidate", "--key", "user:42", "--reason", "INC-12"});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_EQ(Live("user:"), 1u);
}
// Cache stampede, as the metrics show it: a hot key expires under load;
// with the guard every concurrent reader but one is coalesced onto the one
// load (jobpact_cache_coalesced_total moves, the loader histogram's count
// stays at one per window), and the safe action -- a stale-while-revalidate
// window -- lets the expired entry be refreshed by one caller while the
// others are served the stale value (docs/cache.md).
TEST_F(RunbookCacheTest, CacheStampedeTheGuardsMetricsMoveAndStaleWhileRevalidateAbsorbsIt) {
  auto metrics = std::make_shared<InMemoryMetricsSink>();
  CacheGuardOptions o;
  o.store = cache_;
  o.locks = redis_->locks();
  o.clock = clock_;
  o.metrics = metrics;
  auto guard = CacheGuard::Create(o);
  ASSERT_TRUE(guard.ok()) << guard.status();
  std::atomic<int> loads{0};
  std::atomic<bool> release{false};
  // A slow origin: the load waits until every reader has asked.
  auto loader = [&]() -> Result<CacheLoad> {
    ++loads;
    WaitFor([&] { return release.load(); });
    return CacheLoad::Found(R"({"name":"ada"})");
  };
  constexpr int kReaders = 32;
  std::vector<std::thread> readers;
  std::atomic<int> asked{0}, ok{0};
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      ++asked;
      if ((*guard)->Get("user:42", loader).ok()) ++ok;
    });
  }
  while (asked.load() < kReaders) std::this_thread::yield();
  const bool all_coalesced = WaitFor([&] {
    return metrics->Counter(metric::kCacheCoalesced, MetricLabels{{}, {}, {}, {}, "user"}) + 1 >=
           kReaders;
  });
  release = true;
  EXPECT_TRUE(all_coalesced);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(ok.load(), kReaders);
  EXPECT_EQ(loads.load(), 1) << "32 readers of an expired hot key: one origin call";
  EXPECT_EQ(metrics->Counter(metric::kCacheCoalesced, MetricLabels{{}, {}, {}, {}, "user"}),
            kReaders - 1);

  // The safe action: a stale-while-revalidate window. Past the fresh
  // window, readers are served the stale value at once; one refreshes.
  CacheGetOptions swr;
  swr.ttl = Seconds(60);
  swr.ttl_jitter = 0;
  swr.stale_while_revalidate = Seconds(300);
  ASSERT_TRUE((*guard)->Invalidate("user:42").ok());
  ASSERT_TRUE((*guard)->Get("user:42", loader, swr).ok());
  const int before = loads.load();
  clock_->Advance(Seconds(61));
  auto stale = (*guard)->Get("user:42", loader, swr);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(loads.load(), before + 1) << "the one refresher";
  auto fresh = (*guard)->Get("user:42", loader, swr);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->source, CacheSource::kHit) << "refreshed for everyone after it";
}

// Stale data the guard serves on purpose: the origin fails, the guard
// serves the last value within stale-if-error and says how old it is
// (jobpact_cache_stale_served_total{reason="error"} and
// jobpact_cache_loader_errors_total move: JobpactCacheServingStaleOnErrors);
// once the origin is right again, invalidating the key makes the next read
// load it.
TEST_F(RunbookCacheTest, StaleDataServedOnErrorsShowsItsAgeAndInvalidationReloads) {
  auto metrics = std::make_shared<InMemoryMetricsSink>();
  CacheGuardOptions o;
  o.store = cache_;
  o.locks = redis_->locks();
  o.clock = clock_;
  o.metrics = metrics;
  auto guard = CacheGuard::Create(o);
  ASSERT_TRUE(guard.ok()) << guard.status();
  bool origin_up = true;
  std::string address = "old street 1";
  auto loader = [&]() -> Result<CacheLoad> {
    if (!origin_up) return Status::Unavailable("address service down");
    return CacheLoad::Found(address);
  };
  CacheGetOptions sie;
  sie.ttl = Seconds(60);
  sie.ttl_jitter = 0;
  sie.stale_if_error = Seconds(3600);
  ASSERT_TRUE((*guard)->Get("account:7", loader, sie).ok());
  origin_up = false;
  clock_->Advance(Seconds(600));
  auto served = (*guard)->Get("account:7", loader, sie);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->value, "old street 1");
  EXPECT_EQ(served->source, CacheSource::kStaleOnError);
  EXPECT_GE(served->age, Seconds(600)) << "the data age a service can show";
  const MetricLabels account{{}, {}, "error", {}, "account"};
  EXPECT_EQ(metrics->Counter(metric::kCacheStaleServed, account), 1);
  EXPECT_GE(metrics->Counter(metric::kCacheLoaderErrors, MetricLabels{{}, {}, {}, {}, "account"}),
            1);

  // The origin is back with the new address; the runbook's action.
  origin_up = true;
  address = "new street 2";
  Ran r = CacheCli({"cache", "invalidate", "--key", "account:7", "--reason",
                    "INC-12: customer sees the old address"});
  ASSERT_EQ(r.rc, 0) << r;
  auto reloaded = (*guard)->Get("account:7", loader, sie);
  ASSERT_TRUE(reloaded.ok());
  EXPECT_EQ(reloaded->value, "new street 2");
  EXPECT_EQ(reloaded->source, CacheSource::kLoaded);
}
#endif  // JOBPACT_RUNBOOK_TEST_WITH_REDIS

// Every command the runbook gives is one the tool accepts: each `jobpact`
// line of its ```sh blocks, run on an empty store, is never a usage error
// (exit code 2). An action may still fail there (exit 1: nothing to
// resume) or be refused (exit 3), but a renamed flag or command fails here.
TEST_F(RunbookTest, EveryCommandInTheRunbookIsAcceptedByTheTool) {
  std::ifstream in(std::string(JOBPACT_SOURCE_DIR) + "docs/runbook.md");
  ASSERT_TRUE(in.good());
  std::string line;
  bool in_sh = false;
  int commands = 0;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      in_sh = line == "```sh";
      continue;
    }
    if (!in_sh || line.rfind("jobpact ", 0) != 0) continue;
    // Words, with "double quoted" ones kept whole; a # starts a comment.
    std::vector<std::string> words;
    std::string word;
    bool quoted = false, has_word = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
        has_word = true;
      } else if (!quoted && c == '#') {
        break;
      } else if (!quoted && c == ' ') {
        if (has_word) words.push_back(word);
        word.clear();
        has_word = false;
      } else {
        word += c;
        has_word = true;
      }
    }
    if (has_word) words.push_back(word);
    words.erase(words.begin());  // "jobpact"
    Ran r = Cli(words);
    EXPECT_NE(r.rc, 2) << line << "\n" << r;
    EXPECT_NE(r.rc, -1) << line << "\n" << r;
    ++commands;
  }
  EXPECT_GE(commands, 15);
}

}  // namespace
}  // namespace jobpact
