// InMemoryQueueBackend (queue_store.h), the lease step: the best ready
// heads across the (queue, job type, tenant) sets the control state leaves,
// in turn across tenants; lease renewal and recovery.
#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "src/backends/in_memory/queue_store.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

using in_memory_internal::QueueState;
using in_memory_internal::ReadyKey;

// Tenant fairness: among ready heads of the same priority, the tenant after
// the queue's last served one (in name order, wrapping around) goes first;
// within a tenant, ready_at then id. True if `a`'s head goes before `b`'s.
// With one tenant (or none: ""), this is the plain ready order.
bool GoesFirst(const QueueState& a, const QueueState& b) {
  const ReadyKey& ha = *a.ready.begin();
  const ReadyKey& hb = *b.ready.begin();
  if (std::get<0>(ha) != std::get<0>(hb)) return std::get<0>(ha) < std::get<0>(hb);
  if (a.tenant != b.tenant) {
    // Tenants after the last served one first, each group in name order.
    const bool a_wraps = a.tenant <= a.turn->last_tenant;
    const bool b_wraps = b.tenant <= b.turn->last_tenant;
    if (a.turn == b.turn && a_wraps != b_wraps) return !a_wraps;
    if (a.turn == b.turn) return a.tenant < b.tenant;
  }
  return ha < hb;
}

}  // namespace

Status InMemoryQueueBackend::Impl::LeaseJobs(const DequeueRequest& request, TimePoint now,
                                             std::vector<Delivery>& out) {
  internal::MutexLock lock(mu_);
  PromoteDue(now);
  // The (queue, type, tenant) sets to lease from: those asked for, less
  // what the control state holds; and how many more jobs each limited
  // type may run.
  std::map<std::string_view, int> room;
  // And how many more jobs each tenant of a queue with a per-tenant cap
  // may run, keyed (queue, tenant).
  std::map<std::string_view, int> caps;
  for (const ControlRule& rule : control_.rules) {
    if (rule.kind == ControlKind::kConcurrencyLimit) room[rule.subject] = rule.limit;
    if (rule.kind == ControlKind::kTenantConcurrencyLimit) caps[rule.subject] = rule.limit;
  }
  std::map<std::pair<std::string_view, std::string_view>, int> tenant_room;
  if (!room.empty() || !caps.empty()) {
    for (const auto& [key, q] : queues_) {
      auto r = room.find(q.type);
      if (r != room.end()) r->second -= static_cast<int>(q.running);
      auto cap = caps.find(q.queue);
      if (cap != caps.end()) {
        tenant_room.try_emplace({q.queue, q.tenant}, cap->second).first->second -=
            static_cast<int>(q.running);
      }
    }
  }
  // Only the states with ready jobs (active_): a queue may have seen many
  // tenants and types whose states are empty now.
  std::vector<QueueState*> from;
  for (QueueState* state : active_) {
    QueueState& q = *state;
    const std::string_view queue = q.queue;
    const std::string_view type = q.type;
    if (!request.queues.empty() &&
        std::find(request.queues.begin(), request.queues.end(), queue) == request.queues.end()) {
      continue;
    }
    if (control_.QueuePaused(queue) || control_.TypePaused(type)) continue;
    auto r = room.find(type);
    if (r != room.end() && r->second <= 0) continue;
    if (auto t = tenant_room.find({queue, q.tenant}); t != tenant_room.end() && t->second <= 0) {
      continue;
    }
    from.push_back(&q);
  }
  std::size_t ready = 0;
  for (const QueueState* q : from) ready += q->ready.size();
  out.reserve(std::min(ready, static_cast<std::size_t>(request.max_jobs)));
  JobChange rest;     // What DeliverInPlace computes besides the record.
  std::size_t n = 0;  // Deliveries made; out[n..] are spent ones not reused.
  while (static_cast<int>(n) < request.max_jobs) {
    // The best head across the queues asked for (GoesFirst: priority,
    // then the tenants' turn, then ready_at and id).
    QueueState* best = nullptr;
    for (QueueState* q : from) {
      if (!q->ready.empty() && (best == nullptr || GoesFirst(*q, *best))) best = q;
    }
    if (best == nullptr) break;
    if (best->tenant != best->turn->last_tenant) best->turn->last_tenant.assign(best->tenant);
    const Id id = std::get<2>(*best->ready.begin());
    Entry& e = *std::get<3>(*best->ready.begin());
    if (e.record.ready_at > now) {
      // Enqueued (ready at its producer's now) after this caller read the
      // clock, before it took the lock: ready a hair after `now`, so not
      // this lease's. Its set waits for the next lease (a rare race: this
      // lease takes fewer jobs, instead of failing whole).
      from.erase(std::find(from.begin(), from.end(), best));
      continue;
    }
    if (auto r = room.find(e.record.envelope.job_type); r != room.end() && --r->second <= 0) {
      // This delivery takes the type's last free slot.
      from.erase(std::remove_if(from.begin(), from.end(),
                                [&](const QueueState* q) { return q->type == r->first; }),
                 from.end());
    }
    if (auto t =
            tenant_room.empty() ? tenant_room.end() : tenant_room.find({best->queue, best->tenant});
        t != tenant_room.end() && --t->second <= 0) {
      // This delivery takes the tenant's last free slot in its queue.
      const std::pair<std::string_view, std::string_view> full = t->first;
      from.erase(std::remove_if(from.begin(), from.end(),
                                [&](const QueueState* q) {
                                  return q->queue == full.first && q->tenant == full.second;
                                }),
                 from.end());
    }
    std::string token;
    token.reserve(request.worker_id.size() + 21);  // '#' and the counter: one allocation.
    token += request.worker_id;
    token += '#';
    token += std::to_string(++delivery_counter_);
    // The engine delivers the stored record itself: no copy of it but
    // the one handed to the worker.
    Unindex(id, e);
    Status s = engine::DeliverInPlace(e.record, std::move(token), now, &rest);
    if (!s.ok()) {  // An index out of step with its record: a bug here.
      Index(id, e, e.placed);
      out.clear();
      return s;
    }
    AppendHistory(e.record.history, std::move(rest.append));
    Index(id, e, rest.placement);
    // The record without the history before this delivery (see
    // Delivery::job): copying up to kMaxHistory entries with their
    // strings on every delivery would cost more than the rest. Copied
    // over a spent delivery of the caller's, its strings fit in the
    // buffers already there: no allocation while the mutex is held.
    Delivery& d = ReuseDelivery(out, n++);
    CopyWithoutHistory(e.record, &d.job);
    d.job.history.push_back(e.record.history.back());
    d.lease.job_id = e.record.envelope.job_id;
    d.lease.token = e.record.lease_token;
    d.lease.epoch = e.record.epoch;
    d.lease.expires_at = e.record.lease_expires_at;
    d.lease.cancel_requested = e.record.cancel_requested;
    d.store_note = {id_, &e, erasures_};
    d.guards_taken = false;  // This store keeps no guards (DequeueRequest::take_guards).
    d.fencing_token = 0;
    // The delivery-time dedup check, in this step (no second lock).
    d.dedup_checked = request.dedup_window.has_value();
    d.duplicate_of.clear();
    if (d.dedup_checked && !e.dedup_alone && !e.record.envelope.dedup_key.empty()) {
      if (const JobRecord* dup =
              FindLiveDuplicate(e.record.envelope.dedup_key, id, now - *request.dedup_window)) {
        d.duplicate_of = dup->envelope.job_id;
      }
    }
  }
  out.resize(n);
  return Status::Ok();
}

Result<Lease> InMemoryQueueBackend::Impl::RenewLease(const Lease& lease, TimePoint expires_at,
                                                     std::string_view checkpoint, TimePoint now) {
  internal::MutexLock lock(mu_);
  auto it = jobs_.find(lease.job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + lease.job_id);
  Entry& e = *it->second;
  JOBPACT_ASSIGN_OR_RETURN(JobChange c,
                           engine::Renew(e.record, lease, expires_at - now, checkpoint, now));
  Apply(it->first, e, std::move(c));
  return Lease{lease.job_id, e.record.lease_token, e.record.epoch, e.record.lease_expires_at,
               e.record.cancel_requested};
}

Result<std::vector<JobChange>> InMemoryQueueBackend::Impl::RecoverJobs(int max_recoveries,
                                                                       TimePoint now) {
  std::vector<JobChange> out;
  internal::MutexLock lock(mu_);
  while (!leased_.empty() && leased_.begin()->first <= now) {
    auto it = jobs_.find(leased_.begin()->second);
    Entry& e = *it->second;
    Result<JobChange> c = engine::RecoverLease(e.record, max_recoveries, now);
    if (!c.ok()) return c.status();  // An index out of step with its record: a bug here.
    out.push_back(*c);               // The report keeps a copy; the store takes the original.
    Apply(it->first, e, std::move(*c));
  }
  return out;
}

Status InMemoryQueueBackend::Impl::ForceExpireLease(std::string_view job_id, TimePoint now) {
  internal::MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + std::string(job_id));
  Entry& e = *it->second;
  if (e.record.status != JobStatus::kRunning) {
    return Status::FailedPrecondition("job is not running: " + std::string(job_id));
  }
  Unindex(it->first, e);
  e.record.lease_expires_at = now - Duration(1);
  Index(it->first, e, JobPlacement::kLeased);
  return Status::Ok();
}

}  // namespace jobpact
