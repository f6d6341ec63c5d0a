#include "src/backends/postgres/core.h"

#include <poll.h>

#include <algorithm>
#include <exception>
#include <random>
#include <string>
#include <utility>

#include "src/internal/guarded.h"

namespace jobpact {
namespace postgres {

using internal::Connection;
using internal::PgResult;

namespace {

long long ToMillis(Duration d) {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

namespace internal {

Status CheckSchemaName(const std::string& s) {
  bool ok = !s.empty() && s.size() <= 48 && !(s[0] >= '0' && s[0] <= '9') &&
            s.compare(0, 3, "pg_") != 0;
  for (char c : s) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (ok) return Status::Ok();
  return Status::InvalidArgument(
      "PostgresOptions::schema must be 1 to 48 characters of [a-z0-9_], not starting with a "
      "digit or \"pg_\"");
}

}  // namespace internal

PostgresBackend::Core::Core(PostgresOptions options, std::shared_ptr<Clock> clock)
    : options_(std::move(options)), clock_(std::move(clock)), real_clock_(SystemClock::Default()) {
  std::random_device rd;
  rng_.seed((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
}

PostgresBackend::Core::~Core() = default;

Result<std::shared_ptr<PostgresBackend::Core>> PostgresBackend::Core::Open(
    const PostgresOptions& o, std::shared_ptr<Clock> clock) {
  if (clock == nullptr) return Status::InvalidArgument("PostgresBackend::Open: the clock is null");
  JOBPACT_RETURN_IF_ERROR(internal::CheckSchemaName(o.schema));
  std::string bad;
  if (o.host.empty()) {
    bad = "host must not be empty";
  } else if (o.port < 1 || o.port > 65535) {
    bad = "port must be in [1, 65535], got " + std::to_string(o.port);
  } else if (o.database.empty()) {
    bad = "database must not be empty";
  } else if (o.pool_size < 1) {
    bad = "pool_size must be >= 1, got " + std::to_string(o.pool_size);
  } else if (o.connect_timeout <= Duration::zero()) {
    bad = "connect_timeout must be > 0";
  } else if (o.statement_timeout < Duration::zero()) {
    bad = "statement_timeout must be >= 0";
  } else if (o.reconnect_backoff_min <= Duration::zero()) {
    bad = "reconnect_backoff_min must be > 0";
  } else if (o.reconnect_backoff_max < o.reconnect_backoff_min) {
    bad = "reconnect_backoff_max must be >= reconnect_backoff_min";
  } else if (o.idempotency_retention <= Duration::zero()) {
    bad = "idempotency_retention must be > 0";
  }
  if (!bad.empty()) return Status::InvalidArgument("PostgresOptions::" + bad);

  std::shared_ptr<Core> core(new Core(o, std::move(clock)));
  const bool v6 = o.host.find(':') != std::string::npos;
  core->server_ = (v6 ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.port) + "/" +
                  o.database;
  core->quoted_schema_ = "\"" + o.schema + "\"";
  core->channel_ = "jobpact_" + o.schema;
  auto add = [&](const char* k, const std::string& v) {
    core->keywords_.emplace_back(k);
    core->values_.push_back(v);
  };
  add("host", o.host);
  add("port", std::to_string(o.port));
  add("dbname", o.database);
  if (!o.user.empty()) add("user", o.user);
  if (!o.password.empty()) add("password", o.password);
  const long long secs = std::max<long long>(
      2, (ToMillis(o.connect_timeout) + 999) / 1000);  // libpq: whole seconds, at least 2.
  add("connect_timeout", std::to_string(secs));
  add("application_name", o.application_name);
  add("client_encoding", "UTF8");
  // JIT off: the planner's cost of the lease statement (its control-state
  // subqueries) can pass jit_above_cost on a big jobs table, and compiling
  // it then took ~60 ms per lease (auto_explain) for a statement that runs
  // in ~3 ms. None of this library's statements is long enough to pay
  // compilation back.
  std::string server_options = "-c jit=off";
  if (o.statement_timeout > Duration::zero()) {
    server_options += " -c statement_timeout=" +
                      std::to_string(std::max<long long>(1, ToMillis(o.statement_timeout)));
  }
  add("options", server_options);
  JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, core->Connect());
  JOBPACT_RETURN_IF_ERROR(core->Migrate(*conn));
  ::jobpact::internal::MutexLock lock(core->mu_);
  core->open_ = 1;
  core->idle_.push_back(std::move(conn));
  return core;
}

Result<std::unique_ptr<Connection>> PostgresBackend::Core::Connect() {
  return Connection::Open(keywords_, values_, server_);
}

Result<PostgresBackend::Core::Pooled> PostgresBackend::Core::Acquire(std::string_view what) {
  {
    ::jobpact::internal::MutexLock lock(mu_);
    while (true) {
      if (!idle_.empty()) {
        std::unique_ptr<Connection> c = std::move(idle_.back());
        idle_.pop_back();
        return Pooled(this, std::move(c));
      }
      if (open_ < options_.pool_size) {
        const TimePoint now = real_clock_->Now();
        if (now < next_connect_at_) {
          return Status::Unavailable(
              std::string(what) + ": postgres " + server_ + ": not connected (" +
              last_connect_error_ + "); next reconnect attempt in " +
              std::to_string(std::max<long long>(1, ToMillis(next_connect_at_ - now))) + " ms");
        }
        ++open_;  // Taken now; connected below, without the lock.
        break;
      }
      // Not a timed wait: a connection comes back when the thread using it
      // ends its statement or transaction.
      cv_.Wait(mu_);
    }
  }
  Result<std::unique_ptr<Connection>> c = Connect();
  ::jobpact::internal::MutexLock lock(mu_);
  if (!c.ok()) {
    --open_;
    cv_.NotifyOne();
    if (c.status().code() == StatusCode::kUnavailable) {
      backoff_ = backoff_ == Duration::zero()
                     ? options_.reconnect_backoff_min
                     : std::min<Duration>(backoff_ * 2, options_.reconnect_backoff_max);
      // Jittered in [backoff/2, backoff], so that many clients of one
      // server do not reconnect in lockstep after it restarts.
      std::uniform_int_distribution<Duration::rep> jitter(backoff_.count() / 2,
                                                          backoff_.count());
      next_connect_at_ = real_clock_->Now() + Duration(jitter(rng_));
      last_connect_error_ = "last error: " + c.status().message();
    }
    return Status(c.status().code(), std::string(what) + ": " + c.status().message());
  }
  backoff_ = Duration::zero();
  next_connect_at_ = TimePoint();
  return Pooled(this, std::move(*c));
}

void PostgresBackend::Core::Return(std::unique_ptr<Connection> conn) {
  const bool reusable = !conn->broken() && conn->tx_status() == PQTRANS_IDLE;
  std::vector<std::unique_ptr<Connection>> drop;
  {
    ::jobpact::internal::MutexLock lock(mu_);
    if (reusable) {
      idle_.push_back(std::move(conn));
    } else {
      --open_;
      drop.push_back(std::move(conn));
    }
    cv_.NotifyOne();
  }
  // Closed outside the lock (PQfinish may send a terminate message).
}

void PostgresBackend::Core::DropIdle() {
  std::vector<std::unique_ptr<Connection>> drop;
  {
    ::jobpact::internal::MutexLock lock(mu_);
    drop.swap(idle_);
    open_ -= static_cast<int>(drop.size());
    cv_.NotifyAll();
  }
}

Status PostgresBackend::Core::Tx(std::string_view what,
                                 const std::function<Status(Connection&)>& fn) {
  return ::jobpact::internal::Guarded(what, [&]() -> Status {
    for (int attempt = 0;; ++attempt) {
      JOBPACT_ASSIGN_OR_RETURN(Pooled conn, Acquire(what));
      Status begin = conn->Simple("BEGIN", what);
      if (!begin.ok()) {
        if (conn->broken()) {
          DropIdle();
          if (attempt == 0) continue;  // Nothing was sent on the dead one.
        }
        return begin;
      }
      Status s;
      try {
        s = fn(*conn);
      } catch (const std::exception& e) {
        s = Status::Internal(std::string(what) + ": exception inside the transaction: " + e.what());
      } catch (...) {
        s = Status::Internal(std::string(what) + ": non-standard exception inside the transaction");
      }
      if (s.ok()) {
        const PGTransactionStatusType tx = conn->tx_status();
        if (tx == PQTRANS_INERROR) {
          s = Status::Internal(std::string(what) +
                               ": a statement failed inside the transaction and the error was "
                               "not reported; rolled back");
        } else if (tx != PQTRANS_INTRANS) {
          s = Status::Internal(std::string(what) +
                               ": the transaction was ended from inside the callback");
        } else {
          Result<PgResult> commit = conn->SimpleResult("COMMIT", what);
          if (!commit.ok()) {
            s = commit.status();
            if (conn->broken()) {
              s = Status(s.code(), s.message() +
                                       "; the connection was lost during COMMIT, so whether the "
                                       "transaction committed is unknown");
            }
          } else if (std::string(PQcmdStatus(const_cast<PGresult*>(commit->get()))) != "COMMIT") {
            s = Status::Aborted(std::string(what) + ": postgres " + server_ +
                                ": the transaction was rolled back at COMMIT");
          }
        }
      }
      if (!s.ok() && !conn->broken() && conn->tx_status() != PQTRANS_IDLE) {
        (void)conn->Simple("ROLLBACK", what);
      }
      if (conn->broken()) DropIdle();
      return s;
    }
  });
}

Status PostgresBackend::Core::Read(std::string_view what,
                                   const std::function<Status(Connection&)>& fn) {
  return ::jobpact::internal::Guarded(what, [&]() -> Status {
    for (int attempt = 0;; ++attempt) {
      JOBPACT_ASSIGN_OR_RETURN(Pooled conn, Acquire(what));
      Status s = fn(*conn);
      if (conn->broken()) {
        DropIdle();
        // A read may be repeated: once, on a new connection.
        if (attempt == 0 && s.code() == StatusCode::kUnavailable) continue;
      }
      return s;
    }
  });
}

const std::string& PostgresBackend::Core::Sql(const char* tmpl) {
  ::jobpact::internal::MutexLock lock(mu_);
  auto it = sql_.find(tmpl);
  if (it != sql_.end()) return it->second;
  return sql_.emplace(tmpl, SqlOf(tmpl)).first->second;
}

std::string PostgresBackend::Core::SqlOf(const std::string& tmpl) const {
  std::string out;
  out.reserve(tmpl.size() + 64);
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl.compare(i, 3, "{t}") == 0) {
      out += quoted_schema_;
      out += '.';
      i += 2;
    } else {
      out += tmpl[i];
    }
  }
  return out;
}

std::string PostgresBackend::Core::NewNonce() {
  std::uint64_t r;
  {
    ::jobpact::internal::MutexLock lock(mu_);
    r = rng_();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce(16, '0');
  for (int i = 0; i < 16; ++i) nonce[i] = kHex[(r >> (i * 4)) & 0xf];
  return nonce;
}

Result<bool> PostgresBackend::Core::WaitForNotify(Duration timeout) {
  return listen_fanout_.Wait(timeout, [&](Duration left) -> Result<bool> {
    return ::jobpact::internal::Guarded("WaitForWork", [&]() -> Result<bool> {
      if (listener_ != nullptr && listener_->broken()) listener_.reset();
      if (listener_ == nullptr) {
        JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Connect());
        const std::string listen = "LISTEN \"" + channel_ + "\"";
        JOBPACT_RETURN_IF_ERROR(c->Simple(listen.c_str(), "WaitForWork"));
        listener_ = std::move(c);
      }
      PGconn* pg = listener_->raw();
      auto drain = [&]() -> bool {
        bool any = false;
        while (PGnotify* n = PQnotifies(pg)) {
          any = true;
          PQfreemem(n);
        }
        return any;
      };
      if (PQconsumeInput(pg) == 0) {
        listener_.reset();
        return Status::Unavailable("WaitForWork: postgres " + server_ + ": connection lost");
      }
      if (drain()) return true;
      pollfd fd{PQsocket(pg), POLLIN, 0};
      const int ms = static_cast<int>(std::clamp<long long>(ToMillis(left), 1, 60000));
      const int ready = poll(&fd, 1, ms);
      if (ready <= 0) return false;
      if (PQconsumeInput(pg) == 0) {
        listener_.reset();
        return Status::Unavailable("WaitForWork: postgres " + server_ + ": connection lost");
      }
      return drain();
    });
  });
}

}  // namespace postgres
}  // namespace jobpact
