// Private to the SQLite backend: thin RAII wrappers over sqlite3 handles, the
// mapping from SQLite result codes to Status, and time encoding.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_CONNECTION_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_CONNECTION_H_

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "jobpact/clock.h"
#include "jobpact/result.h"
#include "jobpact/status.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// Times and durations are stored as integer nanoseconds since the Unix epoch
// (src/internal/time_ns.h), so comparisons in SQL are integer comparisons.
using ::jobpact::internal::DurationFromNs;
using ::jobpact::internal::TimeFromNs;
using ::jobpact::internal::ToNs;

// Maps a SQLite result code to a Status whose message names `what` (the
// operation), the database `path` and SQLite's own message:
//   BUSY, LOCKED, IOERR    -> kUnavailable (another process holds the lock;
//                             a transient I/O error): retry with backoff.
//   FULL                   -> kResourceExhausted "database or disk is full".
//   READONLY               -> kFailedPrecondition "database is read-only".
//   CORRUPT, NOTADB        -> CorruptionError (kInternal "database file is
//                             corrupt"): a damaged file, found at open or by
//                             any later statement that reads a bad page.
//   CANTOPEN, PERM, AUTH   -> kFailedPrecondition.
//   CONSTRAINT             -> kAlreadyExists.
//   NOMEM                  -> kResourceExhausted.
//   anything else (MISUSE, ...) -> kInternal.
// A file that is not SQLite at all is told apart before SQLite reads it
// (ConnectionOptions::check_header), so NOTADB here means damage.
Status SqliteError(int rc, std::string_view what, std::string_view path, sqlite3* db);

// The one error for a damaged database file, whoever finds the damage:
// kInternal (status.h has no data-loss code; the message says what it is),
// "database file is corrupt: <detail>", naming `path` and what to do.
Status CorruptionError(std::string_view path, std::string_view detail);

// How Connection::Open opens and configures a connection.
struct ConnectionOptions {
  // sqlite3_open_v2 flags (SQLITE_OPEN_NOMUTEX is always added).
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  // Real-time budget of one wait for another connection's lock.
  Duration busy_timeout = std::chrono::seconds(5);
  bool synchronous_full = false;
  // PRAGMA max_page_count; 0 keeps SQLite's default (no practical bound).
  std::int64_t max_page_count = 0;
  // Refuse, before SQLite reads it, a non-empty file that does not start
  // with the SQLite header: kFailedPrecondition "not a SQLite database"
  // (the wrong file, rather than a damaged one). For the first connection
  // of a backend; later ones would report such a file as corrupt.
  bool check_header = false;
};

// A prepared statement in use: Bind*, Step, Column*; reset (and its bindings
// cleared) when the scope ends so the cached statement can be reused.
// Not thread-safe (belongs to one connection).
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() {
    if (stmt_ != nullptr) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }

  // Binding by 1-based index. Strings are copied (SQLITE_TRANSIENT) so that
  // temporaries may be bound.
  Stmt& Bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<std::int64_t>(v)); }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) { return Bind(i, std::string_view(v)); }
  Stmt& Bind(int i, const char* v) { return Bind(i, std::string_view(v)); }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // Binds NULL for an empty string (used for optional keys).
  Stmt& BindOrNull(int i, std::string_view v) { return v.empty() ? BindNull(i) : Bind(i, v); }
  Stmt& BindOrNull(int i, const std::optional<std::int64_t>& v) {
    return v ? Bind(i, *v) : BindNull(i);
  }

  // SQLITE_ROW, SQLITE_DONE, or an error code.
  int Step() { return sqlite3_step(stmt_); }

  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    if (p == nullptr) return std::string();
    return std::string(reinterpret_cast<const char*>(p),
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
  }
  std::optional<std::int64_t> OptInt(int col) const {
    if (IsNull(col)) return std::nullopt;
    return Int(col);
  }

  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

// One SQLite connection with its cache of prepared statements. Owns the
// handle unless built with Borrow() (the caller's connection in
// EnqueueInTransaction). Not thread-safe: used by one thread at a time.
class Connection {
 public:
  // Opens `path` (a file name or an SQLite "file:" URI) and configures it:
  // extended result codes, the busy handler, synchronous mode, the page
  // bound and the hook behind jobs_inserted(). Does not touch the schema.
  static Result<std::unique_ptr<Connection>> Open(const std::string& path,
                                                  const ConnectionOptions& options);
  // Wraps a handle owned by someone else; the statements prepared on it are
  // finalized when this object goes, the handle is left open.
  static std::unique_ptr<Connection> Borrow(sqlite3* db, std::string path);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  sqlite3* db() const { return db_; }
  const std::string& path() const { return path_; }

  // The cached prepared statement for `sql` (prepared on first use), keyed
  // by the text's address: no hashing or copying of the SQL on the hot path.
  // REQUIRES: `sql` has static storage (a literal or a function-local static).
  Result<sqlite3_stmt*> Prepare(const char* sql);
  // The same for SQL built at run time, keyed by its content.
  Result<sqlite3_stmt*> PrepareDynamic(const std::string& sql);

  // Runs SQL text with no results (BEGIN, COMMIT, DDL). Error statuses name
  // `what`.
  Status Exec(const char* sql, std::string_view what);

  // Error status for `rc` on this connection. Remembers a SQLITE_FULL for
  // TakeFull().
  Status Error(int rc, std::string_view what) const {
    if ((rc & 0xff) == SQLITE_FULL) saw_full_ = true;
    return SqliteError(rc, what, path_, db_);
  }

  // Whether an Error() since the last call was SQLITE_FULL; clears it.
  bool TakeFull() { return std::exchange(saw_full_, false); }

  // Rows inserted into jobpact_jobs through this connection so far
  // (committed or not): a transaction adds jobs iff it moves this counter.
  // Counted by SQLite's update hook on owned connections only (a borrowed
  // handle keeps its owner's hook); always 0 on a borrowed one.
  std::int64_t jobs_inserted() const { return jobs_inserted_; }

  // Pages in use: page_count minus the free list, i.e. what the stored data
  // occupies, inside the current transaction if one is open. Free pages
  // (left by deletes) are reused before the file grows.
  Result<std::int64_t> UsedPages();

  // Rolls back the open transaction, if any (SQLite may already have rolled
  // it back itself, e.g. after SQLITE_FULL).
  void RollbackIfOpen();

 private:
  Connection(sqlite3* db, std::string path, bool owned)
      : db_(db), path_(std::move(path)), owned_(owned) {}

  static int BusyHandler(void* self, int count);
  static void UpdateHook(void* self, int op, const char* db_name, const char* table,
                         sqlite3_int64 rowid);

  sqlite3* db_;
  std::string path_;
  bool owned_;
  std::int64_t busy_budget_us_ = 0;  // Real-time budget of one busy wait.
  std::int64_t busy_waited_us_ = 0;  // Slept so far in the current wait.
  std::int64_t jobs_inserted_ = 0;   // See jobs_inserted().
  mutable bool saw_full_ = false;    // See TakeFull().
  std::unordered_map<const char*, sqlite3_stmt*> static_statements_;
  std::unordered_map<std::string, sqlite3_stmt*> dynamic_statements_;
};

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

// JOBPACT_RETURN_IF_ERROR for a call whose argument is a lambda that itself
// uses JOBPACT_RETURN_IF_ERROR (a transaction body): a distinct variable name
// keeps -Wshadow quiet.
#define JOBPACT_SQLITE_RETURN_IF_ERROR(expr)                         \
  do {                                                               \
    ::jobpact::Status jobpact_sqlite_status_ = (expr);               \
    if (!jobpact_sqlite_status_.ok()) return jobpact_sqlite_status_; \
  } while (0)

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_CONNECTION_H_
