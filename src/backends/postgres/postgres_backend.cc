// PostgresBackend: one connection pool and schema, the stores built on it,
// and the transactional entry points on a caller's connection.
#include "jobpact/postgres/postgres_backend.h"

#include <memory>
#include <string>
#include <utility>

#include "src/backends/postgres/connection.h"
#include "src/backends/postgres/core.h"
#include "src/internal/guarded.h"
#include "src/internal/percent_encoding.h"

namespace jobpact {
namespace postgres {

using internal::Connection;

Result<std::shared_ptr<PostgresBackend>> PostgresBackend::Open(const PostgresOptions& options,
                                                               std::shared_ptr<Clock> clock) {
  return ::jobpact::internal::Guarded(
      "PostgresBackend::Open", [&]() -> Result<std::shared_ptr<PostgresBackend>> {
        JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<Core> core, Core::Open(options, std::move(clock)));
        return std::shared_ptr<PostgresBackend>(new PostgresBackend(std::move(core)));
      });
}

PostgresBackend::PostgresBackend(std::shared_ptr<Core> core)
    : core_(std::move(core)),
      queue_(Core::MakeQueue(core_)),
      locks_(Core::MakeLocks(core_)),
      idempotency_(Core::MakeIdempotency(core_)),
      rate_limits_(Core::MakeRateLimits(core_)) {
  core_->own_locks = locks_.get();
  core_->own_idempotency = idempotency_.get();
}

PostgresBackend::~PostgresBackend() = default;

std::shared_ptr<QueueBackend> PostgresBackend::queue() const { return queue_; }
std::shared_ptr<QueueAdmin> PostgresBackend::admin() const { return queue_; }
std::shared_ptr<LockStore> PostgresBackend::locks() const { return locks_; }
std::shared_ptr<IdempotencyStore> PostgresBackend::idempotency() const { return idempotency_; }
std::shared_ptr<RateLimitStore> PostgresBackend::rate_limits() const { return rate_limits_; }
const PostgresOptions& PostgresBackend::options() const { return core_->options(); }
int PostgresBackend::schema_version() const { return core_->schema_version(); }

BackendBundle PostgresBackend::bundle() const {
  BackendBundle b;
  b.queue = queue_;
  b.admin = queue_;
  b.locks = locks_;
  b.idempotency = idempotency_;
  b.rate_limits = rate_limits_;
  b.name = "postgres";
  b.url = url();
  return b;
}

namespace {

// Userinfo, host and path parts: everything but unreserved characters
// encoded (a '/' too).
std::string EncodeComponent(const std::string& s) {
  std::string out;
  for (char c : ::jobpact::internal::PercentEncodePath(s)) {
    if (c == '/') {
      out += "%2F";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string PostgresBackend::url() const {
  const PostgresOptions& o = core_->options();
  const std::string user = o.user.empty() ? "" : EncodeComponent(o.user) + "@";
  const bool v6 = o.host.find(':') != std::string::npos;
  const std::string host = v6 ? "[" + o.host + "]" : EncodeComponent(o.host);
  return "postgres://" + user + host + ":" + std::to_string(o.port) + "/" +
         EncodeComponent(o.database) + "?schema=" + o.schema;
}

Result<EnqueueResult> PostgresBackend::EnqueueInTransaction(PGconn* conn, const Envelope& env,
                                                            const EnqueueOptions& options) {
  return ::jobpact::internal::Guarded("EnqueueInTransaction", [&]() -> Result<EnqueueResult> {
    if (conn == nullptr) return Status::InvalidArgument("EnqueueInTransaction: conn is null");
    const PGTransactionStatusType tx = PQtransactionStatus(conn);
    if (tx != PQTRANS_INTRANS) {
      return Status::FailedPrecondition(
          std::string("EnqueueInTransaction: ") +
          (tx == PQTRANS_INERROR
               ? "the caller's transaction has already failed (roll it back)"
               : tx == PQTRANS_IDLE ? "no transaction is open on the caller's connection; the job "
                                      "would not be tied to the caller's commit (BEGIN first)"
                                    : "the caller's connection is busy or broken"));
    }
    std::unique_ptr<Connection> c = Connection::Borrow(conn, core_->server());
    // Inside a savepoint, so that a refused enqueue leaves the caller's
    // transaction as it was.
    JOBPACT_RETURN_IF_ERROR(c->Simple("SAVEPOINT jobpact_enqueue", "EnqueueInTransaction"));
    Result<std::vector<EnqueueResult>> results = core_->EnqueueOn(*c, {&env}, options);
    if (!results.ok()) {
      (void)c->Simple("ROLLBACK TO SAVEPOINT jobpact_enqueue; RELEASE SAVEPOINT jobpact_enqueue",
                      "EnqueueInTransaction");
      return results.status();
    }
    JOBPACT_RETURN_IF_ERROR(
        c->Simple("RELEASE SAVEPOINT jobpact_enqueue", "EnqueueInTransaction"));
    return std::move(results->front());
  });
}

Status PostgresBackend::RunInTransaction(const std::function<Status(PGconn* conn)>& fn) {
  if (!fn) return Status::InvalidArgument("RunInTransaction: fn is empty");
  return core_->Tx("RunInTransaction", [&](Connection& conn) { return fn(conn.raw()); });
}

}  // namespace postgres
}  // namespace jobpact
