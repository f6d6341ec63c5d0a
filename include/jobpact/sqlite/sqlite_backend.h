// File: jobpact/sqlite/sqlite_backend.h
//
// The durable embedded backend: QueueBackend, LockStore and IdempotencyStore
// kept in ONE SQLite database file, for one host (SPEC 9). Several worker
// processes on that host may open the same file; each opens its own
// connections, and every state change is one SQLite transaction, so a
// process killed at any moment (kill -9) leaves every job either before or
// after the change, never between.
//
// What only this backend offers:
//   - Transactional enqueue: EnqueueInTransaction() writes a job through the
//     CALLER's connection, inside the caller's open transaction on the same
//     file, so the job exists if and only if the caller's business write
//     commits.
//   - Transactional completion: QueueBackend::Complete() runs
//     Completion::transactional_effect(sqlite3*) inside the transaction that
//     marks the job finished, before it commits. An effect kept in the same
//     database therefore happens exactly once: the completion is fenced by
//     the lease epoch inside that transaction, so of all deliveries of a job
//     at most one commits, and a delivery killed before its commit leaves
//     nothing behind.
//
// Durability (see docs/backends.md): WAL journal mode; synchronous=NORMAL by
// default. In WAL mode a commit is in the WAL file (in the OS page cache)
// when COMMIT returns, so it survives the death of the process at any
// moment; only an OS crash or power loss can lose the most recent commits
// (never corrupting the file). Choose Synchronous::kFull to survive power
// loss too, at the cost of one fsync per commit.
//
// Concurrency: the object keeps a small pool of connections (one per
// concurrently calling thread, up to SqliteOptions::max_connections).
// Writes use BEGIN IMMEDIATE; threads of one process serialize their writes
// on an in-process mutex (a cheap hand-off) and processes serialize on
// SQLite's file lock, waiting up to SqliteOptions::busy_timeout (then
// kUnavailable, retryable). Reads run concurrently with writes (WAL). An
// idle runner is woken by a commit of any process (an inotify watch on the
// file's WAL; Linux), not by polling.
//
// Errors that any method may return, each naming the file (the full table
// is in docs/backends.md): kInternal "database file is corrupt" for a
// damaged file (SQLITE_CORRUPT, SQLITE_NOTADB); kFailedPrecondition
// "read-only" for a write to a read-only database; kResourceExhausted
// "database or disk is full", or "database is full" for new jobs that would
// eat into SqliteOptions::drain_reserve_bytes (work on stored jobs goes on).
//
// Contract: methods never throw; errors are Status values. Time comes only
// from the injected Clock (lease expiry, dedup windows, TTLs); the busy wait
// for another process's file lock is the one real-time wait, since another
// process's lock does not follow a test clock.
//
// The same stores, without this object, come from a URL too:
// jobpact::OpenBackend("sqlite:///var/lib/app/jobs.db") (jobpact/backend.h).
//
// Example:
//   auto backend = jobpact::sqlite::SqliteBackend::Open("/var/lib/app/jobs.db", {},
//                                                       jobpact::SystemClock::Default());
//   if (!backend.ok()) return backend.status();
//   jobpact::JobRunnerOptions opts;
//   opts.backend = (*backend)->bundle();  // queue, locks and idempotency of this file
//
//   // Transactional enqueue with the business write:
//   jobpact::Status s = (*backend)->RunInTransaction([&](sqlite3* db) -> jobpact::Status {
//     // ... INSERT INTO orders ... through `db` ...
//     jobpact::Envelope job = ...;
//     jobpact::PrepareForEnqueue(job, clock->Now());
//     return (*backend)->EnqueueInTransaction(db, job, {}).status();
//   });
//
// Thread-safe.
#ifndef JOBPACT_SQLITE_SQLITE_BACKEND_H_
#define JOBPACT_SQLITE_SQLITE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/job.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_backend.h"
#include "jobpact/store_backend.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

// The SQLite connection handle (from <sqlite3.h>); declared here so that this
// header does not require SQLite's.
struct sqlite3;

namespace jobpact {
namespace sqlite {

struct SqliteOptions {
  // How long a write waits for another process's write lock before giving
  // up with kUnavailable (retryable). Real time, not the injected clock.
  Duration busy_timeout = Seconds(5);

  enum class Synchronous {
    // Survives the death of any process at any moment (kill -9); an OS crash
    // or power loss may lose the last commits, never corrupt the file.
    kNormal,
    // Also survives power loss: one fsync of the WAL per commit.
    kFull,
  };
  Synchronous synchronous = Synchronous::kNormal;

  // Opens for inspection only (stats, DLQ listing, Get): nothing is created
  // or migrated, and every write returns kFailedPrecondition. The file must
  // already hold a jobpact database of the current schema version.
  bool read_only = false;

  // A file that already holds other tables but no jobpact schema is refused
  // (it is probably the wrong file). Set this to add jobpact's tables to an
  // existing application database on purpose, e.g. for transactional
  // enqueue next to the business tables. jobpact's tables are all named
  // jobpact_*.
  bool adopt_existing_database = false;

  // Runs SQLite's PRAGMA quick_check when the file is opened, before
  // anything is written to it, so that a damaged file is refused by Open()
  // (kInternal, "database file is corrupt", naming the file) instead of
  // accepting enqueues and failing later. Cost: one read of every page of
  // the file (the B-tree structure of every table and index; not their
  // cross-consistency, which integrity_check adds at twice the cost), once
  // per Open(), not per connection or transaction: about 0.1 s per 100 MB
  // of file from the page cache on the 2-core development VM, plus the
  // disk read when cold. Writers of other processes are not blocked (WAL).
  // On by default: a job database is usually small (finished jobs are
  // purged), and it is the record of acknowledged work, so finding damage
  // before a producer is told "enqueued" is worth a fraction of a second at
  // startup. Turn it off for multi-GB files, or for tools that open the
  // file often. With it off, and for damage that appears later, the first
  // statement that reads a bad page reports the same error.
  bool quick_check_on_open = true;

  // Bounds the database file (0: unbounded): a size cap, enforced on this
  // object's connections with SQLite's max_page_count (which is also how
  // the tests reproduce a full disk). A write that would grow the file past
  // it fails with kResourceExhausted ("database or disk is full", naming
  // the file) and changes nothing. The -wal file comes on top (about 4 MB
  // between checkpoints). Writes through a caller's own connection
  // (EnqueueInTransaction) are bounded only by drain_reserve_bytes below.
  std::int64_t max_database_bytes = 0;

  // The part of max_database_bytes kept for work on jobs already stored, so
  // that a full queue still drains. A transaction that adds jobs (Enqueue,
  // EnqueueBatch, DeadLetterInvalid, EnqueueInTransaction) is refused with
  // kResourceExhausted ("database is full", naming the file) once the pages
  // in use would come within this reserve of the bound; dequeues, lease
  // renewals and recoveries, completions, DLQ actions, locks and
  // idempotency claims may use the reserve. Pages freed by purges are
  // reused, so enqueues resume after PurgeFinished/PurgeDeadLetters.
  // -1 (default): a third of max_database_bytes. A delivery and its
  // completion append about 300 bytes of history to a job, so with a third
  // every stored job with a payload of 100 bytes or more can be delivered
  // and completed once after enqueues stop (measured; near-empty jobs about
  // 85% of them). Retries append more: purge finished jobs, or choose a
  // larger reserve. 0: no reserve (enqueues may fill the file).
  // Ignored without max_database_bytes.
  // REQUIRES: -1, or 0 <= drain_reserve_bytes < max_database_bytes.
  std::int64_t drain_reserve_bytes = -1;

  // Connections kept open by this object; a thread that finds none free
  // waits for one. REQUIRES: >= 1.
  int max_connections = 8;

  // How long an idempotency record completed by a transactional completion
  // is kept (see Completion::transactional_effect and docs/backends.md).
  Duration idempotency_retention = std::chrono::hours(24);
};

// One open database file and the three stores kept in it. Create with
// Open(); hand bundle() (the three stores together) to a JobRunner, or to
// several runners in one process. Thread-safe.
class JOBPACT_EXPORT SqliteBackend {
 public:
  // The schema version this build writes; Open() migrates older files to
  // it and refuses newer ones.
  static constexpr int kSchemaVersion = 6;

  // Opens (creating if missing) the database at `path` (a file name, or an
  // SQLite URI such as "file:/var/lib/app/jobs.db?mode=ro") and runs the
  // schema migrations. Errors, each naming the path:
  //   kInternal "database file is corrupt": the file is damaged (found by
  //     quick_check_on_open, or while reading the schema).
  //   kFailedPrecondition: not a SQLite file; a SQLite file with other
  //     tables and no jobpact schema (see adopt_existing_database); a schema
  //     version newer than kSchemaVersion (both versions named); a read-only
  //     file or directory when read_only is false.
  //   kInvalidArgument: bad options or a null clock.
  //   kUnavailable: the file is locked by another process for longer than
  //     busy_timeout.
  // Nothing in an existing file is changed unless the open succeeds.
  static Result<std::shared_ptr<SqliteBackend>> Open(const std::string& path, SqliteOptions options,
                                                     std::shared_ptr<Clock> clock);

  SqliteBackend(const SqliteBackend&) = delete;
  SqliteBackend& operator=(const SqliteBackend&) = delete;
  ~SqliteBackend();

  // The three stores, sharing this object's connections. Each keeps the
  // database open for as long as it is held, even after this object is gone.
  std::shared_ptr<QueueBackend> queue() const { return queue_; }
  // The operator side of the same store (jobpact/queue_admin.h).
  std::shared_ptr<QueueAdmin> admin() const { return queue_; }
  std::shared_ptr<LockStore> locks() const { return locks_; }
  std::shared_ptr<IdempotencyStore> idempotency() const { return idempotency_; }
  // The rate limiters every process using the file shares.
  std::shared_ptr<RateLimitStore> rate_limits() const { return rate_limits_; }
  // All three, as JobRunnerOptions::backend takes them, with name "sqlite"
  // and url "sqlite:" plus the path (percent-encoded; sqlite:///... for an
  // absolute path; the path itself when it is an SQLite "file:" URI).
  BackendBundle bundle() const;

  // Transactional enqueue: stores `env` (as QueueBackend::Enqueue would,
  // dedup included) through the caller's connection `db`, inside the
  // caller's open transaction, so the job exists iff the caller commits.
  // REQUIRES: `db` is open on this backend's file with a transaction in
  // progress (kFailedPrecondition otherwise); env passed through
  // PrepareForEnqueue. Prefer starting that transaction with BEGIN
  // IMMEDIATE and a busy timeout, as with any SQLite writer. Do not call
  // other methods of this backend while that transaction is open on the
  // same thread: they would wait for the caller's own write lock.
  Result<EnqueueResult> EnqueueInTransaction(sqlite3* db, const Envelope& env,
                                             const EnqueueOptions& options);

  // Runs `fn` inside a write transaction (BEGIN IMMEDIATE) on one of this
  // object's connections and commits iff it returns OK; any other status,
  // or an exception (reported as kInternal), rolls everything back. For
  // business writes plus EnqueueInTransaction(db, ...). `fn` must not call
  // other methods of this backend (kFailedPrecondition: they would deadlock
  // on the write lock this transaction holds).
  Status RunInTransaction(const std::function<Status(sqlite3* db)>& fn);

  const std::string& path() const;
  // The schema version found (after migration) in the file.
  int schema_version() const;

  // Internal: the implementation shared by the three stores (src/backends/sqlite).
  class Core;

 private:
  explicit SqliteBackend(std::shared_ptr<Core> core);

  std::shared_ptr<Core> core_;
  std::shared_ptr<StoreBackend> queue_;
  std::shared_ptr<LockStore> locks_;
  std::shared_ptr<IdempotencyStore> idempotency_;
  std::shared_ptr<RateLimitStore> rate_limits_;
};

}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SQLITE_SQLITE_BACKEND_H_
