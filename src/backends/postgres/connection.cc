#include "src/backends/postgres/connection.h"

#include "src/internal/names.h"

#include <cstring>
#include <string>
#include <utility>

namespace jobpact {
namespace postgres {
namespace internal {

namespace {

// libpq's messages end with a newline (and sometimes a second line).
std::string Trimmed(const char* text) {
  std::string s = text != nullptr ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

}  // namespace

Status PgError(PGconn* conn, const PGresult* res, std::string_view what,
               const std::string& server) {
  const char* state_c = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string state = state_c != nullptr ? state_c : "";
  std::string message;
  if (res != nullptr) message = Trimmed(PQresultErrorMessage(res));
  if (message.empty() && conn != nullptr) message = Trimmed(PQerrorMessage(conn));
  const std::string where = std::string(what) + ": postgres " + server + ": ";
  const bool lost = conn == nullptr || PQstatus(conn) == CONNECTION_BAD;
  if (lost || state.empty() || state.compare(0, 2, "08") == 0 || state == "57P01" ||
      state == "57P02" || state == "57P03") {
    return Status::Unavailable(where + "connection lost or refused (" + message + ")");
  }
  if (state == "25006") {
    return Status::Unavailable(where +
                               "the server is read-only (a hot standby, or "
                               "default_transaction_read_only is on): " +
                               message);
  }
  if (state == "57014") {
    return Status::DeadlineExceeded(where + "statement timeout or cancel (" + message + ")");
  }
  if (state == "40001" || state == "40P01") {
    return Status::Unavailable(where + "transaction aborted by the server, retry (" + message +
                               ")");
  }
  if (state == "23505") return Status::AlreadyExists(where + message);
  if (state == "42P01" || state == "3F000") {
    return Status::FailedPrecondition(where + "no jobpact schema here (" + message + ")");
  }
  if (state.compare(0, 2, "53") == 0) return Status::ResourceExhausted(where + message);
  return Status::Internal(where + message + " (SQLSTATE " + state + ")");
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::vector<std::string>& keywords,
                                                     const std::vector<std::string>& values,
                                                     const std::string& server) {
  std::vector<const char*> k, v;
  for (const std::string& s : keywords) k.push_back(s.c_str());
  for (const std::string& s : values) v.push_back(s.c_str());
  k.push_back(nullptr);
  v.push_back(nullptr);
  PGconn* conn = PQconnectdbParams(k.data(), v.data(), /*expand_dbname=*/0);
  if (conn == nullptr) return Status::ResourceExhausted("postgres " + server + ": out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string msg = Trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    if (msg.find("password authentication failed") != std::string::npos ||
        (msg.find("database \"") != std::string::npos &&
         msg.find("does not exist") != std::string::npos) ||
        msg.find("no pg_hba.conf entry") != std::string::npos) {
      return Status::FailedPrecondition("postgres " + server + ": " + msg);
    }
    return Status::Unavailable("postgres " + server + ": cannot connect (" + msg + ")");
  }
  // Server notices (NOTICE, WARNING) are not errors; libpq would print them
  // on stderr of the application.
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<Connection>(new Connection(conn, /*owned=*/true, server));
}

std::unique_ptr<Connection> Connection::Borrow(PGconn* conn, const std::string& server) {
  return std::unique_ptr<Connection>(new Connection(conn, /*owned=*/false, server));
}

Connection::~Connection() {
  if (owned_) PQfinish(conn_);
}

Result<PgResult> Connection::Exec(const std::string& sql, const Params& params,
                                  std::string_view what) {
  // Values go to libpq as C strings in text format: a NUL byte would cut a
  // value short without a word, and the server refuses bytes that are not
  // UTF-8 with an error that reads as the store's fault. Both are the
  // caller's input, refused here, before anything is sent.
  for (int i = 0; i < params.size(); ++i) {
    if (params.is_null(i)) continue;
    const std::string& v = params.value(i);
    if (v.find('\0') != std::string::npos || !::jobpact::internal::IsValidUtf8(v)) {
      return Status::InvalidArgument(std::string(what) + ": value $" + std::to_string(i + 1) +
                                     " holds a NUL byte or invalid UTF-8, which PostgreSQL text "
                                     "cannot store");
    }
  }
  const std::vector<const char*> values = params.Pointers();
  PGresult* res = nullptr;
  if (!owned_) {
    res = PQexecParams(conn_, sql.c_str(), params.size(), nullptr, values.data(), nullptr,
                       nullptr, 0);
  } else {
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
      std::string name = "jobpact_" + std::to_string(prepared_.size());
      PgResult prep(PQprepare(conn_, name.c_str(), sql.c_str(), params.size(), nullptr));
      if (PQresultStatus(prep.get()) != PGRES_COMMAND_OK) {
        return PgError(conn_, prep.get(), what, server_);
      }
      it = prepared_.emplace(sql, std::move(name)).first;
    }
    res = PQexecPrepared(conn_, it->second.c_str(), params.size(), values.data(), nullptr,
                         nullptr, 0);
  }
  PgResult out(res);
  const ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PgError(conn_, res, what, server_);
  return out;
}

Result<PgResult> Connection::SimpleResult(const char* sql, std::string_view what) {
  PGresult* res = PQexec(conn_, sql);
  PgResult out(res);
  const ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PgError(conn_, res, what, server_);
  return out;
}

Status Connection::Simple(const char* sql, std::string_view what) {
  return SimpleResult(sql, what).status();
}

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact
