// What the SQLite backend adds to the contract suite: the schema and its
// migrations, files that are not ours, read-only and full databases, busy
// files, transactional enqueue and completion, and several processes (and
// backend instances) sharing one file.
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/transitions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/queue_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/backends/sqlite/sqlite_test_files.h"

namespace jobpact {
namespace sqlite {
namespace {

using ::testing::HasSubstr;

#define ASSERT_OK(expr)                          \
  do {                                           \
    const ::jobpact::Status s_ = (expr);         \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_; \
  } while (0)
#define EXPECT_CODE(expr, code_name)                                               \
  do {                                                                             \
    const ::jobpact::Status s_ = (expr);                                           \
    EXPECT_EQ(s_.code(), ::jobpact::StatusCode::code_name) << #expr << ": " << s_; \
  } while (0)

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Inserts a business row through `db` (the caller's, or a transaction's).
Status InsertOrder(sqlite3* db, const std::string& id) {
  std::string sql = "INSERT INTO orders (id) VALUES ('" + id + "')";
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Status::Internal(sqlite3_errmsg(db));
  }
  return Status::Ok();
}

class SqliteBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    path_ = dir_.File("jobs.db");
  }

  std::shared_ptr<SqliteBackend> MustOpen(SqliteOptions options = {}) {
    auto b = SqliteBackend::Open(path_, options, clock_);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : nullptr;
  }

  Envelope Job(const std::string& id, std::string payload = "{}") {
    Envelope env;
    env.job_id = id;
    env.job_type = "test.job";
    env.payload = std::move(payload);
    PrepareForEnqueue(env, clock_->Now());
    return env;
  }

  Delivery TakeOne(QueueBackend& q) {
    DequeueRequest req;
    req.worker_id = "w1";
    auto d = q.Dequeue(req);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok() || d->empty()) {
      ADD_FAILURE() << "nothing to dequeue";
      return {};
    }
    return (*d)[0];
  }

  TempDir dir_;
  std::string path_;
  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
};

// --- Schema and files ---

TEST_F(SqliteBackendTest, NewFileGetsTheCurrentSchemaInWalMode) {
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->schema_version(), SqliteBackend::kSchemaVersion);
  EXPECT_EQ(backend->path(), path_);
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT value FROM jobpact_meta WHERE key = 'schema_version'"),
            std::to_string(SqliteBackend::kSchemaVersion));
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlite_master WHERE name = 'jobpact_jobs'"), "1");
}

// Schema version 6: SQLite evaluates a partial index's condition for each
// row an INSERT or a status UPDATE writes, and codes an IN list of three or
// more values as a temporary b-tree built each time the statement runs (two
// per enqueued job before version 6, half a bulk enqueue's instructions).
// No index condition may have one; the final-job indexes' condition as the
// purge and trim queries repeat it (JOBPACT_SQLITE_FINAL_JOB) still lets the
// planner use them.
TEST_F(SqliteBackendTest, IndexConditionsBuildNoTemporaryTablePerRow) {
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  auto rows = [&](const std::string& sql) {
    std::vector<std::string> out;
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
    while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, sqlite3_column_count(st) - 1);
      out.emplace_back(t == nullptr ? "" : reinterpret_cast<const char*>(t));
    }
    sqlite3_finalize(st);
    return out;
  };
  const std::regex long_in_list(R"(IN\s*\([^)]*,[^)]*,)", std::regex::icase);
  const std::vector<std::string> indexes =
      rows("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL");
  EXPECT_GE(indexes.size(), 8u);
  for (const std::string& sql : indexes) {
    EXPECT_FALSE(std::regex_search(sql, long_in_list)) << sql;
  }
  const std::string final_job =
      "(status = 'succeeded' OR status = 'failed' OR status = 'discarded')";
  EXPECT_THAT(rows("EXPLAIN QUERY PLAN SELECT rowid FROM jobpact_jobs WHERE " + final_job +
                   " AND finished_at_ns < 1 LIMIT 1000"),
              ::testing::Contains(::testing::HasSubstr("INDEX jobpact_jobs_finished")));
  EXPECT_THAT(rows("EXPLAIN QUERY PLAN SELECT job_type FROM jobpact_jobs WHERE " + final_job +
                   " AND status = 'succeeded' AND job_type > '' ORDER BY status, job_type LIMIT 1"),
              ::testing::Contains(::testing::HasSubstr("jobpact_jobs_finished_by_type")));
  sqlite3_close(db);
}

TEST_F(SqliteBackendTest, ReopeningKeepsJobsAndLeases) {
  Delivery lease;
  {
    auto backend = MustOpen();
    ASSERT_NE(backend, nullptr);
    for (const char* id : {"job_a", "job_b", "job_c"}) {
      ASSERT_OK(backend->queue()->Enqueue(Job(id), {}).status());
    }
    lease = TakeOne(*backend->queue());
    ASSERT_EQ(lease.lease.job_id, "job_a");
  }
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  auto a = backend->admin()->Get("job_a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, JobStatus::kRunning);
  EXPECT_EQ(a->envelope.attempt, 1);
  EXPECT_EQ(a->history.size(), 2u);
  // The lease taken before the reopen is still the live one.
  Completion done;
  done.reason = "succeeded";
  done.result = "ok";
  ASSERT_OK(backend->queue()->Complete(lease, done));
  EXPECT_EQ(backend->admin()->Get("job_a")->status, JobStatus::kSucceeded);
  EXPECT_EQ(backend->admin()->Get("job_a")->result, "ok");
  EXPECT_EQ(backend->admin()->Get("job_b")->status, JobStatus::kQueued);
  EXPECT_EQ(TakeOne(*backend->queue()).lease.job_id, "job_b");
}

TEST_F(SqliteBackendTest, MigratesAnOlderSchema) {
  {
    // A file at version 0: jobpact_meta only, as a pre-release layout would be.
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("CREATE TABLE jobpact_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                       "INSERT INTO jobpact_meta VALUES ('schema_version', '0');"),
              SQLITE_OK);
  }
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->schema_version(), SqliteBackend::kSchemaVersion);
  ASSERT_OK(backend->queue()->Enqueue(Job("job_1"), {}).status());
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT value FROM jobpact_meta WHERE key = 'schema_version'"),
            std::to_string(SqliteBackend::kSchemaVersion));
}

TEST_F(SqliteBackendTest, RefusesANewerSchemaAndLeavesTheFileAlone) {
  { ASSERT_NE(MustOpen(), nullptr); }
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_meta SET value = '99' WHERE key = 'schema_version'"),
              SQLITE_OK);
  }
  auto b = SqliteBackend::Open(path_, {}, clock_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("99"));
  EXPECT_THAT(b.status().message(),
              HasSubstr("version " + std::to_string(SqliteBackend::kSchemaVersion)));
  EXPECT_THAT(b.status().message(), HasSubstr(path_));
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT value FROM jobpact_meta WHERE key = 'schema_version'"), "99");
}

TEST_F(SqliteBackendTest, RefusesAFileThatIsNotSqlite) {
  const std::string text =
      "this is not a database, it is a shopping list\n" + std::string(8192, 'x');
  { std::ofstream(path_) << text; }
  auto b = SqliteBackend::Open(path_, {}, clock_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("not a SQLite database"));
  EXPECT_THAT(b.status().message(), HasSubstr(path_));
  EXPECT_EQ(ReadFile(path_), text);
}

TEST_F(SqliteBackendTest, RefusesAnotherApplicationsDatabaseUnlessAdopted) {
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY);"
                       "INSERT INTO orders VALUES ('ord_1');"),
              SQLITE_OK);
  }
  auto b = SqliteBackend::Open(path_, {}, clock_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("not a jobpact database"));
  EXPECT_THAT(b.status().message(), HasSubstr("adopt_existing_database"));
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlite_master WHERE name LIKE 'jobpact%'"), "0");
    EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "delete");  // Untouched.
  }
  SqliteOptions adopt;
  adopt.adopt_existing_database = true;
  auto backend = MustOpen(adopt);
  ASSERT_NE(backend, nullptr);
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT id FROM orders"), "ord_1");
  // Adopted once, it is a jobpact database: no flag needed any more.
  backend.reset();
  EXPECT_NE(MustOpen(), nullptr);
}

TEST_F(SqliteBackendTest, ReadOnlyOpenReadsButRefusesWrites) {
  {
    auto backend = MustOpen();
    ASSERT_NE(backend, nullptr);
    ASSERT_OK(backend->queue()->Enqueue(Job("job_1"), {}).status());
  }
  SqliteOptions ro;
  ro.read_only = true;
  auto backend = MustOpen(ro);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->admin()->Get("job_1")->status, JobStatus::kQueued);
  auto stats = backend->admin()->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->by_status[JobStatus::kQueued], 1);
  Status s = backend->queue()->Enqueue(Job("job_2"), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("read-only"));
  EXPECT_THAT(s.message(), HasSubstr(path_));
  EXPECT_CODE(backend->locks()->Acquire("k", "o", Seconds(1)).status(), kFailedPrecondition);
  EXPECT_EQ(backend->admin()->Get("job_1")->status, JobStatus::kQueued);
}

TEST_F(SqliteBackendTest, ReadOnlyOpenOfANewFileFails) {
  SqliteOptions ro;
  ro.read_only = true;
  auto b = SqliteBackend::Open(path_, ro, clock_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition) << b.status();
}

TEST_F(SqliteBackendTest, ReadOnlyFileIsAClearError) {
  {
    auto backend = MustOpen();
    ASSERT_NE(backend, nullptr);
    ASSERT_OK(backend->queue()->Enqueue(Job("job_1"), {}).status());
  }
  ASSERT_EQ(chmod(path_.c_str(), 0444), 0);
  // root ignores file permissions; the read_only option test above covers
  // the same error path there.
  if (access(path_.c_str(), W_OK) == 0) GTEST_SKIP() << "running with permission override";
  auto b = SqliteBackend::Open(path_, {}, clock_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("read-only"));
  EXPECT_THAT(b.status().message(), HasSubstr(path_));
}

TEST_F(SqliteBackendTest, FullDatabaseIsResourceExhaustedAndLosesNothing) {
  SqliteOptions bounded;
  bounded.max_database_bytes = 256 * 1024;
  std::vector<std::string> stored;
  {
    auto backend = MustOpen(bounded);
    ASSERT_NE(backend, nullptr);
    const std::string payload = "{\"blob\":\"" + std::string(2000, 'p') + "\"}";
    Status last;
    for (int i = 0; i < 1000; ++i) {
      const std::string id = "job_" + std::to_string(1000 + i);
      last = backend->queue()->Enqueue(Job(id, payload), {}).status();
      if (!last.ok()) break;
      stored.push_back(id);
    }
    ASSERT_EQ(last.code(), StatusCode::kResourceExhausted) << last;
    EXPECT_THAT(last.message(), HasSubstr(path_));
    ASSERT_GT(stored.size(), 10u);
    // Everything acknowledged is still there and readable; the store still
    // works for what needs no new space.
    for (const std::string& id : stored) {
      ASSERT_EQ(backend->admin()->Get(id)->status, JobStatus::kQueued) << id;
    }
    ASSERT_OK(backend->locks()->Acquire("k", "o", Seconds(5)).status());
  }
  // Reopened without the bound: nothing lost, and room again.
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  auto stats = backend->admin()->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->by_status[JobStatus::kQueued], static_cast<std::int64_t>(stored.size()));
  ASSERT_OK(backend->queue()->Enqueue(Job("job_more"), {}).status());
}

TEST_F(SqliteBackendTest, FullDatabaseStillDrainsAndTakesJobsAgainAfterAPurge) {
  SqliteOptions bounded;
  bounded.max_database_bytes = 256 * 1024;
  auto backend = MustOpen(bounded);
  ASSERT_NE(backend, nullptr);
  auto q = backend->queue();
  const std::string payload = "{\"blob\":\"" + std::string(100, 'p') + "\"}";
  std::vector<std::string> stored;
  Status refused;
  for (int i = 0; i < 100000; ++i) {
    const std::string id = "job_" + std::to_string(1000 + i);
    refused = q->Enqueue(Job(id, payload), {}).status();
    if (!refused.ok()) break;
    stored.push_back(id);
  }
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("full"));
  EXPECT_THAT(refused.message(), HasSubstr(path_));
  ASSERT_GT(stored.size(), 10u);
  // A refused enqueue leaves the connection usable: the next one is refused
  // the same way, not wedged.
  EXPECT_CODE(q->Enqueue(Job("job_extra", payload), {}).status(), kResourceExhausted);

  // Everything already queued still drains: deliveries, renewals, locks,
  // idempotency claims and completions all find room.
  int completed = 0;
  while (true) {
    DequeueRequest req;
    req.worker_id = "w1";
    req.max_jobs = 4;
    auto batch = q->Dequeue(req);
    ASSERT_TRUE(batch.ok()) << "after " << completed << " completions: " << batch.status();
    if (batch->empty()) break;
    for (const Delivery& d : *batch) {
      // What a runner with the full contract does for each job.
      const std::string& id = d.lease.job_id;
      ASSERT_OK(backend->locks()->Acquire("lock:" + id, d.lease.token, Seconds(30)).status());
      auto claim = backend->idempotency()->Claim("key:" + id, d.lease.token, Seconds(30));
      ASSERT_TRUE(claim.ok()) << claim.status();
      auto renewed = q->Renew(d.lease, Seconds(30), "");
      ASSERT_TRUE(renewed.ok()) << renewed.status();
      Completion done;
      done.reason = "succeeded";
      done.result = "ok";
      Delivery current = d;
      current.lease = *renewed;
      ASSERT_OK(q->Complete(current, done));
      ASSERT_OK(backend->idempotency()->Complete("key:" + id, d.lease.token, "ok", Seconds(60)));
      ASSERT_OK(backend->locks()->Release("lock:" + id, d.lease.token));
      ++completed;
    }
  }
  EXPECT_EQ(completed, static_cast<int>(stored.size()));
  ASSERT_OK(backend->locks()->Acquire("k", "o", Seconds(5)).status());
  EXPECT_EQ(backend->admin()->Stats()->by_status[JobStatus::kSucceeded],
            static_cast<std::int64_t>(stored.size()));

  // Purging the finished jobs makes room for new ones.
  clock_->Advance(Seconds(1));
  auto purged = backend->admin()->PurgeFinished(clock_->Now());
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, static_cast<int>(stored.size()));
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(q->Enqueue(Job("job_again_" + std::to_string(i), payload), {}).status());
  }
}

TEST_F(SqliteBackendTest, FullDatabaseRefusesATransactionalEnqueueButNotTheCallersWrite) {
  SqliteOptions bounded;
  bounded.max_database_bytes = 256 * 1024;
  auto backend = MustOpen(bounded);
  ASSERT_NE(backend, nullptr);
  RawDb caller(path_);
  ASSERT_EQ(caller.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY)"), SQLITE_OK);
  const std::string payload = "{\"blob\":\"" + std::string(100, 'p') + "\"}";
  Status refused;
  for (int i = 0; i < 100000 && refused.ok(); ++i) {
    refused =
        backend->queue()->Enqueue(Job("job_" + std::to_string(100000 + i), payload), {}).status();
  }
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;

  ASSERT_EQ(caller.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_OK(InsertOrder(caller.get(), "ord_1"));
  Status s = backend->EnqueueInTransaction(caller.get(), Job("job_tx", payload), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("full"));
  EXPECT_THAT(s.message(), HasSubstr(path_));
  // The refusal undid only the enqueue: the caller's transaction goes on.
  ASSERT_EQ(caller.Exec("COMMIT"), SQLITE_OK);
  EXPECT_EQ(caller.Query("SELECT id FROM orders"), "ord_1");
  EXPECT_CODE(backend->admin()->Get("job_tx").status(), kNotFound);

  // The same through RunInTransaction: everything rolls back.
  s = backend->RunInTransaction([&](sqlite3* db) -> Status {
    JOBPACT_RETURN_IF_ERROR(InsertOrder(db, "ord_2"));
    return backend->EnqueueInTransaction(db, Job("job_tx2", payload), {}).status();
  });
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(caller.Query("SELECT count(*) FROM orders"), "1");
  EXPECT_CODE(backend->admin()->Get("job_tx2").status(), kNotFound);
}

// Writes a database of 400 jobs and closes it (the last close checkpoints
// the WAL into the file), then overwrites whole pages in the middle of the
// file with garbage.
void WriteAndCorruptTheMiddle(const std::string& path, std::shared_ptr<Clock> clock) {
  {
    auto b = SqliteBackend::Open(path, {}, clock);
    ASSERT_TRUE(b.ok()) << b.status();
    std::vector<Envelope> envs;
    for (int i = 0; i < 400; ++i) {
      Envelope env;
      env.job_id = "job_" + std::to_string(10000 + i);
      env.job_type = "test.job";
      env.payload = "{\"blob\":\"" + std::string(1500, 'p') + "\"}";
      PrepareForEnqueue(env, clock->Now());
      envs.push_back(std::move(env));
    }
    ASSERT_TRUE((*b)->queue()->EnqueueBatch(envs, {}).ok());
  }
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 64u * 4096u);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>((size / 2 / 4096) * 4096));
  std::string garbage(4 * 4096, '\0');
  for (std::size_t i = 0; i < garbage.size(); ++i)
    garbage[i] = static_cast<char>((i * 37 + 11) % 251);
  f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  ASSERT_TRUE(f.good());
}

void ExpectCorruptionError(const Status& s, const std::string& path) {
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("database file is corrupt"));
  EXPECT_THAT(s.message(), HasSubstr(path));
}

TEST_F(SqliteBackendTest, QuickCheckAtOpenRefusesACorruptFile) {
  WriteAndCorruptTheMiddle(path_, clock_);
  const std::string before = ReadFile(path_);
  SqliteOptions checked;
  checked.quick_check_on_open = true;
  auto b = SqliteBackend::Open(path_, checked, clock_);
  ASSERT_FALSE(b.ok());
  ExpectCorruptionError(b.status(), path_);
  EXPECT_EQ(ReadFile(path_), before);  // Nothing written to a damaged file.
}

TEST_F(SqliteBackendTest, CorruptionFoundAfterOpenIsReportedAsCorruption) {
  WriteAndCorruptTheMiddle(path_, clock_);
  SqliteOptions unchecked;
  unchecked.quick_check_on_open = false;
  auto backend = MustOpen(unchecked);  // Page 1 and the schema are intact.
  ASSERT_NE(backend, nullptr);
  // Stats reads every row of the jobs table, so it reaches the bad pages.
  ExpectCorruptionError(backend->admin()->Stats().status(), path_);
  // So does a dequeue that walks past them (or it works, on intact pages):
  // never a generic internal error.
  DequeueRequest req;
  req.max_jobs = 400;
  auto d = backend->queue()->Dequeue(req);
  if (!d.ok()) ExpectCorruptionError(d.status(), path_);
}

TEST_F(SqliteBackendTest, ReadOnlyFileSaysReadOnlyAtOpenAndOnEveryWriteEvenAsRoot) {
  {
    auto backend = MustOpen();
    ASSERT_NE(backend, nullptr);
    ASSERT_OK(backend->queue()->Enqueue(Job("job_1"), {}).status());
  }
  // A read-only file, reproduced as root too: SQLite's URI mode=ro.
  const std::string uri = "file:" + path_ + "?mode=ro";
  auto rw = SqliteBackend::Open(uri, {}, clock_);
  ASSERT_FALSE(rw.ok());
  EXPECT_EQ(rw.status().code(), StatusCode::kFailedPrecondition) << rw.status();
  EXPECT_THAT(rw.status().message(), HasSubstr("read-only"));
  EXPECT_THAT(rw.status().message(), HasSubstr(path_));

  SqliteOptions ro;
  ro.read_only = true;
  auto b = SqliteBackend::Open(uri, ro, clock_);
  ASSERT_TRUE(b.ok()) << b.status();
  auto backend = *b;
  EXPECT_EQ(backend->admin()->Get("job_1")->status, JobStatus::kQueued);
  for (const Status& s : {backend->queue()->Enqueue(Job("job_2"), {}).status(),
                          backend->queue()->Dequeue({}).status(),
                          backend->locks()->Acquire("k", "o", Seconds(1)).status(),
                          backend->RunInTransaction([](sqlite3*) { return Status::Ok(); })}) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("read-only"));
    EXPECT_THAT(s.message(), HasSubstr(path_));
  }

  // A caller's read-only connection in EnqueueInTransaction: SQLite's own
  // SQLITE_READONLY, reported as such.
  auto writable = MustOpen();
  ASSERT_NE(writable, nullptr);
  sqlite3* caller = nullptr;
  ASSERT_EQ(sqlite3_open_v2(uri.c_str(), &caller, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(caller, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
  Status s = writable->EnqueueInTransaction(caller, Job("job_3"), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("read-only"));
  EXPECT_THAT(s.message(), HasSubstr(path_));
  sqlite3_exec(caller, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(caller);
}

TEST_F(SqliteBackendTest, AUriPathNamesTheSameFileForTransactionalEnqueue) {
  auto backend = SqliteBackend::Open("file:" + path_ + "?cache=private", {}, clock_);
  ASSERT_TRUE(backend.ok()) << backend.status();
  RawDb caller(path_);
  ASSERT_EQ(caller.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_OK((*backend)->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status());
  ASSERT_EQ(caller.Exec("COMMIT"), SQLITE_OK);
  EXPECT_EQ((*backend)->admin()->Get("job_1")->status, JobStatus::kQueued);
}

// A stored record that can no longer be decoded (a tenant "acme corp"
// written by an old version, a hand edit, a bad page) used to fail every
// dequeue batch after it had committed its leases and abort lease recovery
// on every pass. It is quarantined as its own DLQ entry, its whole row kept,
// and the other jobs keep flowing.
TEST_F(SqliteBackendTest, UndecodableRecordIsQuarantinedAndBlocksNothing) {
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  for (const char* id : {"job_a", "job_b", "job_c", "job_d"}) {
    ASSERT_OK(backend->queue()->Enqueue(Job(id), {}).status());
  }
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_jobs SET envelope = replace(envelope, '\"job_type\"', "
                       "'\"tenant_id\":\"acme corp\",\"job_type\"') WHERE job_id = 'job_b'"),
              SQLITE_OK);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_jobs SET envelope = '{garbage' WHERE job_id = 'job_c'"),
              SQLITE_OK);
  }
  // Get shows what it is before anything moved it.
  auto shown = backend->admin()->Get("job_c");
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->reason, kUndecodableRecord);

  auto batch = backend->queue()->Dequeue({{}, 10, "w1"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<std::string> ids;
  for (const Delivery& d : *batch) ids.push_back(d.lease.job_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"job_a", "job_d"}));
  for (const char* id : {"job_b", "job_c"}) {
    auto e = backend->admin()->GetDeadLetter(id);
    ASSERT_TRUE(e.ok()) << id << ": " << e.status();
    EXPECT_EQ(e->reason, kUndecodableRecord);
    ASSERT_TRUE(e->last_failure.has_value());
    EXPECT_EQ(e->last_failure->failure_class, FailureClass::kPermanent);
    // The whole row is kept, the broken envelope included.
    EXPECT_NE(e->raw_envelope.find("\"job_id\":\"" + std::string(id) + "\""), std::string::npos)
        << e->raw_envelope;
    EXPECT_EQ(backend->admin()->Replay(id, {"ops", "try again", true, 0, std::nullopt}).code(),
              StatusCode::kFailedPrecondition);
  }
  EXPECT_NE(backend->admin()->GetDeadLetter("job_c")->raw_envelope.find("{garbage"),
            std::string::npos);

  // A running job whose record breaks while it runs: lease recovery
  // quarantines it and still recovers the others.
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_jobs SET envelope = '[1' WHERE job_id = 'job_a'"),
              SQLITE_OK);
  }
  clock_->Advance(Seconds(46));
  auto recovered = backend->queue()->RecoverExpiredLeases(3);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  ASSERT_EQ(recovered->size(), 1u);
  EXPECT_EQ((*recovered)[0].job_id, "job_d");
  EXPECT_EQ(backend->admin()->Get("job_a")->reason, kUndecodableRecord);
  auto stats = backend->admin()->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->dead_letters, 3);
  EXPECT_EQ(stats->by_status[JobStatus::kQueued], 1);
}

// Found by fuzz/sqlite_row_fuzzer and fuzz/redis_record_fuzzer: a history
// entry with a member of the wrong type ("from": 1) made the JSON reader
// throw, and a floating-point time ("at_ns": 1.8e27) was converted to int64
// with undefined behaviour. The throw failed the whole read (Get answered
// INTERNAL), and the float came back as a garbage time. Now such a row
// reads as quarantined like any other undecodable record, its whole row
// kept, and the other records read as before.
TEST_F(SqliteBackendTest, HistoryEntryOfTheWrongTypeIsQuarantinedNotThrown) {
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  for (const char* id : {"job_a", "job_b", "job_c"}) {
    ASSERT_OK(backend->queue()->Enqueue(Job(id), {}).status());
  }
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_jobs SET history = "
                       "'[{\"from\":1,\"to\":\"queued\",\"at_ns\":0,\"reason\":\"x\"}]' "
                       "WHERE job_id = 'job_a'"),
              SQLITE_OK);
    ASSERT_EQ(raw.Exec("UPDATE jobpact_jobs SET history = "
                       "'[{\"from\":\"queued\",\"to\":\"queued\",\"at_ns\":1.8e27,"
                       "\"reason\":\"x\"}]' WHERE job_id = 'job_b'"),
              SQLITE_OK);
  }
  for (const char* id : {"job_a", "job_b"}) {
    auto shown = backend->admin()->Get(id);
    ASSERT_TRUE(shown.ok()) << id << ": " << shown.status();
    EXPECT_EQ(shown->reason, kUndecodableRecord) << id;
    auto e = backend->admin()->GetDeadLetter(id);
    ASSERT_TRUE(e.ok()) << id << ": " << e.status();
    EXPECT_THAT(e->raw_envelope, HasSubstr("at_ns")) << id;  // The whole row is kept.
  }
  auto intact = backend->admin()->Get("job_c");
  ASSERT_TRUE(intact.ok()) << intact.status();
  EXPECT_EQ(intact->status, JobStatus::kQueued);
  ASSERT_EQ(intact->history.size(), 1u);
}

// The operator audit trail survives in the file and comes back with the
// record, after the job left the DLQ and after a reopen.
TEST_F(SqliteBackendTest, OperatorAuditTrailIsReadBackWithTheRecord) {
  {
    auto backend = MustOpen();
    ASSERT_NE(backend, nullptr);
    ASSERT_OK(backend->queue()->Enqueue(Job("job_a"), {}).status());
    Delivery d = TakeOne(*backend->queue());
    Completion dead;
    dead.to = JobStatus::kDeadLettered;
    dead.reason = "permanent_error";
    ASSERT_OK(backend->queue()->Complete(d, dead));
    ASSERT_OK(backend->admin()->Replay("job_a", {"alice", "fixed upstream", true, 0, std::nullopt}));
    d = TakeOne(*backend->queue());
    ASSERT_OK(backend->queue()->Complete(d, dead));
    ASSERT_OK(backend->admin()->Discard("job_a", {"bob", "superseded", true, 0, std::nullopt}));
  }
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  auto r = backend->admin()->Get("job_a");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, JobStatus::kDiscarded);
  ASSERT_EQ(r->audit.size(), 2u);
  EXPECT_NE(r->audit[0].find("replay by alice: fixed upstream"), std::string::npos) << r->audit[0];
  EXPECT_NE(r->audit[1].find("discard by bob: superseded"), std::string::npos) << r->audit[1];
}

TEST_F(SqliteBackendTest, BusyFileIsUnavailableUntilTheLockIsReleased) {
  SqliteOptions quick;
  quick.busy_timeout = Millis(100);
  auto backend = MustOpen(quick);
  ASSERT_NE(backend, nullptr);
  RawDb other(path_);
  ASSERT_EQ(other.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  Status s = backend->queue()->Enqueue(Job("job_1"), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  // Reads are not blocked by a writer (WAL).
  EXPECT_CODE(backend->admin()->Get("job_1").status(), kNotFound);
  ASSERT_EQ(other.Exec("COMMIT"), SQLITE_OK);
  ASSERT_OK(backend->queue()->Enqueue(Job("job_1"), {}).status());
}

TEST_F(SqliteBackendTest, RejectsBadOptions) {
  SqliteOptions bad;
  bad.max_connections = 0;
  EXPECT_CODE(SqliteBackend::Open(path_, bad, clock_).status(), kInvalidArgument);
  EXPECT_CODE(SqliteBackend::Open(path_, {}, nullptr).status(), kInvalidArgument);
  EXPECT_CODE(SqliteBackend::Open("", {}, clock_).status(), kInvalidArgument);
  SqliteOptions bad_reserve;
  bad_reserve.max_database_bytes = 1 << 20;
  bad_reserve.drain_reserve_bytes = 1 << 20;  // Nothing left for enqueues.
  EXPECT_CODE(SqliteBackend::Open(path_, bad_reserve, clock_).status(), kInvalidArgument);
  bad_reserve.drain_reserve_bytes = -2;
  EXPECT_CODE(SqliteBackend::Open(path_, bad_reserve, clock_).status(), kInvalidArgument);
}

// --- Transactional enqueue ---

class SqliteTransactionalTest : public SqliteBackendTest {
 protected:
  void SetUp() override {
    SqliteBackendTest::SetUp();
    backend_ = MustOpen();
    ASSERT_NE(backend_, nullptr);
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY);"
                       "CREATE TABLE effects (job_id TEXT, note TEXT);"),
              SQLITE_OK);
  }

  std::string Count(const std::string& table) {
    RawDb raw(path_);
    return raw.Query("SELECT count(*) FROM " + table);
  }

  std::shared_ptr<SqliteBackend> backend_;
};

TEST_F(SqliteTransactionalTest, RunInTransactionCommitsTheJobWithTheBusinessWrite) {
  ASSERT_OK(backend_->RunInTransaction([&](sqlite3* db) -> Status {
    JOBPACT_RETURN_IF_ERROR(InsertOrder(db, "ord_1"));
    auto r = backend_->EnqueueInTransaction(db, Job("job_1"), {});
    return r.status();
  }));
  EXPECT_EQ(Count("orders"), "1");
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
}

TEST_F(SqliteTransactionalTest, RunInTransactionRollsBackTheJobWithTheBusinessWrite) {
  Status s = backend_->RunInTransaction([&](sqlite3* db) -> Status {
    JOBPACT_RETURN_IF_ERROR(InsertOrder(db, "ord_1"));
    JOBPACT_RETURN_IF_ERROR(backend_->EnqueueInTransaction(db, Job("job_1"), {}).status());
    return Status::FailedPrecondition("credit check failed");
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Count("orders"), "0");
  EXPECT_CODE(backend_->admin()->Get("job_1").status(), kNotFound);
}

TEST_F(SqliteTransactionalTest, RunInTransactionRollsBackOnAThrow) {
  Status s = backend_->RunInTransaction([&](sqlite3* db) -> Status {
    JOBPACT_RETURN_IF_ERROR(backend_->EnqueueInTransaction(db, Job("job_1"), {}).status());
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("boom"));
  EXPECT_CODE(backend_->admin()->Get("job_1").status(), kNotFound);
}

TEST_F(SqliteTransactionalTest, CallersOwnConnectionDecidesWhetherTheJobExists) {
  RawDb caller(path_);
  ASSERT_EQ(caller.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_OK(InsertOrder(caller.get(), "ord_1"));
  ASSERT_OK(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status());
  // Not visible to anyone else before the caller commits.
  EXPECT_CODE(backend_->admin()->Get("job_1").status(), kNotFound);
  ASSERT_EQ(caller.Exec("ROLLBACK"), SQLITE_OK);
  EXPECT_CODE(backend_->admin()->Get("job_1").status(), kNotFound);
  EXPECT_EQ(Count("orders"), "0");

  ASSERT_EQ(caller.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_OK(InsertOrder(caller.get(), "ord_1"));
  ASSERT_OK(backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status());
  ASSERT_EQ(caller.Exec("COMMIT"), SQLITE_OK);
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kQueued);
  EXPECT_EQ(Count("orders"), "1");
  EXPECT_EQ(TakeOne(*backend_->queue()).lease.job_id, "job_1");
}

TEST_F(SqliteTransactionalTest, EnqueueInTransactionDedupsLikeEnqueue) {
  Envelope first = Job("job_1");
  first.dedup_key = "order:ord_1";
  ASSERT_OK(backend_->queue()->Enqueue(first, {}).status());
  Envelope second = Job("job_2");
  second.dedup_key = "order:ord_1";
  RawDb caller(path_);
  ASSERT_EQ(caller.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  auto r = backend_->EnqueueInTransaction(caller.get(), second, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(r->job_id, "job_1");
  ASSERT_EQ(caller.Exec("COMMIT"), SQLITE_OK);
}

TEST_F(SqliteTransactionalTest, EnqueueInTransactionNeedsAnOpenTransaction) {
  RawDb caller(path_);
  Status s = backend_->EnqueueInTransaction(caller.get(), Job("job_1"), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_CODE(backend_->admin()->Get("job_1").status(), kNotFound);
  EXPECT_CODE(backend_->EnqueueInTransaction(nullptr, Job("job_1"), {}).status(), kInvalidArgument);
}

TEST_F(SqliteTransactionalTest, EnqueueInTransactionOnAnotherDatabaseIsRefused) {
  RawDb other(dir_.File("other.db"));
  ASSERT_EQ(other.Exec("BEGIN IMMEDIATE"), SQLITE_OK);
  Status s = backend_->EnqueueInTransaction(other.get(), Job("job_1"), {}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("not on this backend's database"));
  other.Exec("ROLLBACK");
}

TEST_F(SqliteTransactionalTest, CallingBackIntoTheBackendFromATransactionIsRefused) {
  Status inner;
  ASSERT_OK(backend_->RunInTransaction([&](sqlite3*) -> Status {
    inner = backend_->queue()->Enqueue(Job("job_1"), {}).status();
    return Status::Ok();
  }));
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition) << inner;
}

// --- Transactional completion ---

Status InsertEffect(void* native, const std::string& job_id) {
  auto* db = static_cast<sqlite3*>(native);
  if (db == nullptr) return Status::Internal("no native handle");
  std::string sql = "INSERT INTO effects (job_id, note) VALUES ('" + job_id + "', 'done')";
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Status::Internal(sqlite3_errmsg(db));
  }
  return Status::Ok();
}

TEST_F(SqliteTransactionalTest, CompletionCommitsTheEffectWithTheOutcome) {
  ASSERT_OK(backend_->queue()->Enqueue(Job("job_1"), {}).status());
  Delivery d = TakeOne(*backend_->queue());
  Completion done;
  done.reason = "succeeded";
  done.transactional_effect = [](void* native) { return InsertEffect(native, "job_1"); };
  ASSERT_OK(backend_->queue()->Complete(d, done));
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kSucceeded);
  EXPECT_EQ(Count("effects"), "1");
}

TEST_F(SqliteTransactionalTest, FailingEffectRollsBackTheEffectAndTheOutcome) {
  ASSERT_OK(backend_->queue()->Enqueue(Job("job_1"), {}).status());
  Delivery d = TakeOne(*backend_->queue());
  Completion done;
  done.reason = "succeeded";
  done.transactional_effect = [](void* native) -> Status {
    JOBPACT_RETURN_IF_ERROR(InsertEffect(native, "job_1"));
    return Status::Unavailable("ledger said no");
  };
  Status s = backend_->queue()->Complete(d, done);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("ledger said no"));
  EXPECT_EQ(Count("effects"), "0");
  auto rec = backend_->admin()->Get("job_1");
  EXPECT_EQ(rec->status, JobStatus::kRunning);
  EXPECT_EQ(rec->history.size(), 2u);
  // The lease is untouched: the worker can still record another outcome.
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "transient_error";
  retry.ready_at = clock_->Now() + Seconds(1);
  ASSERT_OK(backend_->queue()->Complete(d, retry));
}

TEST_F(SqliteTransactionalTest, ThrowingEffectRollsBack) {
  ASSERT_OK(backend_->queue()->Enqueue(Job("job_1"), {}).status());
  Delivery d = TakeOne(*backend_->queue());
  Completion done;
  done.reason = "succeeded";
  done.transactional_effect = [](void* native) -> Status {
    InsertEffect(native, "job_1").IgnoreError();
    throw std::runtime_error("effect exploded");
  };
  Status s = backend_->queue()->Complete(d, done);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_EQ(Count("effects"), "0");
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kRunning);
}

TEST_F(SqliteTransactionalTest, StaleLeaseNeverRunsTheEffect) {
  ASSERT_OK(backend_->queue()->Enqueue(Job("job_1"), {}).status());
  Delivery first = TakeOne(*backend_->queue());
  clock_->Advance(first.job.envelope.visibility_timeout + Seconds(1));
  ASSERT_EQ(backend_->queue()->RecoverExpiredLeases(3)->size(), 1u);
  Delivery second = TakeOne(*backend_->queue());
  ASSERT_EQ(second.lease.epoch, first.lease.epoch + 1);

  bool ran = false;
  Completion late;
  late.reason = "succeeded";
  late.transactional_effect = [&](void* native) {
    ran = true;
    return InsertEffect(native, "job_1");
  };
  EXPECT_CODE(backend_->queue()->Complete(first, late), kAborted);
  EXPECT_FALSE(ran);
  Completion done = late;
  ASSERT_OK(backend_->queue()->Complete(second, done));
  EXPECT_TRUE(ran);
  EXPECT_EQ(Count("effects"), "1");
}

TEST_F(SqliteTransactionalTest, CompletionAlsoRecordsTheDeliverysIdempotencyClaim) {
  Envelope env = Job("job_1");
  env.idempotency_key = "invoice:ord_1";
  ASSERT_OK(backend_->queue()->Enqueue(env, {}).status());
  Delivery d = TakeOne(*backend_->queue());
  // The runner claims with the lease token as the owner.
  auto claim = backend_->idempotency()->Claim("invoice:ord_1", d.lease.token, Seconds(45));
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_EQ(claim->kind, ClaimOutcome::Kind::kClaimed);

  Completion failing;
  failing.reason = "succeeded";
  failing.transactional_effect = [](void*) { return Status::Unavailable("no"); };
  EXPECT_CODE(backend_->queue()->Complete(d, failing), kUnavailable);
  auto rec = backend_->idempotency()->Get("invoice:ord_1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kInProgress);

  Completion done;
  done.reason = "succeeded";
  done.result = "inv_42";
  done.transactional_effect = [](void* native) { return InsertEffect(native, "job_1"); };
  ASSERT_OK(backend_->queue()->Complete(d, done));
  rec = backend_->idempotency()->Get("invoice:ord_1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ((*rec)->result, "inv_42");
  EXPECT_EQ(Count("effects"), "1");
}

// A worker whose idempotency claim expired and was taken over must not
// commit its transactional effect: the key's effect would happen twice
// (reproduced before the fix: two effect rows for one key, both jobs
// succeeded).
TEST_F(SqliteTransactionalTest, CompletionWhoseClaimWasLostRollsBackTheEffect) {
  for (const char* id : {"job_1", "job_2"}) {
    Envelope env = Job(id);
    env.idempotency_key = "invoice:ord_1";
    ASSERT_OK(backend_->queue()->Enqueue(env, {}).status());
  }
  Delivery first = TakeOne(*backend_->queue());
  ASSERT_OK(backend_->idempotency()->Claim("invoice:ord_1", first.lease.token, Seconds(5)).status());
  // The first worker stalls past its claim; the second job claims the key
  // and commits its effect.
  clock_->Advance(Seconds(6));
  Delivery second = TakeOne(*backend_->queue());
  auto claim = backend_->idempotency()->Claim("invoice:ord_1", second.lease.token, Seconds(45));
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_EQ(claim->kind, ClaimOutcome::Kind::kClaimed);
  Completion done;
  done.reason = "succeeded";
  done.result = "inv_2";
  done.transactional_effect = [](void* native) { return InsertEffect(native, "job_2"); };
  ASSERT_OK(backend_->queue()->Complete(second, done));
  ASSERT_EQ(Count("effects"), "1");

  // The stalled worker's lease is still live, but its claim is gone.
  Completion late = done;
  late.result = "inv_1";
  late.transactional_effect = [](void* native) { return InsertEffect(native, "job_1"); };
  Status s = backend_->queue()->Complete(first, late);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("idempotency claim"));
  EXPECT_EQ(Count("effects"), "1");
  EXPECT_EQ(backend_->admin()->Get("job_1")->status, JobStatus::kRunning);
  auto rec = backend_->idempotency()->Get("invoice:ord_1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->owner, second.lease.token);
  EXPECT_EQ((*rec)->result, "inv_2");
}

// --- Several instances and processes on one file ---

TEST_F(SqliteBackendTest, TwoInstancesShareLocksAndFencingTokens) {
  auto a = MustOpen();
  auto b = MustOpen();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto la = a->locks()->Acquire("order:1", "proc-a", Seconds(10));
  ASSERT_TRUE(la.ok()) << la.status();
  EXPECT_CODE(b->locks()->Acquire("order:1", "proc-b", Seconds(10)).status(), kAborted);
  auto lb = b->locks()->Acquire("order:2", "proc-b", Seconds(10));
  ASSERT_TRUE(lb.ok());
  EXPECT_GT(lb->fencing_token, la->fencing_token);
  ASSERT_OK(a->locks()->Release("order:1", "proc-a"));
  auto lb1 = b->locks()->Acquire("order:1", "proc-b", Seconds(10));
  ASSERT_TRUE(lb1.ok());
  EXPECT_GT(lb1->fencing_token, lb->fencing_token);
}

// An idle worker waits on the file's WAL (inotify), not on a poll: a
// commit by another process wakes it (issue 12: a new job starts within
// milliseconds of its enqueue, not after the 100 ms poll interval).
TEST_F(SqliteBackendTest, AnIdleWorkerIsWokenByAnotherProcesssCommit) {
  auto backend = MustOpen();
  ASSERT_NE(backend, nullptr);
  QueueBackend& q = *backend->queue();
  // The first wait starts the watch and says "look": commits before it
  // were not watched.
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool woken, q.WaitForWork(Seconds(30)));
  EXPECT_TRUE(woken);
  // Nothing written since: the wait times out.
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, q.WaitForWork(std::chrono::milliseconds(20)));
  EXPECT_FALSE(woken);

  // Another process enqueues. Whether its commit comes before the wait or
  // during it, the wait returns woken (a 30 s bound: a missed wake-up
  // fails the test, never a timing).
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The parent's time, so that the job is ready by the parent's clock.
    auto b = SqliteBackend::Open(path_, {}, std::make_shared<testing::ManualClock>(clock_->Now()));
    if (!b.ok()) _exit(2);
    Envelope env;
    env.job_id = "job_from_child";
    env.job_type = "test.job";
    PrepareForEnqueue(env, clock_->Now());
    _exit((*b)->queue()->Enqueue(env, {}).ok() ? 0 : 3);
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, q.WaitForWork(Seconds(30)));
  EXPECT_TRUE(woken);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  Delivery d = TakeOne(q);
  EXPECT_EQ(d.job.envelope.job_id, "job_from_child");

  // Another instance in this process is another connection, as another
  // process is: its completion wakes a worker waiting on this one.
  auto other = MustOpen();
  ASSERT_NE(other, nullptr);
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, other->queue()->WaitForWork(Seconds(30)));  // Starts it.
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, other->queue()->WaitForWork(Seconds(0)));  // Our lease.
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, other->queue()->WaitForWork(std::chrono::milliseconds(20)));
  EXPECT_FALSE(woken);
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "transient_error";
  retry.ready_at = clock_->Now();
  ASSERT_OK(q.Complete(d, retry));
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, other->queue()->WaitForWork(Seconds(30)));
  EXPECT_TRUE(woken);
}

// Idle workers of one process share one watch: many waiters, one wake-up
// seen by all of them.
TEST_F(SqliteBackendTest, ManyIdleWorkersShareOneWatchAndAllWake) {
  auto backend = MustOpen();
  auto producer = MustOpen();
  ASSERT_NE(backend, nullptr);
  ASSERT_NE(producer, nullptr);
  std::shared_ptr<QueueBackend> q = backend->queue();
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool started, q->WaitForWork(Seconds(30)));
  EXPECT_TRUE(started);
  constexpr int kWaiters = 4;
  std::atomic<int> woken{0};
  std::atomic<int> timed_out{0};
  std::atomic<int> waiting{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      waiting.fetch_add(1);
      Result<bool> r = q->WaitForWork(Seconds(30));
      (r.ok() && *r ? woken : timed_out).fetch_add(1);
    });
  }
  while (waiting.load() < kWaiters) std::this_thread::yield();
  // A waiter that reached the watch only after a wake-up was reported
  // waits for the next one: the producer commits until every waiter has
  // returned. Each must return woken, none after its 30 s.
  for (int n = 0; woken.load() + timed_out.load() < kWaiters; ++n) {
    if (!producer->queue()->Enqueue(Job("job_" + std::to_string(n)), {}).ok()) {
      ADD_FAILURE() << "enqueue " << n << " failed";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
  EXPECT_EQ(timed_out.load(), 0);
}

TEST_F(SqliteBackendTest, JobsEnqueuedByOtherProcessesAreAllProcessedOnce) {
  { ASSERT_NE(MustOpen(), nullptr); }  // Create the schema before forking.
  constexpr int kChildren = 2;
  constexpr int kJobsPerChild = 150;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: its own connections, its own (system) clock.
      auto b = SqliteBackend::Open(path_, {}, SystemClock::Default());
      if (!b.ok()) _exit(2);
      for (int i = 0; i < kJobsPerChild; ++i) {
        Envelope env;
        env.job_id = "job_c" + std::to_string(c) + "_" + std::to_string(i);
        env.job_type = "test.job";
        PrepareForEnqueue(env, SystemClock::Default()->Now());
        if (!(*b)->queue()->Enqueue(env, {}).ok()) _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  // The parent processes what the children enqueue, as they enqueue it.
  auto backend = SqliteBackend::Open(path_, {}, SystemClock::Default());
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto q = (*backend)->queue();
  int done = 0;
  for (int round = 0; round < 200000 && done < kChildren * kJobsPerChild; ++round) {
    DequeueRequest req;
    req.max_jobs = 16;
    auto batch = q->Dequeue(req);
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (batch->empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (const Delivery& d : *batch) {
      Completion c;
      c.reason = "succeeded";
      ASSERT_OK(q->Complete(d, c));
      ++done;
    }
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_EQ(done, kChildren * kJobsPerChild);
  auto stats = (*backend)->admin()->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->by_status[JobStatus::kSucceeded], kChildren * kJobsPerChild);
}

TEST_F(SqliteBackendTest, ManyThreadsShareOneBackendWithoutDoubleDelivery) {
  SqliteOptions small_pool;
  small_pool.max_connections = 3;  // Fewer connections than threads.
  auto backend = MustOpen(small_pool);
  ASSERT_NE(backend, nullptr);
  std::vector<Envelope> envs;
  for (int i = 0; i < 400; ++i) envs.push_back(Job("job_" + std::to_string(10000 + i)));
  auto enq = backend->queue()->EnqueueBatch(envs, {});
  ASSERT_TRUE(enq.ok()) << enq.status();
  std::atomic<int> delivered{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto q = backend->queue();
      while (true) {
        DequeueRequest req;
        req.max_jobs = 4;
        req.worker_id = "t" + std::to_string(t);
        auto batch = q->Dequeue(req);
        if (!batch.ok()) {
          ++errors;
          return;
        }
        if (batch->empty()) return;
        for (const Delivery& d : *batch) {
          Completion c;
          c.reason = "succeeded";
          if (!q->Complete(d, c).ok()) ++errors;
          ++delivered;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(delivered.load(), 400);
  EXPECT_EQ(backend->admin()->Stats()->by_status[JobStatus::kSucceeded], 400);
}

}  // namespace
}  // namespace sqlite
}  // namespace jobpact
