// Private: the Redis queue store's class, whose definitions are split by
// side: the worker side (enqueue, write, lease, renew, recover, wait:
// queue_backend.cc) and the reads and the operator side (loads, listings,
// purges, stats, cancel, control state, policies: queue_store_admin.cc).
// The scripts and the key layout are in queue_scripts*.cc.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_QUEUE_STORE_H_
#define JOBPACT_SRC_BACKENDS_REDIS_QUEUE_STORE_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/redis/redis_effect.h"
#include "jobpact/store_backend.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"

namespace jobpact {
namespace redis_internal {

// Jobs read or written per script call where a step is chunked (recovery,
// purge, listing pages), so no call holds the server for long.
constexpr std::size_t kChunk = 1000;
// Writes per write_many script call (WriteJobs).
constexpr std::size_t kWritesPerCall = 64;
// Control audit lines kept.
constexpr int kMaxControlAudit = 10000;
// How long the completion script keeps an idempotency record it completes
// (JobRunnerOptions::idempotency_retention's default; the runner's own
// Complete after the ack then finds it done and leaves it).
constexpr Duration kIdempotencyRetention = std::chrono::hours(24);

// The queue store of one namespace. Holds no state of its own beyond its
// immutable handles: every state change is one script on the server, so
// several of these (threads, processes, hosts) share one queue.
// Thread-safe.
class RedisQueueBackend final : public StoreBackend {
 public:
  RedisQueueBackend(std::shared_ptr<RedisClient> client, const RedisKeys& keys,
                    std::shared_ptr<Clock> clock, const LockStore* own_locks,
                    const IdempotencyStore* own_idempotency)
      : StoreBackend(std::move(clock)),
        client_(std::move(client)),
        keys_(keys),
        prefix_(keys.prefix()),
        script_keys_{prefix_},
        own_locks_(own_locks),
        own_idempotency_(own_idempotency) {}

  std::string_view Name() const override { return "redis"; }

  // BLPOP on the namespace's wake list, which every enqueue and requeue
  // that makes a job ready pushes to: an idle worker in any process starts
  // the job at once. On its own connection, so waiting holds no pool slot.
  Result<bool> WaitForWork(Duration timeout) override;

  // The bundle's lock and idempotency hashes live in the namespace beside
  // its jobs: the completion script releases and records them with the
  // write, and a job with both keys takes them in one script.
  bool CompletesGuards(const LockStore& locks, const IdempotencyStore& idempotency) const override {
    return &locks == own_locks_ && &idempotency == own_idempotency_;
  }
  bool AppliesGuards() const override { return true; }
  Result<LockLease> AcquireLockAndClaim(std::string_view lock_key, std::string_view idempotency_key,
                                        std::string_view owner, Duration ttl,
                                        ClaimOutcome* claim) override;

 protected:
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options,
                                                TimePoint now) override;
  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) override;
  Status LeaseJobs(const DequeueRequest& request, TimePoint now,
                   std::vector<Delivery>* deliveries) override;
  Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at, std::string_view checkpoint,
                           TimePoint now) override;
  Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now) override;
  Result<std::optional<JobRecord>> LoadJob(std::string_view job_id) override;
  Result<std::vector<JobRecord>> QueryJobs(const JobQuery& query) override;
  Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                      std::string_view self_job_id,
                                                      TimePoint since) override;
  Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than) override;
  Result<int> DeleteSurplusJobs(JobStatus status, std::int64_t keep, TimePoint dedup_floor,
                                int limit) override;
  Result<QueueStats> ReadStats(TimePoint now) override;
  Status RequestCancel(const JobChange& change) override;
  Result<ControlState> LoadControl() override;
  Status WriteControl(const ControlWrite& write) override;
  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) override;
  Status StorePolicies(const std::vector<PublishedPolicy>& policies) override;
  Result<std::vector<PublishedPolicy>> LoadPolicies() override;

 private:
  // A script's reply: a failed call, or an error reply from the server
  // (a bug or a server problem), as a Status naming the server and `what`.
  Result<Reply> Run(std::string_view what, const Script& script, std::vector<std::string> args);
  Status ReplyError(std::string_view what, const Reply& r) const;
  // The Status of a {code, ...} reply of a conditional script.
  Status ConditionStatus(std::string_view what, std::string_view job_id, const Reply& r) const;
  // The arguments of the write script for `c` up to its history entry: the
  // condition (none for a quarantine, which also clears queue and type),
  // the record's values, its index entry and ready score.
  Status ChangeArgs(const JobChange& c, const std::string& expired_by, bool quarantine,
                    std::vector<std::string>* args) const;
  // The arguments of the write script for `c`; `expired_by` non-empty:
  // only if the stored lease has expired by then. Effect ops appended.
  Status WriteArgs(const JobChange& c, const std::string& expired_by,
                   const redis::RedisEffect* effect, std::vector<std::string>* args,
                   const CompletionGuards* guards = nullptr) const;
  // The record of fields `f` of job `id`, or -- for a record that no longer
  // decodes -- the record quarantined in its place (written, if `write`),
  // with `*quarantined` set.
  Result<JobRecord> DecodeOrQuarantine(const std::string& id, const Reply& f, TimePoint now,
                                       bool write, bool* quarantined);
  // Records of `ids` (with history), in order; absent ones skipped.
  Result<std::vector<JobRecord>> LoadMany(const std::vector<std::string>& ids);

  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::string prefix_;
  const std::vector<std::string> script_keys_;  // KEYS of every script: the prefix.
  const LockStore* const own_locks_;
  const IdempotencyStore* const own_idempotency_;
};

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_QUEUE_STORE_H_
