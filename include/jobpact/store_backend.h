// File: jobpact/store_backend.h
//
// StoreBackend is the one base of every QueueBackend (in memory, SQLite,
// and the ones users write). It implements the QueueBackend methods once,
// `final`: the argument and name checks, the contract engine's transitions
// (jobpact/transitions.h) and one exception boundary (a stray exception
// becomes a Status: std::bad_alloc kResourceExhausted, anything else
// kInternal, each naming the method). A backend then only stores: it
// implements the protected storage primitives below, and joins the
// conformance suite with one INSTANTIATE line (jobpact/testing/).
//
// What a backend stores is what the engine computed; it never decides what a
// completion, a replay or a discard means. Only two steps run inside the
// store, because they must pick jobs atomically: leasing the next ready jobs
// (LeaseJobs) and recovering expired leases (RecoverJobs). Each must give,
// per job, exactly what engine::Deliver / engine::RecoverLease give (an
// in-process store simply calls them; a SQL or Lua store encodes the same
// rule), and the conformance suite compares the two.
//
// Contract for the primitives: each is one atomic operation on the store;
// they may be called concurrently from many threads; they must not throw
// (the base catches what escapes anyway); time is the `now` passed in.
//
// Thread-safe.
#ifndef JOBPACT_STORE_BACKEND_H_
#define JOBPACT_STORE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/transitions.h"

namespace jobpact {

// One completion of StoreBackend::CompleteInPlace.
struct InPlaceCompletion {
  const Delivery* delivery = nullptr;
  const Completion* completion = nullptr;
  Status result;  // Set by CompleteInPlace.
};

// One conditional write of WriteJobs: the change the engine computed and,
// for a transactional completion, the effect to run inside the same atomic
// step (Completion::transactional_effect; null: none).
struct JobWrite {
  JobChange change;
  const std::function<Status(void* native)>* effect = nullptr;
  // The completion's guards (Completion::guards; null: none), for a store
  // whose AppliesGuards() is true: the lock and claim are owned by
  // change.expect.lease_token; the keys are the envelope's.
  const CompletionGuards* guards = nullptr;
};

// Which stored jobs QueryJobs returns.
struct JobQuery {
  std::optional<JobStatus> status;
  std::optional<std::string> job_type;
  std::optional<std::string> queue;
  // Only jobs whose finished_at (the time dead-lettered, for DLQ entries) is
  // in [finished_after, finished_before).
  std::optional<TimePoint> finished_after;
  std::optional<TimePoint> finished_before;
  // DLQ filters on the record's reason and last failure class.
  std::optional<std::string> reason;
  std::optional<FailureClass> failure_class;
  // At most this many, in the order below.
  std::size_t limit = 1000;
  // Order: by finished_at then job id (DLQ listings), or by job id.
  bool by_finished_at = false;
  // By job id only: jobs whose id sorts after this one (paging).
  std::optional<std::string> after_job_id;
};

// One change of the control state: a rule set (or replaced) or cleared, and
// its audit line, written in one atomic step.
struct ControlWrite {
  std::optional<ControlRule> set;       // With set_at filled in.
  std::optional<ControlRuleKey> clear;  // kNotFound if no such rule.
  std::string audit_line;
};

class JOBPACT_EXPORT StoreBackend : public QueueBackend, public QueueAdmin {
 public:
  ~StoreBackend() override;

  // --- QueueBackend, implemented once for every store ---
  Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) final;
  // Atomic: every job is stored (or found a duplicate), or none is.
  Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                  const EnqueueOptions& options) final;
  Result<std::string> DeadLetterInvalid(std::string_view raw,
                                        const std::vector<FieldError>& problems) final;
  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) final;
  Status DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) final;
  Result<Lease> Renew(const Lease& lease, Duration extension, std::string_view checkpoint) final;
  Status Complete(const Delivery& delivery, const Completion& completion) final;
  // As the const& form (the delivery is left as it was).
  Status Complete(Delivery&& delivery, const Completion& completion) final;
  std::vector<Status> CompleteBatch(const std::vector<CompletionRequest>& requests) final;
  // True unless the store completes in place (CompletesInPlace): a store
  // that writes (WriteJobs) shares one write among a batch's completions.
  bool GroupsCompletions() const override { return !CompletesInPlace(); }
  Result<std::vector<LeaseRecovery>> RecoverExpiredLeases(int max_recoveries) final;
  Result<std::optional<std::string>> FindDuplicate(std::string_view dedup_key,
                                                   std::string_view self_job_id,
                                                   TimePoint since) final;

  // --- QueueAdmin, implemented once for every store ---
  Result<JobRecord> Get(std::string_view job_id) final;
  Result<std::vector<JobRecord>> ListJobs(const JobFilter& filter) final;
  Result<QueueStats> Stats() final;
  Result<CancelOutcome> Cancel(std::string_view job_id, const DlqAction& action) final;
  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& filter) final;
  Result<DlqEntry> GetDeadLetter(std::string_view job_id) final;
  Status Replay(std::string_view job_id, const DlqAction& action) final;
  Status Discard(std::string_view job_id, const DlqAction& action) final;
  Result<int> PurgeDeadLetters(TimePoint older_than) final;
  Result<int> PurgeFinished(TimePoint older_than) final;
  // Per final status with a count, DeleteSurplusJobs in chunks of
  // FinishedRetention::kTrimChunk until none is left or max_jobs are gone.
  Result<int> TrimFinished(const FinishedRetention& keep) final;
  Result<ControlState> ReadControl() final;
  Status SetControl(const ControlRule& rule) final;
  Status ClearControl(const ControlRuleKey& key, std::string_view actor,
                      std::string_view reason) final;
  Result<std::vector<std::string>> ControlAudit(std::size_t limit) final;
  Status PublishPolicies(const std::vector<PublishedPolicy>& policies) final;
  Result<std::vector<PublishedPolicy>> ReadPolicies() final;

  const std::shared_ptr<Clock>& clock() const { return clock_; }

  // True if every envelope Dequeue delivers is the very object Enqueue
  // stored after engine::CheckStorable, never decoded from storage since (a
  // store that keeps its records in process memory). A runner then skips at
  // delivery the checks CheckStorable made for certain (the payload's JSON
  // syntax, the character sets of names and keys) and applies the rest of
  // its ValidationOptions. Default false (a store that decodes what it
  // delivers: storage can be corrupted or written by another version).
  virtual bool DeliversStoredEnvelopes() const { return false; }

 protected:
  // REQUIRES: clock != nullptr (null: SystemClock::Default()).
  explicit StoreBackend(std::shared_ptr<Clock> clock);

  // For InsertJobs: OK if `adding` more jobs fit in `queue` at `depth`
  // waiting jobs under its maximum `limit`; else kResourceExhausted naming
  // the queue, its depth and the limit (the words every store uses).
  static Status CheckQueueDepth(std::string_view queue, std::int64_t depth, std::int64_t adding,
                                std::int64_t limit);

  // --- Storage primitives ---

  // Inserts new jobs (each change.expect.new_job) in one atomic step, in
  // order. A job whose envelope.dedup_key matches a stored job enqueued
  // within options.dedup_window (now - enqueued_at < window) that did not
  // end without effect (discarded, failed, dead-lettered) is not stored: its
  // result names the existing job with duplicate = true. kAlreadyExists if
  // an id is taken (nothing is stored then). In the same atomic step, the
  // store obeys the stored maximum queue depths (ControlKind::kMaxQueueDepth,
  // ControlState::MaxQueueDepth): if the jobs of `jobs` for a queue with
  // one, added to its waiting (queued and retry_scheduled) jobs, would pass
  // it, nothing is stored and the result is CheckQueueDepth's error.
  virtual Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                        const EnqueueOptions& options,
                                                        TimePoint now) = 0;

  // Writes each change over the stored record if that record still matches
  // change.expect (status, epoch, lease token), appending change.append to
  // its history (AppendHistory). Per write: OK, kAborted (the record no
  // longer matches: a stale lease), kNotFound, or the store's error. With an
  // effect, it runs inside the write's atomic step before it commits (with
  // the store's native handle) and a non-OK status aborts that write alone.
  // The writes may share one transaction, but each commits or rolls back
  // alone. May move from `writes`.
  virtual std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) = 0;

  // Optional: true if WriteJobs applies JobWrite::guards as
  // Completion::guards says, in the write's atomic step (a store that keeps
  // the locks and claims beside the jobs; it then also overrides
  // CompletesGuards). Default false: Complete and CompleteBatch refuse a
  // completion with guards (kFailedPrecondition) before any write.
  virtual bool AppliesGuards() const { return false; }

  // Optional, for a store that holds its records in process memory: true
  // if it implements CompleteInPlace, which Complete and CompleteBatch then
  // call instead of computing the change from the delivered copy of the
  // record and handing it to WriteJobs. Default false.
  virtual bool CompletesInPlace() const { return false; }

  // Completes each delivery of `items` (its lease, its completion) on the
  // stored record itself, all under one hold of the store's lock, each in
  // its own atomic step: item.result is kNotFound for an unknown job,
  // kAborted if the record no longer matches the lease (status running,
  // epoch, token); else the item's `completion.transactional_effect` (if
  // set) runs inside the step, aborting that item alone on its error, then
  // engine::CompleteInPlace applies, its entry is appended (AppendHistory)
  // and the job re-indexed. Called only if CompletesInPlace(); the default
  // sets every result to kUnimplemented.
  virtual void CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint now);

  // Optional, for a store that copies deliveries out of process memory:
  // true if its LeaseJobs takes `*out` holding the spent deliveries of the
  // caller's previous Dequeue and assigns over them, so that their strings'
  // buffers serve again instead of being freed and allocated per job (see
  // ReuseDelivery). It must leave exactly this call's deliveries in `*out`.
  // Default false: DequeueInto empties `*out` before LeaseJobs.
  virtual bool ReusesDeliveries() const { return false; }

  // For a store that ReusesDeliveries(): the slot of its `n`th delivery of
  // this call, the spent one there or a new one at the end. Call with n =
  // 0, 1, 2, ... in turn, then resize `out` to the count.
  static Delivery& ReuseDelivery(std::vector<Delivery>& out, std::size_t n);

  // Leases up to request.max_jobs ready jobs of request.queues (empty: all),
  // highest priority first, then oldest ready_at, then job id (a store may
  // hand the jobs of one priority out to a queue's tenants in turn first:
  // the in-memory and SQLite stores do, see docs/operations.md), obeying the
  // stored control state in the same atomic step: jobs of a paused type or
  // a paused queue are passed over, and a type with a concurrency limit gets
  // at most (limit - its running jobs, counted in the store) more; passed
  // over jobs stay as they are (never leased and handed back). Each as
  // engine::Deliver(record, token, now) gives it, with a token unique per
  // delivery in this store (request.worker_id kept in it for diagnosis).
  // A store that AppliesGuards() takes each leased job's lock and claim in
  // the same step when asked (DequeueRequest::take_guards), as
  // Delivery::guards_taken says; others leave guards_taken false.
  // The deliveries go into `*out` (empty on entry, unless
  // ReusesDeliveries(); its capacity is the caller's to reuse); on an error
  // nothing may be left in it.
  // REQUIRES: request.max_jobs >= 1, out->empty() unless ReusesDeliveries().
  virtual Status LeaseJobs(const DequeueRequest& request, TimePoint now,
                           std::vector<Delivery>* out) = 0;

  // Extends the live lease to `expires_at` and keeps `checkpoint` if not
  // empty. kAborted for a stale lease (or a job no longer running),
  // kNotFound for an unknown job.
  virtual Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at,
                                   std::string_view checkpoint, TimePoint now) = 0;

  // Applies engine::RecoverLease(record, max_recoveries, now) to every
  // running job whose lease has expired (expires_at <= now), each in one
  // atomic step, and returns the changes made.
  virtual Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now) = 0;

  // The stored record with its whole history, or empty.
  virtual Result<std::optional<JobRecord>> LoadJob(std::string_view job_id) = 0;

  // Stored records matching `query`, with their history.
  virtual Result<std::vector<JobRecord>> QueryJobs(const JobQuery& query) = 0;

  // Another job than `self_job_id` with this dedup key that is running, or
  // succeeded at or after `since`.
  virtual Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                              std::string_view self_job_id,
                                                              TimePoint since) = 0;

  // Deletes jobs at `placement` (kDeadLettered or kFinal) whose finished_at
  // is before `older_than`. Returns how many.
  virtual Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than) = 0;

  // Count retention (TrimFinished), one chunk: deletes, in one atomic step,
  // up to `limit` jobs in final `status` that are not among the newest
  // `keep` of their job type -- newest by finished_at, then by job id (of
  // jobs finished at the same time the greater id is the newer), so that
  // which jobs go is deterministic. The oldest surplus go first. Returns how
  // many. A job with a dedup key finished at or after `dedup_floor` stays
  // (it counts among the surplus but is passed over); what a call looks at,
  // kept or not, counts against `limit`, so that a window full of such jobs
  // costs one bounded step. Fewer than `limit` deleted: no surplus is left,
  // or what is left waits for its window to pass. Jobs in any other status
  // are never touched. It must not scan every stored job: keep an
  // index by (status, job type, finished_at). Added after the others: the
  // default returns kUnimplemented, so a store written before still
  // compiles (its finished jobs are then retained by age only).
  // REQUIRES: status final, keep >= 0, limit >= 1.
  virtual Result<int> DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                        TimePoint dedup_floor, int limit);

  // Counts for Stats(), at `now` (see QueueStats).
  virtual Result<QueueStats> ReadStats(TimePoint now) = 0;

  // An operator's cancel of a running job (engine::Cancel gave `change`):
  // sets the stored record's cancel_requested, appends the change's newest
  // audit line and sets updated_at, if the record still matches
  // change.expect (kAborted / kNotFound otherwise). Nothing else is written:
  // the holder may renew the lease or store a checkpoint meanwhile.
  virtual Status RequestCancel(const JobChange& change) = 0;

  // The control rules stored, by kind, subject, failure class.
  virtual Result<ControlState> LoadControl() = 0;
  // Applies one control change and appends its audit line, atomically.
  virtual Status WriteControl(const ControlWrite& write) = 0;
  // The newest `limit` control audit lines, oldest first.
  virtual Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) = 0;
  // Stores each policy in place of the one stored for its job type.
  virtual Status StorePolicies(const std::vector<PublishedPolicy>& policies) = 0;
  // The stored policies, by job type.
  virtual Result<std::vector<PublishedPolicy>> LoadPolicies() = 0;

 private:
  // Enqueues envs[0, n) as one batch. REQUIRES: n >= 1.
  Result<std::vector<EnqueueResult>> EnqueueAll(const Envelope* envs, std::size_t n,
                                                const EnqueueOptions& options);
  // Loads a job for an operator action: kNotFound naming the id if absent.
  Result<JobRecord> MustLoad(std::string_view job_id, std::string_view what);
  // kFailedPrecondition for a completion with guards this store does not
  // apply (AppliesGuards).
  Status CheckGuards(const Completion& completion) const;
  // Writes one change computed outside the store.
  Status WriteOne(JobChange&& change);
  // REQUIRES: one.size() == 1.
  Status WriteOne(std::vector<JobWrite>& one);

  const std::shared_ptr<Clock> clock_;
};

// The DLQ view of a dead-lettered record (SPEC 7).
JOBPACT_EXPORT DlqEntry ToDlqEntry(const JobRecord& record);

}  // namespace jobpact

#endif  // JOBPACT_STORE_BACKEND_H_
