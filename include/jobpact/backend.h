// File: jobpact/backend.h
//
// A backend is opened as ONE bundle of its stores (SPEC 9): the queue (and
// its operator side), the lock store and the idempotency store of one place. A runner must take all
// three from the same place: a SQLite queue with in-memory locks would let
// two processes hold "the" lock on an order at once, and an in-memory
// idempotency store would forget every claim when the process restarts.
// JobRunner::Create therefore refuses a durable queue without its locks and
// idempotency store (see JobRunnerOptions::backend).
//
// Three ways to get a bundle:
//   - OpenBackend(url): from a URL, e.g. a configuration value. Defined in
//     the jobpact::backends target (CMake: link jobpact::backends), which
//     links every backend this build of jobpact has.
//   - InMemoryBackend(clock): the in-memory stores (jobpact::jobpact).
//   - SqliteBackend::bundle(): the stores of an open SQLite file
//     (jobpact/sqlite/sqlite_backend.h), when you also need the
//     SqliteBackend itself (transactional enqueue, RunInTransaction).
//   - RedisBackend::bundle(): the stores of one Redis server and key
//     namespace (jobpact/redis/redis_backend.h).
//   - PostgresBackend::bundle(): the stores of one PostgreSQL database and
//     schema (jobpact/postgres/postgres_backend.h), when you also need the
//     PostgresBackend itself (transactional enqueue on your PGconn*).
//
// URLs (the grammar is RFC 3986's, read the way file: URIs are, RFC 8089):
//   memory:                       the in-memory stores (nothing after the
//                                 colon; "memory://" is accepted too)
//   sqlite:///var/lib/app/jobs.db an absolute path: empty authority, then
//                                 the path (three slashes in all)
//   sqlite:/var/lib/app/jobs.db   the same file (no authority)
//   sqlite:jobs.db                a path relative to the working directory
//   sqlite:data/jobs.db           likewise
// The path is percent-decoded (%20 for a space, %3F for '?', %23 for '#',
// %25 for '%'); it is always a file name, never an SQLite "file:" URI.
// Refused, with kInvalidArgument saying what to write instead:
//   sqlite://jobs.db              "jobs.db" would be a host name; a
//                                 relative path is sqlite:jobs.db
//   sqlite:////var/lib/jobs.db    four slashes are SQLAlchemy's spelling
//                                 of an absolute path; here it is three
//   sqlite:, sqlite:///           no path
//   sqlite::memory:               an SQLite in-memory database is private
//                                 to one connection; use memory:
// NOTE for SQLAlchemy users: SQLAlchemy reads sqlite:///jobs.db as a
// RELATIVE path; here it is the absolute path /jobs.db.
//
// Query parameters of sqlite: URLs set jobpact::sqlite::SqliteOptions
// (each at most once; booleans are 1/0/true/false):
//   busy_timeout_ms=5000          SqliteOptions::busy_timeout
//   synchronous=normal|full       SqliteOptions::synchronous
//   read_only=1                   SqliteOptions::read_only
//   adopt_existing_database=1     SqliteOptions::adopt_existing_database
//   quick_check_on_open=0         SqliteOptions::quick_check_on_open
//   max_database_bytes=N          SqliteOptions::max_database_bytes
//   drain_reserve_bytes=N         SqliteOptions::drain_reserve_bytes (-1: default)
//   max_connections=N             SqliteOptions::max_connections
//   idempotency_retention_ms=N    SqliteOptions::idempotency_retention
// memory: takes no parameters.
//
// Redis URLs (jobpact/redis/redis_backend.h, redis::ParseRedisUrl, has the
// whole grammar and its parameters):
//   redis://[user[:password]@]host[:port][/db][?namespace=NAME&...]
//   redis+unix://[user[:password]@]/path/to/redis.sock[?db=N&namespace=NAME]
// e.g. redis://app:s3cret@10.0.0.5:6379/0?namespace=orders&pool_size=16.
// The bundle's url names the user but never the password. rediss:// (TLS)
// is refused with kUnimplemented: Debian's hiredis 0.14 has no TLS (use a
// TLS-terminating proxy such as stunnel on loopback).
//
// PostgreSQL URLs (jobpact/postgres/postgres_backend.h,
// postgres::ParsePostgresUrl, has the whole grammar and its parameters):
//   postgres://[user[:password]@][host][:port][/database][?schema=NAME&...]
//   postgresql://...  (the same)
// e.g. postgres://app:s3cret@db:5432/orders?schema=jobs&pool_size=16. The
// bundle's url names the user but never the password.
//
// Example:
//   // JOBS_URL=sqlite:///var/lib/orders/jobs.db?busy_timeout_ms=2000
//   auto backend = jobpact::OpenBackend(std::getenv("JOBS_URL"));
//   if (!backend.ok()) return backend.status();  // says what is wrong with the URL
//   jobpact::JobRunnerOptions opts;
//   opts.backend = *backend;  // queue, locks and idempotency, from one place
//   auto runner = jobpact::JobRunner::Create(opts);
//
// Nothing here throws; every failure is a Status.
#ifndef JOBPACT_BACKEND_H_
#define JOBPACT_BACKEND_H_

#include <memory>
#include <string>
#include <string_view>

#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/result.h"

namespace jobpact {

// The stores of one backend, which a runner (or a producer, or an operator
// tool) uses together. A plain struct: copies share the stores.
struct BackendBundle {
  std::shared_ptr<QueueBackend> queue;
  // The operator side of the same store (QueueAdmin; usually the same
  // object as `queue`): lookup, listing, cancel, the DLQ, control state.
  std::shared_ptr<QueueAdmin> admin;
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
  // The backend's cache store for the cache guard (jobpact/cache.h), where
  // it has one (in-memory, Redis); null otherwise. Not part of complete():
  // a runner does not need it.
  std::shared_ptr<CacheStore> cache;
  // The rate limiters every process of this backend shares
  // (jobpact/rate_limit_store.h); null for a backend without them. Not part
  // of complete(): a runner needs it only for rate limits
  // (HandlerOptions::rate_limit, JobRunnerOptions::dependency_rate_limits)
  // and to spread a handler's RateLimited backoff to the other processes.
  std::shared_ptr<RateLimitStore> rate_limits;
  // For logs and status pages: the backend's name ("in_memory", "sqlite",
  // "redis") and where it is ("memory:", "sqlite:///var/lib/orders/jobs.db",
  // "redis://app@10.0.0.5:6379/0?namespace=orders"). A URL here never holds
  // a password.
  std::string name;
  std::string url;

  // True when every store is set.
  bool complete() const { return queue && admin && locks && idempotency; }
};

struct BackendOpenOptions {
  // The clock every store follows (lease expiry, lock and claim TTLs, dedup
  // windows). Null: SystemClock::Default(). Give the runner the same one.
  std::shared_ptr<Clock> clock;
};

// The in-memory stores (InMemoryQueueBackend, InMemoryLockStore,
// InMemoryIdempotencyStore, and as `cache` an in-memory CacheStore with the
// default bounds) on `clock` (null: SystemClock::Default()), with name
// "in_memory" and url "memory:". Single process; nothing survives it.
JOBPACT_EXPORT BackendBundle InMemoryBackend(std::shared_ptr<Clock> clock = nullptr);

// Opens the backend named by `url` (grammar above) and returns its stores.
// Errors:
//   kInvalidArgument: a malformed URL (empty, no scheme, bad
//     percent-encoding, no path, a host where none belongs, an unknown or
//     repeated query parameter, a bad value), or an unknown scheme (the
//     message names it and lists the known ones). Each names what is wrong.
//   kUnimplemented: rediss: (no TLS); sqlite:, redis: or postgres: in a
//     build without that backend (configure jobpact with
//     -DJOBPACT_WITH_SQLITE=ON, -DJOBPACT_WITH_REDIS=ON or
//     -DJOBPACT_WITH_POSTGRES=ON); redis: while the build's Redis backend
//     has no queue store yet.
//   Otherwise the backend's own error from opening it, e.g. for sqlite:
//     those of SqliteBackend::Open (a corrupt file, a newer schema, a
//     read-only directory, ...), each naming the file; for redis: those of
//     RedisBackend::Open (kUnavailable naming the server, kFailedPrecondition
//     for refused credentials or database).
// Defined in jobpact::backends (link it; jobpact::jobpact alone lacks it).
// Thread-safe.
JOBPACT_EXPORT Result<BackendBundle> OpenBackend(std::string_view url,
                                                 const BackendOpenOptions& options = {});

}  // namespace jobpact

#endif  // JOBPACT_BACKEND_H_
