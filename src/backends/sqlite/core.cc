#include "src/backends/sqlite/core.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <utility>

#include "src/backends/sqlite/schema.h"
#include "src/internal/guarded.h"
#include "src/internal/percent_encoding.h"

namespace jobpact {
namespace sqlite {

using internal::Connection;

namespace {

// The Core whose write transaction the current thread is inside, if any.
// Used to refuse re-entry (a transactional effect calling back into the
// backend) with an error instead of a self-deadlock on write_mu_.
thread_local const void* t_writing_core = nullptr;

}  // namespace

Result<std::shared_ptr<SqliteBackend::Core>> SqliteBackend::Core::Open(
    const std::string& path, SqliteOptions options, std::shared_ptr<Clock> clock) {
  if (path.empty()) return Status::InvalidArgument("SqliteBackend::Open: path is empty");
  if (clock == nullptr) return Status::InvalidArgument("SqliteBackend::Open: clock is null");
  if (options.max_connections < 1) {
    return Status::InvalidArgument("SqliteOptions::max_connections must be >= 1, got " +
                                   std::to_string(options.max_connections));
  }
  if (options.busy_timeout < Duration::zero()) {
    return Status::InvalidArgument("SqliteOptions::busy_timeout must be >= 0");
  }
  if (options.max_database_bytes < 0) {
    return Status::InvalidArgument("SqliteOptions::max_database_bytes must be >= 0");
  }
  if (options.drain_reserve_bytes < -1 ||
      (options.max_database_bytes > 0 &&
       options.drain_reserve_bytes >= options.max_database_bytes)) {
    return Status::InvalidArgument(
        "SqliteOptions::drain_reserve_bytes must be -1 (automatic) or in [0, "
        "max_database_bytes), got " +
        std::to_string(options.drain_reserve_bytes));
  }
  std::shared_ptr<Core> core(new Core(path, std::move(options), std::move(clock)));
  {
    std::error_code ec;
    core->canonical_path_ = std::filesystem::weakly_canonical(path, ec);
    if (ec) core->canonical_path_ = std::filesystem::absolute(path, ec);
  }
  {
    std::random_device rd;
    // Not shared yet; the lock costs nothing and keeps the rule simple.
    ::jobpact::internal::MutexLock lock(core->pool_mu_);
    core->token_rng_.seed((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  }
  JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, core->OpenConnection(/*first=*/true));
  {
    // The file SQLite resolved, so that a URI path names the same file as
    // the caller's connection in EnqueueInTransaction.
    const char* file = sqlite3_db_filename(conn->db(), "main");
    std::error_code ec;
    if (file != nullptr && *file != '\0') {
      core->on_disk_ = true;
      std::filesystem::path resolved = std::filesystem::weakly_canonical(file, ec);
      if (!ec) core->canonical_path_ = std::move(resolved);
    }
  }
  JOBPACT_RETURN_IF_ERROR(core->InitBounds(*conn));
  // Before the schema is read or migrated: a damaged file is refused
  // before anything is written to it.
  if (core->options_.quick_check_on_open) JOBPACT_RETURN_IF_ERROR(internal::QuickCheck(*conn));
  JOBPACT_RETURN_IF_ERROR(core->InitSchema(*conn));
  ::jobpact::internal::MutexLock lock(core->pool_mu_);
  core->open_connections_ = 1;
  core->free_.push_back(std::move(conn));
  return core;
}

Result<std::unique_ptr<Connection>> SqliteBackend::Core::OpenConnection(bool first) const {
  internal::ConnectionOptions o;
  // URI: "file:...?mode=ro" and friends work whatever SQLITE_USE_URI the
  // library was built with (a plain path is unaffected).
  o.flags = SQLITE_OPEN_URI | (options_.read_only ? SQLITE_OPEN_READONLY
                                                  : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  o.busy_timeout = options_.busy_timeout;
  o.synchronous_full = options_.synchronous == SqliteOptions::Synchronous::kFull;
  // The first connection learns the page size; InitBounds then bounds it.
  o.max_page_count = first ? 0 : max_pages_;
  o.check_header = first;
  return Connection::Open(path_, o);
}

Status SqliteBackend::Core::InitBounds(Connection& conn) {
  if (options_.max_database_bytes == 0) return Status::Ok();
  // The page size of the file (SQLite's default for a new one, which its
  // first write then uses).
  std::int64_t page_size = 0;
  {
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare("PRAGMA page_size"));
    internal::Stmt st(raw);
    const int rc = st.Step();
    if (rc != SQLITE_ROW) return conn.Error(rc, "open database");
    page_size = st.Int(0);
  }
  if (page_size <= 0) page_size = 4096;
  max_pages_ = std::max<std::int64_t>(1, options_.max_database_bytes / page_size);
  const std::int64_t reserve_bytes = options_.drain_reserve_bytes >= 0
                                         ? options_.drain_reserve_bytes
                                         : options_.max_database_bytes / 3;
  const std::int64_t reserve_pages = (reserve_bytes + page_size - 1) / page_size;
  enqueue_max_pages_ = std::max<std::int64_t>(1, max_pages_ - reserve_pages);
  const std::string pragma = "PRAGMA max_page_count=" + std::to_string(max_pages_);
  return conn.Exec(pragma.c_str(), "open database");
}

Status SqliteBackend::Core::CheckEnqueueRoom(Connection& conn, std::string_view what) {
  if (max_pages_ == 0) return Status::Ok();
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t used, conn.UsedPages());
  if (used <= enqueue_max_pages_) return Status::Ok();
  return Status::ResourceExhausted(
      "database is full: " + std::string(what) + " on " + path_ +
      " refused, nothing was written: storing the new job(s) would use " + std::to_string(used) +
      " pages, past the " + std::to_string(enqueue_max_pages_) + " of the " +
      std::to_string(max_pages_) +
      "-page bound (SqliteOptions::max_database_bytes) open to new jobs; the rest is kept so "
      "that the jobs already stored can be delivered and completed "
      "(SqliteOptions::drain_reserve_bytes). Enqueues resume when finished jobs are purged");
}

Status SqliteBackend::Core::InitSchema(Connection& conn) {
  // SQLITE_OPEN_READWRITE silently falls back to read-only when the file
  // cannot be written; say so now rather than at the first write.
  if (!options_.read_only && sqlite3_db_readonly(conn.db(), "main") == 1) {
    return Status::FailedPrecondition(
        "database " + path_ +
        " is read-only (file or directory permissions, a read-only mount, or mode=ro or "
        "immutable=1 in a file: URI); jobpact needs write access. "
        "Use SqliteOptions::read_only to open it for inspection.");
  }
  Result<int> version = internal::CheckAndMigrate(conn, options_);
  if (!version.ok()) return version.status();
  schema_version_ = *version;
  return Status::Ok();
}

Result<SqliteBackend::Core::PooledConnection> SqliteBackend::Core::Acquire() {
  {
    ::jobpact::internal::MutexLock lock(pool_mu_);
    while (true) {
      if (!free_.empty()) {
        std::unique_ptr<Connection> conn = std::move(free_.back());
        free_.pop_back();
        return PooledConnection(this, std::move(conn));
      }
      if (open_connections_ < options_.max_connections) {
        ++open_connections_;  // Taken now; opened below, without the lock.
        break;
      }
      // Not a timed wait: a connection comes back as soon as the thread
      // using it finishes its statement or transaction.
      pool_cv_.Wait(pool_mu_);
    }
  }
  Result<std::unique_ptr<Connection>> conn = OpenConnection(/*first=*/false);
  if (!conn.ok()) {
    ::jobpact::internal::MutexLock lock(pool_mu_);
    --open_connections_;
    pool_cv_.NotifyOne();
    return conn.status();
  }
  return PooledConnection(this, std::move(*conn));
}

void SqliteBackend::Core::Return(std::unique_ptr<Connection> conn) {
  ::jobpact::internal::MutexLock lock(pool_mu_);
  free_.push_back(std::move(conn));
  pool_cv_.NotifyOne();
}

void SqliteBackend::Core::Forget() {
  ::jobpact::internal::MutexLock lock(pool_mu_);
  --open_connections_;
  pool_cv_.NotifyOne();  // A waiter may open a new one in its place.
}

namespace {

// Ends a failed transaction so that nothing of it outlives the call. After
// SQLITE_FULL, checkpoints the WAL (PASSIVE: never waits): on a full disk
// the next writer can then restart the WAL from its beginning and reuse its
// space instead of growing it. A connection still inside a transaction
// after the rollback is discarded rather than pooled, so one failure cannot
// wedge later calls.
void CleanUpAfterFailure(SqliteBackend::Core::PooledConnection& conn) {
  conn->RollbackIfOpen();
  if (conn->TakeFull()) {
    sqlite3_wal_checkpoint_v2(conn->db(), "main", SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  }
  if (sqlite3_get_autocommit(conn->db()) == 0) conn.Discard();
}

}  // namespace

Status SqliteBackend::Core::Write(std::string_view what,
                                  const std::function<Status(Connection&)>& fn) {
  if (t_writing_core == this) {
    return Status::FailedPrecondition(
        std::string(what) +
        ": called from inside a write transaction of the same SQLite backend (a transactional "
        "effect or RunInTransaction callback); use the sqlite3* handle it was given instead");
  }
  if (options_.read_only) {
    return Status::FailedPrecondition(std::string(what) + " on " + path_ +
                                      ": the database was opened read-only "
                                      "(SqliteOptions::read_only); nothing was written");
  }
  return ::jobpact::internal::Guarded(what, [&]() -> Status {
    // The write mutex first, then a connection: threads queued for the
    // write lock then hold no connection, so readers are never starved of
    // connections by waiting writers.
    ::jobpact::internal::MutexLock write_lock(write_mu_);
    JOBPACT_ASSIGN_OR_RETURN(PooledConnection conn, Acquire());
    JOBPACT_RETURN_IF_ERROR(conn->Exec("BEGIN IMMEDIATE", what));
    const std::int64_t jobs_inserted_before = conn->jobs_inserted();
    t_writing_core = this;
    Status status;
    try {
      status = fn(*conn);
    } catch (const std::exception& e) {
      status =
          Status::Internal(std::string(what) + ": exception inside the transaction: " + e.what());
    } catch (...) {
      status =
          Status::Internal(std::string(what) + ": non-standard exception inside the transaction");
    }
    t_writing_core = nullptr;
    if (status.ok()) {
      if (sqlite3_get_autocommit(conn->db()) != 0) {
        // Something inside ended our transaction (e.g. a stray COMMIT or
        // ROLLBACK in a transactional effect): atomicity is lost, say so.
        return Status::Internal(std::string(what) +
                                ": the transaction was ended from inside the callback");
      }
      // New jobs must leave the drain reserve free (see drain_reserve_bytes);
      // everything else may use it.
      if (conn->jobs_inserted() != jobs_inserted_before) status = CheckEnqueueRoom(*conn, what);
      if (status.ok()) status = conn->Exec("COMMIT", what);
    }
    if (!status.ok()) CleanUpAfterFailure(conn);
    return status;
  });
}

Status SqliteBackend::Core::Read(std::string_view what, bool snapshot,
                                 const std::function<Status(Connection&)>& fn) {
  return ::jobpact::internal::Guarded(what, [&]() -> Status {
    JOBPACT_ASSIGN_OR_RETURN(PooledConnection conn, Acquire());
    if (!snapshot) return fn(*conn);
    JOBPACT_RETURN_IF_ERROR(conn->Exec("BEGIN", what));
    Status status = fn(*conn);
    if (status.ok()) status = conn->Exec("COMMIT", what);
    if (!status.ok()) CleanUpAfterFailure(conn);
    return status;
  });
}

std::string SqliteBackend::Core::NewNonce() {
  std::uint64_t r;
  {
    ::jobpact::internal::MutexLock lock(pool_mu_);
    r = token_rng_();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce(16, '0');
  for (int i = 0; i < 16; ++i) nonce[i] = kHex[(r >> (i * 4)) & 0xf];
  return nonce;
}

Result<bool> SqliteBackend::Core::WaitForChange(Duration timeout) {
  if (!on_disk_) {
    return Status::Unimplemented("WaitForWork: " + path_ +
                                 " is an in-memory database: no other process writes it");
  }
  return change_fanout_.Wait(timeout, [&](Duration left) -> Result<bool> {
    return ::jobpact::internal::Guarded("WaitForWork", [&]() -> Result<bool> {
      if (change_watch_ == nullptr) {
        JOBPACT_ASSIGN_OR_RETURN(change_watch_, internal::ChangeWatch::Create(canonical_path_));
        return true;  // Commits before the watch began were not seen: look once.
      }
      return change_watch_->Wait(left);
    });
  });
}

// --- SqliteBackend ---

Result<std::shared_ptr<SqliteBackend>> SqliteBackend::Open(const std::string& path,
                                                           SqliteOptions options,
                                                           std::shared_ptr<Clock> clock) {
  Result<std::shared_ptr<SqliteBackend>> out = Status::Internal("SqliteBackend::Open");
  Status s = ::jobpact::internal::Guarded("SqliteBackend::Open", [&]() -> Status {
    JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<Core> core,
                             Core::Open(path, std::move(options), std::move(clock)));
    out = std::shared_ptr<SqliteBackend>(new SqliteBackend(std::move(core)));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

SqliteBackend::SqliteBackend(std::shared_ptr<Core> core)
    : core_(std::move(core)),
      queue_(Core::MakeQueue(core_)),
      locks_(Core::MakeLocks(core_)),
      idempotency_(Core::MakeIdempotency(core_)),
      rate_limits_(Core::MakeRateLimits(core_)) {
  core_->own_locks = locks_.get();
  core_->own_idempotency = idempotency_.get();
}

SqliteBackend::~SqliteBackend() = default;

BackendBundle SqliteBackend::bundle() const {
  BackendBundle b;
  b.queue = queue_;
  b.admin = queue_;
  b.locks = locks_;
  b.idempotency = idempotency_;
  b.rate_limits = rate_limits_;
  b.name = "sqlite";
  const std::string& p = core_->path();
  if (p.compare(0, 5, "file:") == 0) {
    b.url = p;  // Already a URL (SQLite's URI form).
  } else {
    b.url = (p.empty() || p[0] != '/' ? "sqlite:" : "sqlite://") +
            jobpact::internal::PercentEncodePath(p);
  }
  return b;
}

const std::string& SqliteBackend::path() const { return core_->path(); }
int SqliteBackend::schema_version() const { return core_->schema_version(); }

Result<EnqueueResult> SqliteBackend::EnqueueInTransaction(sqlite3* db, const Envelope& env,
                                                          const EnqueueOptions& options) {
  Result<EnqueueResult> out = Status::Internal("EnqueueInTransaction");
  Status s = ::jobpact::internal::Guarded("EnqueueInTransaction", [&]() -> Status {
    if (db == nullptr) return Status::InvalidArgument("EnqueueInTransaction: db is null");
    if (sqlite3_get_autocommit(db) != 0) {
      return Status::FailedPrecondition(
          "EnqueueInTransaction: no transaction is open on the caller's connection; the job "
          "would not be tied to the caller's commit (BEGIN IMMEDIATE first)");
    }
    // The caller's connection must be on this backend's file, or the job
    // would land in a database nobody reads from.
    const char* file = sqlite3_db_filename(db, "main");
    if (file == nullptr || *file == '\0') {
      return Status::FailedPrecondition(
          "EnqueueInTransaction: the caller's connection is on a temporary or in-memory "
          "database, not on " +
          core_->path());
    }
    std::error_code ec;
    const std::filesystem::path caller_file = std::filesystem::weakly_canonical(file, ec);
    if (ec || caller_file != core_->canonical_path()) {
      return Status::FailedPrecondition(
          std::string("EnqueueInTransaction: the caller's connection is on ") + file +
          ", not on this backend's database " + core_->path());
    }
    std::unique_ptr<Connection> conn = Connection::Borrow(db, file);
    // The caller's file must hold the jobpact schema (the same file as this
    // backend's); otherwise the job would land nowhere we read from.
    JOBPACT_ASSIGN_OR_RETURN(int version, internal::ReadSchemaVersion(*conn));
    if (version != kSchemaVersion) {
      return Status::FailedPrecondition(
          "EnqueueInTransaction: the caller's database " + conn->path() +
          " does not hold a jobpact schema of version " + std::to_string(kSchemaVersion) +
          " (found " + std::to_string(version) + "); open it with SqliteBackend::Open first");
    }
    // Inside a savepoint, so that a refused enqueue (no room, a failed
    // insert) leaves the caller's transaction as it was.
    JOBPACT_RETURN_IF_ERROR(conn->Exec("SAVEPOINT jobpact_enqueue", "EnqueueInTransaction"));
    Result<std::vector<EnqueueResult>> results = core_->EnqueueOn(*conn, {&env}, options);
    Status status = results.status();
    if (status.ok() && !results->front().duplicate) {
      status = core_->CheckEnqueueRoom(*conn, "EnqueueInTransaction");
    }
    if (!status.ok()) {
      // Fails harmlessly if SQLite already rolled the whole transaction
      // back (e.g. after SQLITE_FULL): then there is nothing left to undo.
      sqlite3_exec(db, "ROLLBACK TO jobpact_enqueue; RELEASE jobpact_enqueue", nullptr, nullptr,
                   nullptr);
      return status;
    }
    JOBPACT_RETURN_IF_ERROR(conn->Exec("RELEASE jobpact_enqueue", "EnqueueInTransaction"));
    out = std::move(results->front());
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status SqliteBackend::RunInTransaction(const std::function<Status(sqlite3* db)>& fn) {
  if (!fn) return Status::InvalidArgument("RunInTransaction: fn is empty");
  return core_->Write("RunInTransaction", [&](Connection& conn) { return fn(conn.db()); });
}

}  // namespace sqlite
}  // namespace jobpact
