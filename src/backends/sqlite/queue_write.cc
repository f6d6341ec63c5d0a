// The SQLite queue store, writes (queue_store.h): WriteJobs' grouped
// completions (a savepoint per write, the transactional effect inside it)
// with the completion guards, and AcquireLockAndClaim.
#include "src/backends/sqlite/queue_store.h"

namespace jobpact {
namespace sqlite {

std::vector<Status> SqliteQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out(writes.size());
  Status batch = core_->Write("Complete", [&](Connection& conn) -> Status {
    // The transaction may be retried (a busy file): start each try afresh.
    std::fill(out.begin(), out.end(), Status::Ok());
    const std::int64_t now_ns = ToNs(core_->Now());
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const JobWrite& w = writes[i];
      const JobChange& c = w.change;
      const Duration retention =
          w.guards != nullptr ? w.guards->retention : core_->options().idempotency_retention;
      // Without an effect, the result is recorded before the ack, so a stale
      // ack leaves it recorded; a claim no longer held stops the ack.
      Status s;
      if (w.guards != nullptr && w.guards->claim == CompletionGuards::Claim::kRecord &&
          w.effect == nullptr) {
        s = internal::CompleteClaimRow(conn, c.record.envelope.idempotency_key,
                                       c.expect.lease_token, c.record.result, now_ns,
                                       now_ns + ToNs(retention), "Complete");
        if (s.code() == StatusCode::kAborted) {
          s = Status::Aborted(s.message() + "; job " + c.record.envelope.job_id +
                              " was not completed");
        } else {
          JOBPACT_RETURN_IF_ERROR(s);
        }
      }
      // Each write commits or rolls back alone (a stale lease or a failed
      // effect), inside the one transaction of the batch.
      JOBPACT_RETURN_IF_ERROR(conn.Exec("SAVEPOINT jobpact_write", "Complete"));
      if (s.ok()) s = UpdateRow(conn, c);
      if (s.ok() && w.effect != nullptr) {
        // Inside the completion transaction, after the fence: the effect
        // commits iff this delivery's completion does.
        Status effect = ::jobpact::internal::Guarded("transactional_effect", [&] {
          return (*w.effect)(static_cast<void*>(conn.db()));
        });
        if (!effect.ok()) {
          s = Status(effect.code(), "Complete: the transactional effect failed, the completion of job " +
                                        c.record.envelope.job_id +
                                        " was rolled back: " + effect.message());
        } else if (c.record.status == JobStatus::kSucceeded &&
                   !c.record.envelope.idempotency_key.empty()) {
          s = CompleteClaimOn(conn, c, now_ns, retention);
        }
      }
      if (sqlite3_get_autocommit(conn.db()) != 0) {
        // SQLite rolled the whole transaction back (a full disk, an I/O
        // error): nothing of the batch is written.
        return s.ok() ? Status::Internal("Complete: the transaction was rolled back") : s;
      }
      if (s.ok()) {
        JOBPACT_RETURN_IF_ERROR(conn.Exec("RELEASE jobpact_write", "Complete"));
      } else {
        JOBPACT_RETURN_IF_ERROR(conn.Exec("ROLLBACK TO jobpact_write; RELEASE jobpact_write", "Complete"));
        const StatusCode code = s.code();
        // The store's own failures fail the batch; a refused write fails
        // alone.
        if (code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted) {
          return s;
        }
      }
      if (w.guards != nullptr) JOBPACT_RETURN_IF_ERROR(ReleaseGuards(conn, w, now_ns));
      out[i] = std::move(s);
    }
    return Status::Ok();
  });
  if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
  return out;
}

Result<LockLease> SqliteQueueBackend::AcquireLockAndClaim(std::string_view lock_key,
                                                          std::string_view idempotency_key,
                                                          std::string_view owner, Duration ttl,
                                                          ClaimOutcome* claim) {
  constexpr std::string_view kWhat = "AcquireLockAndClaim";
  return ::jobpact::internal::Guarded(kWhat, [&]() -> Result<LockLease> {
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckLockAndClaim(kWhat, lock_key, idempotency_key, owner, ttl));
    LockLease lease;
    JOBPACT_SQLITE_RETURN_IF_ERROR(core_->Write(kWhat, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      const std::int64_t expires_ns = now_ns + ToNs(ttl);
      JOBPACT_ASSIGN_OR_RETURN(
          lease, internal::AcquireLockRow(conn, lock_key, owner, now_ns, expires_ns, kWhat));
      JOBPACT_ASSIGN_OR_RETURN(
          *claim, internal::ClaimRow(conn, idempotency_key, owner, now_ns, expires_ns, kWhat));
      return Status::Ok();
    }));
    return lease;
  });
}

Status SqliteQueueBackend::ReleaseGuards(Connection& conn, const JobWrite& w,
                                         std::int64_t now_ns) {
  const Envelope& env = w.change.record.envelope;
  const std::string& owner = w.change.expect.lease_token;
  auto own_gone = [](const Status& s) {
    return s.ok() || s.code() == StatusCode::kAborted || s.code() == StatusCode::kNotFound;
  };
  if (w.guards->release_lock) {
    Status s = internal::ReleaseLockRow(conn, env.lock_key, owner, now_ns, "Complete");
    if (!own_gone(s)) return s;
  }
  if (w.guards->claim == CompletionGuards::Claim::kRelease) {
    Status s = internal::ReleaseClaimRow(conn, env.idempotency_key, owner, "Complete");
    if (!own_gone(s)) return s;
  }
  return Status::Ok();
}

Status SqliteQueueBackend::CompleteClaimOn(Connection& conn, const JobChange& c,
                                           std::int64_t now_ns, Duration retention) {
  // Same-store exactly-once also for the idempotency record: the claim this
  // delivery holds (the runner's claim owner is the lease token) is marked
  // completed in the same transaction as the effect, so no crash can
  // separate "effect committed" from "key recorded". A key claimed or
  // completed by another owner means this delivery lost its claim: the
  // effect must not commit a second time for the key.
  const std::string& key = c.record.envelope.idempotency_key;
  const std::string& owner = c.expect.lease_token;
  {
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("UPDATE jobpact_idempotency SET state = 'completed', result = ?3, "
                     "expires_at_ns = ?4 WHERE key = ?1 AND owner = ?2 AND state = "
                     "'in_progress'"));
    Stmt st(raw);
    st.Bind(1, key).Bind(2, owner).Bind(3, c.record.result).Bind(4, now_ns + ToNs(retention));
    JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "Complete"));
    if (sqlite3_changes(conn.db()) > 0) return Status::Ok();
  }
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT owner, state FROM jobpact_idempotency WHERE key = ?1 AND owner != ?2"));
  Stmt st(raw);
  st.Bind(1, key).Bind(2, owner);
  const int rc = st.Step();
  if (rc == SQLITE_ROW) {
    return Status::Aborted("Complete: the idempotency claim on key '" + key +
                           "' is no longer held by this delivery (" + st.Text(1) + " by " +
                           st.Text(0) + "): the completion of job " + c.record.envelope.job_id +
                           " and its transactional effect were rolled back");
  }
  if (rc != SQLITE_DONE) return conn.Error(rc, "Complete");
  return Status::Ok();
}


}  // namespace sqlite
}  // namespace jobpact
