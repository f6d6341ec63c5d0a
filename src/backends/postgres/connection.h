// Private to the PostgreSQL backend: one libpq connection, parameterised
// statements (prepared once per connection), results, and the one mapping
// of server errors to Status codes.
#ifndef JOBPACT_SRC_BACKENDS_POSTGRES_CONNECTION_H_
#define JOBPACT_SRC_BACKENDS_POSTGRES_CONNECTION_H_

#include <libpq-fe.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {
namespace postgres {
namespace internal {

// The parameters of one statement, in order ($1, $2, ...), all sent as text
// (the server parses them by the type it infers). Never part of the SQL.
class Params {
 public:
  Params() { values_.reserve(32); }
  Params& Add(std::string_view v) {
    values_.emplace_back(v);
    null_.push_back(false);
    return *this;
  }
  Params& Add(const char* v) { return Add(std::string_view(v)); }
  Params& Add(std::int64_t v) { return Add(std::string_view(std::to_string(v))); }
  Params& Add(int v) { return Add(static_cast<std::int64_t>(v)); }
  Params& Null() {
    values_.emplace_back();
    null_.push_back(true);
    return *this;
  }
  // NULL for an empty string.
  Params& AddOrNull(std::string_view v) { return v.empty() ? Null() : Add(v); }
  int size() const { return static_cast<int>(values_.size()); }
  const std::string& value(int i) const { return values_[static_cast<std::size_t>(i)]; }
  bool is_null(int i) const { return null_[static_cast<std::size_t>(i)]; }
  // Pointers for libpq (valid while this object lives and is not changed).
  std::vector<const char*> Pointers() const {
    std::vector<const char*> p(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) p[i] = null_[i] ? nullptr : values_[i].c_str();
    return p;
  }

 private:
  std::vector<std::string> values_;
  std::vector<bool> null_;
};

// An owned PGresult.
class PgResult {
 public:
  PgResult() = default;
  explicit PgResult(PGresult* r) : r_(r, &PQclear) {}
  const PGresult* get() const { return r_.get(); }
  int rows() const { return r_ ? PQntuples(r_.get()) : 0; }
  bool IsNull(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string Text(int row, int col) const {
    return std::string(PQgetvalue(r_.get(), row, col),
                       static_cast<std::size_t>(PQgetlength(r_.get(), row, col)));
  }
  std::int64_t Int(int row, int col) const {
    return std::strtoll(PQgetvalue(r_.get(), row, col), nullptr, 10);
  }
  // Rows an INSERT/UPDATE/DELETE touched.
  std::int64_t affected() const {
    const char* n = r_ ? PQcmdTuples(r_.get()) : "";
    return *n == '\0' ? 0 : std::strtoll(n, nullptr, 10);
  }

 private:
  std::shared_ptr<PGresult> r_;
};

// One row of a result, with the accessors the shared row codec takes
// (src/internal/job_row_codec.h).
class PgRow {
 public:
  PgRow(const PgResult& r, int row) : r_(&r), row_(row) {}
  bool IsNull(int col) const { return r_->IsNull(row_, col); }
  std::int64_t Int(int col) const { return r_->Int(row_, col); }
  std::string Text(int col) const { return r_->Text(row_, col); }

 private:
  const PgResult* r_;
  int row_;
};

// The Status of a failed statement (or a failed connect with res null):
//   a lost connection, a server shutting down or starting, a read-only
//   server, a serialization failure or deadlock: kUnavailable (retryable);
//   a statement timeout or cancel: kDeadlineExceeded; a unique violation:
//   kAlreadyExists; no such schema or table: kFailedPrecondition; out of
//   resources: kResourceExhausted; anything else kInternal. Each message
//   starts with `what` and names `server`.
Status PgError(PGconn* conn, const PGresult* res, std::string_view what,
               const std::string& server);

// One connection. Owned ones (the pool's) prepare each distinct statement
// once; a borrowed one (the caller's, for EnqueueInTransaction) runs
// unnamed statements and is never closed. Not thread-safe.
class Connection {
 public:
  // Connects with libpq keyword/value parameters (no connection string is
  // built, so no value can change another's meaning).
  static Result<std::unique_ptr<Connection>> Open(const std::vector<std::string>& keywords,
                                                  const std::vector<std::string>& values,
                                                  const std::string& server);
  static std::unique_ptr<Connection> Borrow(PGconn* conn, const std::string& server);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  PGconn* raw() const { return conn_; }
  const std::string& server() const { return server_; }

  // Runs one parameterised statement. The SQL text must not hold any
  // value: every value is a parameter.
  Result<PgResult> Exec(const std::string& sql, const Params& params, std::string_view what);
  // Runs a statement without parameters (BEGIN, COMMIT, SAVEPOINT, DDL).
  Status Simple(const char* sql, std::string_view what);
  Result<PgResult> SimpleResult(const char* sql, std::string_view what);

  // The connection is gone (it must not go back to the pool).
  bool broken() const { return PQstatus(conn_) == CONNECTION_BAD; }
  PGTransactionStatusType tx_status() const { return PQtransactionStatus(conn_); }

 private:
  Connection(PGconn* conn, bool owned, std::string server)
      : conn_(conn), owned_(owned), server_(std::move(server)) {}

  PGconn* const conn_;
  const bool owned_;
  const std::string server_;
  // Statement text -> prepared statement name (owned connections only).
  std::unordered_map<std::string, std::string> prepared_;
};

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact

// JOBPACT_RETURN_IF_ERROR for a statement whose argument holds a lambda that
// uses JOBPACT_RETURN_IF_ERROR itself (a distinct variable, so no shadowing).
#define JOBPACT_PG_RETURN_IF_ERROR(expr)                         \
  do {                                                           \
    ::jobpact::Status jobpact_pg_status_ = (expr);               \
    if (!jobpact_pg_status_.ok()) return jobpact_pg_status_;     \
  } while (0)

#endif  // JOBPACT_SRC_BACKENDS_POSTGRES_CONNECTION_H_
