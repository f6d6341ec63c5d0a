#include "src/backends/sqlite/connection.h"

#include <cstring>
#include <fstream>
#include <string>
#include <utility>

namespace jobpact {
namespace sqlite {
namespace internal {

Status SqliteError(int rc, std::string_view what, std::string_view path, sqlite3* db) {
  std::string message(what);
  message += " on ";
  message += path;
  message += ": ";
  // sqlite3_errmsg describes the most recent error of the connection; the
  // generic string is used when there is no connection (open failed early).
  const char* detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  message += detail != nullptr ? detail : "unknown SQLite error";
  message += " (SQLite code ";
  message += std::to_string(rc);
  message += ")";
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(
          "database is locked by another connection for longer than "
          "the busy timeout: " +
          message);
    case SQLITE_IOERR:
      return Status::Unavailable(std::move(message));
    case SQLITE_FULL:
      return Status::ResourceExhausted("database or disk is full, nothing was written: " + message);
    case SQLITE_NOMEM:
      return Status::ResourceExhausted(std::move(message));
    case SQLITE_READONLY:
      return Status::FailedPrecondition(
          "database is read-only (check the permissions of the file and its directory, or "
          "SqliteOptions::read_only), nothing was written: " +
          message);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return Status::FailedPrecondition(std::move(message));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return CorruptionError(path, message);
    case SQLITE_CONSTRAINT:
      return Status::AlreadyExists(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}

Status CorruptionError(std::string_view path, std::string_view detail) {
  std::string message = "database file is corrupt: ";
  message += detail;
  message += ". Stop the processes using ";
  message += path;
  message +=
      ", keep a copy of it, and restore it from a backup (or salvage what is readable "
      "with: sqlite3 <file> .recover)";
  return Status::Internal(std::move(message));
}

namespace {

// A non-empty file that does not start with SQLite's 16-byte header is
// some other kind of file. `file` is the name SQLite resolved (URIs too).
Status CheckHeader(const char* file, const std::string& path) {
  if (file == nullptr || *file == '\0') return Status::Ok();  // Temporary or in-memory.
  static constexpr char kMagic[] = "SQLite format 3";         // 15 chars + NUL = 16 bytes.
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::Ok();  // Missing: SQLite creates it (or reports CANTOPEN).
  char header[sizeof(kMagic)] = {};
  in.read(header, sizeof(header));
  const std::streamsize n = in.gcount();
  if (n == 0) return Status::Ok();  // Empty: a new database.
  if (n == static_cast<std::streamsize>(sizeof(header)) &&
      std::memcmp(header, kMagic, sizeof(header)) == 0) {
    return Status::Ok();
  }
  return Status::FailedPrecondition("not a SQLite database: " + path +
                                    " does not start with the SQLite file header; is it the "
                                    "right file? (it was left unchanged)");
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                     const ConnectionOptions& options) {
  sqlite3* db = nullptr;
  // NOMUTEX: a connection is used by one thread at a time (the pool hands
  // it out), so SQLite's own per-connection mutex would be pure overhead.
  int rc = sqlite3_open_v2(path.c_str(), &db, options.flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(rc, "open", path, db);
    sqlite3_close_v2(db);
    return s;
  }
  std::unique_ptr<Connection> conn(new Connection(db, path, /*owned=*/true));
  // sqlite3_open_v2 has not read the file yet; the first statement below
  // (or the configuration) would, and would call a foreign file NOTADB.
  if (options.check_header) {
    JOBPACT_RETURN_IF_ERROR(CheckHeader(sqlite3_db_filename(db, "main"), path));
  }
  sqlite3_extended_result_codes(db, 1);
  conn->busy_budget_us_ =
      std::chrono::duration_cast<std::chrono::microseconds>(options.busy_timeout).count();
  sqlite3_busy_handler(db, &Connection::BusyHandler, conn.get());
  sqlite3_update_hook(db, &Connection::UpdateHook, conn.get());
  // synchronous is per connection. NORMAL in WAL mode: a commit is durable
  // against a process crash as soon as it is in the WAL (in the page cache);
  // FULL adds an fsync per commit for power loss.
  JOBPACT_RETURN_IF_ERROR(
      conn->Exec(options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
                 "configure"));
  // The schema has no foreign keys; temp data stays in memory. An 8 MiB page
  // cache per connection (default 2 MiB) keeps the hot index pages of a
  // large backlog in memory.
  JOBPACT_RETURN_IF_ERROR(conn->Exec("PRAGMA temp_store=MEMORY", "configure"));
  JOBPACT_RETURN_IF_ERROR(conn->Exec("PRAGMA cache_size=-8192", "configure"));
  if (options.max_page_count > 0) {
    // max_page_count is per connection. A write that would grow the file
    // past it fails with SQLITE_FULL (and rolls back).
    const std::string pragma = "PRAGMA max_page_count=" + std::to_string(options.max_page_count);
    JOBPACT_RETURN_IF_ERROR(conn->Exec(pragma.c_str(), "configure"));
  }
  return conn;
}

std::unique_ptr<Connection> Connection::Borrow(sqlite3* db, std::string path) {
  return std::unique_ptr<Connection>(new Connection(db, std::move(path), /*owned=*/false));
}

Connection::~Connection() {
  for (auto& entry : static_statements_) sqlite3_finalize(entry.second);
  for (auto& entry : dynamic_statements_) sqlite3_finalize(entry.second);
  if (owned_) sqlite3_close_v2(db_);
}

// Waits for another process's lock. SQLite's built-in busy timeout sleeps in
// steps that grow to 100 ms, which lets one process starve the others under
// heavy write contention; short steps hand the lock over quickly. The wait
// is real time (sqlite3_sleep): the lock holder is another process, whose
// progress does not follow the injected clock. The budget is counted in
// slept time, so no clock is read here.
int Connection::BusyHandler(void* self, int count) {
  auto* conn = static_cast<Connection*>(self);
  if (count == 0) conn->busy_waited_us_ = 0;
  if (conn->busy_waited_us_ >= conn->busy_budget_us_) return 0;  // Give up: SQLITE_BUSY.
  const int sleep_ms = count < 20 ? 1 : (count < 100 ? 2 : 5);
  sqlite3_sleep(sleep_ms);
  conn->busy_waited_us_ += sleep_ms * 1000;
  return 1;
}

void Connection::UpdateHook(void* self, int op, const char* db_name, const char* table,
                            sqlite3_int64 /*rowid*/) {
  if (op == SQLITE_INSERT && std::strcmp(table, "jobpact_jobs") == 0 &&
      std::strcmp(db_name, "main") == 0) {
    ++static_cast<Connection*>(self)->jobs_inserted_;
  }
}

Result<std::int64_t> Connection::UsedPages() {
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                           Prepare("SELECT (SELECT page_count FROM pragma_page_count()) - "
                                   "(SELECT freelist_count FROM pragma_freelist_count())"));
  Stmt st(raw);
  const int rc = st.Step();
  if (rc != SQLITE_ROW) return Error(rc, "count pages");
  return st.Int(0);
}

Result<sqlite3_stmt*> Connection::Prepare(const char* sql) {
  auto it = static_statements_.find(sql);
  if (it != static_statements_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, "prepare");
  }
  static_statements_.emplace(sql, stmt);
  return stmt;
}

Result<sqlite3_stmt*> Connection::PrepareDynamic(const std::string& sql) {
  auto it = dynamic_statements_.find(sql);
  if (it != dynamic_statements_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, "prepare");
  }
  dynamic_statements_.emplace(sql, stmt);
  return stmt;
}

Status Connection::Exec(const char* sql, std::string_view what) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, what);
  return Status::Ok();
}

void Connection::RollbackIfOpen() {
  if (sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
