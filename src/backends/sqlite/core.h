// Private to the SQLite backend: the state shared by the three stores of one
// SqliteBackend (the connection pool, the in-process write mutex, the clock),
// and the factories of the three store views.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_CORE_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_CORE_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_backend.h"
#include "jobpact/result.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/status.h"
#include "src/backends/sqlite/change_watch.h"
#include "src/backends/sqlite/connection.h"
#include "src/internal/mutex.h"
#include "src/internal/wake_fanout.h"

namespace jobpact {
namespace sqlite {

// Thread-safe.
class SqliteBackend::Core {
 public:
  // Opens the file, checks and migrates the schema (see SqliteBackend::Open).
  static Result<std::shared_ptr<Core>> Open(const std::string& path, SqliteOptions options,
                                            std::shared_ptr<Clock> clock);

  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // A connection taken from the pool; returned to it on destruction.
  class PooledConnection {
   public:
    PooledConnection(Core* core, std::unique_ptr<internal::Connection> conn)
        : core_(core), conn_(std::move(conn)) {}
    PooledConnection(PooledConnection&&) = default;
    ~PooledConnection() {
      if (conn_) core_->Return(std::move(conn_));
    }
    internal::Connection& operator*() const { return *conn_; }
    internal::Connection* operator->() const { return conn_.get(); }

    // Closes the connection instead of returning it to the pool (one left
    // in an unknown state must not be handed to the next caller).
    void Discard() {
      conn_.reset();
      core_->Forget();
    }

   private:
    Core* core_;
    std::unique_ptr<internal::Connection> conn_;
  };

  // A free connection (opening one if fewer than max_connections exist,
  // waiting for one otherwise).
  Result<PooledConnection> Acquire();

  // Runs `fn` in a write transaction (BEGIN IMMEDIATE ... COMMIT) and
  // commits iff it returns OK; rolls back otherwise. Exceptions from `fn`
  // (a user's transactional effect) become kInternal after the rollback.
  // kFailedPrecondition when called from inside another Write of this Core
  // on the same thread (it would deadlock on the write mutex).
  // With a size bound, a transaction that inserted jobs is rolled back with
  // kResourceExhausted if it leaves less than the drain reserve free
  // (CheckEnqueueRoom); after SQLITE_FULL the WAL is checkpointed, so that
  // on a real full disk the next transactions reuse the WAL's space.
  Status Write(std::string_view what, const std::function<Status(internal::Connection&)>& fn);

  // Runs `fn` on a pooled connection with no explicit transaction (each
  // statement is its own consistent snapshot). With `snapshot`, inside
  // BEGIN ... COMMIT so that several statements see one snapshot.
  Status Read(std::string_view what, bool snapshot,
              const std::function<Status(internal::Connection&)>& fn);

  TimePoint Now() const { return clock_->Now(); }
  const std::shared_ptr<Clock>& clock() const { return clock_; }
  const std::string& path() const { return path_; }
  const std::filesystem::path& canonical_path() const { return canonical_path_; }
  const SqliteOptions& options() const { return options_; }
  int schema_version() const { return schema_version_; }

  // kResourceExhausted if the pages in use on `conn` (inside its open
  // transaction) exceed the bound minus the drain reserve; OK without a
  // bound. For transactions that add jobs.
  Status CheckEnqueueRoom(internal::Connection& conn, std::string_view what);

  // QueueBackend::WaitForWork: blocks up to `timeout` until any connection,
  // in any process, commits to the file (a ChangeWatch on its WAL, shared
  // by this Core's idle workers). The first call starts the watch and
  // returns true at once: writes before it were not watched. kUnimplemented
  // for an in-memory database or where the watch cannot be set up.
  Result<bool> WaitForChange(Duration timeout);

  // 16 random hex digits (lease token nonces).
  std::string NewNonce();

  // The views. Each holds a shared_ptr to the Core.
  static std::shared_ptr<StoreBackend> MakeQueue(std::shared_ptr<Core> core);
  static std::shared_ptr<LockStore> MakeLocks(std::shared_ptr<Core> core);
  static std::shared_ptr<IdempotencyStore> MakeIdempotency(std::shared_ptr<Core> core);
  static std::shared_ptr<RateLimitStore> MakeRateLimits(std::shared_ptr<Core> core);

  // The LockStore and IdempotencyStore that SqliteBackend made on this Core:
  // those whose rows the queue's completion writes release and record
  // (Completion::guards). Set once by SqliteBackend's constructor, before
  // the Core is shared with any other thread.
  const LockStore* own_locks = nullptr;
  const IdempotencyStore* own_idempotency = nullptr;

  // Enqueue through any connection that is inside a write transaction (ours
  // or the caller's).
  Result<std::vector<EnqueueResult>> EnqueueOn(internal::Connection& conn,
                                               const std::vector<const Envelope*>& envs,
                                               const EnqueueOptions& options);

 private:
  Core(std::string path, SqliteOptions options, std::shared_ptr<Clock> clock)
      : path_(std::move(path)), options_(std::move(options)), clock_(std::move(clock)) {}

  Result<std::unique_ptr<internal::Connection>> OpenConnection(bool first) const;
  // Sets the page bounds from the file's page size (called once by Open).
  Status InitBounds(internal::Connection& conn);
  Status InitSchema(internal::Connection& conn);
  void Return(std::unique_ptr<internal::Connection> conn);
  // Accounts for a connection closed by PooledConnection::Discard().
  void Forget();

  // Immutable after construction.
  const std::string path_;
  const SqliteOptions options_;
  const std::shared_ptr<Clock> clock_;
  int schema_version_ = 0;                // Set once by Open().
  std::filesystem::path canonical_path_;  // Set once by Open().
  bool on_disk_ = false;                  // Set once by Open(): not an in-memory database.
  // Bounds in pages (0: unbounded), set once by Open(): the hard bound
  // (max_page_count) and the most pages a transaction adding jobs may leave
  // in use (the hard bound minus the drain reserve).
  std::int64_t max_pages_ = 0;
  std::int64_t enqueue_max_pages_ = 0;

  // Serializes this process's writers, so that they hand the SQLite write
  // lock over in-process instead of polling the file lock.
  // It guards no memory: the SQLite write lock is what it hands over.
  ::jobpact::internal::PlainMutex write_mu_;

  // WaitForChange: one thread at a time waits on the watch.
  ::jobpact::internal::WakeFanout change_fanout_;
  std::unique_ptr<internal::ChangeWatch> change_watch_;  // Used by the waiting thread only.

  ::jobpact::internal::PlainMutex pool_mu_;
  ::jobpact::internal::CondVar pool_cv_;  // A connection came back or closed.
  std::vector<std::unique_ptr<internal::Connection>> free_ JOBPACT_GUARDED_BY(pool_mu_);
  int open_connections_ JOBPACT_GUARDED_BY(pool_mu_) = 0;
  std::mt19937_64 token_rng_ JOBPACT_GUARDED_BY(pool_mu_);
};

}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_CORE_H_
