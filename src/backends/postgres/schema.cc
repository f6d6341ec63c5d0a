// The PostgreSQL schema and its migrations (PostgresBackend::Core::Migrate).
#include <string>

#include "src/backends/postgres/core.h"

namespace jobpact {
namespace postgres {

using internal::Connection;
using internal::Params;
using internal::PgResult;

namespace {

// Migration N brings a schema from version N-1 to N. Each runs inside the
// one transaction that also records the new version, under the schema's
// migration advisory lock, so processes starting at once migrate once and a
// crash during a migration leaves the old version. Append only, and
// additive (new tables, columns with defaults, indexes): the previous
// library version must keep working on the new schema during a rolling
// deploy. A migration that breaks that raises kMinCompatibleVersion.
//
// Layout notes (docs/backends.md has the table):
//   - "{t}" is the quoted schema and a dot.
//   - Times and durations are bigint nanoseconds since the Unix epoch
//     (*_ns): a TimePoint survives a round trip exactly, and every time
//     compared is the client's clock, never the server's.
//   - The columns are those of the SQLite store (src/internal/job_row_codec.h
//     decodes both); history and audit are jsonb arrays, appended in SQL.
//   - Names are COLLATE "C" so that ordering and paging by id are bytewise,
//     whatever the database's locale.
//   - The DLQ is the set of jobs in status dead_lettered (its own index by
//     dead_lettered_at_ns); dedup keys are a column with a partial index,
//     checked under a per-key advisory lock at insert.
constexpr const char* kMigrations[] = {
    // Version 1.
    R"sql(
CREATE TABLE {t}jobs (
  job_id                text COLLATE "C" PRIMARY KEY,
  job_type              text COLLATE "C" NOT NULL,
  queue                 text COLLATE "C" NOT NULL,
  priority              integer NOT NULL,
  status                text COLLATE "C" NOT NULL,
  attempt               integer NOT NULL,
  max_attempts          integer NOT NULL,
  ready_at_ns           bigint NOT NULL,
  enqueued_at_ns        bigint NOT NULL,
  updated_at_ns         bigint NOT NULL,
  finished_at_ns        bigint,
  epoch                 bigint NOT NULL DEFAULT 0,
  lease_token           text COLLATE "C",
  lease_expires_at_ns   bigint,
  visibility_timeout_ns bigint NOT NULL,
  lease_recoveries      integer NOT NULL DEFAULT 0,
  lock_waits            integer NOT NULL DEFAULT 0,
  previous_delay_ns     bigint NOT NULL DEFAULT 0,
  dedup_key             text COLLATE "C",
  checkpoint            text NOT NULL DEFAULT '',
  failure_class         text COLLATE "C",
  failure_code          text,
  failure_message       text,
  reason                text COLLATE "C" NOT NULL DEFAULT '',
  result                text NOT NULL DEFAULT '',
  envelope              text NOT NULL,
  history               jsonb NOT NULL DEFAULT '[]',
  dead_lettered_at_ns   bigint,
  raw_envelope          text,
  audit                 jsonb NOT NULL DEFAULT '[]',
  cancel_requested      integer NOT NULL DEFAULT 0
);
CREATE INDEX jobs_ready ON {t}jobs (priority DESC, ready_at_ns, job_id)
  WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobs_ready_by_queue ON {t}jobs (queue, priority DESC, ready_at_ns, job_id)
  WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobs_leases ON {t}jobs (lease_expires_at_ns) WHERE status = 'running';
CREATE INDEX jobs_running_type ON {t}jobs (job_type) WHERE status = 'running';
CREATE INDEX jobs_dedup ON {t}jobs (dedup_key, enqueued_at_ns) WHERE dedup_key IS NOT NULL;
CREATE INDEX jobs_dlq ON {t}jobs (dead_lettered_at_ns) WHERE status = 'dead_lettered';
CREATE INDEX jobs_finished ON {t}jobs (finished_at_ns)
  WHERE status IN ('succeeded', 'failed', 'discarded');

CREATE TABLE {t}locks (
  key           text COLLATE "C" PRIMARY KEY,
  owner         text COLLATE "C" NOT NULL,
  fencing_token bigint NOT NULL,
  expires_at_ns bigint NOT NULL
);
CREATE SEQUENCE {t}lock_fencing_tokens;

CREATE TABLE {t}idempotency (
  key           text COLLATE "C" PRIMARY KEY,
  state         text NOT NULL,
  owner         text COLLATE "C" NOT NULL,
  result        text NOT NULL DEFAULT '',
  expires_at_ns bigint NOT NULL
);
CREATE INDEX idempotency_expiry ON {t}idempotency (expires_at_ns);

CREATE TABLE {t}control (
  kind          text COLLATE "C" NOT NULL,
  subject       text COLLATE "C" NOT NULL,
  failure_class text COLLATE "C" NOT NULL DEFAULT '',
  limit_value   integer NOT NULL DEFAULT 0,
  actor         text NOT NULL,
  reason        text NOT NULL,
  set_at_ns     bigint NOT NULL,
  PRIMARY KEY (kind, subject, failure_class)
);

CREATE TABLE {t}control_audit (
  seq  bigserial PRIMARY KEY,
  line text NOT NULL
);

CREATE TABLE {t}policies (
  job_type        text COLLATE "C" PRIMARY KEY,
  policy          text NOT NULL,
  reason          text NOT NULL,
  publisher       text NOT NULL,
  published_at_ns bigint NOT NULL
);
)sql",
    // Version 2: the rate limiters (jobpact/rate_limit_store.h), the SQLite
    // store's columns. A new table only: a version-1 library ignores it,
    // so kMinCompatibleVersion stays 1.
    R"sql(
CREATE TABLE {t}rate_limits (
  key                 text COLLATE "C" PRIMARY KEY,
  tat_ns              bigint NOT NULL DEFAULT 0,
  backoff_until_ns    bigint NOT NULL DEFAULT 0,
  hint_ns             bigint NOT NULL DEFAULT 0,
  backoff_reason      text NOT NULL DEFAULT '',
  override_per_second double precision,
  override_burst      integer,
  override_actor      text NOT NULL DEFAULT '',
  override_reason     text NOT NULL DEFAULT '',
  updated_at_ns       bigint NOT NULL
);
)sql",
    // Version 3: tenant fairness and the per-tenant concurrency cap (issue
    // 11). The envelope's tenant as a column of its own ('' for none),
    // written at insert and filled here for the jobs already stored (an
    // envelope that does not parse as JSON has none); the ready index by
    // (queue, job type, tenant), so the lease step finds each tenant's
    // first jobs by index seeks however many jobs a tenant has; running
    // jobs by (queue, tenant), which the cap counts; and which tenant of
    // each queue the lease step served last (the turn, shared by every
    // process). Additive: a version-2 library ignores all of it (the jobs
    // it enqueues have tenant '', one tenant for fairness and the cap), so
    // kMinCompatibleVersion stays 1.
    R"sql(
ALTER TABLE {t}jobs ADD COLUMN tenant_id text COLLATE "C" NOT NULL DEFAULT '';
CREATE FUNCTION pg_temp.jobpact_tenant_of(envelope text) RETURNS text
  LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN coalesce(envelope::jsonb ->> 'tenant_id', '');
EXCEPTION WHEN others THEN
  RETURN '';
END $$;
UPDATE {t}jobs SET tenant_id = pg_temp.jobpact_tenant_of(envelope)
  WHERE envelope LIKE '%"tenant_id"%';
DROP FUNCTION pg_temp.jobpact_tenant_of(text);
CREATE INDEX jobs_ready_by_tenant ON {t}jobs (queue, job_type, tenant_id, priority DESC,
  ready_at_ns, job_id) WHERE status IN ('queued', 'retry_scheduled');
CREATE INDEX jobs_running_tenant ON {t}jobs (queue, tenant_id) WHERE status = 'running';
CREATE TABLE {t}tenant_turns (
  queue       text COLLATE "C" PRIMARY KEY,
  last_tenant text COLLATE "C" NOT NULL
);
)sql",
    // Version 4: count retention (TrimFinished). Final jobs by (status, job
    // type, finished_at, id), so that finding the newest N of a type and
    // deleting the older ones walk that type's part of the index alone.
    // An index only: a version-3 library ignores it (and maintains it on
    // its writes), so kMinCompatibleVersion stays 1.
    R"sql(
CREATE INDEX jobs_finished_by_type ON {t}jobs (status, job_type, finished_at_ns, job_id)
  WHERE status IN ('succeeded', 'failed', 'discarded');
)sql",
};

static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == PostgresBackend::kSchemaVersion,
              "one migration per schema version");

}  // namespace

Status PostgresBackend::Core::Migrate(Connection& conn) {
  constexpr std::string_view kWhat = "PostgresBackend::Open";
  JOBPACT_RETURN_IF_ERROR(conn.Simple("BEGIN", kWhat));
  Status s = [&]() -> Status {
    // Every process opening this schema queues here until the first has
    // created or migrated it; released at COMMIT or ROLLBACK.
    JOBPACT_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock(hashtext($1), 0)",
                                      Params().Add(LockSpace("migrate")), kWhat)
                                .status());
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult exists,
        conn.Exec("SELECT to_regclass($1::text) IS NOT NULL",
                  Params().Add(quoted_schema_ + ".schema_version"), kWhat));
    int version = 0;
    if (exists.Text(0, 0) == "t") {
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult row,
          conn.Exec(SqlOf("SELECT version, min_compatible_version FROM {t}schema_version "
                          "WHERE id = 1"),
                    Params(), kWhat));
      if (row.rows() != 1) {
        return Status::FailedPrecondition(std::string(kWhat) + ": postgres " + server_ +
                                          ": schema " + options_.schema +
                                          " has a damaged schema_version table (no row)");
      }
      version = static_cast<int>(row.Int(0, 0));
      const int min_compatible = static_cast<int>(row.Int(0, 1));
      if (version > kSchemaVersion) {
        if (min_compatible > kSchemaVersion) {
          return Status::FailedPrecondition(
              std::string(kWhat) + ": postgres " + server_ + ": schema " + options_.schema +
              " has jobpact schema version " + std::to_string(version) +
              ", which needs a jobpact that supports schema version " +
              std::to_string(min_compatible) + " or newer; this one supports version " +
              std::to_string(kSchemaVersion) + " (upgrade jobpact; nothing was changed)");
        }
        // A newer, compatible schema (additive migrations of a newer
        // library): used as it is, never migrated down.
        schema_version_ = version;
        return Status::Ok();
      }
    } else {
      JOBPACT_RETURN_IF_ERROR(conn.Simple(
          SqlOf("CREATE SCHEMA IF NOT EXISTS " + quoted_schema_ +
                "; CREATE TABLE {t}schema_version (id integer PRIMARY KEY CHECK (id = 1), "
                "version integer NOT NULL, min_compatible_version integer NOT NULL, "
                "migrated_at timestamptz NOT NULL DEFAULT now()); INSERT INTO {t}schema_version "
                "(id, version, min_compatible_version) VALUES (1, 0, 0)")
              .c_str(),
          kWhat));
    }
    for (int v = version + 1; v <= kSchemaVersion; ++v) {
      JOBPACT_RETURN_IF_ERROR(conn.Simple(
          SqlOf(kMigrations[v - 1]).c_str(),
          std::string(kWhat) + ": migrate schema " + options_.schema + " to version " +
              std::to_string(v)));
    }
    if (version < kSchemaVersion) {
      JOBPACT_RETURN_IF_ERROR(
          conn.Exec(SqlOf("UPDATE {t}schema_version SET version = $1, min_compatible_version = "
                          "$2, migrated_at = now() WHERE id = 1"),
                    Params().Add(kSchemaVersion).Add(kMinCompatibleVersion), kWhat)
              .status());
    }
    schema_version_ = kSchemaVersion;
    return Status::Ok();
  }();
  if (s.ok()) s = conn.Simple("COMMIT", kWhat);
  if (!s.ok() && !conn.broken()) (void)conn.Simple("ROLLBACK", kWhat);
  return s;
}

}  // namespace postgres
}  // namespace jobpact
