// InMemoryQueueBackend (queue_store.h), the indexes: a job's placement in
// its ready set, scheduled_, leased_, dlq_ or its final set (Index,
// Unindex), the (queue, type, tenant) states, and the dedup index.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "src/backends/in_memory/queue_store.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

// Jobs mostly enter an index in its order (the clock moves forward: a FIFO
// queue's ready_at, lease expiries, finish times) and leave it from the
// front, so these try the end and the front before a search from the root.
//
// A job leaves one index and enters the next in the same step (Unindex,
// then Index), so the node taken out is kept in `spare` (one per set type)
// and the next insertion into a set of that type re-keys it instead of
// allocating: a completion moves its job from leased_ to finals_ without a
// free and a malloc on the worker's thread.
template <typename Set>
void InsertKey(Set& set, typename Set::value_type key, typename Set::node_type& spare) {
  if (spare.empty()) {
    set.emplace_hint(set.end(), std::move(key));  // O(1) when it goes last.
    return;
  }
  spare.value() = std::move(key);
  set.insert(set.end(), std::move(spare));  // Leaves `spare` empty.
}
template <typename Set>
void EraseKey(Set& set, const typename Set::value_type& key, typename Set::node_type& spare) {
  auto it = !set.empty() && *set.begin() == key ? set.begin() : set.find(key);
  if (it != set.end()) spare = set.extract(it);  // Frees the previous spare, if any.
}

// Statuses an enqueue dedup match ignores (SPEC 6: the first attempt at the
// work ended without doing it, so a new message may try again).
bool EndedWithoutEffect(JobStatus s) {
  return s == JobStatus::kDiscarded || s == JobStatus::kFailed || s == JobStatus::kDeadLettered;
}

}  // namespace

using in_memory_internal::FinalSlot;
using in_memory_internal::QueueState;
using in_memory_internal::TimeKey;

QueueState* InMemoryQueueBackend::Impl::QueueOf(const JobRecord& r) JOBPACT_REQUIRES(mu_) {
  if (r.envelope.queue.empty()) return nullptr;  // Quarantined input: no queue.
  // Jobs mostly arrive in runs of one (queue, type): the last one found is
  // tried first, compared by content (a set is never erased, so the
  // pointer stays valid), before a search of the map.
  const Envelope& env = r.envelope;
  if (last_queue_ != nullptr && last_queue_->second.queue == env.queue &&
      last_queue_->second.type == env.job_type && last_queue_->second.tenant == env.tenant_id) {
    return &last_queue_->second;
  }
  auto it = queues_.find(QueueKeyView(env.queue, env.job_type, env.tenant_id));
  if (it == queues_.end()) {
    it = queues_.emplace(QueueKey(env.queue, env.job_type, env.tenant_id), QueueState()).first;
    QueueState& q = it->second;
    q.queue = std::get<0>(it->first);
    q.type = std::get<1>(it->first);
    q.tenant = std::get<2>(it->first);
    q.turn = &turns_[env.queue];
  }
  last_queue_ = &*it;
  return &it->second;
}

// Puts `e` in the index of `placement` and counts it.
void InMemoryQueueBackend::Impl::Index(Id id, Entry& e, JobPlacement placement)
    JOBPACT_REQUIRES(mu_) {
  const JobRecord& r = e.record;
  QueueState* q = e.queue;
  switch (placement) {
    case JobPlacement::kReady:
      if (q != nullptr) {
        InsertKey(q->ready, ReadyKey{-r.envelope.priority, r.ready_at, id, &e}, spare_ready_);
        if (q->active == QueueState::kInactive) {
          q->active = active_.size();
          active_.push_back(q);
        }
      }
      break;
    case JobPlacement::kScheduled:
      InsertKey(scheduled_, TimeKey{r.ready_at, id}, spare_time_);
      if (q != nullptr) ++q->scheduled;
      break;
    case JobPlacement::kLeased:
      InsertKey(leased_, TimeKey{r.lease_expires_at, id}, spare_time_);
      if (q != nullptr) ++q->running;
      break;
    case JobPlacement::kDeadLettered:
      InsertKey(dlq_, TimeKey{r.finished_at.value_or(r.updated_at), id}, spare_time_);
      break;
    case JobPlacement::kFinal:
      InsertKey(FinalSetOf(e), TimeKey{r.finished_at.value_or(r.updated_at), id}, spare_time_);
      break;
  }
  e.placed = placement;
  ++status_counts_[Slot(r.status)];
}

// Takes `e` out of its index, by its current fields.
void InMemoryQueueBackend::Impl::Unindex(Id id, Entry& e) JOBPACT_REQUIRES(mu_) {
  const JobRecord& r = e.record;
  QueueState* q = e.queue;
  switch (e.placed) {
    case JobPlacement::kReady:
      if (q != nullptr) {
        EraseKey(q->ready, ReadyKey{-r.envelope.priority, r.ready_at, id, &e}, spare_ready_);
        if (q->ready.empty() && q->active != QueueState::kInactive) {
          QueueState* last = active_.back();
          active_[q->active] = last;
          last->active = q->active;
          active_.pop_back();
          q->active = QueueState::kInactive;
        }
      }
      break;
    case JobPlacement::kScheduled:
      EraseKey(scheduled_, TimeKey{r.ready_at, id}, spare_time_);
      if (q != nullptr) --q->scheduled;
      break;
    case JobPlacement::kLeased:
      EraseKey(leased_, TimeKey{r.lease_expires_at, id}, spare_time_);
      if (q != nullptr) --q->running;
      break;
    case JobPlacement::kDeadLettered:
      EraseKey(dlq_, TimeKey{r.finished_at.value_or(r.updated_at), id}, spare_time_);
      break;
    case JobPlacement::kFinal:
      EraseKey(FinalSetOf(e), TimeKey{r.finished_at.value_or(r.updated_at), id}, spare_time_);
      break;
  }
  --status_counts_[Slot(r.status)];
}

// The set of finals_ that holds (or will hold) `e`, by its job type and
// its (final) status.
std::set<TimeKey>& InMemoryQueueBackend::Impl::FinalSetOf(const Entry& e) JOBPACT_REQUIRES(mu_) {
  FinalSets* sets = e.queue != nullptr ? e.queue->finals : nullptr;
  if (sets == nullptr) {
    const std::string_view type = e.record.envelope.job_type;
    auto it = finals_.find(type);
    if (it == finals_.end()) it = finals_.emplace(std::string(type), FinalSets{}).first;
    sets = &it->second;
    if (e.queue != nullptr) e.queue->finals = sets;  // Map nodes stay put.
  }
  return (*sets)[FinalSlot(e.record.status)];
}

// Moves scheduled jobs whose time has come to their ready sets.
void InMemoryQueueBackend::Impl::PromoteDue(TimePoint now) JOBPACT_REQUIRES(mu_) {
  while (!scheduled_.empty() && scheduled_.begin()->first <= now) {
    auto it = jobs_.find(scheduled_.begin()->second);
    Unindex(it->first, *it->second);
    Index(it->first, *it->second, JobPlacement::kReady);
  }
}

// Indexes `e` by its dedup_key (see Entry::dedup_alone).
void InMemoryQueueBackend::Impl::AddDedupHolder(Entry& e) JOBPACT_REQUIRES(mu_) {
  const std::string_view key = e.record.envelope.dedup_key;
  const auto [first, last] = dedup_.equal_range(key);
  e.dedup_alone = first == last;
  for (auto d = first; d != last; ++d) d->second->dedup_alone = false;
  dedup_.emplace_hint(first, key, &e);
}

// FindDuplicateJob's answer: the oldest other job with the key that is
// running or succeeded at or after `since`.
const JobRecord* InMemoryQueueBackend::Impl::FindLiveDuplicate(std::string_view dedup_key,
                                                               std::string_view self_job_id,
                                                               TimePoint since) const
    JOBPACT_REQUIRES(mu_) {
  const JobRecord* best = nullptr;
  const auto [first, last] = dedup_.equal_range(dedup_key);
  for (auto d = first; d != last; ++d) {
    const JobRecord& r = d->second->record;
    if (r.envelope.job_id == self_job_id) continue;
    const bool live = r.status == JobStatus::kRunning ||
                      (r.status == JobStatus::kSucceeded && r.finished_at >= since);
    if (live && (best == nullptr || std::tie(r.enqueued_at, r.envelope.job_id) <
                                        std::tie(best->enqueued_at, best->envelope.job_id))) {
      best = &r;
    }
  }
  return best;
}

// The newest of the jobs stored with this dedup key enqueued within the
// window that did not end without effect, as an EnqueueResult.
std::optional<EnqueueResult> InMemoryQueueBackend::Impl::FindEnqueueDuplicate(
    std::string_view dedup_key, const EnqueueOptions& options, TimePoint now)
    JOBPACT_REQUIRES(mu_) {
  if (options.dedup_window <= Duration::zero()) return std::nullopt;
  const JobRecord* best = nullptr;
  const auto [first, last] = dedup_.equal_range(dedup_key);
  for (auto d = first; d != last; ++d) {
    const JobRecord& other = d->second->record;
    if (now - other.enqueued_at >= options.dedup_window || EndedWithoutEffect(other.status)) {
      continue;
    }
    if (best == nullptr || std::tie(other.enqueued_at, other.envelope.job_id) >
                               std::tie(best->enqueued_at, best->envelope.job_id)) {
      best = &other;
    }
  }
  if (best == nullptr) return std::nullopt;
  return EnqueueResult{best->envelope.job_id, true, best->status};
}

// Erases a stored job, its index entries and its dedup entry.
void InMemoryQueueBackend::Impl::EraseJob(Id id) JOBPACT_REQUIRES(mu_) {
  auto it = jobs_.find(id);
  Unindex(it->first, *it->second);
  const std::string& key = it->second->record.envelope.dedup_key;
  if (!key.empty()) {  // Its dedup entry views its key: it goes first.
    const auto [first, last] = dedup_.equal_range(key);
    for (auto d = first; d != last; ++d) {
      if (d->second == it->second.get()) {
        dedup_.erase(d);
        break;
      }
    }
  }
  jobs_.erase(it);
  ++erasures_;  // Voids every store_note given out (see EntryOf).
}

}  // namespace jobpact
