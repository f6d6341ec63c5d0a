// Private to the PostgreSQL backend: the state shared by the stores of one
// PostgresBackend -- the connection pool with its reconnect backoff, the
// transaction runner, the schema-qualified statement texts, the listener
// connection of WaitForWork -- and the factories of the store views.
#ifndef JOBPACT_SRC_BACKENDS_POSTGRES_CORE_H_
#define JOBPACT_SRC_BACKENDS_POSTGRES_CORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/result.h"
#include "jobpact/status.h"
#include "jobpact/store_backend.h"
#include "src/backends/postgres/connection.h"
#include "src/internal/mutex.h"
#include "src/internal/wake_fanout.h"

namespace jobpact {
namespace postgres {
namespace internal {

// kInvalidArgument unless `schema` follows the rule of PostgresOptions::schema.
Status CheckSchemaName(const std::string& schema);

}  // namespace internal

// Thread-safe.
class PostgresBackend::Core {
 public:
  // Checks the options, connects once and creates or migrates the schema.
  static Result<std::shared_ptr<Core>> Open(const PostgresOptions& options,
                                            std::shared_ptr<Clock> clock);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // A connection taken from the pool; back to it on destruction, unless
  // broken (or left inside a transaction), when it is closed instead.
  class Pooled {
   public:
    Pooled(Core* core, std::unique_ptr<internal::Connection> conn)
        : core_(core), conn_(std::move(conn)) {}
    Pooled(Pooled&&) = default;
    ~Pooled() {
      if (conn_) core_->Return(std::move(conn_));
    }
    internal::Connection& operator*() const { return *conn_; }
    internal::Connection* operator->() const { return conn_.get(); }

   private:
    Core* core_;
    std::unique_ptr<internal::Connection> conn_;
  };

  // A free connection, opening one if fewer than pool_size are open (or
  // kUnavailable naming the server during the reconnect backoff).
  Result<Pooled> Acquire(std::string_view what);

  // Runs `fn` in a transaction (BEGIN ... COMMIT) and commits iff it
  // returns OK and the transaction is still healthy; rolls back otherwise.
  // Exceptions from `fn` become kInternal after the rollback. A connection
  // found dead at BEGIN (a server restart since it was last used) is
  // replaced once, transparently: nothing had been sent on it.
  Status Tx(std::string_view what, const std::function<Status(internal::Connection&)>& fn);
  // Runs `fn` on a pooled connection outside an explicit transaction (each
  // statement its own snapshot).
  Status Read(std::string_view what, const std::function<Status(internal::Connection&)>& fn);
  // The same for a writing statement that commits on its own (one round
  // trip: no BEGIN, no COMMIT). As Read, `fn` runs again once, on a new
  // connection, after a connection found dead, so each of its statements
  // must be safe to repeat (a second run gives the first one's outcome).
  Status Autocommit(std::string_view what,
                    const std::function<Status(internal::Connection&)>& fn) {
    return Read(what, fn);
  }

  // `tmpl` with every "{t}" replaced by the quoted schema and a dot, e.g.
  // "SELECT 1 FROM {t}jobs" -> SELECT 1 FROM "jobpact".jobs. Cached by the
  // template's address: pass string literals (or strings that live as long
  // as the process).
  const std::string& Sql(const char* tmpl);
  // The same, uncached (dynamic statements).
  std::string SqlOf(const std::string& tmpl) const;

  // The first key of this schema's advisory locks for `purpose`, passed as
  // pg_advisory_xact_lock(hashtext(<this>), ...).
  std::string LockSpace(std::string_view purpose) const {
    return "jobpact:" + options_.schema + ":" + std::string(purpose);
  }

  // The NOTIFY channel idle workers LISTEN on.
  const std::string& channel() const { return channel_; }

  // Waits up to `timeout` (real time) for a NOTIFY on channel(); true if
  // one came.
  Result<bool> WaitForNotify(Duration timeout);

  TimePoint Now() const { return clock_->Now(); }
  const std::shared_ptr<Clock>& clock() const { return clock_; }
  const PostgresOptions& options() const { return options_; }
  // host:port/database, for messages.
  const std::string& server() const { return server_; }
  int schema_version() const { return schema_version_; }
  // 16 random hex digits (lease token nonces).
  std::string NewNonce();

  static std::shared_ptr<StoreBackend> MakeQueue(std::shared_ptr<Core> core);
  static std::shared_ptr<LockStore> MakeLocks(std::shared_ptr<Core> core);
  static std::shared_ptr<IdempotencyStore> MakeIdempotency(std::shared_ptr<Core> core);
  static std::shared_ptr<RateLimitStore> MakeRateLimits(std::shared_ptr<Core> core);
  // The bundle's own stores (set once by PostgresBackend's constructor): the
  // queue applies completion guards for these only (CompletesGuards).
  const LockStore* own_locks = nullptr;
  const IdempotencyStore* own_idempotency = nullptr;

  // Enqueue through any connection inside a transaction (ours or the
  // caller's), with NOTIFY.
  Result<std::vector<EnqueueResult>> EnqueueOn(internal::Connection& conn,
                                               const std::vector<const Envelope*>& envs,
                                               const EnqueueOptions& options);

 private:
  Core(PostgresOptions options, std::shared_ptr<Clock> clock);

  Result<std::unique_ptr<internal::Connection>> Connect();
  void Return(std::unique_ptr<internal::Connection> conn);
  // Drops every idle connection (after one was found dead: the others to
  // the same server most likely are too).
  void DropIdle();
  Status Migrate(internal::Connection& conn);

  // Immutable after construction.
  const PostgresOptions options_;
  const std::shared_ptr<Clock> clock_;
  // The real clock, for the reconnect backoff.
  const std::shared_ptr<Clock> real_clock_;
  std::string server_;
  std::string quoted_schema_;
  std::string channel_;
  std::vector<std::string> keywords_;
  std::vector<std::string> values_;
  int schema_version_ = 0;  // Set once by Open().

  ::jobpact::internal::PlainMutex mu_;
  ::jobpact::internal::CondVar cv_;  // A pooled connection came back or closed.
  std::vector<std::unique_ptr<internal::Connection>> idle_ JOBPACT_GUARDED_BY(mu_);
  int open_ JOBPACT_GUARDED_BY(mu_) = 0;
  Duration backoff_ JOBPACT_GUARDED_BY(mu_) = Duration::zero();
  TimePoint next_connect_at_ JOBPACT_GUARDED_BY(mu_);
  std::string last_connect_error_ JOBPACT_GUARDED_BY(mu_);
  std::mt19937_64 rng_ JOBPACT_GUARDED_BY(mu_);
  std::unordered_map<const char*, std::string> sql_ JOBPACT_GUARDED_BY(mu_);

  // WaitForWork: one thread at a time polls the listener connection; the
  // others wait for it to report a wake-up.
  ::jobpact::internal::WakeFanout listen_fanout_;
  std::unique_ptr<internal::Connection> listener_;  // Used by the polling thread only.
};

}  // namespace postgres
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_POSTGRES_CORE_H_
