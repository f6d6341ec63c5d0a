// InMemoryQueueBackend (queue_store.h), the operator side: load, query,
// dedup lookup, the age purge and the count trim, stats.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "src/backends/in_memory/queue_store.h"
#include "src/internal/mutex.h"

namespace jobpact {

using in_memory_internal::FinalSlot;

Result<std::optional<JobRecord>> InMemoryQueueBackend::Impl::LoadJob(std::string_view job_id) {
  internal::MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(it->second->record);
}

Result<std::vector<JobRecord>> InMemoryQueueBackend::Impl::QueryJobs(const JobQuery& q) {
  std::vector<JobRecord> out;
  internal::MutexLock lock(mu_);
  auto consider = [&](const JobRecord& r) {
    if (q.status && r.status != *q.status) return;
    if (q.job_type && r.envelope.job_type != *q.job_type) return;
    if (q.queue && r.envelope.queue != *q.queue) return;
    if (q.after_job_id && r.envelope.job_id <= *q.after_job_id) return;
    if (q.reason && r.reason != *q.reason) return;
    if (q.failure_class && (!r.last_failure || r.last_failure->failure_class != *q.failure_class)) {
      return;
    }
    if (q.finished_after || q.finished_before) {
      if (!r.finished_at) return;
      if (q.finished_after && *r.finished_at < *q.finished_after) return;
      if (q.finished_before && *r.finished_at >= *q.finished_before) return;
    }
    out.push_back(r);
  };
  if (q.by_finished_at && q.status == JobStatus::kDeadLettered) {
    auto it = q.finished_after ? dlq_.lower_bound(TimeKey{*q.finished_after, Id()}) : dlq_.begin();
    for (; it != dlq_.end() && out.size() < q.limit; ++it) {
      if (q.finished_before && it->first >= *q.finished_before) break;
      consider(jobs_.find(it->second)->second->record);
    }
    return out;
  }
  for (const auto& [id, e] : jobs_) consider(e->record);
  std::sort(out.begin(), out.end(), [&](const JobRecord& a, const JobRecord& b) {
    if (q.by_finished_at && a.finished_at != b.finished_at) return a.finished_at < b.finished_at;
    return a.envelope.job_id < b.envelope.job_id;
  });
  if (out.size() > q.limit) out.resize(q.limit);
  return out;
}

Result<std::optional<std::string>> InMemoryQueueBackend::Impl::FindDuplicateJob(
    std::string_view dedup_key, std::string_view self_job_id, TimePoint since) {
  internal::MutexLock lock(mu_);
  const JobRecord* dup = FindLiveDuplicate(dedup_key, self_job_id, since);
  if (dup == nullptr) return std::optional<std::string>();
  return std::optional<std::string>(dup->envelope.job_id);
}

Result<int> InMemoryQueueBackend::Impl::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  internal::MutexLock lock(mu_);
  int deleted = 0;
  auto purge = [&](std::set<TimeKey>& set) JOBPACT_REQUIRES(mu_) {
    while (!set.empty() && set.begin()->first < older_than) {
      EraseJob(set.begin()->second);
      ++deleted;
    }
  };
  if (placement == JobPlacement::kDeadLettered) {
    purge(dlq_);
  } else {
    for (auto& [type, sets] : finals_) {
      for (std::set<TimeKey>& set : sets) purge(set);
    }
  }
  return deleted;
}

Result<int> InMemoryQueueBackend::Impl::DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                                          TimePoint dedup_floor, int limit) {
  internal::MutexLock lock(mu_);
  int deleted = 0;
  int looked = 0;
  for (auto& [type, sets] : finals_) {
    std::set<TimeKey>& set = sets[FinalSlot(status)];
    // The oldest first: (finished_at, id). Past dedup_floor, a job with
    // a dedup key is passed over; what is looked at counts against
    // `limit` too, so a window full of them costs a chunk, not a walk.
    auto it = set.begin();
    std::int64_t surplus = static_cast<std::int64_t>(set.size()) - keep;
    while (looked < limit && surplus > 0 && it != set.end()) {
      --surplus;
      ++looked;
      const auto job = jobs_.find(it->second);
      if (it->first >= dedup_floor && !job->second->record.envelope.dedup_key.empty()) {
        ++it;
        continue;
      }
      ++it;
      EraseJob(job->first);
      ++deleted;
    }
  }
  return deleted;
}

Result<QueueStats> InMemoryQueueBackend::Impl::ReadStats(TimePoint now) {
  QueueStats stats;
  internal::MutexLock lock(mu_);
  PromoteDue(now);
  for (const auto& [key, q] : queues_) {
    QueueStats::PerQueue& pq = stats.queues[std::get<0>(key)];
    pq.depth += static_cast<std::int64_t>(q.ready.size()) + q.scheduled;
    pq.running += q.running;
    // ready_at >= enqueued_at always holds, so the oldest ready job has
    // the smallest ready_at: the first entry of some priority level.
    std::optional<TimePoint> oldest;
    for (auto it = q.ready.begin(); it != q.ready.end();) {
      const TimePoint at = std::get<1>(*it);
      if (!oldest || at < *oldest) oldest = at;
      it = q.ready.lower_bound(ReadyKey{std::get<0>(*it) + 1, TimePoint::min(), Id(), nullptr});
    }
    if (oldest && now > *oldest) pq.oldest_ready_age = std::max(pq.oldest_ready_age, now - *oldest);
  }
  for (JobStatus s : kAllJobStatuses) stats.by_status[s] = status_counts_[Slot(s)];
  stats.dead_letters = static_cast<std::int64_t>(dlq_.size());
  return stats;
}

std::size_t InMemoryQueueBackend::Impl::Size() const {
  internal::MutexLock lock(mu_);
  return jobs_.size();
}

std::size_t InMemoryQueueBackend::Impl::ReadyCount(TimePoint now) {
  internal::MutexLock lock(mu_);
  PromoteDue(now);
  std::size_t n = 0;
  for (const auto& [key, q] : queues_) n += q.ready.size();
  return n;
}

}  // namespace jobpact
