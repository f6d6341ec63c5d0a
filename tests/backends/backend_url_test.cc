// OpenBackend(url) (jobpact/backend.h, jobpact::backends): what every URL
// form means, every error it gives, and that the bundles it opens work --
// and, with SQLite built, share one file between bundles and keep a runner
// from taking a SQLite queue without its locks. Built in every
// configuration: without SQLite it checks the "not built" error instead.
#include "src/backends/url/backend_url.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#ifdef JOBPACT_TEST_WITH_REDIS
#include "jobpact/redis/redis_backend.h"
#include "tests/backends/redis/redis_test_server.h"
#endif
#ifdef JOBPACT_TEST_WITH_SQLITE
#include "jobpact/sqlite/sqlite_backend.h"
#endif
#ifdef JOBPACT_TEST_WITH_POSTGRES
#include "jobpact/postgres/postgres_backend.h"
#include "tests/backends/free_port.h"
#include "tests/backends/postgres/postgres_test_server.h"
#endif

namespace jobpact {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::ManualClock;
using ::testing::Not;
using testing::StatusIs;

Envelope Job(const std::string& id, TimePoint now) {
  Envelope env;
  env.job_id = id;
  env.job_type = "test.job";
  env.payload = "{}";
  PrepareForEnqueue(env, now);
  return env;
}

// Enqueues `id` on `from` and returns what a Dequeue on `to` delivers.
std::vector<std::string> EnqueueThenDequeue(QueueBackend& from, QueueBackend& to,
                                            const std::string& id, TimePoint now) {
  std::vector<std::string> ids;
  Result<EnqueueResult> queued = from.Enqueue(Job(id, now), {});
  EXPECT_THAT(queued, IsOk());
  DequeueRequest req;
  req.max_jobs = 8;
  req.worker_id = "w1";
  Result<std::vector<Delivery>> got = to.Dequeue(req);
  EXPECT_THAT(got, IsOk());
  if (got.ok()) {
    for (const Delivery& d : *got) ids.push_back(d.lease.job_id);
  }
  return ids;
}

Status ParseError(std::string_view url) { return internal::ParseBackendUrl(url).status(); }

Status SqliteError(std::string_view url) {
  Result<internal::BackendUrl> parsed = internal::ParseBackendUrl(url);
  if (!parsed.ok()) return parsed.status();
  return internal::ParseSqliteUrl(*parsed).status();
}

// The file name (and options) a sqlite: URL asks for; "" on error.
internal::SqliteUrl Sqlite(std::string_view url) {
  Result<internal::BackendUrl> parsed = internal::ParseBackendUrl(url);
  EXPECT_THAT(parsed, IsOk()) << url;
  if (!parsed.ok()) return {};
  EXPECT_EQ(parsed->scheme, "sqlite");
  Result<internal::SqliteUrl> sqlite = internal::ParseSqliteUrl(*parsed);
  EXPECT_THAT(sqlite, IsOk()) << url;
  return sqlite.ok() ? *sqlite : internal::SqliteUrl{};
}

// --- memory: -------------------------------------------------------------------

TEST(OpenBackendTest, MemoryGivesTheThreeInMemoryStores) {
  for (const char* url : {"memory:", "memory://", "MEMORY:", "Memory:"}) {
    Result<BackendBundle> b = OpenBackend(url);
    ASSERT_THAT(b, IsOk()) << url;
    EXPECT_TRUE(b->complete()) << url;
    EXPECT_EQ(b->name, "in_memory");
    EXPECT_EQ(b->url, "memory:");
    EXPECT_EQ(b->queue->Name(), "in_memory");
    EXPECT_EQ(b->locks->Name(), "in_memory");
    EXPECT_EQ(b->idempotency->Name(), "in_memory");
  }
}

TEST(OpenBackendTest, MemoryBundleEnqueuesAndDequeues) {
  auto clock = std::make_shared<ManualClock>();
  Result<BackendBundle> b = OpenBackend("memory:", {clock});
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(EnqueueThenDequeue(*b->queue, *b->queue, "job_1", clock->Now()),
              ::testing::ElementsAre("job_1"));
}

TEST(OpenBackendTest, MemoryStoresFollowTheGivenClock) {
  auto clock = std::make_shared<ManualClock>();
  Result<BackendBundle> b = OpenBackend("memory:", {clock});
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(b->locks->Acquire("k", "a", Seconds(10)), IsOk());
  EXPECT_THAT(b->locks->Acquire("k", "b", Seconds(10)), StatusIs(StatusCode::kAborted));
  clock->Advance(Seconds(10));  // Expired on the manual clock: free again.
  EXPECT_THAT(b->locks->Acquire("k", "b", Seconds(10)), IsOk());
}

TEST(OpenBackendTest, MemoryTakesNoPathHostOrParameters) {
  for (const char* url : {"memory:jobs", "memory://host", "memory:///x", "memory:?a=1"}) {
    EXPECT_THAT(OpenBackend(url).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("memory: takes no")))
        << url;
  }
}

TEST(OpenBackendTest, InMemoryBackendMatchesMemoryUrl) {
  BackendBundle b = InMemoryBackend();
  EXPECT_TRUE(b.complete());
  EXPECT_EQ(b.name, "in_memory");
  EXPECT_EQ(b.url, "memory:");
}

// --- Malformed URLs -------------------------------------------------------------

TEST(OpenBackendTest, EmptyUrlIsRefused) {
  EXPECT_THAT(OpenBackend("").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("the URL is empty")));
}

TEST(OpenBackendTest, UrlWithoutSchemeIsRefused) {
  for (const char* url :
       {"/var/lib/jobs.db", "jobs.db", "1sqlite:jobs.db", ":memory:", "./sqlite:jobs.db"}) {
    EXPECT_THAT(OpenBackend(url).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("no scheme")))
        << url;
  }
}

TEST(OpenBackendTest, SpacesAndControlCharactersAreRefused) {
  EXPECT_THAT(OpenBackend(" memory:").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a space at offset 0")));
  EXPECT_THAT(OpenBackend("sqlite:my jobs.db").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("%20")));
  EXPECT_THAT(OpenBackend("memory:\n").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("control character at offset 7")));
}

TEST(OpenBackendTest, BadPercentEncodingIsRefused) {
  for (const char* url : {"sqlite:jobs%zz.db", "sqlite:jobs%2", "sqlite:jobs%", "memory:%g0"}) {
    EXPECT_THAT(OpenBackend(url).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("bad percent-encoding")))
        << url;
  }
  EXPECT_THAT(ParseError("sqlite:jobs%zz.db"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("\"%zz\"")));
  EXPECT_THAT(ParseError("sqlite:jobs.db?read_only=%q1"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("bad percent-encoding"), HasSubstr("read_only=%q1"))));
  EXPECT_THAT(ParseError("sqlite:jobs%00.db"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("NUL")));
}

TEST(OpenBackendTest, FragmentIsRefused) {
  EXPECT_THAT(OpenBackend("sqlite:jobs.db#main").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("fragment (#main)"), HasSubstr("%23"))));
}

TEST(OpenBackendTest, MalformedQueryItemsAreRefused) {
  EXPECT_THAT(ParseError("sqlite:jobs.db?read_only"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("\"read_only\" has no value")));
  EXPECT_THAT(ParseError("sqlite:jobs.db?=1"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("has no name")));
  // Empty items are skipped; so is an empty query.
  EXPECT_THAT(internal::ParseBackendUrl("sqlite:jobs.db?&read_only=1&"), IsOk());
  EXPECT_THAT(internal::ParseBackendUrl("sqlite:jobs.db?"), IsOk());
}

// --- Schemes --------------------------------------------------------------------

TEST(OpenBackendTest, UnknownSchemeIsNamedWithTheKnownOnes) {
  Status s = OpenBackend("mysql://app:s3cret@db.internal/jobs").status();
  EXPECT_THAT(s,
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("unknown backend scheme \"mysql:\""), HasSubstr("memory:"),
                             HasSubstr("sqlite:"), HasSubstr("redis:"), HasSubstr("postgres:"))));
  EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));  // Never echo a password.
  EXPECT_THAT(OpenBackend("file:///var/lib/jobs.db").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("\"file:\"")));
}

#ifndef JOBPACT_TEST_WITH_POSTGRES

TEST(OpenBackendTest, PostgresSaysHowToBuildIt) {
  for (const char* url :
       {"postgres://app:s3cret@db/jobs", "postgresql://db/jobs?schema=jobs", "POSTGRES:"}) {
    Status s = OpenBackend(url).status();
    EXPECT_THAT(s, StatusIs(StatusCode::kUnimplemented,
                            AllOf(HasSubstr("postgres backend is not built"),
                                  HasSubstr("-DJOBPACT_WITH_POSTGRES=ON"))))
        << url;
    EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
  }
}

#else  // JOBPACT_TEST_WITH_POSTGRES

TEST(PostgresOpenBackendTest, OpensTheServerNamedByTheUrl) {
  JOBPACT_POSTGRES_URL_OR_SKIP(base);
  const std::string schema = postgres_testing::FreshSchema();
  const std::string url =
      base + (base.find('?') == std::string::npos ? "?" : "&") + "schema=" + schema;
  auto clock = std::make_shared<ManualClock>();
  Result<BackendBundle> b = OpenBackend(url, {clock});
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->complete());
  EXPECT_EQ(b->name, "postgres");
  EXPECT_THAT(b->url, HasSubstr("schema=" + schema));
  Result<postgres::PostgresOptions> options = postgres::ParsePostgresUrl(url);
  ASSERT_THAT(options, IsOk());
  Result<std::shared_ptr<postgres::PostgresBackend>> direct =
      postgres::PostgresBackend::Open(*options, clock);
  ASSERT_THAT(direct, IsOk());
  // The bundle's stores and a second handle's are the same place.
  ASSERT_THAT(b->locks->Acquire("order:1", "w1", Seconds(30)), IsOk());
  EXPECT_THAT((*direct)->locks()->Acquire("order:1", "w2", Seconds(30)),
              StatusIs(StatusCode::kAborted, HasSubstr("held by w1")));
  direct->reset();
  *b = BackendBundle{};
  postgres_testing::DropSchema(*options);
}

TEST(PostgresOpenBackendTest, UrlErrorsComeFromThePostgresParserAndHideThePassword) {
  for (const char* url : {"postgres://:s3cret@h:bad", "postgres://:s3#cret@h",
                          "postgres://:s3cret@h/x/y", "postgresql://:s3cret@h?poolsize=2",
                          "postgres://u:s3cret@h/db?schema=Bad-Name"}) {
    Status s = OpenBackend(url).status();
    EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument, HasSubstr("postgres"))) << url;
    EXPECT_THAT(s.message(), Not(HasSubstr("s3"))) << url << ": " << s.message();
  }
}

TEST(PostgresOpenBackendTest, UnreachableServerIsUnavailableNamingIt) {
  const int port = backend_testing::FreeLoopbackPort();
  const std::string p = std::to_string(port);
  Status s = OpenBackend("postgres://u:s3cret@127.0.0.1:" + p + "/app").status();
  EXPECT_THAT(s, StatusIs(StatusCode::kUnavailable, HasSubstr("postgres 127.0.0.1:" + p + "/app")));
  EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
}

#endif  // JOBPACT_TEST_WITH_POSTGRES

// --- sqlite: paths ------------------------------------------------------------------

TEST(SqliteUrlTest, ThreeSlashesIsAnAbsolutePath) {
  EXPECT_EQ(Sqlite("sqlite:///var/lib/app/jobs.db").path, "/var/lib/app/jobs.db");
  EXPECT_EQ(Sqlite("SQLite:///var/lib/app/jobs.db").path, "/var/lib/app/jobs.db");
}

TEST(SqliteUrlTest, OneSlashIsTheSameAbsolutePath) {
  EXPECT_EQ(Sqlite("sqlite:/var/lib/app/jobs.db").path, "/var/lib/app/jobs.db");
}

TEST(SqliteUrlTest, NoSlashIsARelativePath) {
  EXPECT_EQ(Sqlite("sqlite:jobs.db").path, "jobs.db");
  EXPECT_EQ(Sqlite("sqlite:data/jobs.db").path, "data/jobs.db");
  EXPECT_EQ(Sqlite("sqlite:../jobs.db").path, "../jobs.db");
}

TEST(SqliteUrlTest, PathIsPercentDecoded) {
  EXPECT_EQ(Sqlite("sqlite:///tmp/my%20jobs%3F%23%25.db").path, "/tmp/my jobs?#%.db");
  EXPECT_EQ(Sqlite("sqlite:caf%C3%A9.db").path, "caf\xC3\xA9.db");
  EXPECT_EQ(Sqlite("sqlite:a+b.db").path, "a+b.db");  // '+' is not a space in a URL.
}

TEST(SqliteUrlTest, PathIsNeverReadAsAnSqliteUri) {
  EXPECT_EQ(Sqlite("sqlite:file:jobs.db").path, "./file:jobs.db");
}

TEST(SqliteUrlTest, HostPositionIsRefusedWithTheRelativeSpelling) {
  EXPECT_THAT(
      SqliteError("sqlite://jobs.db"),
      StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("\"jobs.db\" is in the host position"),
                                                   HasSubstr("write sqlite:jobs.db"))));
  EXPECT_THAT(SqliteError("sqlite://localhost/var/jobs.db"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("host position")));
}

TEST(SqliteUrlTest, FourSlashesAreRefusedWithTheThreeSlashSpelling) {
  EXPECT_THAT(SqliteError("sqlite:////var/lib/jobs.db"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("SQLAlchemy"), HasSubstr("sqlite:///var/lib/jobs.db"))));
}

TEST(SqliteUrlTest, MissingPathIsRefused) {
  for (const char* url : {"sqlite:", "sqlite://", "sqlite:///", "sqlite:?read_only=1"}) {
    EXPECT_THAT(SqliteError(url), StatusIs(StatusCode::kInvalidArgument, HasSubstr("no path")))
        << url;
  }
  EXPECT_THAT(SqliteError("sqlite:///var/lib/"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("names a directory")));
}

TEST(SqliteUrlTest, SqliteInMemoryDatabaseIsRefused) {
  EXPECT_THAT(SqliteError("sqlite::memory:"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("use memory: instead")));
}

// --- sqlite: parameters ---------------------------------------------------------------

TEST(SqliteUrlTest, DefaultsWithoutParameters) {
  const sqlite::SqliteOptions defaults;
  const sqlite::SqliteOptions o = Sqlite("sqlite:jobs.db").options;
  EXPECT_EQ(o.busy_timeout, defaults.busy_timeout);
  EXPECT_EQ(o.synchronous, defaults.synchronous);
  EXPECT_EQ(o.read_only, defaults.read_only);
  EXPECT_EQ(o.adopt_existing_database, defaults.adopt_existing_database);
  EXPECT_EQ(o.quick_check_on_open, defaults.quick_check_on_open);
  EXPECT_EQ(o.max_database_bytes, defaults.max_database_bytes);
  EXPECT_EQ(o.drain_reserve_bytes, defaults.drain_reserve_bytes);
  EXPECT_EQ(o.max_connections, defaults.max_connections);
  EXPECT_EQ(o.idempotency_retention, defaults.idempotency_retention);
}

TEST(SqliteUrlTest, EveryParameterSetsItsOption) {
  const sqlite::SqliteOptions o =
      Sqlite(
          "sqlite:///tmp/jobs.db?busy_timeout_ms=250&synchronous=full&read_only=1"
          "&adopt_existing_database=true&quick_check_on_open=0&max_database_bytes=1048576"
          "&drain_reserve_bytes=4096&max_connections=3&idempotency_retention_ms=60000")
          .options;
  EXPECT_EQ(o.busy_timeout, Millis(250));
  EXPECT_EQ(o.synchronous, sqlite::SqliteOptions::Synchronous::kFull);
  EXPECT_TRUE(o.read_only);
  EXPECT_TRUE(o.adopt_existing_database);
  EXPECT_FALSE(o.quick_check_on_open);
  EXPECT_EQ(o.max_database_bytes, 1048576);
  EXPECT_EQ(o.drain_reserve_bytes, 4096);
  EXPECT_EQ(o.max_connections, 3);
  EXPECT_EQ(o.idempotency_retention, Seconds(60));
  EXPECT_EQ(Sqlite("sqlite:j.db?synchronous=normal&read_only=false").options.synchronous,
            sqlite::SqliteOptions::Synchronous::kNormal);
  EXPECT_EQ(Sqlite("sqlite:j.db?max_database_bytes=100&drain_reserve_bytes=-1")
                .options.drain_reserve_bytes,
            -1);
  // Names and values may be percent-encoded too.
  EXPECT_TRUE(Sqlite("sqlite:j.db?read%5Fonly=%31").options.read_only);
}

TEST(SqliteUrlTest, UnknownParameterIsNamedWithTheKnownOnes) {
  EXPECT_THAT(SqliteError("sqlite:jobs.db?busy_timeout=5"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("unknown query parameter \"busy_timeout\""),
                             HasSubstr("busy_timeout_ms"), HasSubstr("read_only"))));
}

TEST(SqliteUrlTest, RepeatedParameterIsRefused) {
  EXPECT_THAT(
      SqliteError("sqlite:jobs.db?read_only=1&read_only=0"),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("\"read_only\" is given more than once")));
}

TEST(SqliteUrlTest, BadValuesAreNamed) {
  struct Case {
    const char* url;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"sqlite:j.db?read_only=yes", "read_only=yes: not a boolean"},
           {"sqlite:j.db?quick_check_on_open=", "quick_check_on_open=: not a boolean"},
           {"sqlite:j.db?busy_timeout_ms=5s", "busy_timeout_ms=5s: not an integer"},
           {"sqlite:j.db?busy_timeout_ms=+5", "busy_timeout_ms=+5: not an integer"},
           {"sqlite:j.db?busy_timeout_ms=-1", "busy_timeout_ms=-1: out of range"},
           {"sqlite:j.db?busy_timeout_ms=99999999999999999999", "out of range"},
           {"sqlite:j.db?max_connections=0", "max_connections=0: out of range"},
           {"sqlite:j.db?max_connections=3000000000", "max_connections=3000000000: out of range"},
           {"sqlite:j.db?idempotency_retention_ms=0", "idempotency_retention_ms=0: out of range"},
           {"sqlite:j.db?max_database_bytes=-5", "max_database_bytes=-5: out of range"},
           {"sqlite:j.db?drain_reserve_bytes=-2", "drain_reserve_bytes=-2: out of range"},
           {"sqlite:j.db?synchronous=fast", "synchronous=fast: use normal or full"},
           {"sqlite:j.db?drain_reserve_bytes=10", "needs max_database_bytes"},
           {"sqlite:j.db?max_database_bytes=100&drain_reserve_bytes=100",
            "must be less than max_database_bytes=100"},
       }) {
    EXPECT_THAT(SqliteError(c.url), StatusIs(StatusCode::kInvalidArgument, HasSubstr(c.says)))
        << c.url;
  }
}

#ifndef JOBPACT_TEST_WITH_REDIS

// --- Built without Redis --------------------------------------------------------------

TEST(OpenBackendTest, RedisSaysHowToBuildIt) {
  for (const char* url : {"redis://localhost:6379/0", "rediss://u:s3cret@cache:6380",
                          "redis+unix:///run/redis.sock", "REDIS:"}) {
    Status s = OpenBackend(url).status();
    EXPECT_THAT(s, StatusIs(StatusCode::kUnimplemented, AllOf(HasSubstr("redis backend is not built"),
                                                              HasSubstr("-DJOBPACT_WITH_REDIS=ON"))))
        << url;
    EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
  }
}

#else  // JOBPACT_TEST_WITH_REDIS

// --- redis: opened for real, against the test server (redis_test_server.h) -----------

// The test server's URL with a namespace of this test's own.
std::string RedisUrlWithFreshNamespace(const std::string& base) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") +
         "namespace=" + redis_testing::FreshNamespace();
}

TEST(RedisOpenBackendTest, OpensTheServerNamedByTheUrl) {
  JOBPACT_REDIS_URL_OR_SKIP(base);
  const std::string url = RedisUrlWithFreshNamespace(base);
  auto clock = std::make_shared<ManualClock>();
  Result<BackendBundle> b = OpenBackend(url, {clock});
  // The queue store comes from src/backends/redis/queue_backend.cc; a
  // build with only its stub must say so instead of handing out half a
  // bundle.
  Result<redis::RedisOptions> options = redis::ParseRedisUrl(url);
  ASSERT_THAT(options, IsOk());
  Result<std::shared_ptr<redis::RedisBackend>> direct = redis::RedisBackend::Open(*options, clock);
  ASSERT_THAT(direct, IsOk());
  if ((*direct)->queue() == nullptr) {
    EXPECT_THAT(b, StatusIs(StatusCode::kUnimplemented, HasSubstr("no queue store yet")));
    return;
  }
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->complete());
  EXPECT_EQ(b->name, "redis");
  EXPECT_EQ(b->url, (*direct)->url());
  // The bundle's stores and a second handle's are the same place.
  ASSERT_THAT(b->locks->Acquire("order:1", "w1", Seconds(30)), IsOk());
  EXPECT_THAT((*direct)->locks()->Acquire("order:1", "w2", Seconds(30)),
              StatusIs(StatusCode::kAborted, HasSubstr("held by w1")));
}

TEST(RedisOpenBackendTest, UrlErrorsComeFromTheRedisParserAndHideThePassword) {
  for (const char* url : {"redis://:s3cret@h:bad", "redis://:s3#cret@h", "redis://:s3cret@h/x",
                          "redis://:s3cret@h?poolsize=2", "redis+unix://u:s3cret@host/x.sock"}) {
    Status s = OpenBackend(url).status();
    EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument, HasSubstr("redis URL: "))) << url;
    EXPECT_THAT(s.message(), Not(HasSubstr("s3"))) << url << ": " << s.message();
  }
}

TEST(RedisOpenBackendTest, RedissSaysThereIsNoTls) {
  Status s = OpenBackend("rediss://u:s3cret@cache:6380").status();
  EXPECT_THAT(s, StatusIs(StatusCode::kUnimplemented,
                          AllOf(HasSubstr("no TLS"), HasSubstr("stunnel"))));
  EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
}

TEST(RedisOpenBackendTest, UnreachableServerIsUnavailableNamingIt) {
  redis_testing::PrivateRedisServer server;
  const std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  server.Kill();
  const std::string port = std::to_string(server.port());
  EXPECT_THAT(OpenBackend("redis://127.0.0.1:" + port + "/0").status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr("redis 127.0.0.1:" + port)));
}

#endif  // JOBPACT_TEST_WITH_REDIS

#ifndef JOBPACT_TEST_WITH_SQLITE

// --- Built without SQLite ------------------------------------------------------------

TEST(OpenBackendTest, SqliteSaysHowToBuildIt) {
  for (const char* url : {"sqlite:///tmp/jobs.db", "sqlite:jobs.db?read_only=1"}) {
    EXPECT_THAT(OpenBackend(url).status(),
                StatusIs(StatusCode::kUnimplemented, AllOf(HasSubstr("sqlite backend is not built"),
                                                           HasSubstr("-DJOBPACT_WITH_SQLITE=ON"))))
        << url;
  }
}

#else  // JOBPACT_TEST_WITH_SQLITE

// --- sqlite: opened for real ---------------------------------------------------------

class SqliteOpenBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "jobpact_backend_url_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Result<BackendBundle> Open(const std::string& url) { return OpenBackend(url, {clock_}); }

  std::string dir_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(SqliteOpenBackendTest, AbsolutePathOpensAWorkingBundle) {
  const std::string url = "sqlite://" + dir_ + "/jobs.db";
  Result<BackendBundle> b = Open(url);
  ASSERT_THAT(b, IsOk());
  EXPECT_TRUE(b->complete());
  EXPECT_EQ(b->name, "sqlite");
  EXPECT_EQ(b->url, url);
  EXPECT_EQ(b->queue->Name(), "sqlite");
  EXPECT_EQ(b->locks->Name(), "sqlite");
  EXPECT_EQ(b->idempotency->Name(), "sqlite");
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/jobs.db"));
  EXPECT_THAT(EnqueueThenDequeue(*b->queue, *b->queue, "job_1", clock_->Now()),
              ::testing::ElementsAre("job_1"));
}

TEST_F(SqliteOpenBackendTest, TwoBundlesOnOneFileShareJobsLocksAndClaims) {
  const std::string url = "sqlite://" + dir_ + "/shared.db";
  Result<BackendBundle> a = Open(url);
  Result<BackendBundle> b = Open(url);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(EnqueueThenDequeue(*a->queue, *b->queue, "job_1", clock_->Now()),
              ::testing::ElementsAre("job_1"));
  // A's lock is held in the file: B cannot take it.
  ASSERT_THAT(a->locks->Acquire("order:1", "worker-a", Seconds(30)), IsOk());
  EXPECT_THAT(b->locks->Acquire("order:1", "worker-b", Seconds(30)),
              StatusIs(StatusCode::kAborted));
  // A's idempotency claim too.
  Result<ClaimOutcome> claim = a->idempotency->Claim("invoice:1", "worker-a", Seconds(30));
  ASSERT_THAT(claim, IsOk());
  EXPECT_EQ(claim->kind, ClaimOutcome::Kind::kClaimed);
  Result<ClaimOutcome> second = b->idempotency->Claim("invoice:1", "worker-b", Seconds(30));
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->kind, ClaimOutcome::Kind::kInProgress);
}

TEST_F(SqliteOpenBackendTest, RelativePathIsUnderTheWorkingDirectory) {
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  Result<BackendBundle> b = Open("sqlite:rel.db");
  Result<BackendBundle> c = Open("sqlite:file:odd.db");
  std::filesystem::current_path(before);
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/rel.db"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/file:odd.db"));
}

TEST_F(SqliteOpenBackendTest, PercentEncodedPathNamesTheDecodedFile) {
  ASSERT_THAT(Open("sqlite://" + dir_ + "/my%20jobs%3F.db"), IsOk());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/my jobs?.db"));
}

TEST_F(SqliteOpenBackendTest, ParametersReachTheBackend) {
  const std::string url = "sqlite://" + dir_ + "/jobs.db";
  ASSERT_THAT(Open(url), IsOk());  // Creates the file.
  Result<BackendBundle> ro = Open(url + "?read_only=1&busy_timeout_ms=100");
  ASSERT_THAT(ro, IsOk());
  EXPECT_THAT(ro->queue->Enqueue(Job("job_1", clock_->Now()), {}).status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("read-only")));
}

TEST_F(SqliteOpenBackendTest, OpenErrorsOfTheBackendPassThrough) {
  const std::string missing_dir = dir_ + "/no/such/dir/jobs.db";
  Status s = Open("sqlite://" + missing_dir).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(missing_dir));
  // read_only on a file that does not exist creates nothing.
  EXPECT_FALSE(Open("sqlite://" + dir_ + "/absent.db?read_only=1").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/absent.db"));
}

TEST_F(SqliteOpenBackendTest, SqliteBackendBundleHasItsThreeStores) {
  auto opened = sqlite::SqliteBackend::Open(dir_ + "/my jobs.db", {}, clock_);
  ASSERT_THAT(opened, IsOk());
  BackendBundle b = (*opened)->bundle();
  EXPECT_TRUE(b.complete());
  EXPECT_EQ(b.queue, (*opened)->queue());
  EXPECT_EQ(b.locks, (*opened)->locks());
  EXPECT_EQ(b.idempotency, (*opened)->idempotency());
  EXPECT_EQ(b.name, "sqlite");
  EXPECT_EQ(b.url, "sqlite://" + dir_ + "/my%20jobs.db");
  // Its URL opens the same file.
  Result<BackendBundle> again = Open(b.url);
  ASSERT_THAT(again, IsOk());
  EXPECT_THAT(EnqueueThenDequeue(*b.queue, *again->queue, "job_1", clock_->Now()),
              ::testing::ElementsAre("job_1"));
}

// --- The runner takes the whole bundle ---------------------------------------------

JobRunnerOptions RunnerOptions(std::shared_ptr<Clock> clock) {
  JobRunnerOptions o;
  o.clock = std::move(clock);
  o.log_level = LogLevel::kOff;
  o.workers = 1;
  return o;
}

TEST_F(SqliteOpenBackendTest, RunnerRefusesASqliteQueueWithoutItsLocks) {
  Result<BackendBundle> b = Open("sqlite://" + dir_ + "/jobs.db");
  ASSERT_THAT(b, IsOk());
  JobRunnerOptions queue_only = RunnerOptions(clock_);
  queue_only.queue = b->queue;
  EXPECT_THAT(
      JobRunner::Create(queue_only).status(),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(HasSubstr("the queue is \"sqlite\" but locks and idempotency are not set"),
                     HasSubstr("same backend"))));
  JobRunnerOptions no_claims = RunnerOptions(clock_);
  no_claims.queue = b->queue;
  no_claims.locks = b->locks;
  EXPECT_THAT(JobRunner::Create(no_claims).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("the queue is \"sqlite\" but idempotency is not set")));
  JobRunnerOptions no_locks = RunnerOptions(clock_);
  no_locks.queue = b->queue;
  no_locks.idempotency = b->idempotency;
  EXPECT_THAT(JobRunner::Create(no_locks).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("the queue is \"sqlite\" but locks is not set")));
  // A bundle with a store missing is refused the same way.
  JobRunnerOptions partial = RunnerOptions(clock_);
  partial.backend = *b;
  partial.backend.locks = nullptr;
  EXPECT_THAT(JobRunner::Create(partial).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("same backend")));
}

TEST_F(SqliteOpenBackendTest, RunnerRunsAJobOnTheBundle) {
  Result<BackendBundle> b = Open("sqlite://" + dir_ + "/jobs.db");
  ASSERT_THAT(b, IsOk());
  JobRunnerOptions o = RunnerOptions(clock_);
  o.backend = *b;
  Result<std::unique_ptr<JobRunner>> runner = JobRunner::Create(o);
  ASSERT_THAT(runner, IsOk());
  EXPECT_EQ((*runner)->options().queue, b->queue);
  EXPECT_EQ((*runner)->options().locks, b->locks);
  EXPECT_EQ((*runner)->options().idempotency, b->idempotency);
  EXPECT_EQ((*runner)->options().backend.name, "sqlite");
  ASSERT_THAT((*runner)->Handle("t", [](JobContext&) { return Status::Ok(); }), IsOk());
  Envelope env;
  env.job_type = "t";
  env.idempotency_key = "t:1";
  env.lock_key = "order:1";
  Result<EnqueueResult> queued = (*runner)->Enqueue(env);
  ASSERT_THAT(queued, IsOk());
  Result<int> ran = (*runner)->RunUntilIdle();
  ASSERT_THAT(ran, IsOk());
  EXPECT_EQ(*ran, 1);
  EXPECT_EQ(b->admin->Get(queued->job_id)->status, JobStatus::kSucceeded);
  // The claim was completed in the file's idempotency store, not in memory.
  Result<std::optional<IdempotencyRecord>> record = b->idempotency->Get("t:1");
  ASSERT_THAT(record, IsOk());
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->state, IdempotencyRecord::State::kCompleted);
}

#endif  // JOBPACT_TEST_WITH_SQLITE

}  // namespace
}  // namespace jobpact
