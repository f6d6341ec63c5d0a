// StoreBackend: the QueueBackend methods, once for every store (see
// jobpact/store_backend.h). Each public method checks its arguments, asks
// the engine (jobpact/transitions.h) what the change is, hands the result to
// one storage primitive, and runs inside the one exception boundary.
#include "jobpact/store_backend.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "src/internal/backpressure.h"
#include "src/internal/guarded.h"
#include "src/internal/names.h"

namespace jobpact {

using internal::Guarded;

StoreBackend::StoreBackend(std::shared_ptr<Clock> clock)
    : clock_(clock ? std::move(clock) : SystemClock::Default()) {}

StoreBackend::~StoreBackend() = default;

Result<std::vector<EnqueueResult>> StoreBackend::EnqueueAll(const Envelope* envs, std::size_t n,
                                                            const EnqueueOptions& options) {
  const TimePoint now = clock_->Now();
  std::vector<JobChange> jobs;
  jobs.reserve(n);
  std::unordered_set<std::string_view> ids;
  for (std::size_t i = 0; i < n; ++i) {
    // Built in its slot: a JobChange is ~1 KB of strings to move otherwise.
    Status s = engine::NewJob(envs[i], now, &jobs.emplace_back());
    if (!s.ok()) {
      if (n == 1) return s;
      return Status(s.code(), "job " + std::to_string(i) + " of the batch: " + s.message());
    }
    if (n > 1 && !ids.insert(envs[i].job_id).second) {
      return Status::AlreadyExists("job id given twice in one batch: " + envs[i].job_id);
    }
  }
  return InsertJobs(jobs, options, now);
}

Status StoreBackend::CheckQueueDepth(std::string_view queue, std::int64_t depth,
                                     std::int64_t adding, std::int64_t limit) {
  return internal::CheckQueueDepth(queue, depth, adding, limit);
}

Result<EnqueueResult> StoreBackend::Enqueue(const Envelope& env, const EnqueueOptions& options) {
  return Guarded("Enqueue", [&]() -> Result<EnqueueResult> {
    JOBPACT_ASSIGN_OR_RETURN(std::vector<EnqueueResult> r, EnqueueAll(&env, 1, options));
    return std::move(r.front());
  });
}

Result<std::vector<EnqueueResult>> StoreBackend::EnqueueBatch(const std::vector<Envelope>& envs,
                                                              const EnqueueOptions& options) {
  return Guarded("EnqueueBatch", [&]() -> Result<std::vector<EnqueueResult>> {
    if (envs.empty()) return std::vector<EnqueueResult>{};
    return EnqueueAll(envs.data(), envs.size(), options);
  });
}

Result<std::string> StoreBackend::DeadLetterInvalid(std::string_view raw,
                                                    const std::vector<FieldError>& problems) {
  return Guarded("DeadLetterInvalid", [&]() -> Result<std::string> {
    const TimePoint now = clock_->Now();
    // A readable id that is already taken belongs to another job: never
    // overwrite it, file this input under a new id instead.
    std::string id = engine::InvalidEnvelopeId(raw);
    for (int tries = 0; tries < 8; ++tries) {
      if (id.empty()) id = NewJobId(now);
      std::vector<JobChange> jobs;
      jobs.push_back(engine::InvalidEnvelope(raw, problems, id, now));
      EnqueueOptions no_dedup;
      no_dedup.dedup_window = Duration::zero();
      Result<std::vector<EnqueueResult>> r = InsertJobs(jobs, no_dedup, now);
      if (r.ok()) return id;
      if (r.status().code() != StatusCode::kAlreadyExists) return r.status();
      id.clear();
    }
    return Status::Internal("DeadLetterInvalid: no free job id after 8 tries");
  });
}

Result<std::vector<Delivery>> StoreBackend::Dequeue(const DequeueRequest& request) {
  std::vector<Delivery> out;
  JOBPACT_RETURN_IF_ERROR(DequeueInto(request, &out));
  return out;
}

Delivery& StoreBackend::ReuseDelivery(std::vector<Delivery>& out, std::size_t n) {
  return n < out.size() ? out[n] : out.emplace_back();
}

Status StoreBackend::DequeueInto(const DequeueRequest& request, std::vector<Delivery>* out) {
  if (!ReusesDeliveries()) out->clear();
  Status s = Guarded("Dequeue", [&]() -> Status {
    if (request.max_jobs < 1) return Status::InvalidArgument("max_jobs must be >= 1");
    for (const std::string& q : request.queues) {
      if (!internal::IsSafeName(q)) {
        return Status::InvalidArgument("Dequeue: queue name '" + q +
                                       "' is not a safe name ([A-Za-z0-9._:-], at most 255)");
      }
    }
    return LeaseJobs(request, clock_->Now(), out);
  });
  if (!s.ok()) out->clear();
  return s;
}

Result<Lease> StoreBackend::Renew(const Lease& lease, Duration extension,
                                  std::string_view checkpoint) {
  return Guarded("Renew", [&]() -> Result<Lease> {
    if (extension <= Duration::zero()) return Status::InvalidArgument("extension must be > 0");
    if (lease.job_id.empty()) return Status::InvalidArgument("Renew: lease has no job id");
    const TimePoint now = clock_->Now();
    return RenewLease(lease, now + extension, checkpoint, now);
  });
}

Status StoreBackend::WriteOne(std::vector<JobWrite>& one) {
  std::vector<Status> out = WriteJobs(one);
  if (out.size() != 1) return Status::Internal("WriteJobs returned a result per write, not 1");
  return std::move(out.front());
}

Status StoreBackend::WriteOne(JobChange&& change) {
  std::vector<JobWrite> writes(1);
  writes[0].change = std::move(change);
  return WriteOne(writes);
}

Status StoreBackend::CheckGuards(const Completion& completion) const {
  if (!completion.guards.any() || AppliesGuards()) return Status::Ok();
  return Status::FailedPrecondition(
      "Complete: this store does not release locks or record idempotency claims with a "
      "completion (Completion::guards); release and record them through the LockStore and "
      "IdempotencyStore");
}

Status StoreBackend::Complete(const Delivery& delivery, const Completion& completion) {
  return Guarded("Complete", [&]() -> Status {
    JOBPACT_RETURN_IF_ERROR(CheckGuards(completion));
    if (CompletesInPlace()) {
      InPlaceCompletion one{&delivery, &completion, {}};
      CompleteInPlace(&one, 1, clock_->Now());
      return one.result;
    }
    // The engine writes the change into the write itself (no ~1 KB move).
    std::vector<JobWrite> writes(1);
    JOBPACT_RETURN_IF_ERROR(
        engine::Complete(delivery, completion, clock_->Now(), &writes[0].change));
    if (completion.transactional_effect) writes[0].effect = &completion.transactional_effect;
    if (completion.guards.any()) writes[0].guards = &completion.guards;
    return WriteOne(writes);
  });
}

Status StoreBackend::Complete(Delivery&& delivery, const Completion& completion) {
  return Complete(static_cast<const Delivery&>(delivery), completion);
}

void StoreBackend::CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint) {
  for (std::size_t i = 0; i < n; ++i) {
    items[i].result =
        Status::Unimplemented("CompleteInPlace: this store does not complete in place");
  }
}

std::vector<Status> StoreBackend::CompleteBatch(const std::vector<CompletionRequest>& requests) {
  std::vector<Status> out(requests.size());
  Status failed = Guarded("CompleteBatch", [&]() -> Status {
    const TimePoint now = clock_->Now();
    if (CompletesInPlace()) {
      std::vector<InPlaceCompletion> items;
      std::vector<std::size_t> index;  // items[k] is requests[index[k]].
      items.reserve(requests.size());
      for (std::size_t i = 0; i < requests.size(); ++i) {
        out[i] = CheckGuards(requests[i].completion);
        if (!out[i].ok()) continue;
        items.push_back(InPlaceCompletion{&requests[i].delivery, &requests[i].completion, {}});
        index.push_back(i);
      }
      if (!items.empty()) CompleteInPlace(items.data(), items.size(), now);
      for (std::size_t k = 0; k < items.size(); ++k) out[index[k]] = std::move(items[k].result);
      return Status::Ok();
    }
    std::vector<JobWrite> writes;
    std::vector<std::size_t> index;  // writes[k] is requests[index[k]].
    writes.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const Completion& c = requests[i].completion;
      out[i] = CheckGuards(c);
      if (!out[i].ok()) continue;
      JobWrite& w = writes.emplace_back();
      Status s = engine::Complete(requests[i].delivery, c, now, &w.change);
      if (!s.ok()) {
        out[i] = std::move(s);
        writes.pop_back();
        continue;
      }
      w.effect = c.transactional_effect ? &c.transactional_effect : nullptr;
      w.guards = c.guards.any() ? &c.guards : nullptr;
      index.push_back(i);
    }
    if (writes.empty()) return Status::Ok();
    std::vector<Status> written = WriteJobs(writes);
    if (written.size() != writes.size()) {
      return Status::Internal("WriteJobs returned " + std::to_string(written.size()) +
                              " results for " + std::to_string(writes.size()) + " writes");
    }
    for (std::size_t k = 0; k < written.size(); ++k) out[index[k]] = std::move(written[k]);
    return Status::Ok();
  });
  if (!failed.ok()) {
    for (Status& s : out) {
      if (s.ok()) s = failed;
    }
  }
  return out;
}

Result<std::vector<LeaseRecovery>> StoreBackend::RecoverExpiredLeases(int max_recoveries) {
  return Guarded("RecoverExpiredLeases", [&]() -> Result<std::vector<LeaseRecovery>> {
    if (max_recoveries < 0) return Status::InvalidArgument("max_recoveries must be >= 0");
    JOBPACT_ASSIGN_OR_RETURN(std::vector<JobChange> changes,
                             RecoverJobs(max_recoveries, clock_->Now()));
    std::vector<LeaseRecovery> out;
    out.reserve(changes.size());
    for (const JobChange& c : changes) out.push_back(engine::RecoveryReport(c));
    return out;
  });
}

Result<JobRecord> StoreBackend::MustLoad(std::string_view job_id, std::string_view what) {
  if (job_id.empty()) return Status::InvalidArgument(std::string(what) + ": empty job id");
  JOBPACT_ASSIGN_OR_RETURN(std::optional<JobRecord> r, LoadJob(job_id));
  if (!r) return Status::NotFound(std::string(what) + ": no job " + std::string(job_id));
  return std::move(*r);
}

Result<JobRecord> StoreBackend::Get(std::string_view job_id) {
  return Guarded("Get", [&]() -> Result<JobRecord> { return MustLoad(job_id, "Get"); });
}

Result<std::optional<std::string>> StoreBackend::FindDuplicate(std::string_view dedup_key,
                                                               std::string_view self_job_id,
                                                               TimePoint since) {
  return Guarded("FindDuplicate", [&]() -> Result<std::optional<std::string>> {
    if (dedup_key.empty()) return std::optional<std::string>();
    return FindDuplicateJob(dedup_key, self_job_id, since);
  });
}

DlqEntry ToDlqEntry(const JobRecord& r) {
  DlqEntry e;
  e.job_id = r.envelope.job_id;
  e.job_type = r.envelope.job_type;
  e.queue = r.envelope.queue;
  e.created_at = r.envelope.created_at.value_or(r.enqueued_at);
  e.attempts = r.envelope.attempt;
  e.reason = r.reason;
  e.last_failure = r.last_failure;
  e.trace_id = r.envelope.trace_id;
  e.dead_lettered_at = r.finished_at.value_or(r.updated_at);
  e.history = r.history;
  e.audit = r.audit;
  if (r.raw_input) {
    e.raw_envelope = *r.raw_input;
    e.payload = *r.raw_input;
  } else {
    e.payload = r.envelope.payload;
  }
  return e;
}

Result<std::vector<DlqEntry>> StoreBackend::ListDeadLetters(const DlqFilter& f) {
  return Guarded("ListDeadLetters", [&]() -> Result<std::vector<DlqEntry>> {
    JobQuery q;
    q.status = JobStatus::kDeadLettered;
    q.job_type = f.job_type;
    q.reason = f.reason;
    q.failure_class = f.failure_class;
    q.finished_after = f.dead_lettered_after;
    q.finished_before = f.dead_lettered_before;
    q.limit = f.limit;
    q.by_finished_at = true;
    JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> records, QueryJobs(q));
    std::vector<DlqEntry> out;
    out.reserve(records.size());
    for (const JobRecord& r : records) out.push_back(ToDlqEntry(r));
    return out;
  });
}

Result<DlqEntry> StoreBackend::GetDeadLetter(std::string_view job_id) {
  return Guarded("GetDeadLetter", [&]() -> Result<DlqEntry> {
    JOBPACT_ASSIGN_OR_RETURN(std::optional<JobRecord> r, LoadJob(job_id));
    if (!r || r->status != JobStatus::kDeadLettered) {
      return Status::NotFound("not in the DLQ: " + std::string(job_id));
    }
    return ToDlqEntry(*r);
  });
}

Status StoreBackend::Replay(std::string_view job_id, const DlqAction& action) {
  return Guarded("Replay", [&]() -> Status {
    JOBPACT_ASSIGN_OR_RETURN(JobRecord r, MustLoad(job_id, "Replay"));
    Result<JobChange> c = engine::Replay(r, action, clock_->Now());
    if (!c.ok()) return c.status();
    return WriteOne(std::move(*c));
  });
}

Status StoreBackend::Discard(std::string_view job_id, const DlqAction& action) {
  return Guarded("Discard", [&]() -> Status {
    JOBPACT_ASSIGN_OR_RETURN(JobRecord r, MustLoad(job_id, "Discard"));
    Result<JobChange> c = engine::Discard(r, action, clock_->Now());
    if (!c.ok()) return c.status();
    return WriteOne(std::move(*c));
  });
}

Result<int> StoreBackend::PurgeDeadLetters(TimePoint older_than) {
  return Guarded("PurgeDeadLetters",
                 [&] { return DeleteJobs(JobPlacement::kDeadLettered, older_than); });
}

Result<int> StoreBackend::PurgeFinished(TimePoint older_than) {
  return Guarded("PurgeFinished", [&] { return DeleteJobs(JobPlacement::kFinal, older_than); });
}

Result<int> StoreBackend::TrimFinished(const FinishedRetention& keep) {
  return Guarded("TrimFinished", [&]() -> Result<int> {
    const std::pair<JobStatus, const std::optional<std::int64_t>*> counts[] = {
        {JobStatus::kSucceeded, &keep.succeeded},
        {JobStatus::kFailed, &keep.failed},
        {JobStatus::kDiscarded, &keep.discarded}};
    for (const auto& [status, n] : counts) {
      if (*n && **n < 0) {
        return Status::InvalidArgument("TrimFinished: the count kept for " +
                                       std::string(JobStatusName(status)) + " jobs is " +
                                       std::to_string(**n) + "; it must be >= 0");
      }
    }
    if (keep.max_jobs < 0) {
      return Status::InvalidArgument("TrimFinished: max_jobs is " + std::to_string(keep.max_jobs) +
                                     "; it must be >= 0 (0: no cap)");
    }
    std::int64_t total = 0;
    for (const auto& [status, n] : counts) {
      if (!*n) continue;
      const TimePoint before = status == JobStatus::kSucceeded && keep.keep_succeeded_since
                                   ? *keep.keep_succeeded_since
                                   : TimePoint::max();
      while (keep.max_jobs == 0 || total < keep.max_jobs) {
        std::int64_t chunk = FinishedRetention::kTrimChunk;
        if (keep.max_jobs != 0) chunk = std::min(chunk, keep.max_jobs - total);
        JOBPACT_ASSIGN_OR_RETURN(int deleted,
                                 DeleteSurplusJobs(status, **n, before, static_cast<int>(chunk)));
        total += deleted;
        if (deleted < chunk) break;
      }
    }
    return static_cast<int>(std::min<std::int64_t>(total, std::numeric_limits<int>::max()));
  });
}

Result<int> StoreBackend::DeleteSurplusJobs(JobStatus, std::int64_t, TimePoint, int) {
  return Status::Unimplemented("TrimFinished: the " + std::string(Name()) +
                               " store does not trim finished jobs by count (it implements no "
                               "DeleteSurplusJobs); they are retained by age only");
}

Result<QueueStats> StoreBackend::Stats() {
  return Guarded("Stats", [&] { return ReadStats(clock_->Now()); });
}

}  // namespace jobpact
