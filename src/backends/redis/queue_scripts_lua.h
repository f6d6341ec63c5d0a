// Private to the Redis queue store's scripts: the Lua text of each script
// body, one file per group (queue_scripts.cc prepends the shared library,
// kLib, and builds the Script objects; it also has the key table). Each
// body's comment gives its ARGV and its reply.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_LUA_H_
#define JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_LUA_H_

namespace jobpact {
namespace redis_internal {

// queue_scripts_enqueue.cc
extern const char* const kInsert;  // InsertJobs.

// queue_scripts_lease.cc
extern const char* const kLease;    // LeaseJobs.
extern const char* const kRenew;    // RenewLease.
extern const char* const kExpired;  // The expired leases (RecoverJobs).

// queue_scripts_write.cc
extern const char* const kWrite;      // One conditional write, as a function.
extern const char* const kWriteOne;   // kWrite's call for one write.
extern const char* const kWriteMany;  // kWrite's calls for several (WriteJobs).

// queue_scripts_admin.cc
extern const char* const kCancel;    // RequestCancel.
extern const char* const kLoad;      // Records of several jobs.
extern const char* const kScanIds;   // A page of job ids.
extern const char* const kScanTime;  // A page of a finished_at index.
extern const char* const kFindDup;   // FindDuplicateJob.
extern const char* const kPurge;     // DeleteJobs, one chunk.
extern const char* const kTrim;      // DeleteSurplusJobs, one chunk.
extern const char* const kStats;     // ReadStats.
extern const char* const kControl;   // WriteControl.

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_SCRIPTS_LUA_H_
