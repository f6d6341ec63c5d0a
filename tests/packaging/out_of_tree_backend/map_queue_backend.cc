// MapQueueBackend: the storage primitives of jobpact::StoreBackend over one
// std::map. Every change of a record is the engine's (jobpact/transitions.h);
// this file only finds, stores and counts records.
#include "map_queue_backend.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

namespace example {
namespace {

using jobpact::JobChange;
using jobpact::JobPlacement;
using jobpact::JobRecord;
using jobpact::JobStatus;
using jobpact::Result;
using jobpact::Status;
using jobpact::TimePoint;

// Stores `change` over `stored`: the engine's record, after the history the
// store has, keeping the stored checkpoint if the change carries none, and a
// audit and cancel request an operator stored while the job ran.
void Apply(JobRecord& stored, JobChange&& change) {
  std::vector<jobpact::Transition> history = std::move(stored.history);
  std::string checkpoint = std::move(stored.checkpoint);
  const bool was_running = change.expect.status == JobStatus::kRunning;
  const bool cancel = stored.cancel_requested;
  std::vector<std::string> audit = std::move(stored.audit);
  stored = std::move(change.record);
  if (stored.checkpoint.empty()) stored.checkpoint = std::move(checkpoint);
  if (was_running) {
    stored.audit = std::move(audit);
    stored.cancel_requested = stored.cancel_requested || cancel;
  }
  jobpact::AppendHistory(history, change.append);
  stored.history = std::move(history);
}

// An enqueue dedup match ignores jobs that ended without doing the work.
bool EndedWithoutEffect(JobStatus s) {
  return s == JobStatus::kDiscarded || s == JobStatus::kFailed || s == JobStatus::kDeadLettered;
}

}  // namespace

Result<std::vector<jobpact::EnqueueResult>> MapQueueBackend::InsertJobs(
    std::vector<JobChange>& jobs, const jobpact::EnqueueOptions& options, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const JobChange& c : jobs) {  // All or nothing: check every id first.
    if (jobs_.count(c.record.envelope.job_id) != 0) {
      return Status::AlreadyExists("job id already in use: " + c.record.envelope.job_id);
    }
  }
  // The maximum queue depths, checked before anything is stored.
  std::map<std::string, std::int64_t> adding;
  for (const JobChange& c : jobs) ++adding[c.record.envelope.queue];
  for (const auto& [queue, n] : adding) {
    std::optional<int> limit = control_.MaxQueueDepth(queue);
    if (!limit) continue;
    std::int64_t depth = 0;
    for (const auto& [id, r] : jobs_) {
      depth += r.envelope.queue == queue && (r.status == jobpact::JobStatus::kQueued ||
                                             r.status == jobpact::JobStatus::kRetryScheduled);
    }
    JOBPACT_RETURN_IF_ERROR(CheckQueueDepth(queue, depth, n, *limit));
  }
  std::vector<jobpact::EnqueueResult> out;
  for (JobChange& c : jobs) {
    const std::string& key = c.record.envelope.dedup_key;
    const JobRecord* dup = nullptr;  // The newest match within the window.
    for (const auto& [id, r] : jobs_) {
      if (!key.empty() && r.envelope.dedup_key == key &&
          now - r.enqueued_at < options.dedup_window && !EndedWithoutEffect(r.status) &&
          (dup == nullptr || r.enqueued_at >= dup->enqueued_at)) {
        dup = &r;
      }
    }
    if (dup != nullptr) {
      out.push_back({dup->envelope.job_id, true, dup->status});
      continue;
    }
    JobRecord& stored = jobs_[c.record.envelope.job_id];
    Apply(stored, std::move(c));
    if (!stored.envelope.queue.empty()) queues_.insert(stored.envelope.queue);
    out.push_back({stored.envelope.job_id, false, stored.status});
  }
  return out;
}

std::vector<Status> MapQueueBackend::WriteJobs(std::vector<jobpact::JobWrite>& writes) {
  std::vector<Status> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (jobpact::JobWrite& w : writes) out.push_back(WriteLocked(w));
  return out;
}

Status MapQueueBackend::WriteLocked(jobpact::JobWrite& w) {
  const std::string& id = w.change.record.envelope.job_id;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  const jobpact::WriteCondition& expect = w.change.expect;
  if (it->second.status != expect.status || it->second.epoch != expect.epoch ||
      it->second.lease_token != expect.lease_token) {
    return Status::Aborted("stale: job " + id + " changed since epoch " +
                           std::to_string(expect.epoch));
  }
  if (w.effect != nullptr) {  // Under mu_: the effect and the write are one step.
    Status s;
    try {
      s = (*w.effect)(nullptr);
    } catch (const std::exception& e) {
      s = Status::Internal(std::string("transactional_effect threw: ") + e.what());
    }
    if (!s.ok()) return s;
  }
  Apply(it->second, std::move(w.change));
  return Status::Ok();
}

std::vector<JobRecord*> MapQueueBackend::TakeTurns(const std::vector<JobRecord*>& sorted) const {
  std::vector<JobRecord*> out;
  out.reserve(sorted.size());
  for (auto band = sorted.begin(); band != sorted.end();) {
    const int priority = (*band)->envelope.priority;
    auto band_end = std::find_if(band, sorted.end(), [&](const JobRecord* r) {
      return r->envelope.priority != priority;
    });
    // Each tenant's jobs of this priority, in ready order; the turn starts
    // with the first tenant after the one served last.
    std::map<std::string_view, std::vector<JobRecord*>> by_tenant;
    for (auto it = band; it != band_end; ++it) by_tenant[(*it)->envelope.tenant_id].push_back(*it);
    std::vector<std::vector<JobRecord*>*> turn;
    for (auto it = by_tenant.upper_bound(last_tenant_); it != by_tenant.end(); ++it) {
      turn.push_back(&it->second);
    }
    for (auto it = by_tenant.begin(); it != by_tenant.upper_bound(last_tenant_); ++it) {
      turn.push_back(&it->second);
    }
    for (std::size_t round = 0; out.size() < static_cast<std::size_t>(band_end - sorted.begin());
         ++round) {
      for (std::vector<JobRecord*>* jobs : turn) {
        if (round < jobs->size()) out.push_back((*jobs)[round]);
      }
    }
    band = band_end;
  }
  return out;
}

Status MapQueueBackend::LeaseJobs(const jobpact::DequeueRequest& request, TimePoint now,
                                  std::vector<jobpact::Delivery>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  // The control state: paused types and queues are passed over, a type
  // with a concurrency limit gets at most (limit - running) more, and so
  // does each tenant of a queue with a per-tenant cap.
  std::map<std::string_view, int> room;
  std::map<std::string_view, int> caps;
  for (const jobpact::ControlRule& rule : control_.rules) {
    if (rule.kind == jobpact::ControlKind::kConcurrencyLimit) room[rule.subject] = rule.limit;
    if (rule.kind == jobpact::ControlKind::kTenantConcurrencyLimit) caps[rule.subject] = rule.limit;
  }
  std::map<std::pair<std::string_view, std::string_view>, int> tenant_room;
  auto tenant_left = [&](const jobpact::Envelope& env) -> int* {
    auto cap = caps.find(env.queue);
    if (cap == caps.end()) return nullptr;
    return &tenant_room.try_emplace({env.queue, env.tenant_id}, cap->second).first->second;
  };
  for (const auto& [id, r] : jobs_) {
    if (r.status != JobStatus::kRunning) continue;
    auto it = room.find(r.envelope.job_type);
    if (it != room.end()) --it->second;
    if (int* left = tenant_left(r.envelope)) --*left;
  }
  std::vector<JobRecord*> ready;
  for (auto& [id, r] : jobs_) {
    const auto& qs = request.queues;
    if (jobpact::PlacementOf(r, now) == JobPlacement::kReady &&
        (qs.empty() || std::find(qs.begin(), qs.end(), r.envelope.queue) != qs.end()) &&
        !control_.TypePaused(r.envelope.job_type) && !control_.QueuePaused(r.envelope.queue)) {
      ready.push_back(&r);
    }
  }
  auto order = [](const JobRecord* r) {  // Priority first, then oldest, then id.
    return std::make_tuple(-r->envelope.priority, r->ready_at,
                           std::string_view(r->envelope.job_id));
  };
  std::sort(ready.begin(), ready.end(),
            [&](const JobRecord* a, const JobRecord* b) { return order(a) < order(b); });
  for (JobRecord* r : TakeTurns(ready)) {
    if (static_cast<int>(out->size()) == request.max_jobs) break;
    auto limited = room.find(r->envelope.job_type);
    int* tenant = tenant_left(r->envelope);
    if ((limited != room.end() && limited->second <= 0) || (tenant != nullptr && *tenant <= 0)) {
      continue;
    }
    if (limited != room.end()) --limited->second;
    if (tenant != nullptr) --*tenant;
    last_tenant_ = r->envelope.tenant_id;
    std::string token = request.worker_id + "#" + std::to_string(++deliveries_);
    JOBPACT_ASSIGN_OR_RETURN(JobChange c, jobpact::engine::Deliver(*r, std::move(token), now));
    Apply(*r, std::move(c));
    out->push_back({*r, {r->envelope.job_id, r->lease_token, r->epoch, r->lease_expires_at,
                         r->cancel_requested}});
  }
  return Status::Ok();
}

Result<jobpact::Lease> MapQueueBackend::RenewLease(const jobpact::Lease& lease,
                                                   TimePoint expires_at,
                                                   std::string_view checkpoint, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(lease.job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + lease.job_id);
  JOBPACT_ASSIGN_OR_RETURN(
      JobChange c, jobpact::engine::Renew(it->second, lease, expires_at - now, checkpoint, now));
  Apply(it->second, std::move(c));
  const JobRecord& r = it->second;
  return jobpact::Lease{lease.job_id, r.lease_token, r.epoch, r.lease_expires_at,
                        r.cancel_requested};
}

Result<std::vector<JobChange>> MapQueueBackend::RecoverJobs(int max_recoveries, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobRecord*> expired;
  for (auto& [id, r] : jobs_) {
    if (r.status == JobStatus::kRunning && r.lease_expires_at <= now) expired.push_back(&r);
  }
  std::sort(expired.begin(), expired.end(), [](const JobRecord* a, const JobRecord* b) {
    return std::tie(a->lease_expires_at, a->envelope.job_id) <
           std::tie(b->lease_expires_at, b->envelope.job_id);
  });
  std::vector<JobChange> out;
  for (JobRecord* r : expired) {
    JOBPACT_ASSIGN_OR_RETURN(JobChange c, jobpact::engine::RecoverLease(*r, max_recoveries, now));
    out.push_back(c);
    Apply(*r, std::move(c));
  }
  return out;
}

Result<std::optional<JobRecord>> MapQueueBackend::LoadJob(std::string_view job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(it->second);
}

Result<std::vector<JobRecord>> MapQueueBackend::QueryJobs(const jobpact::JobQuery& q) {
  std::vector<JobRecord> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : jobs_) {  // In id order.
    if ((q.status && r.status != *q.status) || (q.job_type && r.envelope.job_type != *q.job_type) ||
        (q.queue && r.envelope.queue != *q.queue) || (q.reason && r.reason != *q.reason) ||
        (q.after_job_id && id <= *q.after_job_id) ||
        (q.failure_class &&
         (!r.last_failure || r.last_failure->failure_class != *q.failure_class))) {
      continue;
    }
    if ((q.finished_after || q.finished_before) &&
        (!r.finished_at || (q.finished_after && *r.finished_at < *q.finished_after) ||
         (q.finished_before && *r.finished_at >= *q.finished_before))) {
      continue;
    }
    out.push_back(r);
  }
  if (q.by_finished_at) {
    std::stable_sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
      return a.finished_at < b.finished_at;
    });
  }
  if (out.size() > q.limit) out.resize(q.limit);
  return out;
}

Result<std::optional<std::string>> MapQueueBackend::FindDuplicateJob(std::string_view dedup_key,
                                                                     std::string_view self_job_id,
                                                                     TimePoint since) {
  std::lock_guard<std::mutex> lock(mu_);
  const JobRecord* oldest = nullptr;
  for (const auto& [id, r] : jobs_) {
    const bool live = r.status == JobStatus::kRunning ||
                      (r.status == JobStatus::kSucceeded && r.finished_at >= since);
    if (r.envelope.dedup_key == dedup_key && id != self_job_id && live &&
        (oldest == nullptr || r.enqueued_at < oldest->enqueued_at)) {
      oldest = &r;
    }
  }
  if (oldest == nullptr) return std::optional<std::string>();
  return std::optional<std::string>(oldest->envelope.job_id);
}

Result<int> MapQueueBackend::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  std::lock_guard<std::mutex> lock(mu_);
  int deleted = 0;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const JobRecord& r = it->second;
    if (jobpact::PlacementOf(r, older_than) == placement &&
        r.finished_at.value_or(r.updated_at) < older_than) {
      it = jobs_.erase(it);
      ++deleted;
    } else {
      ++it;
    }
  }
  return deleted;
}

Result<jobpact::QueueStats> MapQueueBackend::ReadStats(TimePoint now) {
  jobpact::QueueStats stats;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& q : queues_) stats.queues[q];
  for (JobStatus s : jobpact::kAllJobStatuses) stats.by_status[s] = 0;
  for (const auto& [id, r] : jobs_) {
    ++stats.by_status[r.status];
    const JobPlacement p = jobpact::PlacementOf(r, now);
    if (p == JobPlacement::kDeadLettered) ++stats.dead_letters;
    if (r.envelope.queue.empty()) continue;  // Quarantined input has no queue.
    jobpact::QueueStats::PerQueue& pq = stats.queues[r.envelope.queue];
    if (p == JobPlacement::kReady || p == JobPlacement::kScheduled) ++pq.depth;
    if (p == JobPlacement::kLeased) ++pq.running;
    if (p == JobPlacement::kReady && now > r.ready_at) {
      pq.oldest_ready_age = std::max(pq.oldest_ready_age, now - r.ready_at);
    }
  }
  return stats;
}

Status MapQueueBackend::RequestCancel(const JobChange& c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(c.record.envelope.job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + c.record.envelope.job_id);
  JobRecord& r = it->second;
  if (r.status != c.expect.status || r.epoch != c.expect.epoch ||
      r.lease_token != c.expect.lease_token) {
    return Status::Aborted("stale: job " + r.envelope.job_id + " changed");
  }
  r.cancel_requested = true;
  if (!c.record.audit.empty()) r.audit.push_back(c.record.audit.back());
  r.updated_at = c.record.updated_at;
  return Status::Ok();
}

Result<jobpact::ControlState> MapQueueBackend::LoadControl() {
  std::lock_guard<std::mutex> lock(mu_);
  return control_;
}

Status MapQueueBackend::WriteControl(const jobpact::ControlWrite& w) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& rules = control_.rules;
  auto key = [](const auto& r) { return std::tie(r.kind, r.subject, r.failure_class); };
  auto it = std::find_if(rules.begin(), rules.end(), [&](const jobpact::ControlRule& r) {
    return w.set ? key(r) == key(*w.set) : key(r) == key(*w.clear);
  });
  if (w.set) {
    if (it != rules.end()) rules.erase(it);
    rules.push_back(*w.set);
    std::sort(rules.begin(), rules.end(),
              [&](const auto& a, const auto& b) { return key(a) < key(b); });
  } else {
    if (it == rules.end()) return Status::NotFound("no such control rule");
    rules.erase(it);
  }
  control_audit_.push_back(w.audit_line);
  return Status::Ok();
}

Result<std::vector<std::string>> MapQueueBackend::LoadControlAudit(std::size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t n = std::min(limit, control_audit_.size());
  return std::vector<std::string>(control_audit_.end() - static_cast<std::ptrdiff_t>(n),
                                  control_audit_.end());
}

Status MapQueueBackend::StorePolicies(const std::vector<jobpact::PublishedPolicy>& policies) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const jobpact::PublishedPolicy& p : policies) policies_[p.job_type] = p;
  return Status::Ok();
}

Result<std::vector<jobpact::PublishedPolicy>> MapQueueBackend::LoadPolicies() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<jobpact::PublishedPolicy> out;
  for (const auto& [type, p] : policies_) out.push_back(p);
  return out;
}

}  // namespace example
