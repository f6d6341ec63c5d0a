// File: jobpact/postgres/postgres_backend.h
//
// The shared SQL backend for many processes on many hosts (SPEC 9): the
// queue (and its operator side), the lock store, the idempotency store and
// the rate limiters kept in ONE PostgreSQL database, in one schema
// (PostgresOptions::schema).
// Every state change is one transaction; jobs are leased with
// SELECT ... FOR UPDATE SKIP LOCKED, so workers of any number of processes
// never wait for each other's rows, and every completion is fenced by
// (job id, epoch, lease token) inside its transaction.
//
// What only a SQL backend offers (as the SQLite one does):
//   - Transactional enqueue: EnqueueInTransaction() writes a job through
//     the CALLER's connection (PGconn*), inside the caller's open
//     transaction, so the job exists if and only if the caller's business
//     write commits (the outbox case).
//   - Transactional completion: QueueBackend::Complete() runs
//     Completion::transactional_effect(PGconn*) inside the transaction that
//     marks the job finished (and records its idempotency claim), before it
//     commits. An effect kept in the same database therefore happens exactly
//     once. CompleteBatch() groups completions into one transaction: a
//     refused one (stale lease, failed effect) rolls back alone and the
//     others commit (a SAVEPOINT per job with an effect; completions without
//     one are a single conditional UPDATE, where a stale one matches no row).
//
// Schema: created and migrated by Open() under a transaction-level advisory
// lock, so processes starting together migrate once. Migrations are
// additive; a schema newer than this library is accepted while its
// min_compatible_version is <= kSchemaVersion (the compatibility window,
// docs/backends.md), else refused naming both versions.
//
// Connections: a pool of PostgresOptions::pool_size connections with
// prepared statements, shared by the stores. A connection lost (server
// restart, network) is dropped; new ones are opened with jittered
// exponential backoff, and calls made meanwhile return kUnavailable naming
// the server. Only parameterised statements reach the server: no job id,
// type, queue, key or payload is ever part of SQL text.
//
// Errors any method may return, each naming the server: kUnavailable for a
// server down or restarting, a connection lost (mid-transaction: the
// transaction was rolled back; during COMMIT: its outcome is unknown, and
// the engine's fencing makes a retry safe), a read-only server (a hot
// standby, or default_transaction_read_only), a serialization failure or
// deadlock; kDeadlineExceeded for a statement timeout
// (PostgresOptions::statement_timeout); kFailedPrecondition for a database
// without the schema.
//
// Contract: methods never throw; errors are Status values. Time comes only
// from the injected Clock (lease, lock and claim expiry are compared with a
// `now` the client passes, never with the server's clock). The connect and
// statement timeouts, the reconnect backoff and WaitForWork are real time.
//
// The same stores come from a URL too:
// jobpact::OpenBackend("postgres://app@db:5432/orders?schema=jobs").
//
// Example:
//   JOBPACT_ASSIGN_OR_RETURN(jobpact::postgres::PostgresOptions options,
//                            jobpact::postgres::ParsePostgresUrl(std::getenv("PG_URL")));
//   auto backend = jobpact::postgres::PostgresBackend::Open(options, clock);
//   if (!backend.ok()) return backend.status();
//   jobpact::JobRunnerOptions opts;
//   opts.backend = (*backend)->bundle();
//   // The outbox: the job commits with the order, or neither does.
//   //   PQexec(conn, "BEGIN"); ... INSERT INTO orders ... ;
//   //   (*backend)->EnqueueInTransaction(conn, job, {}); PQexec(conn, "COMMIT");
//
// Thread-safe.
#ifndef JOBPACT_POSTGRES_POSTGRES_BACKEND_H_
#define JOBPACT_POSTGRES_POSTGRES_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/job.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/result.h"
#include "jobpact/store_backend.h"
#include "jobpact/status.h"

// libpq's connection handle (<libpq-fe.h> declares it the same way), so that
// this header does not require libpq's.
typedef struct pg_conn PGconn;

namespace jobpact {
namespace postgres {

struct PostgresOptions {
  // Where the server is. A host starting with '/' is a Unix socket
  // directory (libpq's rule).
  std::string host = "127.0.0.1";
  int port = 5432;
  // Empty: libpq's defaults (the OS user; no password, or ~/.pgpass).
  // The password is never printed (url() and messages leave it out).
  std::string user;
  std::string password;
  std::string database = "postgres";

  // The schema holding jobpact's tables: 1 to 48 characters of [a-z0-9_],
  // not starting with a digit or "pg_". Created if missing. Applications
  // sharing a database use different schemas.
  std::string schema = "jobpact";

  // Connections kept open (WaitForWork uses one more of its own); a thread
  // that finds none free waits for one. REQUIRES: >= 1.
  int pool_size = 8;

  // Real-time bounds. connect_timeout: libpq's, in whole seconds (at least
  // 2). statement_timeout: each statement's, set on every pooled
  // connection (zero: the server's setting); a statement that runs longer
  // fails with kDeadlineExceeded and its transaction rolls back.
  Duration connect_timeout = Seconds(5);
  Duration statement_timeout = Duration::zero();

  // After a failed connect, no new connect is tried for a delay drawn in
  // [d/2, d], d doubling from reconnect_backoff_min up to
  // reconnect_backoff_max; calls in between fail at once with kUnavailable.
  // REQUIRES: 0 < min <= max.
  Duration reconnect_backoff_min = Millis(100);
  Duration reconnect_backoff_max = Seconds(5);

  // How long an idempotency record completed by a transactional completion
  // is kept.
  Duration idempotency_retention = std::chrono::hours(24);

  // Sent as libpq's application_name (pg_stat_activity).
  std::string application_name = "jobpact";
};

// Parses a PostgreSQL URL into options (fields it does not set keep the
// defaults above):
//   postgres://[user[:password]@][host][:port][/database][?params]
//   postgresql://...  (the same)
// host may be a name, an IPv4 address or a bracketed IPv6 address; the
// userinfo, host, database and values are percent-decoded (%2F for '/', so
// postgres://%2Fvar%2Frun%2Fpostgresql/app names a socket directory).
// Parameters (each at most once):
//   schema=NAME                 PostgresOptions::schema
//   pool_size=N                 PostgresOptions::pool_size
//   connect_timeout=SECONDS     PostgresOptions::connect_timeout (libpq's spelling)
//   statement_timeout_ms=N      PostgresOptions::statement_timeout
//   reconnect_backoff_min_ms=N  PostgresOptions::reconnect_backoff_min
//   reconnect_backoff_max_ms=N  PostgresOptions::reconnect_backoff_max
//   idempotency_retention_ms=N  PostgresOptions::idempotency_retention
//   application_name=NAME       PostgresOptions::application_name
//   host=DIR                    a Unix socket directory (libpq's spelling)
// kInvalidArgument naming what is wrong (another scheme, a bad port, bad
// percent-encoding, an unknown or repeated parameter, a bad value or
// schema name). Messages never repeat the password.
JOBPACT_EXPORT Result<PostgresOptions> ParsePostgresUrl(std::string_view url);

// One connection pool to one database and schema, and the stores kept
// there. Create with Open(); hand bundle() to a JobRunner, or to several
// runners in one process. Thread-safe.
class JOBPACT_EXPORT PostgresBackend {
 public:
  // The schema version this build writes, and the oldest schema version
  // whose library can still use a schema of this version (written as
  // min_compatible_version when this build migrates).
  // Version 2 added the rate_limits table (a version-1 library works on
  // it, so the minimum stays 1); version 3 the tenant column, its indexes
  // and tenant_turns (tenant fairness, issue 11; additive, likewise).
  static constexpr int kSchemaVersion = 4;
  static constexpr int kMinCompatibleVersion = 1;

  // Connects (one connection, to check the server and the schema), creates
  // or migrates the schema, and builds the stores. Errors:
  // kInvalidArgument for bad options or a null clock; kUnavailable naming
  // the server if it cannot be reached (or is read-only and the schema
  // needs creating); kFailedPrecondition for a schema newer than this
  // library can use (both versions named) or refused credentials.
  static Result<std::shared_ptr<PostgresBackend>> Open(const PostgresOptions& options,
                                                       std::shared_ptr<Clock> clock);

  PostgresBackend(const PostgresBackend&) = delete;
  PostgresBackend& operator=(const PostgresBackend&) = delete;
  ~PostgresBackend();

  // The stores, sharing this object's connections; each keeps the pool
  // open for as long as it is held, even after this object is gone.
  std::shared_ptr<QueueBackend> queue() const;
  std::shared_ptr<QueueAdmin> admin() const;
  std::shared_ptr<LockStore> locks() const;
  std::shared_ptr<IdempotencyStore> idempotency() const;
  // The rate limiters every process using the schema shares.
  std::shared_ptr<RateLimitStore> rate_limits() const;
  // All of them, as JobRunnerOptions::backend takes them, with name
  // "postgres" and url() as the url.
  BackendBundle bundle() const;

  // postgres://[user@]host:port/database?schema=S. Never holds the password.
  std::string url() const;
  const PostgresOptions& options() const;
  // The schema version found in the database after Open (>= kSchemaVersion;
  // greater if a newer, compatible library migrated it).
  int schema_version() const;

  // Transactional enqueue: stores `env` (as QueueBackend::Enqueue would,
  // dedup included) through the caller's connection `conn`, inside the
  // caller's open transaction (in a savepoint, so a refused enqueue leaves
  // the caller's transaction usable), so the job exists iff the caller
  // commits. Idle workers are woken when it commits (NOTIFY).
  // REQUIRES: `conn` is connected to this backend's database with a
  // transaction open and not failed (kFailedPrecondition otherwise); env
  // passed through PrepareForEnqueue.
  Result<EnqueueResult> EnqueueInTransaction(PGconn* conn, const Envelope& env,
                                             const EnqueueOptions& options);

  // Runs `fn` inside a transaction on one of this object's connections and
  // commits iff it returns OK; any other status, or an exception (kInternal),
  // rolls everything back. For business writes plus EnqueueInTransaction.
  Status RunInTransaction(const std::function<Status(PGconn* conn)>& fn);

  // Internal: the state shared by the stores (src/backends/postgres).
  class Core;

 private:
  explicit PostgresBackend(std::shared_ptr<Core> core);

  std::shared_ptr<Core> core_;
  std::shared_ptr<StoreBackend> queue_;
  std::shared_ptr<LockStore> locks_;
  std::shared_ptr<IdempotencyStore> idempotency_;
  std::shared_ptr<RateLimitStore> rate_limits_;
};

}  // namespace postgres
}  // namespace jobpact

#endif  // JOBPACT_POSTGRES_POSTGRES_BACKEND_H_
