// The operator side on a SQLite file shared by several backend instances
// (each as another process would hold it): control state, cancel requests
// and limits cross from one instance to another through the file; schema
// version 2 migrates a version-1 file in place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/backends/sqlite/sqlite_test_files.h"
#include "tests/backends/tenant_fairness.h"

namespace jobpact {
namespace sqlite {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::IsOk;
using testing::ManualClock;
using testing::StatusIs;

class SqliteAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    path_ = dir_.File("jobs.db");
  }

  // Another handle on the file, as another process would open it.
  std::shared_ptr<SqliteBackend> Open() {
    auto b = SqliteBackend::Open(path_, {}, clock_);
    EXPECT_THAT(b.status(), IsOk());
    return b.ok() ? *b : nullptr;
  }

  static void Put(SqliteBackend& b, std::string id, std::string type) {
    Envelope env;
    env.job_id = std::move(id);
    env.job_type = std::move(type);
    env.payload = "{}";
    ASSERT_THAT(b.queue()->Enqueue(env, {}).status(), IsOk());
  }

  static std::vector<Delivery> Take(SqliteBackend& b, int n, std::string worker) {
    DequeueRequest req;
    req.max_jobs = n;
    req.worker_id = std::move(worker);
    auto r = b.queue()->Dequeue(req);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? std::move(*r) : std::vector<Delivery>{};
  }

  // A runner on its own handle of the file, counting the runs per type.
  struct Process {
    std::shared_ptr<SqliteBackend> db;
    std::unique_ptr<JobRunner> runner;
    int mails = 0;
    int pdfs = 0;
  };
  std::unique_ptr<Process> StartProcess(std::string id) {
    auto p = std::make_unique<Process>();
    p->db = Open();
    JobRunnerOptions o;
    o.backend = p->db->bundle();
    o.clock = clock_;
    o.runner_id = std::move(id);
    o.log_level = LogLevel::kOff;
    auto r = JobRunner::Create(o);
    EXPECT_THAT(r.status(), IsOk());
    if (!r.ok()) return p;
    p->runner = std::move(*r);
    Process* raw = p.get();
    EXPECT_THAT(p->runner->Handle("mail.send", [raw](JobContext&) {
      ++raw->mails;
      return Status::Ok();
    }),
                IsOk());
    EXPECT_THAT(p->runner->Handle("pdf.render", [raw](JobContext&) {
      ++raw->pdfs;
      return Status::Ok();
    }),
                IsOk());
    return p;
  }

  TempDir dir_;
  std::string path_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(SqliteAdminTest, APauseFromAnOperatorHandleStopsTheTypeInTwoRunners) {
  std::unique_ptr<Process> a = StartProcess("runner-a");
  std::unique_ptr<Process> b = StartProcess("runner-b");
  ASSERT_TRUE(a->runner && b->runner);
  for (int i = 0; i < 4; ++i) {
    Put(*a->db, "job_m" + std::to_string(i), "mail.send");
    Put(*a->db, "job_p" + std::to_string(i), "pdf.render");
  }
  auto ops = Operations::Open(Open()->bundle());
  ASSERT_THAT(ops.status(), IsOk());
  ASSERT_THAT((*ops)->PauseType("mail.send", "alice", "INC-3: relay down"), IsOk());

  ASSERT_THAT(a->runner->RunUntilIdle().status(), IsOk());
  ASSERT_THAT(b->runner->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(a->mails + b->mails, 0) << "neither process runs a paused type";
  EXPECT_EQ(a->pdfs + b->pdfs, 4);
  JobFilter queued;
  queued.status = JobStatus::kQueued;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> held, (*ops)->ListJobs(queued));
  ASSERT_THAT(held, SizeIs(4));
  for (const JobRecord& r : held) EXPECT_EQ(r.epoch, 0) << r.envelope.job_id << " was leased";

  ASSERT_THAT((*ops)->ResumeType("mail.send", "alice", "relay back"), IsOk());
  ASSERT_THAT(b->runner->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(b->mails, 4);
}

TEST_F(SqliteAdminTest, APauseGivenByOneRunnerStopsTheTypeInTheOtherOnOneFile) {
  std::unique_ptr<Process> a = StartProcess("runner-a");
  std::unique_ptr<Process> b = StartProcess("runner-b");
  ASSERT_TRUE(a->runner && b->runner);
  for (int i = 0; i < 3; ++i) Put(*a->db, "job_m" + std::to_string(i), "mail.send");
  ASSERT_THAT(a->runner->Pause("mail.send"), IsOk());
  ASSERT_THAT(b->runner->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(b->mails, 0) << "runner b obeys the pause runner a stored in the file";
  ASSERT_THAT(a->runner->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(a->mails, 0);
  ASSERT_THAT(b->runner->Resume("mail.send"), IsOk());
  ASSERT_THAT(a->runner->RunUntilIdle().status(), IsOk());
  EXPECT_EQ(a->mails, 3) << "and a resume from runner b lifts it for runner a";
}

TEST_F(SqliteAdminTest, ACancelFromAnotherHandleReachesTheHolderAtItsNextRenew) {
  std::shared_ptr<SqliteBackend> worker = Open();
  std::shared_ptr<SqliteBackend> operator_handle = Open();
  Put(*worker, "job_1", "mail.send");
  std::vector<Delivery> d = Take(*worker, 1, "w1");
  ASSERT_THAT(d, SizeIs(1));
  DlqAction who;
  who.actor = "bob";
  who.reason = "customer asked";
  JOBPACT_ASSERT_OK_AND_ASSIGN(CancelOutcome o, operator_handle->admin()->Cancel("job_1", who));
  EXPECT_EQ(o, CancelOutcome::kCancelRequested);
  JOBPACT_ASSERT_OK_AND_ASSIGN(Lease renewed, worker->queue()->Renew(d[0].lease, Seconds(30), ""));
  EXPECT_TRUE(renewed.cancel_requested);
}

TEST_F(SqliteAdminTest, AConcurrencyLimitIsCountedOverEveryHandleOfTheFile) {
  std::shared_ptr<SqliteBackend> one = Open();
  std::shared_ptr<SqliteBackend> two = Open();
  for (int i = 0; i < 3; ++i) Put(*one, "job_" + std::to_string(i), "pdf.render");
  ControlRule limit;
  limit.kind = ControlKind::kConcurrencyLimit;
  limit.subject = "pdf.render";
  limit.limit = 1;
  limit.actor = "alice";
  limit.reason = "renderer is overloaded";
  ASSERT_THAT(two->admin()->SetControl(limit), IsOk());
  EXPECT_THAT(Take(*one, 5, "w1"), SizeIs(1));
  EXPECT_THAT(Take(*two, 5, "w2"), IsEmpty()) << "the other handle sees the running job";
}

// The runbook's "lower its concurrency" at run time: a lowered limit holds
// in another process at its next lease (its next poll), while the jobs
// already running finish as usual.
TEST_F(SqliteAdminTest, ALimitLoweredAtRunTimeHoldsInAnotherProcessAtItsNextLease) {
  std::unique_ptr<Process> a = StartProcess("runner-a");
  std::unique_ptr<Process> b = StartProcess("runner-b");
  ASSERT_TRUE(a->runner && b->runner);
  auto ops = Operations::Open(Open()->bundle());
  ASSERT_THAT(ops.status(), IsOk());
  ASSERT_THAT((*ops)->SetConcurrencyLimit("report.build", 3, "alice", "normal load"), IsOk());
  for (int i = 0; i < 4; ++i) Put(*a->db, "job_r" + std::to_string(i), "report.build");
  int ran_in_b = 0;
  ASSERT_THAT(b->runner->Handle("report.build", [&](JobContext&) { ++ran_in_b; return Status::Ok(); }),
              IsOk());
  bool lowered = false;
  ASSERT_THAT(a->runner->Handle("report.build",
                                [&](JobContext&) {
                                  if (!lowered) {
                                    // While this job runs, the operator lowers
                                    // the limit to 1, and process b polls.
                                    lowered = true;
                                    EXPECT_THAT((*ops)->SetConcurrencyLimit(
                                                    "report.build", 1, "alice", "INC-5: overloaded"),
                                                IsOk());
                                    EXPECT_THAT(b->runner->RunUntilIdle().status(), IsOk());
                                  }
                                  return Status::Ok();
                                }),
              IsOk());
  ASSERT_THAT(a->runner->RunUntilIdle().status(), IsOk());
  EXPECT_TRUE(lowered);
  EXPECT_EQ(ran_in_b, 0) << "b's lease saw a's running job at the lowered limit of 1";
  JobFilter done;
  done.status = JobStatus::kSucceeded;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> succeeded, (*ops)->ListJobs(done));
  EXPECT_THAT(succeeded, SizeIs(4)) << "the jobs already leased finished as usual; a ran the rest";
}

// A shared rate limit counts over every process using the file.
TEST_F(SqliteAdminTest, ASharedRateLimitIsCountedOverEveryProcessOfTheFile) {
  std::shared_ptr<SqliteBackend> one = Open();
  std::shared_ptr<SqliteBackend> two = Open();
  const RateLimit one_per_second{1, 1};
  JOBPACT_ASSERT_OK_AND_ASSIGN(RateDecision first,
                               one->rate_limits()->Take("type:pdf.render", one_per_second));
  EXPECT_TRUE(first.allowed);
  JOBPACT_ASSERT_OK_AND_ASSIGN(RateDecision second,
                               two->rate_limits()->Take("type:pdf.render", one_per_second));
  EXPECT_FALSE(second.allowed) << "the other handle took this second's start";
  EXPECT_EQ(second.retry_at, clock_->Now() + Seconds(1));
}

// The turn is kept in the file: a lease of one job at a time still goes
// round the tenants, in every process.
TEST_F(SqliteAdminTest, TenantsTakeTurnsAcrossLeasesAndProcesses) {
  std::shared_ptr<SqliteBackend> one = Open();
  std::shared_ptr<SqliteBackend> two = Open();
  for (int i = 0; i < 3; ++i) {
    for (const char* tenant : {"acme", "bolt", "corp"}) {
      ASSERT_THAT(one->queue()
                      ->Enqueue(test_support::TenantJob(
                                    std::string("job_") + tenant + std::to_string(i), tenant),
                                {})
                      .status(),
                  IsOk());
    }
    clock_->Advance(Millis(1));
  }
  ASSERT_THAT(one->queue()
                  ->Enqueue(test_support::TenantJob("job_urgent", "corp", "report.build", 7), {})
                  .status(),
              IsOk());
  std::vector<std::string> order;
  for (int i = 0; i < 10; ++i) {
    std::vector<Delivery> got = Take(i % 2 == 0 ? *one : *two, 1, "w" + std::to_string(i));
    ASSERT_THAT(got, SizeIs(1));
    order.push_back(got[0].job.envelope.job_id);
  }
  EXPECT_THAT(order, ::testing::ElementsAre("job_urgent", "job_acme0", "job_bolt0", "job_corp0",
                                            "job_acme1", "job_bolt1", "job_corp1", "job_acme2",
                                            "job_bolt2", "job_corp2"));
}

TEST_F(SqliteAdminTest, ControlStateAndPoliciesSurviveAReopen) {
  {
    std::shared_ptr<SqliteBackend> db = Open();
    ControlRule pause;
    pause.kind = ControlKind::kPauseQueue;
    pause.subject = "bulk";
    pause.actor = "alice";
    pause.reason = "migration";
    ASSERT_THAT(db->admin()->SetControl(pause), IsOk());
    PublishedPolicy p;
    p.job_type = "mail.send";
    p.policy.max_attempts = 9;
    p.reason = "flaky relay";
    p.publisher = "runner-a";
    ASSERT_THAT(db->admin()->PublishPolicies({p}), IsOk());
  }
  std::shared_ptr<SqliteBackend> db = Open();
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, db->admin()->ReadControl());
  EXPECT_TRUE(s.QueuePaused("bulk"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<PublishedPolicy> ps, db->admin()->ReadPolicies());
  ASSERT_THAT(ps, SizeIs(1));
  EXPECT_EQ(ps[0].policy.max_attempts, 9);
  EXPECT_EQ(ps[0].reason, "flaky relay");
}

TEST_F(SqliteAdminTest, AVersionOneFileIsMigratedInPlaceWithItsJobs) {
  {
    std::shared_ptr<SqliteBackend> db = Open();
    Put(*db, "job_old", "mail.send");
  }
  {
    // Take the file back to schema version 1, as the previous release left it.
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("DROP INDEX jobpact_jobs_finished_by_type; "
                       "DROP TABLE jobpact_tenant_turns; DROP INDEX jobpact_jobs_ready_by_tenant; "
                       "DROP INDEX jobpact_jobs_running_tenant; "
                       "ALTER TABLE jobpact_jobs DROP COLUMN tenant_id; "
                       "DROP TABLE jobpact_rate_limits; "
                       "DROP TABLE jobpact_control; DROP TABLE jobpact_control_audit; "
                       "DROP TABLE jobpact_policies; DROP INDEX jobpact_jobs_running_type; "
                       "CREATE INDEX jobpact_jobs_ready ON jobpact_jobs "
                       "(priority DESC, ready_at_ns, job_id) "
                       "WHERE status IN ('queued', 'retry_scheduled'); "
                       "ALTER TABLE jobpact_jobs DROP COLUMN cancel_requested; "
                       "UPDATE jobpact_meta SET value = '1' WHERE key = 'schema_version';"),
              SQLITE_OK);
  }
  std::shared_ptr<SqliteBackend> db = Open();
  ASSERT_TRUE(db);
  EXPECT_EQ(db->schema_version(), SqliteBackend::kSchemaVersion);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, db->admin()->Get("job_old"));
  EXPECT_EQ(r.status, JobStatus::kQueued);
  EXPECT_FALSE(r.cancel_requested);
  JOBPACT_ASSERT_OK_AND_ASSIGN(ControlState s, db->admin()->ReadControl());
  EXPECT_THAT(s.rules, IsEmpty());
  EXPECT_THAT(Take(*db, 1, "w1"), SizeIs(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(RateDecision d,
                               db->rate_limits()->Take("type:mail.send", RateLimit{1, 1}));
  EXPECT_TRUE(d.allowed) << "version 3's rate limiters are there too";
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
