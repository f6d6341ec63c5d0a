// The PostgreSQL backend beyond the conformance suite: its URL and options,
// the schema (concurrent migration, the compatibility window), SQL
// injection, CompleteBatch's savepoints, transactional enqueue and
// completion on a PGconn*, WaitForWork over LISTEN/NOTIFY, and the errors of
// a server that is down, a connection lost mid-transaction or during
// COMMIT, a read-only server and a statement timeout.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/queue_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/backends/postgres/commit_cut_proxy.h"
#include "tests/backends/postgres/postgres_test_server.h"
#include "tests/support/durable_runner_cases.h"

namespace jobpact {
namespace postgres {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using jobpact::testing::IsOk;
using jobpact::testing::StatusIs;
namespace pt = postgres_testing;

// --- URL and options (no server needed) ---

TEST(PostgresUrlTest, ParsesEveryPart) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      PostgresOptions o,
      ParsePostgresUrl("postgresql://app%40corp:p%40ss%2Fw@db.internal:6543/orders%20db?schema="
                       "jobs_1&pool_size=3&connect_timeout=7&statement_timeout_ms=250&"
                       "reconnect_backoff_min_ms=10&reconnect_backoff_max_ms=20&"
                       "idempotency_retention_ms=1000&application_name=billing"));
  EXPECT_EQ(o.user, "app@corp");
  EXPECT_EQ(o.password, "p@ss/w");
  EXPECT_EQ(o.host, "db.internal");
  EXPECT_EQ(o.port, 6543);
  EXPECT_EQ(o.database, "orders db");
  EXPECT_EQ(o.schema, "jobs_1");
  EXPECT_EQ(o.pool_size, 3);
  EXPECT_EQ(o.connect_timeout, Seconds(7));
  EXPECT_EQ(o.statement_timeout, Millis(250));
  EXPECT_EQ(o.reconnect_backoff_min, Millis(10));
  EXPECT_EQ(o.reconnect_backoff_max, Millis(20));
  EXPECT_EQ(o.idempotency_retention, Millis(1000));
  EXPECT_EQ(o.application_name, "billing");
}

TEST(PostgresUrlTest, DefaultsAndSocketDirectoriesAndIpv6) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions d, ParsePostgresUrl("postgres://"));
  EXPECT_EQ(d.host, "127.0.0.1");
  EXPECT_EQ(d.port, 5432);
  EXPECT_EQ(d.database, "postgres");
  EXPECT_EQ(d.schema, "jobpact");
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions s,
                               ParsePostgresUrl("postgres://%2Fvar%2Frun%2Fpostgresql/app"));
  EXPECT_EQ(s.host, "/var/run/postgresql");
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions h,
                               ParsePostgresUrl("postgres:///app?host=/tmp/pg"));
  EXPECT_EQ(h.host, "/tmp/pg");
  EXPECT_EQ(h.database, "app");
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions v6, ParsePostgresUrl("postgres://[::1]:5433/x"));
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 5433);
}

TEST(PostgresUrlTest, ErrorsNameThePartAndNeverThePassword) {
  struct Case {
    const char* url;
    const char* says;
  };
  for (const Case& c : {
           Case{"mysql://u:s3cret@h/db", "scheme must be postgres: or postgresql:"},
           Case{"postgres:u:s3cret@h", "must be followed by //"},
           Case{"postgres://u:s3cret@h:99999/db", "the port \"99999\" is out of range"},
           Case{"postgres://u:s3cret@h:x/db", "is not an integer"},
           Case{"postgres://u:s3cret@h/db?pool=1", "unknown query parameter \"pool\""},
           Case{"postgres://u:s3cret@h/db?pool_size=1&pool_size=2", "more than once"},
           Case{"postgres://u:s3cret@h/db?pool_size=0", "out of range"},
           Case{"postgres://u:s3cret@h/db?schema=Jobs", "schema="},
           Case{"postgres://u:s3cret@h/db?schema=pg_x", "schema="},
           Case{"postgres://u:s3cret@h/db?schema=a%22b", "schema="},
           Case{"postgres://u:s3cret@h/a/b", "more than the database name"},
           Case{"postgres://u:s3c%zzret@h/db", "bad percent-encoding in the password"},
           Case{"postgres://u:s3cret@h/db#frag", "fragment"},
           Case{"postgres://u:s3cret@h/db?reconnect_backoff_min_ms=50&reconnect_backoff_max_ms=10",
                "reconnect_backoff_max_ms must be >="},
       }) {
    Status s = ParsePostgresUrl(c.url).status();
    EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument,
                            AllOf(HasSubstr("postgres URL: "), HasSubstr(c.says))))
        << c.url;
    EXPECT_THAT(s.message(), Not(HasSubstr("s3c"))) << c.url;
  }
}

TEST(PostgresOptionsTest, BadOptionsAreRefusedBeforeConnecting) {
  auto clock = std::make_shared<testing::ManualClock>();
  struct Case {
    void (*set)(PostgresOptions&);
    const char* says;
  };
  for (const Case& c : {
           Case{[](PostgresOptions& o) { o.pool_size = 0; }, "pool_size"},
           Case{[](PostgresOptions& o) { o.schema = "x\"; DROP TABLE t; --"; }, "schema"},
           Case{[](PostgresOptions& o) { o.schema = ""; }, "schema"},
           Case{[](PostgresOptions& o) { o.port = 0; }, "port"},
           Case{[](PostgresOptions& o) { o.reconnect_backoff_min = Duration::zero(); },
                "reconnect_backoff_min"},
           Case{[](PostgresOptions& o) { o.statement_timeout = -Millis(1); }, "statement_timeout"},
       }) {
    PostgresOptions o;
    o.port = 1;  // Nothing listens: a check that connected first would say kUnavailable.
    c.set(o);
    EXPECT_THAT(PostgresBackend::Open(o, clock).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(c.says)));
  }
  EXPECT_THAT(PostgresBackend::Open(PostgresOptions{}, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("clock")));
}

// --- Against the test server ---

class PostgresBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JOBPACT_POSTGRES_URL_OR_SKIP(url);
    options_ = pt::TestOptions();
    std::string error;
    raw_ = pt::Connect(options_, &error);
    ASSERT_NE(raw_, nullptr) << error;
  }
  void TearDown() override {
    backend_.reset();
    if (!options_.schema.empty() && raw_ != nullptr) pt::DropSchema(options_);
  }

  std::shared_ptr<PostgresBackend> MustOpen(PostgresOptions o) {
    auto b = PostgresBackend::Open(o, clock_);
    EXPECT_THAT(b.status(), IsOk());
    return b.ok() ? *b : nullptr;
  }
  void OpenBackend() {
    backend_ = MustOpen(options_);
    ASSERT_NE(backend_, nullptr);
  }

  Envelope Job(const std::string& id, std::string payload = "{}") {
    Envelope env;
    env.job_id = id;
    env.job_type = "test.job";
    env.payload = std::move(payload);
    PrepareForEnqueue(env, clock_->Now());
    return env;
  }

  Delivery TakeOne(QueueBackend& q, const std::string& worker = "w1") {
    DequeueRequest req;
    req.worker_id = worker;
    auto d = q.Dequeue(req);
    EXPECT_THAT(d.status(), IsOk());
    if (!d.ok() || d->empty()) {
      ADD_FAILURE() << "nothing to dequeue";
      return {};
    }
    return (*d)[0];
  }

  // The test's own statement on the schema ({s} is the quoted schema).
  std::string Sql(const std::string& tmpl) {
    std::string sql = tmpl;
    for (std::size_t p; (p = sql.find("{s}")) != std::string::npos;) {
      sql.replace(p, 3, "\"" + options_.schema + "\"");
    }
    return pt::Query(raw_.get(), sql);
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  PostgresOptions options_;
  pt::PgConnPtr raw_;
  std::shared_ptr<PostgresBackend> backend_;
};

TEST_F(PostgresBackendTest, OpenCreatesTheSchemaAtTheCurrentVersion) {
  OpenBackend();
  EXPECT_EQ(backend_->schema_version(), PostgresBackend::kSchemaVersion);
  EXPECT_EQ(Sql("SELECT version || '/' || min_compatible_version FROM {s}.schema_version"),
            std::to_string(PostgresBackend::kSchemaVersion) + "/" +
                std::to_string(PostgresBackend::kMinCompatibleVersion));
  // The partial indexes that keep leasing fast exist. pg_index is read by
  // the indexes' own names: pg_indexes would call pg_get_indexdef on every
  // schema's indexes, and fail on one another test process drops meanwhile.
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_index WHERE indpred IS NOT NULL AND indexrelid IN "
                "(to_regclass('{s}.jobs_ready'), to_regclass('{s}.jobs_ready_by_queue'))"),
            "2");
  EXPECT_THAT(backend_->url(), HasSubstr("?schema=" + options_.schema));
  EXPECT_EQ(backend_->bundle().name, "postgres");
}

TEST_F(PostgresBackendTest, ThreadsStartingTogetherMigrateOnce) {
  // Eight openers of one new schema at once: the advisory lock lets one
  // create it; the others find it created.
  constexpr int kOpeners = 8;
  std::vector<Status> results(kOpeners);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      results[i] = PostgresBackend::Open(options_, clock_).status();
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_THAT(s, IsOk());
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.schema_version"), "1");
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_tables WHERE schemaname = '" + options_.schema +
                "' AND tablename = 'jobs'"),
            "1");
}

TEST_F(PostgresBackendTest, ProcessesStartingTogetherMigrateOnce) {
  // As a rolling deploy starts them: six processes (postgres_open_worker)
  // open one new schema at the same instant, each with its own sessions.
  constexpr int kProcesses = 6;
  const auto start = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()) +
                     std::chrono::milliseconds(500);
  const std::string url = pt::PostgresTestUrl();
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i) {
    const std::string at = std::to_string(start.count());
    std::vector<char*> argv = {const_cast<char*>(JOBPACT_POSTGRES_OPEN_WORKER),
                               const_cast<char*>(url.c_str()),
                               const_cast<char*>(options_.schema.c_str()),
                               const_cast<char*>(at.c_str()), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0)
        << JOBPACT_POSTGRES_OPEN_WORKER;
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "an opener failed (its stderr above); wait status " << status;
  }
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.schema_version"), "1");
  EXPECT_EQ(Sql("SELECT version FROM {s}.schema_version"),
            std::to_string(PostgresBackend::kSchemaVersion));
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_tables WHERE schemaname = '" + options_.schema +
                "' AND tablename = 'jobs'"),
            "1");
  // And the schema they made works.
  OpenBackend();
  EXPECT_THAT(backend_->queue()->Enqueue(Job("job_a"), {}).status(), IsOk());
}

TEST_F(PostgresBackendTest, ANewerCompatibleSchemaIsUsedAsItIs) {
  OpenBackend();
  ASSERT_THAT(backend_->queue()->Enqueue(Job("job_1"), {}).status(), IsOk());
  backend_.reset();
  // What a newer library's additive migration leaves: a higher version that
  // this one can still use.
  Sql("UPDATE {s}.schema_version SET version = " +
      std::to_string(PostgresBackend::kSchemaVersion + 1) +
      ", min_compatible_version = " + std::to_string(PostgresBackend::kSchemaVersion));
  OpenBackend();
  EXPECT_EQ(backend_->schema_version(), PostgresBackend::kSchemaVersion + 1);
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
  // Never migrated down.
  EXPECT_EQ(Sql("SELECT version FROM {s}.schema_version"),
            std::to_string(PostgresBackend::kSchemaVersion + 1));
}

TEST_F(PostgresBackendTest, ANewerIncompatibleSchemaIsRefusedNamingBothVersions) {
  OpenBackend();
  backend_.reset();
  const int newer = PostgresBackend::kSchemaVersion + 2;
  const int needs = PostgresBackend::kSchemaVersion + 1;
  Sql("UPDATE {s}.schema_version SET version = " + std::to_string(newer) +
      ", min_compatible_version = " + std::to_string(needs));
  EXPECT_THAT(PostgresBackend::Open(options_, clock_).status(),
              StatusIs(StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("schema version " + std::to_string(newer)),
                             HasSubstr("supports schema version " + std::to_string(needs)),
                             HasSubstr("this one supports version " +
                                       std::to_string(PostgresBackend::kSchemaVersion)))));
  EXPECT_EQ(Sql("SELECT version FROM {s}.schema_version"), std::to_string(newer));
}

TEST_F(PostgresBackendTest, AVersion1SchemaGainsTheRateLimitsTableAndKeepsItsJobs) {
  OpenBackend();
  ASSERT_THAT(backend_->queue()->Enqueue(Job("job_1"), {}).status(), IsOk());
  backend_.reset();
  // What a version-1 library leaves: everything but the rate limiters (and
  // version 3's tenant column, its indexes and tenant_turns).
  ASSERT_EQ(Sql("DROP TABLE {s}.rate_limits"), "");
  ASSERT_EQ(Sql("DROP INDEX {s}.jobs_finished_by_type"), "");  // Version 4.
  ASSERT_EQ(Sql("DROP TABLE {s}.tenant_turns"), "");
  ASSERT_EQ(Sql("ALTER TABLE {s}.jobs DROP COLUMN tenant_id"), "");
  ASSERT_EQ(Sql("UPDATE {s}.schema_version SET version = 1, min_compatible_version = 1"), "");
  OpenBackend();
  EXPECT_EQ(backend_->schema_version(), PostgresBackend::kSchemaVersion);
  EXPECT_EQ(Sql("SELECT version || '/' || min_compatible_version FROM {s}.schema_version"),
            std::to_string(PostgresBackend::kSchemaVersion) + "/" +
                std::to_string(PostgresBackend::kMinCompatibleVersion));
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
  const RateLimit one_per_second{1, 1};
  EXPECT_TRUE(backend_->rate_limits()->Take("type:test.job", one_per_second)->allowed);
  EXPECT_FALSE(backend_->rate_limits()->Take("type:test.job", one_per_second)->allowed);
  EXPECT_EQ(Sql("SELECT key FROM {s}.rate_limits"), "type:test.job");
  EXPECT_EQ(backend_->bundle().rate_limits, backend_->rate_limits());
}

TEST_F(PostgresBackendTest, AVersion2SchemaGainsTenantsAndKeepsItsJobsWithTheirTenants) {
  OpenBackend();
  Envelope acme = Job("job_acme");
  acme.tenant_id = "acme";
  ASSERT_THAT(backend_->queue()->Enqueue(acme, {}).status(), IsOk());
  ASSERT_THAT(backend_->queue()->Enqueue(Job("job_none"), {}).status(), IsOk());
  backend_.reset();
  // What a version-2 library leaves: no tenant column, no turns. And a row
  // whose envelope is not JSON (a hand edit): it migrates with no tenant.
  ASSERT_EQ(Sql("DROP INDEX {s}.jobs_finished_by_type"), "");  // Version 4.
  ASSERT_EQ(Sql("DROP TABLE {s}.tenant_turns"), "");
  ASSERT_EQ(Sql("ALTER TABLE {s}.jobs DROP COLUMN tenant_id"), "");
  ASSERT_EQ(Sql("INSERT INTO {s}.jobs (job_id, job_type, queue, priority, status, attempt, "
                "max_attempts, ready_at_ns, enqueued_at_ns, updated_at_ns, "
                "visibility_timeout_ns, envelope) SELECT 'job_bad', job_type, queue, priority, "
                "'dead_lettered', attempt, max_attempts, ready_at_ns, enqueued_at_ns, "
                "updated_at_ns, visibility_timeout_ns, '{\"tenant_id\": not json' FROM "
                "{s}.jobs WHERE job_id = 'job_none'"),
            "");
  ASSERT_EQ(Sql("UPDATE {s}.schema_version SET version = 2, min_compatible_version = 1"), "");
  OpenBackend();
  EXPECT_EQ(backend_->schema_version(), PostgresBackend::kSchemaVersion);
  EXPECT_EQ(Sql("SELECT string_agg(job_id || '=' || tenant_id, ',' ORDER BY job_id) FROM "
                "{s}.jobs"),
            "job_acme=acme,job_bad=,job_none=");
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_index WHERE indexrelid IN "
                "(to_regclass('{s}.jobs_ready_by_tenant'), to_regclass('{s}.jobs_running_tenant'))"),
            "2");
  // Both jobs lease, in turn (acme's first: after '', the turn of none).
  DequeueRequest req;
  req.worker_id = "w1";
  req.max_jobs = 10;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, backend_->queue()->Dequeue(req));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].job.envelope.job_id, "job_acme");
  EXPECT_EQ(got[1].job.envelope.job_id, "job_none");
}

TEST_F(PostgresBackendTest, TenantsTakeTurnsAcrossLeasesAndProcesses) {
  // Two backends on one schema are two processes: the turn is the
  // database's (tenant_turns), so workers leasing one job at a time from
  // either alternate tenants between them.
  OpenBackend();
  std::shared_ptr<PostgresBackend> second = MustOpen(options_);
  ASSERT_NE(second, nullptr);
  for (int i = 0; i < 3; ++i) {
    for (const char* tenant : {"acme", "bolt"}) {
      Envelope env = Job(std::string("job_") + tenant + std::to_string(i));
      env.tenant_id = tenant;
      ASSERT_THAT(backend_->queue()->Enqueue(env, {}).status(), IsOk());
    }
    clock_->Advance(Millis(1));
  }
  std::vector<std::string> order;
  for (int i = 0; i < 6; ++i) {
    QueueBackend& q = i % 2 == 0 ? *backend_->queue() : *second->queue();
    order.push_back(TakeOne(q, i % 2 == 0 ? "w1" : "w2").job.envelope.job_id);
  }
  EXPECT_THAT(order, ElementsAre("job_acme0", "job_bolt0", "job_acme1", "job_bolt1", "job_acme2",
                                 "job_bolt2"));
  EXPECT_EQ(Sql("SELECT queue || '=' || last_tenant FROM {s}.tenant_turns"), "default=bolt");
}

TEST_F(PostgresBackendTest, JobsWithoutTenantsNeverWriteTheTurn) {
  // The common case costs no write: a queue whose jobs have no tenant
  // keeps no turn row.
  OpenBackend();
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(backend_->queue()->Enqueue(Job("job_" + std::to_string(i)), {}).status(), IsOk());
  }
  for (int i = 0; i < 3; ++i) (void)TakeOne(*backend_->queue());
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.tenant_turns"), "0");
}

TEST_F(PostgresBackendTest, ConcurrentLeasesDoNotOvershootATenantCap) {
  // Eight backends (eight processes) lease at once from two tenants under
  // a cap of 3: the cap is counted under the limits lock, so no tenant
  // ever has more than 3 running.
  OpenBackend();
  for (int i = 0; i < 40; ++i) {
    Envelope env = Job("job_" + std::to_string(i));
    env.tenant_id = i % 2 == 0 ? "acme" : "bolt";
    ASSERT_THAT(backend_->queue()->Enqueue(env, {}).status(), IsOk());
  }
  ControlRule cap;
  cap.kind = ControlKind::kTenantConcurrencyLimit;
  cap.subject = "default";
  cap.limit = 3;
  cap.actor = "alice";
  cap.reason = "test";
  ASSERT_THAT(backend_->admin()->SetControl(cap), IsOk());
  std::vector<std::shared_ptr<PostgresBackend>> backends;
  for (int i = 0; i < 8; ++i) {
    backends.push_back(MustOpen(options_));
    ASSERT_NE(backends.back(), nullptr);
  }
  std::vector<std::thread> threads;
  std::vector<int> taken(backends.size(), 0);
  for (std::size_t i = 0; i < backends.size(); ++i) {
    threads.emplace_back([&, i] {
      DequeueRequest req;
      req.worker_id = "w" + std::to_string(i);
      req.max_jobs = 2;
      auto got = backends[i]->queue()->Dequeue(req);
      if (got.ok()) taken[i] = static_cast<int>(got->size());
    });
  }
  for (std::thread& t : threads) t.join();
  int total = 0;
  for (int n : taken) total += n;
  EXPECT_EQ(total, 6);
  EXPECT_EQ(Sql("SELECT string_agg(tenant_id || '=' || n, ',' ORDER BY tenant_id) FROM (SELECT "
                "tenant_id, count(*) AS n FROM {s}.jobs WHERE status = 'running' GROUP BY "
                "tenant_id) r"),
            "acme=3,bolt=3");
}

TEST_F(PostgresBackendTest, TwoBackendsOnOneSchemaShareARateLimiterAndItsBackoff) {
  OpenBackend();
  std::shared_ptr<PostgresBackend> second = MustOpen(options_);  // Another process, say.
  ASSERT_NE(second, nullptr);
  const RateLimit two_per_second_burst_two{2, 2};
  EXPECT_TRUE(backend_->rate_limits()->Take("type:mail.send", two_per_second_burst_two)->allowed);
  EXPECT_TRUE(second->rate_limits()->Take("type:mail.send", two_per_second_burst_two)->allowed);
  JOBPACT_ASSERT_OK_AND_ASSIGN(
      RateDecision refused,
      backend_->rate_limits()->Take("type:mail.send", two_per_second_burst_two));
  EXPECT_FALSE(refused.allowed) << "the burst was shared by both backends";
  EXPECT_EQ(refused.retry_at, clock_->Now() + Millis(500));
  ASSERT_THAT(second->rate_limits()->Backoff("dependency:psp", clock_->Now() + Seconds(60), "429"),
              IsOk());
  EXPECT_FALSE(backend_->rate_limits()->Take("dependency:psp", RateLimit{})->allowed);
}

TEST_F(PostgresBackendTest, NoNameOrPayloadCanInjectSql) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  // Keys may hold any printable character but space; payloads, results and
  // worker ids anything. Each is a statement parameter, stored as written.
  const std::string drop = "\"" + options_.schema + "\".jobs";
  const std::string key = "k');DROP/**/TABLE/**/" + drop + ";--\"\\$1''";
  const std::string text = "x'); DROP TABLE " + drop + "; -- \" \\ $1 '' \u00e9";
  Envelope env = Job("job_1", "{\"s\":\"'); DROP TABLE " + options_.schema + ".jobs; --\"}");
  env.dedup_key = key;
  env.idempotency_key = key + "'||pg_sleep(5)||'";
  ASSERT_THAT(q.Enqueue(env, {}).status(), IsOk());
  // Names are refused before they reach a statement (their safe set).
  Envelope bad = Job("job_2");
  bad.job_type = "t'; DROP TABLE x; --";
  EXPECT_THAT(q.Enqueue(bad, {}).status(), StatusIs(StatusCode::kInvalidArgument));
  DequeueRequest req;
  req.worker_id = text;
  req.queues = {"default\"}'); DROP TABLE x; --"};
  EXPECT_THAT(q.Dequeue(req).status(), StatusIs(StatusCode::kInvalidArgument));
  // The queue filter is one text[] parameter: several names, one statement.
  req.queues = {"default", "a:b", "c.d"};
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, q.Dequeue(req));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].job.envelope.payload, env.payload);
  Completion done;
  done.result = text;
  ASSERT_THAT(q.Complete(got[0], done), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend_->admin()->Get(env.job_id));
  EXPECT_EQ(rec.result, text);
  EXPECT_EQ(rec.envelope.dedup_key, key);
  EXPECT_EQ(rec.envelope.idempotency_key, env.idempotency_key);
  ASSERT_THAT(backend_->locks()->Acquire(key, text, Seconds(5)).status(), IsOk());
  ASSERT_THAT(backend_->idempotency()->Claim(key, text, Seconds(5)).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto lock, backend_->locks()->Inspect(key));
  ASSERT_TRUE(lock.has_value());
  EXPECT_EQ(lock->owner, text);
  RateLimitStore& rates = *backend_->rate_limits();
  ASSERT_THAT(rates.Backoff("dependency:psp", clock_->Now() + Seconds(5), text), IsOk());
  ASSERT_THAT(rates.SetOverride("dependency:psp", RateLimit{2, 1}, text, text), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<RateLimiterState> limiters, rates.List(10));
  ASSERT_EQ(limiters.size(), 1u);
  EXPECT_EQ(limiters[0].backoff_reason, text);
  EXPECT_EQ(limiters[0].override_actor, text);
  EXPECT_EQ(limiters[0].override_reason, text);
  // Everything is still there: schema_version, jobs, locks, idempotency,
  // control, control_audit, policies, rate_limits, tenant_turns.
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.jobs"), "1");
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_tables WHERE schemaname = '" + options_.schema + "'"),
            "9");
}

// The lease takes a job's lock and claim both or neither
// (DequeueRequest::take_guards), also when another transaction commits the
// claim while the lease runs: the lease's snapshot saw the key free, so it
// took the lock, then found the claim's row taken at its insert (waiting for
// the other transaction), and gave the lock back in its own transaction.
TEST_F(PostgresBackendTest, TheLeaseGivesBackALockWhoseClaimAnotherTransactionTookFirst) {
  OpenBackend();
  Envelope e = Job("job_1");
  e.lock_key = "order:1";
  e.idempotency_key = "charge:1";
  ASSERT_THAT(backend_->queue()->Enqueue(e, {}).status(), IsOk());
  pt::PgConnPtr other = pt::Connect(options_);
  ASSERT_NE(other, nullptr);
  auto exec = [](PGconn* c, const std::string& sql) {
    PGresult* r = PQexec(c, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
    PQclear(r);
  };
  const std::int64_t expires_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (clock_->Now() + Seconds(30)).time_since_epoch())
          .count();
  exec(other.get(), "BEGIN");
  exec(other.get(), "INSERT INTO \"" + options_.schema +
                        "\".idempotency (key, state, owner, expires_at_ns) VALUES ('charge:1', "
                        "'in_progress', 'other', " + std::to_string(expires_ns) + ")");
  std::thread committer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    exec(other.get(), "COMMIT");
  });
  DequeueRequest req;
  req.worker_id = "w1";
  req.take_guards = true;
  Result<std::vector<Delivery>> leased = backend_->queue()->Dequeue(req);
  committer.join();
  ASSERT_THAT(leased.status(), IsOk());
  ASSERT_EQ(leased->size(), 1u);
  EXPECT_FALSE((*leased)[0].guards_taken);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> lock,
                               backend_->locks()->Inspect("order:1"));
  EXPECT_FALSE(lock.has_value()) << "the lock was not given back: held by " << lock->owner;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> claim,
                               backend_->idempotency()->Get("charge:1"));
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(claim->owner, "other");
}

TEST_F(PostgresBackendTest, ABatchOfCompletionsRollsBackOnlyTheRefusedOnes) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  for (const char* id : {"job_a", "job_b", "job_c"}) {
    ASSERT_THAT(q.Enqueue(Job(id), {}).status(), IsOk());
  }
  DequeueRequest req;
  req.worker_id = "w1";
  req.max_jobs = 3;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, q.Dequeue(req));
  ASSERT_EQ(got.size(), 3u);
  std::vector<CompletionRequest> batch(3);
  for (int i = 0; i < 3; ++i) batch[i].delivery = got[i];
  // The second delivery's lease is stale (another epoch); the third's effect
  // fails after writing a row of its own.
  batch[1].delivery.lease.epoch += 7;
  Sql("CREATE TABLE {s}.effects (job_id text)");
  const std::string insert =
      "INSERT INTO \"" + options_.schema + "\".effects (job_id) VALUES ('x')";
  for (int i = 0; i < 3; ++i) {
    const bool fails = i == 2;
    batch[i].completion.transactional_effect = [insert, fails](void* native) -> Status {
      PGresult* r = PQexec(static_cast<PGconn*>(native), insert.c_str());
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (!ok) return Status::Internal("insert failed");
      return fails ? Status::FailedPrecondition("card declined") : Status::Ok();
    };
  }
  std::vector<Status> out = q.CompleteBatch(batch);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_THAT(out[0], IsOk());
  EXPECT_THAT(out[1], StatusIs(StatusCode::kAborted, HasSubstr("stale lease")));
  EXPECT_THAT(out[2], StatusIs(StatusCode::kFailedPrecondition, HasSubstr("card declined")));
  EXPECT_EQ(backend_->admin()->Get(got[0].job.envelope.job_id)->status, JobStatus::kSucceeded);
  EXPECT_EQ(backend_->admin()->Get(got[1].job.envelope.job_id)->status, JobStatus::kRunning);
  EXPECT_EQ(backend_->admin()->Get(got[2].job.envelope.job_id)->status, JobStatus::kRunning);
  // Only the first write's effect committed.
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.effects"), "1");
}

TEST_F(PostgresBackendTest, ABatchWithoutEffectsIsOneStatementAndAStaleWriteFailsAlone) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  for (const char* id : {"job_a", "job_b", "job_c", "job_d"}) {
    ASSERT_THAT(q.Enqueue(Job(id), {}).status(), IsOk());
  }
  DequeueRequest req;
  req.worker_id = "w1";
  req.max_jobs = 4;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, q.Dequeue(req));
  ASSERT_EQ(got.size(), 4u);
  std::vector<CompletionRequest> batch(4);
  for (int i = 0; i < 4; ++i) batch[i].delivery = got[i];
  batch[1].delivery.lease.token = "someone-else";  // Stale.
  batch[2].completion.to = JobStatus::kRetryScheduled;
  batch[2].completion.reason = "transient";
  batch[2].completion.ready_at = clock_->Now() + Seconds(5);
  batch[2].completion.failure = Failure{FailureClass::kTransient, "e", "try again"};
  batch[3].delivery.job.envelope.job_id = "job_missing";
  batch[3].delivery.lease.job_id = "job_missing";
  std::vector<Status> out = q.CompleteBatch(batch);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_THAT(out[0], IsOk());
  EXPECT_THAT(out[1], StatusIs(StatusCode::kAborted));
  EXPECT_THAT(out[2], IsOk());
  EXPECT_THAT(out[3], StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(backend_->admin()->Get(got[0].job.envelope.job_id)->status, JobStatus::kSucceeded);
  EXPECT_EQ(backend_->admin()->Get(got[1].job.envelope.job_id)->status, JobStatus::kRunning);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord retried, backend_->admin()->Get(got[2].job.envelope.job_id));
  EXPECT_EQ(retried.status, JobStatus::kRetryScheduled);
  ASSERT_FALSE(retried.history.empty());
  EXPECT_EQ(retried.history.back().to, JobStatus::kRetryScheduled);
  EXPECT_EQ(backend_->admin()->Get(got[3].job.envelope.job_id)->status, JobStatus::kRunning);
}

// A batch's jobs without a dedup check go in one INSERT from arrays: every
// value must survive the array literal (quotes, backslashes, braces,
// commas, the word NULL, non-ASCII), results keep the batch's order, and a
// deduplicated job in the middle (checked and inserted on its own) still
// sees an earlier job of the same batch.
TEST_F(PostgresBackendTest, ABatchEnqueueKeepsEveryValueAndTheOrder) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  const std::vector<std::string> payloads = {
      R"({"s":"a \"quoted\", {braced} \\ value"})", R"({"s":"NULL"})", R"({"s":"日本語 ✓"})",
      R"({"s":""})", R"({"k":[1,2,{"x":null}]})"};
  std::vector<Envelope> batch;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    batch.push_back(Job("job_" + std::to_string(i), payloads[i]));
  }
  batch[1].dedup_key = "order-1";
  batch[3].dedup_key = "order-1";  // The same key as job_1, later in the batch.
  batch[4].priority = 7;
  EnqueueOptions opts;
  opts.dedup_window = Seconds(60);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<EnqueueResult> out, q.EnqueueBatch(batch, opts));
  ASSERT_EQ(out.size(), payloads.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE(i);
    if (i == 3) {
      EXPECT_TRUE(out[i].duplicate);
      EXPECT_EQ(out[i].job_id, "job_1");
      continue;
    }
    EXPECT_FALSE(out[i].duplicate);
    EXPECT_EQ(out[i].job_id, "job_" + std::to_string(i));
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend_->admin()->Get(out[i].job_id));
    EXPECT_EQ(rec.envelope.payload, payloads[i]);
    EXPECT_EQ(rec.status, JobStatus::kQueued);
    EXPECT_EQ(rec.envelope.priority, batch[i].priority);
    EXPECT_EQ(rec.envelope.dedup_key, batch[i].dedup_key);
    ASSERT_EQ(rec.history.size(), 1u);
  }
  EXPECT_THAT(backend_->admin()->Get("job_3").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.jobs"), "4");
  // An id twice in one batch is refused whole, naming it.
  std::vector<Envelope> twice = {Job("job_x"), Job("job_x")};
  EXPECT_THAT(q.EnqueueBatch(twice, {}).status(),
              StatusIs(StatusCode::kAlreadyExists, HasSubstr("job_x")));
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.jobs"), "4");
}

// --- A connection lost during COMMIT ---

// The backend through a proxy that cuts the connection at an armed COMMIT
// (commit_cut_proxy.h): before the server sees it, or after the server
// committed. The client cannot tell the two apart; either way the call
// must fail saying the outcome is unknown, and what the store holds must
// make the caller's retry safe: the work is there once, or not at all.
class PostgresCommitLossTest : public PostgresBackendTest {
 protected:
  using Cut = pt::CommitCutProxy::Cut;

  void SetUp() override {
    PostgresBackendTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!options_.host.empty() && options_.host[0] == '/') {
      GTEST_SKIP() << "the test server listens on a Unix socket; the proxy needs TCP";
    }
    proxy_ = std::make_unique<pt::CommitCutProxy>(options_.port);
    ASSERT_NE(proxy_->port(), 0) << "the proxy could not listen";
    PostgresOptions o = options_;
    o.host = "127.0.0.1";
    o.port = proxy_->port();
    o.pool_size = 1;
    backend_ = MustOpen(o);  // Migrates through the proxy, before any cut.
    ASSERT_NE(backend_, nullptr);
  }
  std::string StatusOf(const std::string& id) {
    return Sql("SELECT coalesce((SELECT status FROM {s}.jobs WHERE job_id = '" + id +
               "'), 'none')");
  }
  static constexpr const char* kUnknown = "whether the transaction committed is unknown";

  std::unique_ptr<pt::CommitCutProxy> proxy_;
};

TEST_F(PostgresCommitLossTest, AnEnqueueCutBeforeCommitFailsAndStoresNothing) {
  QueueBackend& q = *backend_->queue();
  proxy_->Arm(Cut::kBeforeCommit);
  EXPECT_THAT(q.Enqueue(Job("job_a"), {}).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr(kUnknown)));
  EXPECT_EQ(proxy_->cuts(), 1);
  EXPECT_EQ(StatusOf("job_a"), "none");
  // The caller's retry, on a new connection, stores it once.
  EXPECT_THAT(q.Enqueue(Job("job_a"), {}).status(), IsOk());
  EXPECT_EQ(StatusOf("job_a"), "queued");
}

TEST_F(PostgresCommitLossTest, AnEnqueueCutAfterCommitFailsAndItsRetryFindsTheJob) {
  QueueBackend& q = *backend_->queue();
  proxy_->Arm(Cut::kAfterCommit);
  EXPECT_THAT(q.Enqueue(Job("job_a"), {}).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr(kUnknown)));
  EXPECT_EQ(proxy_->cuts(), 1);
  EXPECT_EQ(StatusOf("job_a"), "queued");  // It did commit.
  // The retry cannot make a second job: the id is taken.
  EXPECT_THAT(q.Enqueue(Job("job_a"), {}).status(), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.jobs"), "1");
}

TEST_F(PostgresCommitLossTest, ACompletionCutAfterCommitIsStoredOnceAndItsRetryIsRefused) {
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_a"), {}).status(), IsOk());
  const Delivery d = TakeOne(q);
  ASSERT_EQ(d.job.envelope.job_id, "job_a");
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = std::string(reason::kSucceeded);
  proxy_->Arm(Cut::kAfterCommit);
  EXPECT_THAT(q.Complete(d, done), StatusIs(StatusCode::kUnavailable, HasSubstr(kUnknown)));
  EXPECT_EQ(proxy_->cuts(), 1);
  EXPECT_EQ(StatusOf("job_a"), "succeeded");
  // A retried completion of the same delivery finds the job finished.
  EXPECT_THAT(q.Complete(d, done), StatusIs(StatusCode::kAborted, HasSubstr("stale lease")));
  EXPECT_EQ(StatusOf("job_a"), "succeeded");
}

TEST_F(PostgresCommitLossTest, ACompletionCutBeforeCommitLeavesTheLeaseToRecover) {
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_a"), {}).status(), IsOk());
  const Delivery d = TakeOne(q);
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = std::string(reason::kSucceeded);
  proxy_->Arm(Cut::kBeforeCommit);
  EXPECT_THAT(q.Complete(d, done), StatusIs(StatusCode::kUnavailable, HasSubstr(kUnknown)));
  EXPECT_EQ(proxy_->cuts(), 1);
  EXPECT_EQ(StatusOf("job_a"), "running");  // Still leased: retried, or recovered at expiry.
  EXPECT_THAT(q.Complete(d, done), IsOk());
  EXPECT_EQ(StatusOf("job_a"), "succeeded");
}

// --- Transactional enqueue and completion on a PGconn* ---

class PostgresTransactionalTest : public PostgresBackendTest {
 protected:
  void SetUp() override {
    PostgresBackendTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    OpenBackend();
    Sql("CREATE TABLE {s}.orders (id text PRIMARY KEY)");
  }
  std::string InsertOrderSql(const std::string& id) {
    return "INSERT INTO \"" + options_.schema + "\".orders (id) VALUES ('" + id + "')";
  }
  static Status Exec(PGconn* c, const std::string& sql) {
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    std::string msg = PQresultErrorMessage(r);
    PQclear(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Status::Internal(msg);
    return Status::Ok();
  }
};

TEST_F(PostgresTransactionalTest, TheJobExistsIffTheCallersTransactionCommits) {
  pt::PgConnPtr caller = pt::Connect(options_);
  ASSERT_NE(caller, nullptr);
  // Commit: the order and the job.
  ASSERT_THAT(Exec(caller.get(), "BEGIN"), IsOk());
  ASSERT_THAT(Exec(caller.get(), InsertOrderSql("ord_1")), IsOk());
  ASSERT_THAT(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status(), IsOk());
  // Not visible to anyone else before the caller commits.
  EXPECT_THAT(backend_->admin()->Get("job_1").status(), StatusIs(StatusCode::kNotFound));
  ASSERT_THAT(Exec(caller.get(), "COMMIT"), IsOk());
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
  // Rollback: neither.
  ASSERT_THAT(Exec(caller.get(), "BEGIN"), IsOk());
  ASSERT_THAT(Exec(caller.get(), InsertOrderSql("ord_2")), IsOk());
  ASSERT_THAT(backend_->EnqueueInTransaction(caller.get(), Job("job_2"), {}).status(), IsOk());
  ASSERT_THAT(Exec(caller.get(), "ROLLBACK"), IsOk());
  EXPECT_THAT(backend_->admin()->Get("job_2").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(Sql("SELECT string_agg(id, ',') FROM {s}.orders"), "ord_1");
}

TEST_F(PostgresTransactionalTest, ARefusedEnqueueLeavesTheCallersTransactionUsable) {
  ASSERT_THAT(backend_->queue()->Enqueue(Job("job_1"), {}).status(), IsOk());
  pt::PgConnPtr caller = pt::Connect(options_);
  ASSERT_NE(caller, nullptr);
  ASSERT_THAT(Exec(caller.get(), "BEGIN"), IsOk());
  EXPECT_THAT(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status(),
              StatusIs(StatusCode::kAlreadyExists));
  ASSERT_THAT(Exec(caller.get(), InsertOrderSql("ord_1")), IsOk());
  ASSERT_THAT(Exec(caller.get(), "COMMIT"), IsOk());
  EXPECT_EQ(Sql("SELECT count(*) FROM {s}.orders"), "1");
}

TEST_F(PostgresTransactionalTest, EnqueueInTransactionNeedsAnOpenHealthyTransaction) {
  pt::PgConnPtr caller = pt::Connect(options_);
  ASSERT_NE(caller, nullptr);
  EXPECT_THAT(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("BEGIN first")));
  ASSERT_THAT(Exec(caller.get(), "BEGIN"), IsOk());
  EXPECT_FALSE(Exec(caller.get(), "SELECT * FROM no_such_table").ok());
  EXPECT_THAT(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("already failed")));
  EXPECT_THAT(backend_->EnqueueInTransaction(nullptr, Job("job_1"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(PostgresTransactionalTest, RunInTransactionCommitsOrRollsBackBoth) {
  ASSERT_THAT(backend_->RunInTransaction([&](PGconn* c) -> Status {
    JOBPACT_RETURN_IF_ERROR(Exec(c, InsertOrderSql("ord_1")));
    return backend_->EnqueueInTransaction(c, Job("job_1"), {}).status();
  }),
              IsOk());
  Status s = backend_->RunInTransaction([&](PGconn* c) -> Status {
    JOBPACT_RETURN_IF_ERROR(Exec(c, InsertOrderSql("ord_2")));
    JOBPACT_RETURN_IF_ERROR(backend_->EnqueueInTransaction(c, Job("job_2"), {}).status());
    return Status::FailedPrecondition("credit check failed");
  });
  EXPECT_THAT(s, StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
  EXPECT_THAT(backend_->admin()->Get("job_2").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(Sql("SELECT string_agg(id, ',') FROM {s}.orders"), "ord_1");
}

TEST_F(PostgresTransactionalTest, TheEffectCommitsIffTheCompletionCommits) {
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_1"), {}).status(), IsOk());
  Delivery first = TakeOne(q);
  // The lease expires and another worker takes the job: the first
  // delivery's completion is fenced, and its effect must not commit.
  clock_->Advance(first.job.envelope.visibility_timeout + Seconds(1));
  ASSERT_THAT(q.RecoverExpiredLeases(10).status(), IsOk());
  Delivery second = TakeOne(q, "w2");
  ASSERT_GT(second.lease.epoch, first.lease.epoch);
  auto effect_for = [&](const std::string& order) {
    return [this, order](void* native) -> Status {
      return Exec(static_cast<PGconn*>(native), InsertOrderSql(order));
    };
  };
  Completion stale;
  stale.transactional_effect = effect_for("ord_stale");
  EXPECT_THAT(q.Complete(first, stale), StatusIs(StatusCode::kAborted));
  // A failing effect rolls the completion back with it.
  Completion failing;
  failing.transactional_effect = [](void*) { return Status::Unavailable("payment api down"); };
  EXPECT_THAT(q.Complete(second, failing),
              StatusIs(StatusCode::kUnavailable, HasSubstr("payment api down")));
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kRunning);
  // The live delivery's effect commits with its completion.
  Completion ok;
  ok.transactional_effect = effect_for("ord_live");
  ASSERT_THAT(q.Complete(second, ok), IsOk());
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kSucceeded);
  EXPECT_EQ(Sql("SELECT string_agg(id, ',') FROM {s}.orders"), "ord_live");
}

TEST_F(PostgresTransactionalTest, AnEffectThatSwallowsAnSqlErrorStillRollsBack) {
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_1"), {}).status(), IsOk());
  Delivery d = TakeOne(q);
  Completion c;
  c.transactional_effect = [](void* native) -> Status {
    (void)Exec(static_cast<PGconn*>(native), "SELECT * FROM no_such_table");
    return Status::Ok();  // The error is ignored, but the transaction is failed.
  };
  EXPECT_THAT(q.Complete(d, c), StatusIs(StatusCode::kInternal, HasSubstr("effect")));
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kRunning);
  ASSERT_THAT(q.Complete(d, Completion{}), IsOk());
}

// --- Wake-ups ---

TEST_F(PostgresBackendTest, AnEnqueueWakesAWaitingWorker) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  // Nothing enqueued: the wait times out.
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool woken, q.WaitForWork(Millis(200)));
  EXPECT_FALSE(woken);
  std::atomic<bool> result{false};
  std::atomic<long long> waited_ms{-1};
  std::thread waiter([&] {
    const auto start = std::chrono::steady_clock::now();
    Result<bool> r = q.WaitForWork(Seconds(20));
    waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    result = r.ok() && *r;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // The waiter is listening.
  ASSERT_THAT(q.Enqueue(Job("job_1"), {}).status(), IsOk());
  waiter.join();
  EXPECT_TRUE(result.load());
  EXPECT_LT(waited_ms.load(), 10000);
}

// --- Errors ---

TEST_F(PostgresBackendTest, AStatementTimeoutIsDeadlineExceeded) {
  // The schema is created under the default timeout first: its migration is
  // not what this test times, and on a loaded machine (a sanitizer build,
  // other tests beside it) it once took longer than the short timeout.
  backend_ = MustOpen(options_);
  ASSERT_NE(backend_, nullptr);
  backend_.reset();
  PostgresOptions o = options_;
  o.statement_timeout = Millis(1000);
  backend_ = MustOpen(o);
  ASSERT_NE(backend_, nullptr);
  // Another session holds the jobs table.
  pt::PgConnPtr other = pt::Connect(options_);
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(pt::Query(other.get(), "BEGIN"), "");
  ASSERT_EQ(pt::Query(other.get(),
                      "LOCK TABLE \"" + options_.schema + "\".jobs IN ACCESS EXCLUSIVE MODE"),
            "");
  EXPECT_THAT(backend_->queue()->Enqueue(Job("job_1"), {}).status(),
              StatusIs(StatusCode::kDeadlineExceeded, HasSubstr("statement timeout")));
  ASSERT_EQ(pt::Query(other.get(), "ROLLBACK"), "");
  EXPECT_THAT(backend_->queue()->Enqueue(Job("job_1"), {}).status(), IsOk());
}

TEST_F(PostgresBackendTest, AReadOnlyServerIsAClearError) {
  OpenBackend();
  // A role whose sessions are read-only, as on a hot standby.
  const std::string role = "ro_" + options_.schema;
  ASSERT_EQ(Sql("CREATE ROLE " + role + " LOGIN SUPERUSER"), "");
  ASSERT_EQ(Sql("ALTER ROLE " + role + " SET default_transaction_read_only = on"), "");
  PostgresOptions ro = options_;
  ro.user = role;
  {
    // The schema exists: opening only reads; every write says read-only.
    JOBPACT_ASSERT_OK_AND_ASSIGN(auto b, PostgresBackend::Open(ro, clock_));
    EXPECT_THAT(b->queue()->Enqueue(Job("job_1"), {}).status(),
                StatusIs(StatusCode::kUnavailable, HasSubstr("read-only")));
    EXPECT_THAT(b->locks()->Acquire("k", "o", Seconds(1)).status(),
                StatusIs(StatusCode::kUnavailable, HasSubstr("read-only")));
  }
  // A schema that needs creating cannot be.
  PostgresOptions fresh = ro;
  fresh.schema = pt::FreshSchema();
  EXPECT_THAT(PostgresBackend::Open(fresh, clock_).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr("read-only")));
  Sql("DROP ROLE " + role);
}

TEST_F(PostgresBackendTest, TheBackendsSessionsRunWithoutJit) {
  // With JIT, a lease whose planned cost passed jit_above_cost was compiled
  // each time (~60 ms, against ~3 ms for the statement). A statement
  // timeout set beside it still applies.
  PostgresOptions o = options_;
  o.statement_timeout = Millis(5000);
  backend_ = MustOpen(o);
  ASSERT_NE(backend_, nullptr);
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_1"), {}).status(), IsOk());
  Delivery d = TakeOne(q);
  std::string settings;
  Completion c;
  c.transactional_effect = [&settings](void* native) -> Status {
    PGresult* r = PQexec(static_cast<PGconn*>(native),
                         "SELECT current_setting('jit') || ' ' || current_setting('statement_timeout')");
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) settings = PQgetvalue(r, 0, 0);
    PQclear(r);
    return Status::Ok();
  };
  ASSERT_THAT(q.Complete(d, c), IsOk());
  EXPECT_EQ(settings, "off 5s");
}

TEST_F(PostgresBackendTest, AConnectionLostMidTransactionRollsBackAndReconnects) {
  OpenBackend();
  QueueBackend& q = *backend_->queue();
  ASSERT_THAT(q.Enqueue(Job("job_1"), {}).status(), IsOk());
  Delivery d = TakeOne(q);
  Completion c;
  c.transactional_effect = [](void* native) -> Status {
    // The server ends this very session, inside the completion transaction.
    PGresult* r = PQexec(static_cast<PGconn*>(native), "SELECT pg_terminate_backend(pg_backend_pid())");
    PQclear(r);
    return Status::Ok();
  };
  Status s = q.Complete(d, c);
  EXPECT_THAT(s, StatusIs(StatusCode::kUnavailable, HasSubstr("postgres " + options_.host)));
  // Nothing of it was written, and the next calls work on a new connection.
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, backend_->admin()->Get("job_1"));
  EXPECT_EQ(rec.status, JobStatus::kRunning);
  ASSERT_THAT(q.Complete(d, Completion{}), IsOk());
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kSucceeded);
}

TEST(PostgresServerDownTest, CallsAreUnavailableNamingTheServerThenReconnect) {
  pt::PrivatePostgresServer server;
  const std::string why = server.Start();
  if (!why.empty()) {
    if (pt::PostgresRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  auto clock = std::make_shared<testing::ManualClock>();
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions o, ParsePostgresUrl(server.url()));
  o.reconnect_backoff_min = Millis(200);
  o.reconnect_backoff_max = Millis(400);
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, PostgresBackend::Open(o, clock));
  QueueBackend& q = *backend->queue();
  Envelope env;
  env.job_id = "job_before";
  env.job_type = "t";
  PrepareForEnqueue(env, clock->Now());
  ASSERT_THAT(q.Enqueue(env, {}).status(), IsOk());

  // pg_ctl restart -m immediate, in two halves: down ...
  server.StopImmediately();
  const std::string name = "postgres 127.0.0.1:" + std::to_string(server.port()) + "/postgres";
  env.job_id = "job_during";
  EXPECT_THAT(q.Enqueue(env, {}).status(), StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT(backend->admin()->Get("job_before").status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  // Within the backoff, calls fail at once and say when the next try is.
  EXPECT_THAT(q.Enqueue(env, {}).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr("next reconnect attempt")));
  // ... and up again: after the backoff the pool reconnects by itself, and
  // the committed enqueue is still there.
  ASSERT_EQ(server.Start(), "");
  Status s;
  for (int i = 0; i < 50; ++i) {
    s = q.Enqueue(env, {}).status();
    if (s.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(backend->admin()->Get("job_before")->status, JobStatus::kQueued);
  EXPECT_EQ(backend->admin()->Get("job_during")->status, JobStatus::kQueued);
}

// A bounded run against a private server restarted in the middle with an
// immediate shutdown (pg_ctl restart -m immediate): a runner works through
// the jobs while a producer keeps enqueueing; afterwards every enqueue that
// was acknowledged exists and has succeeded, and each one's completion
// effect committed exactly once.
TEST(PostgresServerDownTest, ARestartMidRunLosesNoAcknowledgedEnqueueOrCompletion) {
  pt::PrivatePostgresServer server;
  const std::string why = server.Start();
  if (!why.empty()) {
    if (pt::PostgresRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  auto clock = SystemClock::Default();
  JOBPACT_ASSERT_OK_AND_ASSIGN(PostgresOptions o, ParsePostgresUrl(server.url()));
  o.reconnect_backoff_min = Millis(50);
  o.reconnect_backoff_max = Millis(200);
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto backend, PostgresBackend::Open(o, clock));
  {
    pt::PgConnPtr raw = pt::Connect(o);
    ASSERT_NE(raw, nullptr);
    ASSERT_EQ(pt::Query(raw.get(), "CREATE TABLE jobpact.effects (job_id text)"), "");
  }
  JobRunnerOptions ro;
  ro.backend = backend->bundle();
  ro.clock = clock;
  ro.workers = 2;
  ro.dequeue_batch = 4;
  ro.poll_interval = Millis(20);
  ro.maintenance_interval = Millis(100);
  // Short leases, so that jobs running at the crash are recovered quickly.
  ro.validation.visibility_buffer = Millis(500);
  ro.log_level = LogLevel::kOff;  // The outage's dequeue errors are expected.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobRunner> runner, JobRunner::Create(ro));
  ASSERT_THAT(runner->Handle("restart.effect",
                             [](JobContext& ctx) -> Status {
                               const std::string id = ctx.envelope().job_id;
                               ctx.SetTransactionalEffect([id](void* native) -> Status {
                                 const char* v[1] = {id.c_str()};
                                 PGresult* r = PQexecParams(
                                     static_cast<PGconn*>(native),
                                     "INSERT INTO jobpact.effects (job_id) VALUES ($1)", 1,
                                     nullptr, v, nullptr, nullptr, 0);
                                 const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
                                 PQclear(r);
                                 return ok ? Status::Ok() : Status::Unavailable("effect");
                               });
                               std::this_thread::sleep_for(std::chrono::milliseconds(2));
                               return Status::Ok();
                             }),
              IsOk());
  ASSERT_THAT(runner->Start(), IsOk());
  std::mutex mu;
  std::vector<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::thread producer([&] {
    for (int i = 0; i < 600 && !stop.load(); ++i) {
      Envelope env;
      env.job_type = "restart.effect";
      env.timeout = Seconds(1);
      env.visibility_timeout = Seconds(2);
      PrepareForEnqueue(env, clock->Now());
      Result<EnqueueResult> r = backend->queue()->Enqueue(env, {});
      if (r.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        acknowledged.push_back(env.job_id);
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
        ++refused;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  server.StopImmediately();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(server.Start(), "");
  producer.join();
  // Bounded: every acknowledged job succeeds within 60 s.
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu);
    ids = acknowledged;
  }
  ASSERT_GT(ids.size(), 100u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::size_t done = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    done = 0;
    for (const std::string& id : ids) {
      Result<JobRecord> rec = backend->admin()->Get(id);
      if (rec.ok() && rec->status == JobStatus::kSucceeded) ++done;
    }
    if (done == ids.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_THAT(runner->Shutdown(Seconds(5)), IsOk());
  EXPECT_EQ(done, ids.size()) << "acknowledged jobs not succeeded within 60 s";
  pt::PgConnPtr raw = pt::Connect(o);
  ASSERT_NE(raw, nullptr);
  std::map<std::string, int> effects;
  PGresult* r = PQexec(raw.get(), "SELECT job_id, count(*) FROM jobpact.effects GROUP BY job_id");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
  for (int i = 0; i < PQntuples(r); ++i) effects[PQgetvalue(r, i, 0)] = std::atoi(PQgetvalue(r, i, 1));
  PQclear(r);
  for (const std::string& id : ids) {
    EXPECT_EQ(effects[id], 1) << id << ": its completion effect did not commit exactly once";
  }
  std::printf("restart mid-run: %zu enqueues acknowledged, %d refused while down\n", ids.size(),
              refused.load());
}

// --- The runner with the guards in the completion (as on SQLite) ---

// The bundle's locks and claims live in the schema beside the jobs: the
// runner releases and records them with each completion, and a job with
// both keys takes them in one statement. The cases are SQLite's too
// (tests/support/durable_runner_cases.h).
class PostgresRunnerTest : public PostgresBackendTest {
 protected:
  durable_runner_testing::StoreTarget Target() {
    durable_runner_testing::StoreTarget t;
    t.open = [o = options_](std::shared_ptr<Clock> clock) -> Result<BackendBundle> {
      JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<PostgresBackend> b,
                               PostgresBackend::Open(o, std::move(clock)));
      return b->bundle();
    };
    t.drop_claims = [this] {
      EXPECT_EQ(pt::Query(raw_.get(), "DELETE FROM " + options_.schema + ".idempotency"), "");
    };
    return t;
  }
};

TEST_F(PostgresRunnerTest, SameKeyJobsRunBackToBackAsIfReleasedAtOnce) {
  durable_runner_testing::ExpectSameKeyJobsRunBackToBack(Target());
}

TEST_F(PostgresRunnerTest, AClaimLostWhileTheHandlerRanFailsTheAttemptInsteadOfAckingIt) {
  durable_runner_testing::ExpectAClaimLostFailsTheAttemptInsteadOfAckingIt(Target());
}

// Idle workers woken by another process's NOTIFY: one per wake-up, and a
// full lease wakes the next.
TEST_F(PostgresRunnerTest, AWakeUpBringsOneIdleWorkerNotAll) {
  durable_runner_testing::ExpectAWakeUpBringsOneIdleWorkerNotAll(Target());
}

TEST_F(PostgresRunnerTest, AFullLeaseWakesTheNextIdleWorker) {
  durable_runner_testing::ExpectAFullLeaseWakesTheNextIdleWorker(Target());
}

TEST_F(PostgresRunnerTest, TheLeaseStepAnswersTheDedupCheck) {
  durable_runner_testing::ExpectTheLeaseStepAnswersTheDedupCheck(Target());
}

TEST_F(PostgresRunnerTest, TheLeaseStepTakesTheGuardsTheRunnerNeeds) {
  durable_runner_testing::ExpectTheLeaseStepTakesTheGuardsTheRunnerNeeds(Target());
}

TEST_F(PostgresRunnerTest, ADuplicateDropsTheClaimItsLeaseTook) {
  durable_runner_testing::ExpectADuplicateDropsTheClaimItsLeaseTook(Target());
}

TEST_F(PostgresRunnerTest, GuardsTakenWithTheLeaseAreRenewedWithIt) {
  durable_runner_testing::ExpectGuardsTakenWithTheLeaseAreRenewedWithIt(Target());
}

TEST_F(PostgresRunnerTest, ShutdownGivesBackTheGuardsOfJobsThatDidNotStart) {
  durable_runner_testing::ExpectShutdownGivesBackTheGuardsOfJobsThatDidNotStart(Target());
}

}  // namespace
}  // namespace postgres
}  // namespace jobpact
