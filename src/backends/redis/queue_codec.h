// Private to the Redis queue store: how a JobRecord is laid out in the job
// hash (see queue_scripts.cc for the key table) -- the fields a record is
// read with, decoding them, the arguments every change writes, and where a
// job is indexed for its placement.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_QUEUE_CODEC_H_
#define JOBPACT_SRC_BACKENDS_REDIS_QUEUE_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/queue_backend.h"
#include "jobpact/result.h"
#include "jobpact/transitions.h"
#include "src/backends/redis/client.h"
#include "src/internal/history_json.h"

namespace jobpact {
namespace redis_internal {

// The fields of a record as the scripts read them (the Lua table F), in
// this order: the envelope, the packed fields only this side reads (`d`),
// and the fields the scripts read, index or change on their own (lease,
// renew, cancel).
enum RecordField {
  kFEnv,    // The envelope JSON (SerializeEnvelope), written once.
  kFData,   // The packed fields (EncodeRecordData), rewritten by every write.
  kFQueue,  // Fixed at enqueue: queue and job type.
  kFType,
  kFStatus,  // What a change or a script writes: status, attempt, ...
  kFAttempt,
  kFEpoch,
  kFUpdatedAt,
  kFCheckpoint,  // Absent: ''.
  kFToken,       // '' (or absent) if no lease.
  kFLeaseExp,    // "0" (or absent) if no lease.
  kFAudit,       // JSON array of strings; absent: [].
  kFCancel,      // "0" / "1"; absent: "0".
  kRecordFieldCount,
};

// Times as the scripts hold them: nanoseconds since the epoch, in decimal.
// kInvalidArgument for a time before 1970 (the scores and the scripts'
// arithmetic take non-negative times), naming `what`.
Result<std::string> TimeArg(TimePoint t, std::string_view what);
// The same, clamping a time before 1970 to the epoch (a bound of a range).
std::string TimeArgClamped(TimePoint t);
Result<TimePoint> ParseTime(std::string_view ns, std::string_view what);

// Appends the 11 values of `r` that a change writes, in the order of the
// insert and write scripts: st att upd fin ep cp tok lexp aud cx d.
Status AppendRecordArgs(const JobRecord& r, std::vector<std::string>* args);
// The packed field `d`: the values of `r` no script reads (enqueued_at,
// ready_at, finished_at, max_attempts, the counters, the failure, reason,
// result, the raw input), each as "<length>:<bytes>", in that order.
Result<std::string> EncodeRecordData(const JobRecord& r);

// Where a job sits in the indexes: the key (after the namespace prefix),
// its member there and its score.
struct IndexEntry {
  std::string key;
  std::string member;
  std::string score;
};
Result<IndexEntry> IndexOf(const JobRecord& r, JobPlacement placement);
// "ready:<queue>|<type>": the job's ready set; empty for quarantined input.
std::string ReadyKeyOf(const JobRecord& r);
// Its score there: (1000 - priority) * 2^42 + ready_at in ms.
Result<std::string> ReadyScoreOf(const JobRecord& r);
// A tenant_id as the scripts hold it (the job's field `tn`, the suffix of its
// per-tenant ready set, its member in the queue's tenant sets): each byte
// outside the safe-name set [A-Za-z0-9._:-] as %XX, so no tenant can hold a
// '|' (which ends a queue and a type in a key) or any byte a key should not;
// '' for no tenant. Distinct tenants stay distinct ('%' is escaped too).
std::string TenantPart(std::string_view tenant_id);

// A record from its fields (`f`, an array of kRecordFieldCount), without
// history. kInternal naming the job and the problem if it does not decode
// (the caller quarantines it).
Result<JobRecord> DecodeRecord(std::string_view job_id, const Reply& f);
// The stored fields as one JSON object, for a quarantined record's raw form.
std::string RawFields(const Reply& f);
// A stored history: JSON entries joined by newlines, oldest first.
Result<std::vector<Transition>> DecodeHistory(std::string_view text);

// One history entry as stored, the SQLite store's form
// (src/internal/history_json.h), and a JSON string literal.
using ::jobpact::internal::HistoryEntryJson;
using ::jobpact::internal::JsonString;

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_CODEC_H_
