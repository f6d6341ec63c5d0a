// Private to the Redis queue store: its Lua scripts, one per atomic step
// (queue_scripts.cc has the key layout they share; queue_scripts_*.cc the
// scripts by group, with their argument lists).
// Every script takes KEYS[1] = the namespace prefix ("jobpact:{<ns>}:") and
// builds the keys it touches as prefix .. <kind> .. ":" .. <name>, with the
// kinds of src/backends/redis/keys.h; all of them carry the namespace's one
// hash tag. Names and values arrive as ARGV only: no script text is ever
// built from input.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_H_
#define JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_H_

#include "src/backends/redis/client.h"

namespace jobpact {
namespace redis_internal {

struct QueueScripts {
  Script insert;      // InsertJobs: a batch, all or nothing, with dedup.
  Script write;       // One conditional write of a JobChange (+ effect ops).
  Script lease;       // LeaseJobs: promote due jobs, pick, mark leased.
  Script renew;       // RenewLease.
  Script expired;     // Read the expired leases (RecoverJobs' first step).
  Script cancel;      // RequestCancel.
  Script load;        // Records (and history) of several jobs, read at once.
  Script scan_ids;    // A page of job ids after a cursor, filtered by fields.
  Script scan_time;   // A page of the DLQ / final index by finished_at.
  Script find_dup;    // FindDuplicateJob.
  Script purge;       // DeleteJobs, one chunk.
  Script stats;       // ReadStats from the counters (no scan of jobs).
  Script control;     // WriteControl: a rule and its audit line.
  Script write_many;  // Several writes (WriteJobs' batch) in one call.
  Script trim;        // DeleteSurplusJobs, one chunk.
};

// The scripts, built once. Thread-safe.
const QueueScripts& Scripts();

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_H_
