// The rows of jobpact_locks and jobpact_idempotency changed inside a write
// transaction that is already open: the LockStore and IdempotencyStore run
// each in a transaction of its own, and the queue's completion write
// (WriteJobs, Completion::guards) runs them in the completion's. One home
// for the SQL, so both paths apply the same rules.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_GUARD_ROWS_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_GUARD_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/status.h"
#include "src/backends/sqlite/connection.h"
#include "src/internal/lock_lease.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// A live lock row (expires_at > now), read inside the current transaction.
struct LockRow {
  std::string owner;
  std::uint64_t token = 0;
  std::int64_t expires_ns = 0;
};
Result<std::optional<LockRow>> ReadLock(Connection& conn, std::string_view key,
                                        std::int64_t now_ns, std::string_view what);

using ::jobpact::internal::MakeLockLease;  // src/internal/lock_lease.h

// LockStore::Acquire: takes `key` for `owner` until `expires_ns` (a new
// fencing token from the file's counter; the owner's own live lock is
// extended with its token). kAborted naming the holder if another owner
// holds it.
Result<LockLease> AcquireLockRow(Connection& conn, std::string_view key, std::string_view owner,
                                 std::int64_t now_ns, std::int64_t expires_ns,
                                 std::string_view what);

// Deletes the owner's live lock on `key`. kNotFound if no lock on it is
// live, kAborted if another owner holds it.
Status ReleaseLockRow(Connection& conn, std::string_view key, std::string_view owner,
                      std::int64_t now_ns, std::string_view what);

// The live record of `key` (expires_at > now), if any.
Result<std::optional<IdempotencyRecord>> ReadLiveClaim(Connection& conn, std::string_view key,
                                                       std::int64_t now_ns, std::string_view what);

// IdempotencyStore::Claim: a completed record or another owner's live
// claim is returned as found; otherwise `owner` (re)claims `key` until
// `expires_ns`.
Result<ClaimOutcome> ClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                              std::int64_t now_ns, std::int64_t expires_ns, std::string_view what);

// The lease step's take of a delivery's guards (DequeueRequest::take_guards):
// a new lock on `lock_key` and an in-progress claim on `idempotency_key`
// (each only if not empty) for `owner` until `expires_ns`, both or neither.
// False, with nothing written, if the lock is live (held by anyone: the
// owner is a new lease token) or the key has a live record (completed or
// claimed); else true, with the lock's fencing token in `*fencing`.
Result<bool> TakeGuardRows(Connection& conn, std::string_view lock_key,
                           std::string_view idempotency_key, std::string_view owner,
                           std::int64_t now_ns, std::int64_t expires_ns, std::uint64_t* fencing,
                           std::string_view what);

// Marks the owner's live in-progress claim on `key` completed with `result`
// until `expires_ns`. kAborted if the owner holds no live claim on it.
Status CompleteClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                        std::string_view result, std::int64_t now_ns, std::int64_t expires_ns,
                        std::string_view what);
// Moves the expiry of the owner's live in-progress claim to `expires_ns`.
// kAborted if the owner holds no live claim on it.
Status ExtendClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                      std::int64_t now_ns, std::int64_t expires_ns, std::string_view what);
// Deletes the owner's in-progress claim, live or expired (a completed
// record never). kAborted if there is none.
Status ReleaseClaimRow(Connection& conn, std::string_view key, std::string_view owner,
                       std::string_view what);

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_GUARD_ROWS_H_
