#include "src/backends/postgres/guard_rows.h"

#include <map>
#include <string>
#include <utility>

#include "jobpact/job.h"
#include "src/backends/postgres/queue_store.h"
#include "src/internal/lock_lease.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {
namespace internal {

using ::jobpact::internal::MakeClaimed;
using ::jobpact::internal::MakeLockLease;
using ::jobpact::internal::TimeFromNs;
using Core = PostgresBackend::Core;

namespace {

// The lock upsert (parameters: $1 key, $2 owner, $3 expires_ns, $4 now_ns):
// free, expired or already ours (then extended with the same token); a new
// token for a new holder. Of two acquirers of a free key, one inserts and
// the other finds its row.
#define JOBPACT_PG_LOCK_UPSERT(KEY, OWNER, EXPIRES, NOW)                                      \
  "INSERT INTO {t}locks AS l (key, owner, fencing_token, expires_at_ns) VALUES (" KEY ", " OWNER \
  ", nextval('{t}lock_fencing_tokens'), " EXPIRES ") ON CONFLICT (key) DO UPDATE SET owner = " \
  "EXCLUDED.owner, expires_at_ns = EXCLUDED.expires_at_ns, fencing_token = CASE WHEN l.owner " \
  "= EXCLUDED.owner AND l.expires_at_ns > " NOW " THEN l.fencing_token ELSE "                   \
  "EXCLUDED.fencing_token END WHERE l.expires_at_ns <= " NOW                                     \
  " OR l.owner = EXCLUDED.owner RETURNING fencing_token"

// The claim upsert's conflict clause ($-numbers given): missing, expired,
// or our own live claim is (re)claimed; the unique key decides a race.
#define JOBPACT_PG_CLAIM_CONFLICT(NOW)                                                       \
  " ON CONFLICT (key) DO UPDATE SET state = 'in_progress', owner = EXCLUDED.owner, result = " \
  "'', expires_at_ns = EXCLUDED.expires_at_ns WHERE i.expires_at_ns <= " NOW                  \
  " OR (i.owner = EXCLUDED.owner AND i.state = 'in_progress') RETURNING 1"

Status LockHeld(Core& core, Connection& conn, std::string_view key, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult held, conn.Exec(core.Sql("SELECT owner, expires_at_ns FROM {t}locks WHERE key = $1"),
                               Params().Add(key), what));
  const std::string holder = held.rows() > 0 ? held.Text(0, 0) : "another owner";
  const std::string until =
      held.rows() > 0 ? " until " + FormatRfc3339(TimeFromNs(held.Int(0, 1))) : "";
  return Status::Aborted("lock " + std::string(key) + " is held by " + holder + until);
}

// The claim found instead of taken: columns col..col+3 of row 0 (state,
// owner, result, expires_at_ns), or -- if they are NULL (the record was
// committed after the statement's snapshot) -- read again.
Result<ClaimOutcome> Found(Core& core, Connection& conn, std::string_view key, PgResult r, int col,
                           std::string_view what) {
  if (r.rows() == 0 || r.IsNull(0, col)) {
    JOBPACT_ASSIGN_OR_RETURN(r, conn.Exec(core.Sql("SELECT state, owner, result, expires_at_ns "
                                                   "FROM {t}idempotency WHERE key = $1"),
                                          Params().Add(key), what));
    col = 0;
    if (r.rows() == 0) {
      return Status::Unavailable(std::string(what) + ": the record of idempotency key " +
                                 std::string(key) + " vanished during the claim; retry");
    }
  }
  ClaimOutcome out;
  out.record.key = std::string(key);
  out.record.state = r.Text(0, col) == "completed" ? IdempotencyRecord::State::kCompleted
                                                   : IdempotencyRecord::State::kInProgress;
  out.record.owner = r.Text(0, col + 1);
  out.record.result = r.Text(0, col + 2);
  out.record.expires_at = TimeFromNs(r.Int(0, col + 3));
  out.kind = out.record.state == IdempotencyRecord::State::kCompleted
                 ? ClaimOutcome::Kind::kCompleted
                 : ClaimOutcome::Kind::kInProgress;
  return out;
}

// The rows' keys and owners (and, with `values`, results and expiries) as
// array parameters for unnest.
Params GuardArrays(const std::vector<GuardRow>& rows, bool values) {
  std::vector<Params> items(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    items[i].Add(rows[i].key).Add(rows[i].owner);
    if (values) items[i].Add(rows[i].result).Add(rows[i].expires_ns);
  }
  Params p;
  for (const std::string& column : ArrayColumns(items, values ? 4 : 2)) p.Add(column);
  return p;
}

}  // namespace

Result<LockLease> AcquireLockRow(Core& core, Connection& conn, std::string_view key,
                                 std::string_view owner, std::int64_t now_ns,
                                 std::int64_t expires_ns, std::string_view what) {
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r, conn.Exec(core.Sql(JOBPACT_PG_LOCK_UPSERT("$1", "$2", "$3", "$4")),
                            Params().Add(key).Add(owner).Add(expires_ns).Add(now_ns), what));
  if (r.rows() != 1) return LockHeld(core, conn, key, what);
  return MakeLockLease(key, std::string(owner), static_cast<std::uint64_t>(r.Int(0, 0)),
                       expires_ns);
}

Result<ClaimOutcome> ClaimRow(Core& core, Connection& conn, std::string_view key,
                              std::string_view owner, std::int64_t now_ns,
                              std::int64_t expires_ns, std::string_view what) {
  // One statement: the claim, or else the record that stopped it (as of
  // the statement's snapshot).
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core.Sql("WITH claim AS (INSERT INTO {t}idempotency AS i (key, state, owner, "
                         "result, expires_at_ns) VALUES ($1, 'in_progress', $2, '', $3)" JOBPACT_PG_CLAIM_CONFLICT("$4") ") "
                         "SELECT true, NULL, NULL, NULL, NULL::bigint FROM claim UNION ALL "
                         "SELECT false, state, owner, result, expires_at_ns FROM {t}idempotency "
                         "WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM claim)"),
                Params().Add(key).Add(owner).Add(expires_ns).Add(now_ns), what));
  if (r.rows() > 0 && r.Text(0, 0) == "t") return MakeClaimed(key, owner, expires_ns);
  return Found(core, conn, key, std::move(r), 1, what);
}

Result<LockLease> AcquireLockAndClaimRows(Core& core, Connection& conn, std::string_view lock_key,
                                          std::string_view idempotency_key, std::string_view owner,
                                          std::int64_t now_ns, std::int64_t expires_ns,
                                          ClaimOutcome* claim, std::string_view what) {
  // $1 lock key, $2 idempotency key, $3 owner, $4 expires_ns, $5 now_ns.
  // The claim's INSERT selects from the lock's RETURNING: no lock, no
  // claim. The last SELECT reads the claim's record as of the statement's
  // snapshot, for when the claim was not taken.
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(
          core.Sql("WITH got_lock AS (" JOBPACT_PG_LOCK_UPSERT("$1", "$3", "$4", "$5") "), "
                   "got_claim AS (INSERT INTO {t}idempotency AS i (key, state, owner, result, "
                   "expires_at_ns) SELECT $2, 'in_progress', $3, '', $4 FROM got_lock" JOBPACT_PG_CLAIM_CONFLICT("$5") ") "
                   "SELECT got_lock.fencing_token, EXISTS (SELECT 1 FROM got_claim), i.state, "
                   "i.owner, i.result, i.expires_at_ns FROM (SELECT 1) AS one LEFT JOIN "
                   "got_lock ON true LEFT JOIN {t}idempotency i ON i.key = $2"),
          Params().Add(lock_key).Add(idempotency_key).Add(owner).Add(expires_ns).Add(now_ns),
          what));
  if (r.rows() != 1 || r.IsNull(0, 0)) return LockHeld(core, conn, lock_key, what);
  LockLease lease = MakeLockLease(lock_key, std::string(owner),
                                  static_cast<std::uint64_t>(r.Int(0, 0)), expires_ns);
  if (r.Text(0, 1) == "t") {
    *claim = MakeClaimed(idempotency_key, owner, expires_ns);
  } else {
    JOBPACT_ASSIGN_OR_RETURN(*claim, Found(core, conn, idempotency_key, std::move(r), 2, what));
  }
  return lease;
}

Status TakeGuardRows(Core& core, Connection& conn, std::vector<GuardTake>& items,
                     std::int64_t now_ns, std::string_view what) {
  if (items.empty()) return Status::Ok();
  std::vector<Params> columns(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    columns[i].Add(items[i].lock_key).Add(items[i].idempotency_key).Add(items[i].owner).Add(
        items[i].expires_ns);
  }
  Params p;
  for (const std::string& column : ArrayColumns(columns, 4)) p.Add(column);
  p.Add(now_ns);
  // free: the items whose lock and key have no live row in the statement's
  // snapshot. A row committed after it makes the upsert find a live row and
  // skip the item (ON CONFLICT waits for the other transaction and checks
  // the row as committed); a claim is inserted only beside a lock taken.
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(
          core.Sql(
              "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
              "$4::bigint[]) WITH ORDINALITY AS v(lk, ik, owner, expires, i)), free AS (SELECT "
              "v.* FROM v WHERE (v.lk = '' OR NOT EXISTS (SELECT 1 FROM {t}locks l WHERE l.key "
              "= v.lk AND l.expires_at_ns > $5)) AND (v.ik = '' OR NOT EXISTS (SELECT 1 FROM "
              "{t}idempotency d WHERE d.key = v.ik AND d.expires_at_ns > $5))), got_lock AS "
              "(INSERT INTO {t}locks AS l (key, owner, fencing_token, expires_at_ns) SELECT lk, "
              "owner, nextval('{t}lock_fencing_tokens'), expires FROM free WHERE lk <> '' ON "
              "CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at_ns = "
              "EXCLUDED.expires_at_ns, fencing_token = EXCLUDED.fencing_token WHERE "
              "l.expires_at_ns <= $5 RETURNING key, fencing_token), got_claim AS (INSERT INTO "
              "{t}idempotency AS i (key, state, owner, result, expires_at_ns) SELECT ik, "
              "'in_progress', owner, '', expires FROM free WHERE ik <> '' AND (lk = '' OR lk IN "
              "(SELECT key FROM got_lock)) ON CONFLICT (key) DO UPDATE SET state = "
              "'in_progress', owner = EXCLUDED.owner, result = '', expires_at_ns = "
              "EXCLUDED.expires_at_ns WHERE i.expires_at_ns <= $5 RETURNING key) SELECT v.i, "
              "coalesce(g.fencing_token, 0), v.ik <> '' AND v.ik IN (SELECT key FROM got_claim) "
              "FROM v LEFT JOIN got_lock g ON v.lk <> '' AND g.key = v.lk"),
          p, what));
  std::vector<GuardRow> give_back;
  for (int row = 0; row < r.rows(); ++row) {
    GuardTake& item = items[static_cast<std::size_t>(r.Int(row, 0) - 1)];
    const std::int64_t fencing = r.Int(row, 1);
    const bool lock_ok = item.lock_key.empty() || fencing > 0;
    const bool claim_ok = item.idempotency_key.empty() || r.Text(row, 2) == "t";
    item.taken = lock_ok && claim_ok;
    if (item.taken) {
      item.fencing = static_cast<std::uint64_t>(fencing);
    } else if (fencing > 0) {
      give_back.push_back(GuardRow{item.lock_key, item.owner, {}, 0});
    }
  }
  return ReleaseLockRows(core, conn, give_back, what);
}

Status RecordClaimRows(Core& core, Connection& conn, const std::vector<GuardRow>& rows,
                       std::int64_t now_ns, std::vector<bool>* recorded, std::string_view what) {
  recorded->assign(rows.size(), false);
  if (rows.empty()) return Status::Ok();
  Params p = GuardArrays(rows, true);
  p.Add(now_ns);
  JOBPACT_ASSIGN_OR_RETURN(
      PgResult r,
      conn.Exec(core.Sql("UPDATE {t}idempotency i SET state = 'completed', result = v.result, "
                         "expires_at_ns = v.expires FROM unnest($1::text[], $2::text[], "
                         "$3::text[], $4::bigint[]) AS v(key, owner, result, expires) WHERE "
                         "i.key = v.key AND i.owner = v.owner AND i.state = 'in_progress' AND "
                         "i.expires_at_ns > $5 RETURNING i.key, i.owner"),
                p, what));
  std::map<std::pair<std::string, std::string>, bool> done;
  for (int i = 0; i < r.rows(); ++i) done[{r.Text(i, 0), r.Text(i, 1)}] = true;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    (*recorded)[i] = done.count({std::string(rows[i].key), std::string(rows[i].owner)}) > 0;
  }
  return Status::Ok();
}

Status ReleaseLockRows(Core& core, Connection& conn, const std::vector<GuardRow>& rows,
                       std::string_view what) {
  if (rows.empty()) return Status::Ok();
  return conn
      .Exec(core.Sql("DELETE FROM {t}locks l USING unnest($1::text[], $2::text[]) AS v(key, "
                     "owner) WHERE l.key = v.key AND l.owner = v.owner"),
            GuardArrays(rows, false), what)
      .status();
}

Status ReleaseClaimRows(Core& core, Connection& conn, const std::vector<GuardRow>& rows,
                        std::string_view what) {
  if (rows.empty()) return Status::Ok();
  return conn
      .Exec(core.Sql("DELETE FROM {t}idempotency i USING unnest($1::text[], $2::text[]) AS "
                     "v(key, owner) WHERE i.key = v.key AND i.owner = v.owner AND i.state = "
                     "'in_progress'"),
            GuardArrays(rows, false), what)
      .status();
}

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact
