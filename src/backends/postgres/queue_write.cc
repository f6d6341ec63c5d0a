// The PostgreSQL queue store, writes (queue_store.h): conditional writes
// of engine changes, one row or many in one statement, and WriteJobs'
// grouped commits (one statement for writes without an effect, a savepoint
// per write with one) with the idempotency claim of a transactional effect,
// and the completions' guards (the lock released, the claim recorded or
// dropped in the completion's transaction).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job_status.h"
#include "src/backends/postgres/guard_rows.h"
#include "src/backends/postgres/queue_store.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using internal::Connection;
using internal::Params;
using internal::PgResult;
using ::jobpact::internal::HistoryEntryJson;
using ::jobpact::internal::ToNs;

namespace {

#define JOBPACT_PG_MATCH \
  " WHERE job_id = $1 AND status = $2 AND epoch = $3 AND coalesce(lease_token, '') = $4"

}  // namespace

// Several conditional writes in ONE statement: each row of the unnest is
// one change (the condition, the record's fields in JOBPACT_PG_RECORD_SET's
// order, and its history entry or NULL); a change whose row no longer
// matches its condition writes nothing, and RETURNING says which did. A
// write that matches no row cannot fail the others, so no savepoint is
// needed for writes without an effect.
std::string BatchUpdateSql() {
  return std::string(
             "UPDATE {t}jobs j SET status = v.status, attempt = v.attempt, max_attempts = "
             "v.max_attempts, ready_at_ns = v.ready_at_ns, updated_at_ns = v.updated_at_ns, "
             "finished_at_ns = v.finished_at_ns, epoch = v.epoch, lease_recoveries = "
             "v.lease_recoveries, lock_waits = v.lock_waits, previous_delay_ns = "
             "v.previous_delay_ns, checkpoint = CASE WHEN v.checkpoint = '' THEN j.checkpoint "
             "ELSE v.checkpoint END, failure_class = v.failure_class, failure_code = "
             "v.failure_code, failure_message = v.failure_message, reason = v.reason, result = "
             "v.result, lease_token = v.lease_token, lease_expires_at_ns = v.lease_expires_at_ns, "
             "dead_lettered_at_ns = v.dead_lettered_at_ns, audit = CASE WHEN v.exp_status = "
             "'running' THEN j.audit ELSE v.audit::jsonb END, cancel_requested = CASE WHEN "
             "v.exp_status = 'running' THEN greatest(j.cancel_requested, v.cancel) ELSE v.cancel "
             "END, history = CASE WHEN v.entry IS NULL THEN j.history WHEN "
             "jsonb_array_length(j.history) >= ") +
         std::to_string(kMaxHistory) +
         " THEN (j.history - 0) || v.entry::jsonb ELSE j.history || v.entry::jsonb END FROM "
         "unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::integer[], "
         "$7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], "
         "$12::integer[], $13::integer[], $14::bigint[], $15::text[], $16::text[], $17::text[], "
         "$18::text[], $19::text[], $20::text[], $21::text[], $22::bigint[], $23::bigint[], "
         "$24::text[], $25::integer[], $26::text[]) AS v(job_id, exp_status, exp_epoch, "
         "exp_token, status, attempt, max_attempts, ready_at_ns, updated_at_ns, finished_at_ns, "
         "epoch, lease_recoveries, lock_waits, previous_delay_ns, checkpoint, failure_class, "
         "failure_code, failure_message, reason, result, lease_token, lease_expires_at_ns, "
         "dead_lettered_at_ns, audit, cancel, entry) WHERE j.job_id = v.job_id AND j.status = "
         "v.exp_status AND j.epoch = v.exp_epoch AND coalesce(j.lease_token, '') = v.exp_token "
         "RETURNING j.job_id";
}

Status PostgresQueueBackend::StaleError(Connection& conn, const JobChange& c,
                                        std::string_view what) {
  const std::string& id = c.record.envelope.job_id;
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r, conn.Exec(core_->Sql("SELECT status, epoch FROM {t}jobs WHERE job_id = $1"),
                            Params().Add(id), what));
  if (r.rows() == 0) return Status::NotFound(std::string(what) + ": no job " + id);
  return Status::Aborted(std::string(what) + ": stale lease on job " + id + " (lease epoch " +
                         std::to_string(c.expect.epoch) + ", job epoch " + r.Text(0, 1) +
                         ", status " + r.Text(0, 0) + "): the job was taken over or finished");
}

Status PostgresQueueBackend::UpdateRow(Connection& conn, const JobChange& c,
                                       std::string_view worker) {
  // Every change of a stored job adds one history entry at most (the
  // engine's); more would be dropped here.
  if (c.append.size() > 1) {
    return Status::Internal("write job: more than one history entry in one change");
  }
  static const std::string with_entry_tmpl =
      std::string("UPDATE {t}jobs SET ") + JOBPACT_PG_RECORD_SET +
      ", history = CASE WHEN jsonb_array_length(history) >= " + std::to_string(kMaxHistory) +
      " THEN (history - 0) || $26::jsonb ELSE history || $26::jsonb END" + JOBPACT_PG_MATCH;
  static const std::string without_entry_tmpl =
      std::string("UPDATE {t}jobs SET ") + JOBPACT_PG_RECORD_SET + JOBPACT_PG_MATCH;
  Params p;
  p.Add(c.record.envelope.job_id)
      .Add(JobStatusName(c.expect.status))
      .Add(c.expect.epoch)
      .Add(c.expect.lease_token);
  AddRecord(p, c.record);
  if (!c.append.empty()) p.Add(HistoryEntryJson(c.append.back(), worker));
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core_->Sql(c.append.empty() ? without_entry_tmpl.c_str() : with_entry_tmpl.c_str()),
                p, "write job"));
  if (r.affected() == 0) return StaleError(conn, c, "write job");
  return Status::Ok();
}

Status PostgresQueueBackend::UpdateRows(Connection& conn,
                                        const std::vector<const JobChange*>& changes,
                                        std::string_view worker, std::vector<bool>* matched) {
  std::vector<Params> rows(changes.size());
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const JobChange& c = *changes[i];
    if (c.append.size() > 1) {
      return Status::Internal("write job: more than one history entry in one change");
    }
    Params& p = rows[i];
    p.Add(c.record.envelope.job_id)
        .Add(JobStatusName(c.expect.status))
        .Add(c.expect.epoch)
        .Add(c.expect.lease_token);
    AddRecord(p, c.record);
    if (c.append.empty()) {
      p.Null();
    } else {
      p.Add(HistoryEntryJson(c.append.back(), worker));
    }
  }
  const std::vector<std::string> columns = ArrayColumns(rows, 26);
  Params p;
  for (const std::string& column : columns) p.Add(column);
  JOBPACT_ASSIGN_OR_RETURN(PgResult r, conn.Exec(batch_update_, p, "write jobs"));
  std::map<std::string, bool, std::less<>> written;
  for (int i = 0; i < r.rows(); ++i) written[r.Text(i, 0)] = true;
  matched->assign(changes.size(), false);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    (*matched)[i] = written.count(changes[i]->record.envelope.job_id) > 0;
  }
  return Status::Ok();
}

std::vector<Status> PostgresQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out(writes.size());
  // Writes without an effect cannot fail one another (a stale one matches
  // no row): all of them in one statement, with their guards in one
  // statement per kind. With an effect, a savepoint per write (below).
  bool plain = true;
  {
    std::set<std::string_view> ids;
    for (const JobWrite& w : writes) {
      plain = plain && w.effect == nullptr && ids.insert(w.change.record.envelope.job_id).second;
    }
  }
  if (plain) {
    std::vector<std::size_t> all(writes.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    Status batch = core_->Tx("Complete", [&](Connection& conn) -> Status {
      std::fill(out.begin(), out.end(), Status::Ok());
      JOBPACT_RETURN_IF_ERROR(RecordGuardClaims(conn, writes, all, ToNs(core_->Now()), &out));
      std::vector<const JobChange*> refs;
      std::vector<std::size_t> written;
      for (std::size_t i = 0; i < writes.size(); ++i) {
        if (!out[i].ok()) continue;  // Its claim is no longer held.
        refs.push_back(&writes[i].change);
        written.push_back(i);
      }
      std::vector<bool> matched;
      if (!refs.empty()) JOBPACT_RETURN_IF_ERROR(UpdateRows(conn, refs, {}, &matched));
      bool wake = false;
      for (std::size_t k = 0; k < written.size(); ++k) {
        const std::size_t i = written[k];
        const JobChange& c = writes[i].change;
        if (!matched[k]) {
          out[i] = StaleError(conn, c, "write job");
          const StatusCode code = out[i].code();
          if (code != StatusCode::kAborted && code != StatusCode::kNotFound) return out[i];
        } else if (c.placement == JobPlacement::kReady ||
                   c.placement == JobPlacement::kScheduled) {
          wake = true;
        }
      }
      JOBPACT_RETURN_IF_ERROR(ReleaseGuards(conn, writes, all));
      if (wake) JOBPACT_RETURN_IF_ERROR(Notify(conn));
      return Status::Ok();
    });
    if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
    return out;
  }
  Status batch = core_->Tx("Complete", [&](Connection& conn) -> Status {
    std::fill(out.begin(), out.end(), Status::Ok());
    const std::int64_t now_ns = ToNs(core_->Now());
    bool wake = false;
    for (std::size_t i = 0; i < writes.size(); ++i) {
      const JobWrite& w = writes[i];
      const JobChange& c = w.change;
      const std::vector<std::size_t> one = {i};
      JOBPACT_RETURN_IF_ERROR(RecordGuardClaims(conn, writes, one, now_ns, &out));
      Status s = std::move(out[i]);
      // Each write commits or rolls back alone (a stale lease or a failed
      // effect), inside the one transaction of the batch.
      JOBPACT_RETURN_IF_ERROR(conn.Simple("SAVEPOINT jobpact_write", "Complete"));
      if (s.ok()) s = UpdateRow(conn, c);
      if (s.ok() && w.effect != nullptr) {
        // Inside the completion transaction, after the fence: the effect
        // commits iff this delivery's completion does.
        Status effect = ::jobpact::internal::Guarded(
            "transactional_effect", [&] { return (*w.effect)(static_cast<void*>(conn.raw())); });
        if (effect.ok() && conn.tx_status() == PQTRANS_INERROR) {
          effect =
              Status::Internal("a statement of the effect failed (its error was not returned)");
        }
        if (!effect.ok()) {
          s = Status(effect.code(),
                     "Complete: the transactional effect failed, the completion of job " +
                         c.record.envelope.job_id + " was rolled back: " + effect.message());
        } else if (c.record.status == JobStatus::kSucceeded &&
                   !c.record.envelope.idempotency_key.empty()) {
          s = CompleteClaimOn(conn, c, now_ns,
                              w.guards != nullptr ? w.guards->retention
                                                  : core_->options().idempotency_retention);
        }
      }
      if (conn.broken()) {
        return Status::Unavailable("Complete: postgres " + core_->server() +
                                   ": connection lost; nothing of the batch was written" +
                                   (s.ok() ? std::string() : " (" + s.message() + ")"));
      }
      if (conn.tx_status() != PQTRANS_INTRANS && conn.tx_status() != PQTRANS_INERROR) {
        return Status::Internal(
            "Complete: the transaction was ended inside a transactional effect");
      }
      if (s.ok()) {
        JOBPACT_RETURN_IF_ERROR(conn.Simple("RELEASE SAVEPOINT jobpact_write", "Complete"));
        const JobPlacement pl = c.placement;
        if (pl == JobPlacement::kReady || pl == JobPlacement::kScheduled) wake = true;
      } else {
        JOBPACT_RETURN_IF_ERROR(conn.Simple(
            "ROLLBACK TO SAVEPOINT jobpact_write; RELEASE SAVEPOINT jobpact_write", "Complete"));
        const StatusCode code = s.code();
        // The store's own failures fail the batch; a refused write fails
        // alone.
        if (code == StatusCode::kUnavailable || code == StatusCode::kResourceExhausted ||
            code == StatusCode::kDeadlineExceeded) {
          return s;
        }
      }
      JOBPACT_RETURN_IF_ERROR(ReleaseGuards(conn, writes, one));
      out[i] = std::move(s);
    }
    if (wake) JOBPACT_RETURN_IF_ERROR(Notify(conn));
    return Status::Ok();
  });
  if (!batch.ok()) std::fill(out.begin(), out.end(), batch);
  return out;
}

Status PostgresQueueBackend::RecordGuardClaims(Connection& conn,
                                               const std::vector<JobWrite>& writes,
                                               const std::vector<std::size_t>& which,
                                               std::int64_t now_ns, std::vector<Status>* out) {
  std::vector<internal::GuardRow> rows;
  std::vector<std::size_t> of;
  for (std::size_t i : which) {
    const JobWrite& w = writes[i];
    if (w.guards == nullptr || w.guards->claim != CompletionGuards::Claim::kRecord ||
        w.effect != nullptr) {
      continue;  // With an effect, recorded only if it commits (CompleteClaimOn).
    }
    const JobChange& c = w.change;
    rows.push_back({c.record.envelope.idempotency_key, c.expect.lease_token, c.record.result,
                    now_ns + ToNs(w.guards->retention)});
    of.push_back(i);
  }
  std::vector<bool> recorded;
  JOBPACT_RETURN_IF_ERROR(
      internal::RecordClaimRows(*core_, conn, rows, now_ns, &recorded, "Complete"));
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (recorded[k]) continue;
    (*out)[of[k]] = Status::Aborted(
        "Complete: " + std::string(rows[k].owner) +
        " does not hold a live claim on idempotency key " + std::string(rows[k].key) +
        " (expired, released, completed or taken); job " +
        writes[of[k]].change.record.envelope.job_id + " was not completed");
  }
  return Status::Ok();
}

Status PostgresQueueBackend::ReleaseGuards(Connection& conn, const std::vector<JobWrite>& writes,
                                           const std::vector<std::size_t>& which) {
  std::vector<internal::GuardRow> locks;
  std::vector<internal::GuardRow> claims;
  for (std::size_t i : which) {
    const JobWrite& w = writes[i];
    if (w.guards == nullptr) continue;
    const Envelope& env = w.change.record.envelope;
    const std::string& owner = w.change.expect.lease_token;
    if (w.guards->release_lock && !env.lock_key.empty()) locks.push_back({env.lock_key, owner, {}, 0});
    if (w.guards->claim == CompletionGuards::Claim::kRelease && !env.idempotency_key.empty()) {
      claims.push_back({env.idempotency_key, owner, {}, 0});
    }
  }
  JOBPACT_RETURN_IF_ERROR(internal::ReleaseLockRows(*core_, conn, locks, "Complete"));
  return internal::ReleaseClaimRows(*core_, conn, claims, "Complete");
}

Result<LockLease> PostgresQueueBackend::AcquireLockAndClaim(std::string_view lock_key,
                                                            std::string_view idempotency_key,
                                                            std::string_view owner, Duration ttl,
                                                            ClaimOutcome* claim) {
  constexpr std::string_view kWhat = "AcquireLockAndClaim";
  return ::jobpact::internal::Guarded(kWhat, [&]() -> Result<LockLease> {
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckLockAndClaim(kWhat, lock_key, idempotency_key, owner, ttl));
    LockLease lease;
    // One statement, committed on its own (guard_rows.h).
    JOBPACT_PG_RETURN_IF_ERROR(core_->Autocommit(kWhat, [&](Connection& conn) -> Status {
      const std::int64_t now_ns = ToNs(core_->Now());
      JOBPACT_ASSIGN_OR_RETURN(
          lease, internal::AcquireLockAndClaimRows(*core_, conn, lock_key, idempotency_key, owner,
                                                   now_ns, now_ns + ToNs(ttl), claim, kWhat));
      return Status::Ok();
    }));
    return lease;
  });
}

Status PostgresQueueBackend::CompleteClaimOn(Connection& conn, const JobChange& c,
                                             std::int64_t now_ns, Duration retention) {
  // The claim this delivery holds (the runner's claim owner is the lease
  // token) is marked completed in the same transaction as the effect, so no
  // crash can separate "effect committed" from "key recorded". A key
  // claimed or completed by another owner means this delivery lost its
  // claim: the effect must not commit a second time for the key.
  const std::string& key = c.record.envelope.idempotency_key;
  const std::string& owner = c.expect.lease_token;
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult done,
      conn.Exec(core_->Sql("UPDATE {t}idempotency SET state = 'completed', result = $3, "
                           "expires_at_ns = $4 WHERE key = $1 AND owner = $2 AND state = "
                           "'in_progress'"),
                Params()
                    .Add(key)
                    .Add(owner)
                    .Add(c.record.result)
                    .Add(now_ns + ToNs(retention)),
                "Complete"));
  if (done.affected() > 0) return Status::Ok();
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult other,
      conn.Exec(
          core_->Sql("SELECT owner, state FROM {t}idempotency WHERE key = $1 AND owner <> $2"),
          Params().Add(key).Add(owner), "Complete"));
  if (other.rows() > 0) {
    return Status::Aborted("Complete: the idempotency claim on key '" + key +
                           "' is no longer held by this delivery (" + other.Text(0, 1) + " by " +
                           other.Text(0, 0) + "): the completion of job " +
                           c.record.envelope.job_id +
                           " and its transactional effect were rolled back");
  }
  return Status::Ok();
}

}  // namespace postgres
}  // namespace jobpact
