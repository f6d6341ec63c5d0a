#include "src/backends/sqlite/guard_rows.h"

#include <utility>

#include "jobpact/job.h"
#include "src/backends/sqlite/job_row.h"

namespace jobpact {
namespace sqlite {
namespace internal {

namespace {

// Runs `sql` (?1 key, ?2 owner, then `bind` the rest) and returns kAborted
// naming the key if it changed no row.
template <typename BindRest>
Status ChangeOwnClaim(Connection& conn, const char* sql, std::string_view key,
                      std::string_view owner, std::string_view what, BindRest bind) {
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw, conn.Prepare(sql));
  {
    Stmt st(raw);
    st.Bind(1, key).Bind(2, owner);
    bind(st);
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, what));
  }
  if (sqlite3_changes(conn.db()) > 0) return Status::Ok();
  return Status::Aborted(std::string(what) + ": " + std::string(owner) +
                         " does not hold a live claim on idempotency key " + std::string(key) +
                         " (expired, released, completed or taken)");
}

Result<LockLease> WriteLock(Connection& conn, std::string_view key, std::string_view owner,
                            std::uint64_t token, std::int64_t expires_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                           conn.Prepare("INSERT OR REPLACE INTO jobpact_locks (key, owner, "
                                        "fencing_token, expires_at_ns) VALUES (?1, ?2, ?3, ?4)"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, owner).Bind(3, static_cast<std::int64_t>(token)).Bind(4, expires_ns);
  const int rc = st.Step();
  if (rc != SQLITE_DONE) return conn.Error(rc, what);
  return MakeLockLease(key, std::string(owner), token, expires_ns);
}

// A new lock on `key` for `owner` (no live lock on it), with the next
// fencing token of the file's counter.
Result<LockLease> WriteNewLock(Connection& conn, std::string_view key, std::string_view owner,
                               std::int64_t expires_ns, std::string_view what) {
  std::uint64_t token;
  {
    JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                             conn.Prepare("UPDATE jobpact_counters SET value = value + 1 WHERE "
                                          "name = 'lock_fencing_token' RETURNING value"));
    Stmt st(raw);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return conn.Error(rc, what);
    token = static_cast<std::uint64_t>(st.Int(0));
    rc = st.Step();
    if (rc != SQLITE_DONE) return conn.Error(rc, what);
  }
  return WriteLock(conn, key, owner, token, expires_ns, what);
}

// `owner`'s in-progress claim on `key` until `expires_ns`, over whatever
// record was there.
Status WriteClaim(Connection& conn, std::string_view key, std::string_view owner,
                  std::int64_t expires_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                           conn.Prepare("INSERT OR REPLACE INTO jobpact_idempotency (key, state, "
                                        "owner, result, expires_at_ns) VALUES (?1, "
                                        "'in_progress', ?2, '', ?3)"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, owner).Bind(3, expires_ns);
  return StepDone(conn, st, what);
}

}  // namespace

Result<std::optional<LockRow>> ReadLock(Connection& conn, std::string_view key,
                                        std::int64_t now_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT owner, fencing_token, expires_at_ns FROM jobpact_locks WHERE key = "
                   "?1 AND expires_at_ns > ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, now_ns);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return std::optional<LockRow>();
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  LockRow row;
  row.owner = st.Text(0);
  row.token = static_cast<std::uint64_t>(st.Int(1));
  row.expires_ns = st.Int(2);
  return std::optional<LockRow>(std::move(row));
}

Result<LockLease> AcquireLockRow(Connection& conn, std::string_view key, std::string_view owner,
                                 std::int64_t now_ns, std::int64_t expires_ns,
                                 std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(std::optional<LockRow> held, ReadLock(conn, key, now_ns, what));
  if (held && held->owner != owner) {
    return Status::Aborted("lock " + std::string(key) + " is held by " + held->owner + " until " +
                           FormatRfc3339(TimeFromNs(held->expires_ns)));
  }
  // Re-acquire by the owner: extend, same token.
  if (held) return WriteLock(conn, key, owner, held->token, expires_ns, what);
  return WriteNewLock(conn, key, owner, expires_ns, what);
}

Result<std::optional<IdempotencyRecord>> ReadLiveClaim(Connection& conn, std::string_view key,
                                                       std::int64_t now_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT state, owner, result, expires_at_ns FROM jobpact_idempotency WHERE "
                   "key = ?1 AND expires_at_ns > ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, now_ns);
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return std::optional<IdempotencyRecord>();
  if (rc != SQLITE_ROW) return conn.Error(rc, what);
  IdempotencyRecord r;
  r.key = std::string(key);
  r.state = st.Text(0) == "completed" ? IdempotencyRecord::State::kCompleted
                                      : IdempotencyRecord::State::kInProgress;
  r.owner = st.Text(1);
  r.result = st.Text(2);
  r.expires_at = TimeFromNs(st.Int(3));
  return std::optional<IdempotencyRecord>(std::move(r));
}

Result<ClaimOutcome> ClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                              std::int64_t now_ns, std::int64_t expires_ns, std::string_view what) {
  ClaimOutcome out;
  JOBPACT_ASSIGN_OR_RETURN(std::optional<IdempotencyRecord> live,
                           ReadLiveClaim(conn, key, now_ns, what));
  if (live && live->state == IdempotencyRecord::State::kCompleted) {
    out.kind = ClaimOutcome::Kind::kCompleted;
    out.record = std::move(*live);
    return out;
  }
  if (live && live->owner != owner) {
    out.kind = ClaimOutcome::Kind::kInProgress;
    out.record = std::move(*live);
    return out;
  }
  // Missing, expired, or our own claim: (re)claim until expires_ns.
  JOBPACT_RETURN_IF_ERROR(WriteClaim(conn, key, owner, expires_ns, what));
  return ::jobpact::internal::MakeClaimed(key, owner, expires_ns);
}

Result<bool> TakeGuardRows(Connection& conn, std::string_view lock_key,
                           std::string_view idempotency_key, std::string_view owner,
                           std::int64_t now_ns, std::int64_t expires_ns, std::uint64_t* fencing,
                           std::string_view what) {
  // Both are read before either is written, so that a refusal writes nothing.
  if (!lock_key.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(std::optional<LockRow> held, ReadLock(conn, lock_key, now_ns, what));
    if (held) return false;  // Busy (a new owner holds nothing yet).
  }
  if (!idempotency_key.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(std::optional<IdempotencyRecord> live,
                             ReadLiveClaim(conn, idempotency_key, now_ns, what));
    if (live) return false;  // Completed, or claimed by another delivery.
  }
  if (!lock_key.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(LockLease lease,
                             WriteNewLock(conn, lock_key, owner, expires_ns, what));
    *fencing = lease.fencing_token;
  }
  if (!idempotency_key.empty()) {
    JOBPACT_RETURN_IF_ERROR(WriteClaim(conn, idempotency_key, owner, expires_ns, what));
  }
  return true;
}

Status ReleaseLockRow(Connection& conn, std::string_view key, std::string_view owner,
                      std::int64_t now_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(std::optional<LockRow> held, ReadLock(conn, key, now_ns, what));
  if (!held) {
    return Status::NotFound("lock " + std::string(key) +
                            " is not held (already expired or released)");
  }
  if (held->owner != owner) {
    return Status::Aborted("lock " + std::string(key) + " is held by " + held->owner +
                           ", not by " + std::string(owner));
  }
  JOBPACT_ASSIGN_OR_RETURN(sqlite3_stmt * raw,
                           conn.Prepare("DELETE FROM jobpact_locks WHERE key = ?1 AND owner = ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, owner);
  return StepDone(conn, st, what);
}

Status CompleteClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                        std::string_view result, std::int64_t now_ns, std::int64_t expires_ns,
                        std::string_view what) {
  return ChangeOwnClaim(
      conn,
      "UPDATE jobpact_idempotency SET state = 'completed', result = ?4, expires_at_ns = ?5 "
      "WHERE key = ?1 AND owner = ?2 AND state = 'in_progress' AND expires_at_ns > ?3",
      key, owner, what, [&](Stmt& st) { st.Bind(3, now_ns).Bind(4, result).Bind(5, expires_ns); });
}

Status ExtendClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                      std::int64_t now_ns, std::int64_t expires_ns, std::string_view what) {
  return ChangeOwnClaim(conn,
                        "UPDATE jobpact_idempotency SET expires_at_ns = ?4 WHERE key = ?1 AND "
                        "owner = ?2 AND state = 'in_progress' AND expires_at_ns > ?3",
                        key, owner, what, [&](Stmt& st) { st.Bind(3, now_ns).Bind(4, expires_ns); });
}

Status ReleaseClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                       std::string_view what) {
  return ChangeOwnClaim(conn,
                        "DELETE FROM jobpact_idempotency WHERE key = ?1 AND owner = ?2 AND "
                        "state = 'in_progress'",
                        key, owner, what, [](Stmt&) {});
}

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
