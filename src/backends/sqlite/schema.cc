#include "src/backends/sqlite/schema.h"

#include <string>
#include <vector>

namespace jobpact {
namespace sqlite {
namespace internal {

namespace {

// Marks the file as a jobpact database for tools like `file(1)`; the
// authoritative check is the jobpact_meta table.
constexpr int kApplicationId = 0x6A6F6270;  // "jobp"

// Migration N brings a database from version N-1 to N. Each runs inside the
// one transaction that also records the new version, so a crash during a
// migration leaves the file at the old version. Append only: never edit a
// released migration.
//
// Layout notes:
//   - Times and durations are integer nanoseconds since the Unix epoch
//     (*_ns), so a TimePoint survives a round trip exactly.
//   - The envelope is the SerializeEnvelope() JSON, written once at enqueue;
//     the fields that change (attempt, max_attempts) and those queried
//     (status, queue, priority, ready time, dedup key, ...) are columns.
//   - history and audit are JSON arrays, appended to in SQL.
//   - The DLQ is the set of jobs in status dead_lettered.
//   - Partial indexes cover exactly the queries that need them; their WHERE
//     clauses are repeated verbatim in those queries (SQLite only uses a
//     partial index when the query's WHERE implies it term by term).
constexpr const char* kMigrations[] = {
    // Version 1.
    R"sql(
CREATE TABLE jobpact_jobs (
  job_id                TEXT PRIMARY KEY,
  job_type              TEXT NOT NULL,
  queue                 TEXT NOT NULL,
  priority              INTEGER NOT NULL,
  status                TEXT NOT NULL,
  attempt               INTEGER NOT NULL,
  max_attempts          INTEGER NOT NULL,
  ready_at_ns           INTEGER NOT NULL,
  enqueued_at_ns        INTEGER NOT NULL,
  updated_at_ns         INTEGER NOT NULL,
  finished_at_ns        INTEGER,
  epoch                 INTEGER NOT NULL DEFAULT 0,
  lease_token           TEXT,
  lease_expires_at_ns   INTEGER,
  visibility_timeout_ns INTEGER NOT NULL,
  lease_recoveries      INTEGER NOT NULL DEFAULT 0,
  lock_waits            INTEGER NOT NULL DEFAULT 0,
  previous_delay_ns     INTEGER NOT NULL DEFAULT 0,
  dedup_key             TEXT,
  checkpoint            TEXT NOT NULL DEFAULT '',
  failure_class         TEXT,
  failure_code          TEXT,
  failure_message       TEXT,
  reason                TEXT NOT NULL DEFAULT '',
  result                TEXT NOT NULL DEFAULT '',
  envelope              TEXT NOT NULL,
  history               TEXT NOT NULL DEFAULT '[]',
  dead_lettered_at_ns   INTEGER,
  raw_envelope          TEXT,
  audit                 TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX jobpact_jobs_ready ON jobpact_jobs (priority DESC, ready_at_ns, job_id)
  WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobpact_jobs_leases ON jobpact_jobs (lease_expires_at_ns)
  WHERE status = 'running';
CREATE INDEX jobpact_jobs_dedup ON jobpact_jobs (dedup_key, enqueued_at_ns)
  WHERE dedup_key IS NOT NULL;
CREATE INDEX jobpact_jobs_dlq ON jobpact_jobs (dead_lettered_at_ns)
  WHERE status = 'dead_lettered';
CREATE INDEX jobpact_jobs_finished ON jobpact_jobs (finished_at_ns)
  WHERE status IN ('succeeded', 'failed', 'discarded');

CREATE TABLE jobpact_locks (
  key           TEXT PRIMARY KEY,
  owner         TEXT NOT NULL,
  fencing_token INTEGER NOT NULL,
  expires_at_ns INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE jobpact_counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO jobpact_counters (name, value) VALUES ('lock_fencing_token', 0);

CREATE TABLE jobpact_idempotency (
  key           TEXT PRIMARY KEY,
  state         TEXT NOT NULL,
  owner         TEXT NOT NULL,
  result        TEXT NOT NULL DEFAULT '',
  expires_at_ns INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX jobpact_idempotency_expiry ON jobpact_idempotency (expires_at_ns);
)sql",
    // Version 2: the operator side. A running job's cancel request; the
    // control state every process obeys (pause, concurrency limits, routes
    // to the DLQ) with its audit; the retry policies runners publish; the
    // ready index by (queue, job type), so that the lease step passes over
    // a held type's backlog by index seeks, in place of the one by priority;
    // and an index to count a type's running jobs in the lease step.
    R"sql(
ALTER TABLE jobpact_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
DROP INDEX jobpact_jobs_ready;
CREATE INDEX jobpact_jobs_ready_by_type
  ON jobpact_jobs (queue, job_type, priority DESC, ready_at_ns, job_id)
  WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobpact_jobs_running_type ON jobpact_jobs (job_type)
  WHERE status = 'running';

CREATE TABLE jobpact_control (
  kind          TEXT NOT NULL,
  subject       TEXT NOT NULL,
  failure_class TEXT NOT NULL DEFAULT '',
  limit_value   INTEGER NOT NULL DEFAULT 0,
  actor         TEXT NOT NULL,
  reason        TEXT NOT NULL,
  set_at_ns     INTEGER NOT NULL,
  PRIMARY KEY (kind, subject, failure_class)
) WITHOUT ROWID;

CREATE TABLE jobpact_control_audit (
  seq  INTEGER PRIMARY KEY AUTOINCREMENT,
  line TEXT NOT NULL
);

CREATE TABLE jobpact_policies (
  job_type        TEXT PRIMARY KEY,
  policy          TEXT NOT NULL,
  reason          TEXT NOT NULL,
  publisher       TEXT NOT NULL,
  published_at_ns INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
    // Version 3: the rate limiters every process shares (RateLimitStore):
    // a GCRA's timing state per key, its backoff, and an operator's rate.
    R"sql(
CREATE TABLE jobpact_rate_limits (
  key                 TEXT PRIMARY KEY,
  tat_ns              INTEGER NOT NULL DEFAULT 0,
  backoff_until_ns    INTEGER NOT NULL DEFAULT 0,
  hint_ns             INTEGER NOT NULL DEFAULT 0,
  backoff_reason      TEXT NOT NULL DEFAULT '',
  override_per_second REAL,
  override_burst      INTEGER,
  override_actor      TEXT NOT NULL DEFAULT '',
  override_reason     TEXT NOT NULL DEFAULT '',
  updated_at_ns       INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
    // Version 4: tenant fairness. The envelope's tenant as a virtual column
    // (computed from the stored JSON, so no write path changes; '' for
    // none and for a quarantined row's unparsable envelope), the ready
    // index by (queue, job type, tenant) in place of version 2's by (queue,
    // job type), so the lease step walks tenants by index seeks; an index
    // to count a tenant's running jobs (the per-tenant cap); and which
    // tenant of each queue was served last.
    R"sql(
ALTER TABLE jobpact_jobs ADD COLUMN tenant_id TEXT GENERATED ALWAYS AS
  (CASE WHEN json_valid(envelope) THEN coalesce(json_extract(envelope, '$.tenant_id'), '')
   ELSE '' END) VIRTUAL;
DROP INDEX jobpact_jobs_ready_by_type;
CREATE INDEX jobpact_jobs_ready_by_tenant
  ON jobpact_jobs (queue, job_type, tenant_id, priority DESC, ready_at_ns, job_id)
  WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobpact_jobs_running_tenant ON jobpact_jobs (queue, tenant_id)
  WHERE status = 'running';
CREATE TABLE jobpact_tenant_turns (
  queue       TEXT PRIMARY KEY,
  last_tenant TEXT NOT NULL
) WITHOUT ROWID;
)sql",
    // Version 5: count retention (TrimFinished). Final jobs by (status,
    // job type, finished_at, id), so that finding the newest N of a type
    // and deleting the older ones are index walks of that type alone. The
    // age purge keeps version 1's jobpact_jobs_finished.
    R"sql(
CREATE INDEX jobpact_jobs_finished_by_type
  ON jobpact_jobs (status, job_type, finished_at_ns, job_id)
  WHERE status IN ('succeeded', 'failed', 'discarded');
)sql",
    // Version 6: the two indexes of final jobs, their condition written as
    // comparisons. SQLite evaluates a partial index's condition for every
    // row an INSERT or an UPDATE of its columns writes, and an IN list of
    // three or more values builds a temporary b-tree each time a statement
    // runs: two per job enqueued and per status change, about half of the
    // instructions of a bulk enqueue (callgrind, docs/benchmarks.md). The
    // queries that use them repeat the new condition
    // (JOBPACT_SQLITE_FINAL_JOB in queue_store.h). As after every
    // migration, an older library refuses the file (a newer schema).
    R"sql(
DROP INDEX jobpact_jobs_finished;
CREATE INDEX jobpact_jobs_finished ON jobpact_jobs (finished_at_ns)
  WHERE status = 'succeeded' OR status = 'failed' OR status = 'discarded';
DROP INDEX jobpact_jobs_finished_by_type;
CREATE INDEX jobpact_jobs_finished_by_type
  ON jobpact_jobs (status, job_type, finished_at_ns, job_id)
  WHERE status = 'succeeded' OR status = 'failed' OR status = 'discarded';
)sql",
};

static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == SqliteBackend::kSchemaVersion,
              "one migration per schema version");

Result<std::int64_t> QueryInt(Connection& conn, const char* sql, std::string_view what) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(conn.db(), sql, -1, &raw, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(raw);
    return conn.Error(rc, what);
  }
  rc = sqlite3_step(raw);
  std::int64_t v = 0;
  if (rc == SQLITE_ROW) v = sqlite3_column_int64(raw, 0);
  Status s = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? Status::Ok() : conn.Error(rc, what);
  sqlite3_finalize(raw);
  if (!s.ok()) return s;
  return v;
}

Status CheckAndMigrateInTransaction(Connection& conn, const SqliteOptions& options,
                                    int* version_out) {
  const std::string& path = conn.path();
  JOBPACT_ASSIGN_OR_RETURN(
      std::int64_t has_meta,
      QueryInt(conn,
               "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
               "'jobpact_meta'",
               "read schema"));
  if (has_meta == 0) {
    if (options.read_only) {
      return Status::FailedPrecondition("database " + path +
                                        " is not a jobpact database (no jobpact_meta table); "
                                        "a read-only open cannot create one");
    }
    JOBPACT_ASSIGN_OR_RETURN(
        std::int64_t foreign_tables,
        QueryInt(conn,
                 "SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'view') AND "
                 "name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                 "read schema"));
    if (foreign_tables > 0 && !options.adopt_existing_database) {
      return Status::FailedPrecondition(
          "database " + path + " is not a jobpact database: it holds " +
          std::to_string(foreign_tables) +
          " other table(s) and no jobpact_meta table. Refusing to add jobpact's tables to it; "
          "set SqliteOptions::adopt_existing_database to do so on purpose");
    }
    JOBPACT_RETURN_IF_ERROR(conn.Exec(
        "CREATE TABLE jobpact_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
        "INSERT INTO jobpact_meta (key, value) VALUES ('schema_version', '0');",
        "create schema"));
    const std::string app_id = "PRAGMA application_id=" + std::to_string(kApplicationId);
    JOBPACT_RETURN_IF_ERROR(conn.Exec(app_id.c_str(), "create schema"));
  }
  JOBPACT_ASSIGN_OR_RETURN(int version, ReadSchemaVersion(conn));
  if (version > SqliteBackend::kSchemaVersion) {
    return Status::FailedPrecondition(
        "database " + path + " has jobpact schema version " + std::to_string(version) +
        ", newer than the version " + std::to_string(SqliteBackend::kSchemaVersion) +
        " this build of jobpact supports; upgrade jobpact (the file was left unchanged)");
  }
  if (version < SqliteBackend::kSchemaVersion && options.read_only) {
    return Status::FailedPrecondition("database " + path + " has jobpact schema version " +
                                      std::to_string(version) + " and needs migrating to version " +
                                      std::to_string(SqliteBackend::kSchemaVersion) +
                                      "; open it once without SqliteOptions::read_only");
  }
  for (int v = version + 1; v <= SqliteBackend::kSchemaVersion; ++v) {
    JOBPACT_RETURN_IF_ERROR(
        conn.Exec(kMigrations[v - 1], "migrate schema to version " + std::to_string(v)));
  }
  if (version != SqliteBackend::kSchemaVersion) {
    const std::string update = "UPDATE jobpact_meta SET value = '" +
                               std::to_string(SqliteBackend::kSchemaVersion) +
                               "' WHERE key = 'schema_version'";
    JOBPACT_RETURN_IF_ERROR(conn.Exec(update.c_str(), "record schema version"));
  }
  *version_out = SqliteBackend::kSchemaVersion;
  return Status::Ok();
}

}  // namespace

Status QuickCheck(Connection& conn) {
  // At most 5 problems: enough to show what is wrong, and a badly damaged
  // file stops the check early.
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(conn.db(), "PRAGMA quick_check(5)", -1, &raw, nullptr);
  std::vector<std::string> problems;
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW) break;
    const unsigned char* text = sqlite3_column_text(raw, 0);
    std::string line = text != nullptr ? reinterpret_cast<const char*>(text) : "";
    if (line != "ok") problems.push_back(std::move(line));
  }
  Status s = (rc == SQLITE_DONE) ? Status::Ok() : conn.Error(rc, "quick_check at open");
  sqlite3_finalize(raw);
  if (!s.ok()) return s;
  if (problems.empty()) return Status::Ok();
  std::string detail = "PRAGMA quick_check on " + conn.path() + " found:";
  for (const std::string& p : problems) detail += " [" + p + "]";
  return CorruptionError(conn.path(), detail);
}

Result<int> ReadSchemaVersion(Connection& conn) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(
      conn.db(), "SELECT value FROM jobpact_meta WHERE key = 'schema_version'", -1, &raw, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(raw);
    if ((rc & 0xff) == SQLITE_ERROR) {
      return Status::FailedPrecondition("database " + conn.path() +
                                        " is not a jobpact database (no jobpact_meta table)");
    }
    return conn.Error(rc, "read schema version");
  }
  rc = sqlite3_step(raw);
  std::string text;
  if (rc == SQLITE_ROW && sqlite3_column_text(raw, 0) != nullptr) {
    text = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
  }
  Status s = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? Status::Ok()
                                                     : conn.Error(rc, "read schema version");
  sqlite3_finalize(raw);
  if (!s.ok()) return s;
  int version = -1;
  bool digits = !text.empty() && text.size() < 9;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (digits) version = std::stoi(text);
  if (version < 0) {
    return Status::FailedPrecondition("database " + conn.path() +
                                      " has a damaged jobpact_meta table: schema_version is '" +
                                      text + "'");
  }
  return version;
}

Result<int> CheckAndMigrate(Connection& conn, const SqliteOptions& options) {
  // Check and migrate before switching the journal mode: a file that turns
  // out not to be ours must not be changed, and journal_mode=WAL is
  // persistent. BEGIN IMMEDIATE serializes processes that open a new file
  // at the same time: the second one finds the schema the first created.
  JOBPACT_RETURN_IF_ERROR(
      conn.Exec(options.read_only ? "BEGIN" : "BEGIN IMMEDIATE", "open database"));
  int version = 0;
  Status s = CheckAndMigrateInTransaction(conn, options, &version);
  if (s.ok()) s = conn.Exec("COMMIT", "commit schema migration");
  if (!s.ok()) {
    conn.RollbackIfOpen();
    return s;
  }
  if (!options.read_only) {
    // WAL: readers never block the writer and a commit needs no fsync of
    // the database file; persistent, so this is a no-op after the first open.
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(conn.db(), "PRAGMA journal_mode=WAL", -1, &raw, nullptr);
    std::string mode;
    if (rc == SQLITE_OK) {
      rc = sqlite3_step(raw);
      if (rc == SQLITE_ROW && sqlite3_column_text(raw, 0) != nullptr) {
        mode = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
        rc = SQLITE_OK;
      }
    }
    Status ws = rc == SQLITE_OK ? Status::Ok() : conn.Error(rc, "enable WAL");
    sqlite3_finalize(raw);
    if (!ws.ok()) return ws;
    if (mode != "wal") {
      return Status::FailedPrecondition("database " + conn.path() +
                                        ": could not switch to WAL journal mode (got '" + mode +
                                        "'); WAL needs a local file system with shared memory");
    }
  }
  return version;
}

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
