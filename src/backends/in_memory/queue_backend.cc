// InMemoryQueueBackend: the reference store. The storage primitives of
// StoreBackend over standard containers under one mutex; every change of a
// record is the engine's (jobpact/transitions.h).
//
// The store's types and layout are in queue_store.h. This file: the
// writes (insert, conditional writes, completions, cancel requests), the
// control state and policies, and the public methods.
#include "jobpact/in_memory/queue_backend.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "src/backends/in_memory/queue_store.h"
#include "src/internal/backpressure.h"
#include "src/internal/guarded.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace in_memory_internal {

std::uint64_t NextStoreId() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

}  // namespace in_memory_internal

namespace {

// Control audit lines kept in memory.
constexpr std::size_t kMaxControlAudit = 1000;

Status Stale(const JobRecord& r, const WriteCondition& expect) {
  if (r.status != expect.status) {
    return Status::Aborted("stale: job " + r.envelope.job_id + " is " +
                           std::string(JobStatusName(r.status)) + ", not " +
                           std::string(JobStatusName(expect.status)));
  }
  return Status::Aborted("stale lease: job " + r.envelope.job_id + " epoch " +
                         std::to_string(expect.epoch) + " was superseded by epoch " +
                         std::to_string(r.epoch));
}

bool Matches(const JobRecord& r, const WriteCondition& expect) {
  return r.status == expect.status && r.epoch == expect.epoch &&
         r.lease_token == expect.lease_token;
}

}  // namespace

using in_memory_internal::Entry;

Result<std::vector<EnqueueResult>> InMemoryQueueBackend::Impl::InsertJobs(
    std::vector<JobChange>& jobs, const EnqueueOptions& options, TimePoint now) {
  internal::MutexLock lock(mu_);
  // Check everything first so that the batch is stored whole or not at
  // all. A single job is checked by its insertion instead (one lookup).
  const bool single = jobs.size() == 1;
  for (const JobChange& c : jobs) {
    if (!single && jobs_.find(c.record.envelope.job_id) != jobs_.end()) {
      return IdInUse(c.record.envelope.job_id);
    }
  }
  if (has_depth_limits_) JOBPACT_RETURN_IF_ERROR(CheckDepthLimits(jobs));
  std::vector<EnqueueResult> out;
  out.reserve(jobs.size());
  for (JobChange& c : jobs) {
    const bool has_dedup_key = !c.record.envelope.dedup_key.empty();
    if (has_dedup_key) {
      if (std::optional<EnqueueResult> dup =
              FindEnqueueDuplicate(c.record.envelope.dedup_key, options, now)) {
        if (single && jobs_.count(c.record.envelope.job_id) != 0) {
          return IdInUse(c.record.envelope.job_id);
        }
        out.push_back(std::move(*dup));
        continue;
      }
    }
    auto entry = std::make_unique<Entry>(std::move(c.record));
    Entry& e = *entry;
    auto [it, inserted] = jobs_.try_emplace(Id(e.record.envelope.job_id), nullptr);
    if (!inserted) {  // Only a single job gets here (checked above otherwise).
      c.record = std::move(e.record);
      return IdInUse(c.record.envelope.job_id);
    }
    it->second = std::move(entry);
    e.queue = QueueOf(e.record);
    // Room for the three entries of a job that runs once (enqueued,
    // delivered, its outcome), taken here on the enqueuing thread: the
    // delivery and the completion then append without allocating, on
    // the workers, whose arenas pay most for every new retained block.
    c.append.reserve(3);
    AppendHistory(e.record.history, std::move(c.append));
    Index(it->first, e, c.placement);
    if (has_dedup_key) AddDedupHolder(e);
    out.push_back(EnqueueResult{e.record.envelope.job_id, false, e.record.status});
  }
  return out;
}

std::vector<Status> InMemoryQueueBackend::Impl::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out;
  out.reserve(writes.size());
  internal::MutexLock lock(mu_);
  for (JobWrite& w : writes) out.push_back(WriteLocked(w));
  return out;
}

void InMemoryQueueBackend::Impl::CompleteInPlace(InPlaceCompletion* items, std::size_t n,
                                                 TimePoint now) {
  internal::MutexLock lock(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    items[i].result = CompleteLocked(*items[i].delivery, *items[i].completion, now);
  }
}

// The entry of a delivery's job: where the lease step noted it (see
// LeaseJobs), if no entry was erased since, so it is alive; else by id.
// Spares the completion a lookup in jobs_: a few cache misses per job,
// under the mutex the other workers wait on.
Entry* InMemoryQueueBackend::Impl::EntryOf(const Delivery& d) JOBPACT_REQUIRES(mu_) {
  const Delivery::StoreNote& note = d.store_note;
  if (note.store == id_ && note.version == erasures_) {
    Entry* e = static_cast<Entry*>(note.record);
    if (e->record.envelope.job_id == d.lease.job_id) return e;
  }
  auto it = jobs_.find(d.lease.job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Status InMemoryQueueBackend::Impl::CompleteLocked(const Delivery& d, const Completion& completion,
                                                  TimePoint now) JOBPACT_REQUIRES(mu_) {
  const Lease& lease = d.lease;
  Entry* found = EntryOf(d);
  if (found == nullptr) return Status::NotFound("no job " + lease.job_id);
  Entry& e = *found;
  const Id id(e.record.envelope.job_id);
  if (e.record.status != JobStatus::kRunning || e.record.epoch != lease.epoch ||
      e.record.lease_token != lease.token) {
    WriteCondition expect;
    expect.status = JobStatus::kRunning;
    expect.epoch = lease.epoch;
    return Stale(e.record, expect);
  }
  if (completion.transactional_effect) {
    // Runs under mu_, so that its effect and the write are one step.
    Status s = internal::Guarded("transactional_effect",
                                 [&] { return completion.transactional_effect(nullptr); });
    if (!s.ok()) return s;
  }
  Unindex(id, e);
  Status s = engine::CompleteInPlace(e.record, lease, completion, now, &rest_);
  if (s.ok()) AppendHistory(e.record.history, std::move(rest_.append));
  Index(id, e, s.ok() ? rest_.placement : e.placed);
  return s;
}

// Backpressure (ControlKind::kMaxQueueDepth): OK if the jobs fit in
// their queues' maximum depths.
Status InMemoryQueueBackend::Impl::CheckDepthLimits(const std::vector<JobChange>& jobs)
    JOBPACT_REQUIRES(mu_) {
  for (const auto& [queue, adding] : internal::JobsPerQueue(jobs)) {
    std::optional<int> limit = control_.MaxQueueDepth(queue);
    if (!limit) continue;
    std::int64_t depth = 0;
    for (auto it = queues_.lower_bound(QueueKeyView(queue, "", ""));
         it != queues_.end() && std::get<0>(it->first) == queue; ++it) {
      depth += static_cast<std::int64_t>(it->second.ready.size()) + it->second.scheduled;
    }
    JOBPACT_RETURN_IF_ERROR(internal::CheckQueueDepth(queue, depth, adding, *limit));
  }
  return Status::Ok();
}

Status InMemoryQueueBackend::Impl::RequestCancel(const JobChange& c) {
  internal::MutexLock lock(mu_);
  auto it = jobs_.find(c.record.envelope.job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + c.record.envelope.job_id);
  JobRecord& r = it->second->record;
  if (!Matches(r, c.expect)) return Stale(r, c.expect);
  r.cancel_requested = true;
  if (!c.record.audit.empty()) r.audit.push_back(c.record.audit.back());
  r.updated_at = c.record.updated_at;
  return Status::Ok();
}

Result<ControlState> InMemoryQueueBackend::Impl::LoadControl() {
  internal::MutexLock lock(mu_);
  return control_;
}

Status InMemoryQueueBackend::Impl::WriteControl(const ControlWrite& w) {
  internal::MutexLock lock(mu_);
  std::vector<ControlRule>& rules = control_.rules;
  const ControlRuleKey key =
      w.set ? ControlRuleKey{w.set->kind, w.set->subject, w.set->failure_class} : *w.clear;
  auto same = [&](const ControlRule& r) {
    return r.kind == key.kind && r.subject == key.subject && r.failure_class == key.failure_class;
  };
  auto it = std::find_if(rules.begin(), rules.end(), same);
  if (w.set) {
    if (it != rules.end()) {
      *it = *w.set;
    } else {
      rules.push_back(*w.set);
      std::sort(rules.begin(), rules.end(), [](const ControlRule& a, const ControlRule& b) {
        return std::tie(a.kind, a.subject, a.failure_class) <
               std::tie(b.kind, b.subject, b.failure_class);
      });
    }
  } else {
    if (it == rules.end()) return Status::NotFound("no such control rule");
    rules.erase(it);
  }
  has_depth_limits_ = std::any_of(rules.begin(), rules.end(), [](const ControlRule& r) {
    return r.kind == ControlKind::kMaxQueueDepth;
  });
  control_audit_.push_back(w.audit_line);
  if (control_audit_.size() > kMaxControlAudit) control_audit_.pop_front();
  return Status::Ok();
}

Result<std::vector<std::string>> InMemoryQueueBackend::Impl::LoadControlAudit(std::size_t limit) {
  internal::MutexLock lock(mu_);
  const std::size_t n = std::min(limit, control_audit_.size());
  return std::vector<std::string>(control_audit_.end() - static_cast<std::ptrdiff_t>(n),
                                  control_audit_.end());
}

Status InMemoryQueueBackend::Impl::StorePolicies(const std::vector<PublishedPolicy>& policies) {
  internal::MutexLock lock(mu_);
  for (const PublishedPolicy& p : policies) policies_[p.job_type] = p;
  return Status::Ok();
}

Result<std::vector<PublishedPolicy>> InMemoryQueueBackend::Impl::LoadPolicies() {
  internal::MutexLock lock(mu_);
  std::vector<PublishedPolicy> out;
  out.reserve(policies_.size());
  for (const auto& [type, p] : policies_) out.push_back(p);
  return out;
}

// One conditional write.
Status InMemoryQueueBackend::Impl::WriteLocked(JobWrite& w) JOBPACT_REQUIRES(mu_) {
  auto it = jobs_.find(w.change.record.envelope.job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + w.change.record.envelope.job_id);
  Entry& e = *it->second;
  if (!Matches(e.record, w.change.expect)) return Stale(e.record, w.change.expect);
  if (w.effect != nullptr) {
    // Runs under mu_, so that its effect and the write are one step.
    Status s = internal::Guarded("transactional_effect", [&] { return (*w.effect)(nullptr); });
    if (!s.ok()) return s;
  }
  Apply(it->first, e, std::move(w.change));
  return Status::Ok();
}

// Stores `c` over `e` and re-indexes it.
void InMemoryQueueBackend::Impl::Apply(Id id, Entry& e, JobChange&& c) JOBPACT_REQUIRES(mu_) {
  Unindex(id, e);
  Store(e.record, std::move(c.record), c.expect.status == JobStatus::kRunning);
  AppendHistory(e.record.history, std::move(c.append));
  Index(id, e, c.placement);
}

// Writes a change's record over the stored one, moving field by field:
// every member of JobRecord but the history (appended apart) and, of the
// envelope, all but attempt and max_attempts, which no change alters (see
// JobChange; the indexes hold views of the stored envelope's strings). An
// empty checkpoint keeps the stored one; a change of a running job keeps
// the audit and cancel request an operator's cancel may have stored since
// the change was computed.
void InMemoryQueueBackend::Impl::Store(JobRecord& to, JobRecord&& from, bool was_running) {
  to.envelope.attempt = from.envelope.attempt;
  to.envelope.max_attempts = from.envelope.max_attempts;
  to.status = from.status;
  to.enqueued_at = from.enqueued_at;
  to.ready_at = from.ready_at;
  to.updated_at = from.updated_at;
  to.finished_at = from.finished_at;
  to.epoch = from.epoch;
  to.lease_recoveries = from.lease_recoveries;
  to.lock_waits = from.lock_waits;
  to.previous_delay = from.previous_delay;
  if (!from.checkpoint.empty()) to.checkpoint = std::move(from.checkpoint);
  to.last_failure = std::move(from.last_failure);
  to.reason = std::move(from.reason);
  to.result = std::move(from.result);
  to.lease_token = std::move(from.lease_token);
  to.lease_expires_at = from.lease_expires_at;
  to.raw_input = std::move(from.raw_input);
  if (was_running) {
    to.cancel_requested = to.cancel_requested || from.cancel_requested;
  } else {
    to.audit = std::move(from.audit);
    to.cancel_requested = from.cancel_requested;
  }
}

Status InMemoryQueueBackend::Impl::IdInUse(const std::string& job_id) {
  return Status::AlreadyExists("job id already in use: " + job_id);
}

InMemoryQueueBackend::InMemoryQueueBackend(std::shared_ptr<Clock> clock)
    : StoreBackend(std::move(clock)), impl_(std::make_unique<Impl>()) {}
InMemoryQueueBackend::~InMemoryQueueBackend() = default;

Result<std::vector<EnqueueResult>> InMemoryQueueBackend::InsertJobs(std::vector<JobChange>& jobs,
                                                                    const EnqueueOptions& options,
                                                                    TimePoint now) {
  return impl_->InsertJobs(jobs, options, now);
}
std::vector<Status> InMemoryQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  return impl_->WriteJobs(writes);
}
void InMemoryQueueBackend::CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint now) {
  impl_->CompleteInPlace(items, n, now);
}
Status InMemoryQueueBackend::LeaseJobs(const DequeueRequest& request, TimePoint now,
                                       std::vector<Delivery>* out) {
  return impl_->LeaseJobs(request, now, *out);
}
Result<Lease> InMemoryQueueBackend::RenewLease(const Lease& lease, TimePoint expires_at,
                                               std::string_view checkpoint, TimePoint now) {
  return impl_->RenewLease(lease, expires_at, checkpoint, now);
}
Result<std::vector<JobChange>> InMemoryQueueBackend::RecoverJobs(int max_recoveries,
                                                                 TimePoint now) {
  return impl_->RecoverJobs(max_recoveries, now);
}
Result<std::optional<JobRecord>> InMemoryQueueBackend::LoadJob(std::string_view job_id) {
  return impl_->LoadJob(job_id);
}
Result<std::vector<JobRecord>> InMemoryQueueBackend::QueryJobs(const JobQuery& query) {
  return impl_->QueryJobs(query);
}
Result<std::optional<std::string>> InMemoryQueueBackend::FindDuplicateJob(
    std::string_view dedup_key, std::string_view self_job_id, TimePoint since) {
  return impl_->FindDuplicateJob(dedup_key, self_job_id, since);
}
Result<int> InMemoryQueueBackend::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  return impl_->DeleteJobs(placement, older_than);
}
Result<int> InMemoryQueueBackend::DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                                    TimePoint dedup_floor, int limit) {
  return impl_->DeleteSurplusJobs(status, keep, dedup_floor, limit);
}
Result<QueueStats> InMemoryQueueBackend::ReadStats(TimePoint now) { return impl_->ReadStats(now); }
Status InMemoryQueueBackend::RequestCancel(const JobChange& change) {
  return impl_->RequestCancel(change);
}
Result<ControlState> InMemoryQueueBackend::LoadControl() { return impl_->LoadControl(); }
Status InMemoryQueueBackend::WriteControl(const ControlWrite& write) {
  return impl_->WriteControl(write);
}
Result<std::vector<std::string>> InMemoryQueueBackend::LoadControlAudit(std::size_t limit) {
  return impl_->LoadControlAudit(limit);
}
Status InMemoryQueueBackend::StorePolicies(const std::vector<PublishedPolicy>& policies) {
  return impl_->StorePolicies(policies);
}
Result<std::vector<PublishedPolicy>> InMemoryQueueBackend::LoadPolicies() {
  return impl_->LoadPolicies();
}

std::size_t InMemoryQueueBackend::Size() const { return impl_->Size(); }
std::size_t InMemoryQueueBackend::ReadyCount() {
  return internal::Guarded(
             "ReadyCount",
             [&]() -> Result<std::size_t> { return impl_->ReadyCount(clock()->Now()); })
      .value_or(0);
}
Status InMemoryQueueBackend::ForceExpireLease(std::string_view job_id) {
  return internal::Guarded("ForceExpireLease",
                           [&] { return impl_->ForceExpireLease(job_id, clock()->Now()); });
}

}  // namespace jobpact
