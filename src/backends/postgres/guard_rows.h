// Private to the PostgreSQL backend: the rows of the locks and idempotency
// tables changed through a connection the caller holds. The LockStore and
// IdempotencyStore run them as statements of their own, and the queue runs
// them inside its own steps: AcquireLockAndClaim (SPEC 3 steps 5 and 6 in
// one statement) and the completion's guards (Completion::guards: the claim
// recorded, the lock and claim released in the completion's transaction).
// One home for the SQL, so every path applies the same rules.
#ifndef JOBPACT_SRC_BACKENDS_POSTGRES_GUARD_ROWS_H_
#define JOBPACT_SRC_BACKENDS_POSTGRES_GUARD_ROWS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/result.h"
#include "jobpact/status.h"
#include "src/backends/postgres/connection.h"
#include "src/backends/postgres/core.h"

namespace jobpact {
namespace postgres {
namespace internal {

// LockStore::Acquire in one statement: `key` taken for `owner` until
// `expires_ns` if free, expired or already the owner's (then extended with
// its token; a new holder gets a new token from the schema's sequence).
// kAborted naming the holder if another owner holds it. Safe to repeat.
Result<LockLease> AcquireLockRow(PostgresBackend::Core& core, Connection& conn,
                                 std::string_view key, std::string_view owner,
                                 std::int64_t now_ns, std::int64_t expires_ns,
                                 std::string_view what);

// IdempotencyStore::Claim in one statement: a completed record or another
// owner's live claim is returned as found; otherwise `owner` (re)claims
// `key` until `expires_ns`. Safe to repeat.
Result<ClaimOutcome> ClaimRow(PostgresBackend::Core& core, Connection& conn, std::string_view key,
                              std::string_view owner, std::int64_t now_ns,
                              std::int64_t expires_ns, std::string_view what);

// The two above in ONE statement (so in one commit and one round trip):
// the lock, and only if it was taken, the claim into `*claim`. Same results
// as the two calls. Safe to repeat.
Result<LockLease> AcquireLockAndClaimRows(PostgresBackend::Core& core, Connection& conn,
                                          std::string_view lock_key,
                                          std::string_view idempotency_key,
                                          std::string_view owner, std::int64_t now_ns,
                                          std::int64_t expires_ns, ClaimOutcome* claim,
                                          std::string_view what);

// One job's guards for the lease step to take (DequeueRequest::take_guards):
// its lock and idempotency keys (either may be empty) and its lease token,
// which owns both until `expires_ns`; TakeGuardRows fills in the rest.
struct GuardTake {
  std::string_view lock_key;
  std::string_view idempotency_key;
  std::string_view owner;
  std::int64_t expires_ns = 0;
  bool taken = false;             // Both (whichever the job has) taken.
  std::uint64_t fencing = 0;      // The lock's token, if taken.
};

// Takes each item's lock and claim, both or neither, in one statement (and
// one more, rarely, to give back a lock whose claim a concurrent
// transaction took first): nothing of an item is taken if its lock is live
// or its key has a live record (completed or claimed). Keys must be unique
// among the items (the caller leaves out repeats: the first takes them).
Status TakeGuardRows(PostgresBackend::Core& core, Connection& conn, std::vector<GuardTake>& items,
                     std::int64_t now_ns, std::string_view what);

// One guard of a completion: a key and the owner (the delivery's lease
// token) whose row it is.
struct GuardRow {
  std::string_view key;
  std::string_view owner;
  std::string_view result;     // RecordClaimRows only.
  std::int64_t expires_ns = 0;  // RecordClaimRows only: kept until then.
};

// Marks each owner's live in-progress claim completed with its result, in
// one statement; (*recorded)[i] tells whether rows[i]'s claim was (false:
// the owner no longer holds a live claim on the key).
Status RecordClaimRows(PostgresBackend::Core& core, Connection& conn,
                       const std::vector<GuardRow>& rows, std::int64_t now_ns,
                       std::vector<bool>* recorded, std::string_view what);
// Deletes each owner's lock on its key, in one statement (a lock the owner
// no longer holds is left alone: nothing of its own is left to give back).
Status ReleaseLockRows(PostgresBackend::Core& core, Connection& conn,
                       const std::vector<GuardRow>& rows, std::string_view what);
// Deletes each owner's in-progress claim on its key, live or expired (a
// completed record never), in one statement.
Status ReleaseClaimRows(PostgresBackend::Core& core, Connection& conn,
                        const std::vector<GuardRow>& rows, std::string_view what);

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_POSTGRES_GUARD_ROWS_H_
