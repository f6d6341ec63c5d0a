// InMemoryQueueBackend: the reference store. The storage primitives of
// StoreBackend over standard containers under one mutex; every change of a
// record is the engine's (jobpact/transitions.h).
//
// Layout:
//   - jobs_: id -> Entry (the record with its whole history, and the index
//     it is in). Every key and index holds a view of the stored record's
//     envelope.job_id: a stored envelope never changes but for attempt and
//     max_attempts (see JobChange), so the view lives as long as the entry.
//   - per (queue, job type, tenant), a QueueState: its leasable jobs by
//     (priority desc, ready_at, id), and counts; active_ lists the states
//     with ready jobs. A lease takes the best head across them: priority
//     first, then the tenants of a queue in turn (the one after the queue's
//     last served tenant, in name order), then ready_at and id -- so one
//     tenant's burst cannot starve the others (tenant fairness, issue 11).
//   - scheduled_: queued / retry_scheduled jobs not ready yet, by ready_at;
//     moved to their queue's ready set as the clock passes them
//     (PromoteDue, at the start of LeaseJobs and ReadStats).
//   - leased_: running jobs by lease expiry (RecoverJobs).
//   - dlq_: dead-lettered jobs by finished_at (listing, purging).
//   - finals_: final jobs per job type, one set per final status, each by
//     (finished_at, id): the age purge and the count trim (TrimFinished)
//     take from their fronts, so neither looks at a job it keeps.
//   - dedup_: dedup_key -> the jobs carrying it, one entry per job keyed by
//     a view of that job's own dedup_key (so it lives as long as the job).
//
// A change is stored field by field (Store), moving what it computed into
// the stored record: the record is ~1 KB of strings, and copying or moving
// it whole on every change cost more than the rest of a delivery.
#include "jobpact/in_memory/queue_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "src/internal/backpressure.h"
#include "src/internal/guarded.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace {

using Id = std::string_view;  // A key of jobs_.

struct Entry;

// Ready order: priority desc, then ready_at, then id (unique, so the entry
// itself, kept to lease it without a lookup by id, is never compared).
using ReadyKey = std::tuple<int, TimePoint, Id, Entry*>;
// The time-ordered indexes: time, then id.
using TimeKey = std::pair<TimePoint, Id>;

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

// The final jobs of one job type: per final status (FinalSlot), by
// (finished_at, id).
using FinalSets = std::array<std::set<TimeKey>, 3>;
std::size_t FinalSlot(JobStatus s) {
  return s == JobStatus::kSucceeded ? 0 : s == JobStatus::kFailed ? 1 : 2;
}

// Which tenant of a queue the lease step served last (tenant fairness).
struct QueueTurn {
  std::string last_tenant;
};

// The jobs of one job type of one tenant in one queue: the unit the lease
// step passes over when the control state holds the type or the queue, and
// the unit it rotates over for fairness between tenants.
struct QueueState {
  std::set<ReadyKey> ready;
  std::int64_t scheduled = 0;
  std::int64_t running = 0;
  // Views of the key in queues_.
  std::string_view queue;
  std::string_view type;
  std::string_view tenant;
  QueueTurn* turn = nullptr;  // The queue's, shared by its states.
  FinalSets* finals = nullptr;  // Its type's, once one of its jobs ended.
  // Where it is in the store's list of states with ready jobs, or kInactive.
  std::size_t active = kInactive;
  static constexpr std::size_t kInactive = ~std::size_t{0};
};

// (queue, job type, tenant), stored as strings, looked up by views.
using QueueKey = std::tuple<std::string, std::string, std::string>;
using QueueKeyView = std::tuple<std::string_view, std::string_view, std::string_view>;
struct QueueKeyLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return View(a) < View(b);
  }
  static QueueKeyView View(const QueueKey& k) {
    return QueueKeyView(std::get<0>(k), std::get<1>(k), std::get<2>(k));
  }
  static const QueueKeyView& View(const QueueKeyView& k) { return k; }
};

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

// Control audit lines kept in memory.
constexpr std::size_t kMaxControlAudit = 1000;

struct Entry {
  explicit Entry(JobRecord&& r) : record(std::move(r)) {}
  // Its envelope.job_id is the key of jobs_ and of every index: it never
  // changes, so views of it stay valid while the entry lives.
  JobRecord record;
  JobPlacement placed = JobPlacement::kReady;
  // The job's queue and type (a job never changes either); null for
  // quarantined input.
  QueueState* queue = nullptr;
  // True only while no other stored job carries this job's dedup_key: set
  // when it is stored with the key alone, cleared for every holder when
  // another job with the key is stored (never set again: false only means
  // "look"). Spares the lease step's dedup check a hash lookup.
  bool dedup_alone = false;
};

std::uint64_t NextStoreId() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

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

// Statuses an enqueue dedup match ignores (SPEC 6: the first attempt at the
// work ended without doing it, so a new message may try again).
bool EndedWithoutEffect(JobStatus s) {
  return s == JobStatus::kDiscarded || s == JobStatus::kFailed || s == JobStatus::kDeadLettered;
}

}  // namespace

class InMemoryQueueBackend::Impl {
 public:
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options, TimePoint now) {
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

  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) {
    std::vector<Status> out;
    out.reserve(writes.size());
    internal::MutexLock lock(mu_);
    for (JobWrite& w : writes) out.push_back(WriteLocked(w));
    return out;
  }

  void CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint now) {
    internal::MutexLock lock(mu_);
    for (std::size_t i = 0; i < n; ++i) {
      items[i].result = CompleteLocked(*items[i].delivery, *items[i].completion, now);
    }
  }

  // The entry of a delivery's job: where the lease step noted it (see
  // LeaseJobs), if no entry was erased since, so it is alive; else by id.
  // Spares the completion a lookup in jobs_: a few cache misses per job,
  // under the mutex the other workers wait on.
  Entry* EntryOf(const Delivery& d) JOBPACT_REQUIRES(mu_) {
    const Delivery::StoreNote& note = d.store_note;
    if (note.store == id_ && note.version == erasures_) {
      Entry* e = static_cast<Entry*>(note.record);
      if (e->record.envelope.job_id == d.lease.job_id) return e;
    }
    auto it = jobs_.find(d.lease.job_id);
    return it == jobs_.end() ? nullptr : it->second.get();
  }

  Status CompleteLocked(const Delivery& d, const Completion& completion, TimePoint now)
      JOBPACT_REQUIRES(mu_) {
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
  Status CheckDepthLimits(const std::vector<JobChange>& jobs) JOBPACT_REQUIRES(mu_) {
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

  Status LeaseJobs(const DequeueRequest& request, TimePoint now, std::vector<Delivery>& out) {
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
    JobChange rest;  // What DeliverInPlace computes besides the record.
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
      if (auto t = tenant_room.empty() ? tenant_room.end()
                                       : tenant_room.find({best->queue, best->tenant});
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
      // The delivery-time dedup check, in this step (no second lock).
      d.dedup_checked = request.dedup_window.has_value();
      d.duplicate_of.clear();
      if (d.dedup_checked && !e.dedup_alone && !e.record.envelope.dedup_key.empty()) {
        if (const JobRecord* dup = FindLiveDuplicate(e.record.envelope.dedup_key, id,
                                                     now - *request.dedup_window)) {
          d.duplicate_of = dup->envelope.job_id;
        }
      }
    }
    out.resize(n);
    return Status::Ok();
  }

  Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at, std::string_view checkpoint,
                           TimePoint now) {
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

  Status RequestCancel(const JobChange& c) {
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

  Result<ControlState> LoadControl() {
    internal::MutexLock lock(mu_);
    return control_;
  }

  Status WriteControl(const ControlWrite& w) {
    internal::MutexLock lock(mu_);
    std::vector<ControlRule>& rules = control_.rules;
    const ControlRuleKey key = w.set ? ControlRuleKey{w.set->kind, w.set->subject,
                                                      w.set->failure_class}
                                     : *w.clear;
    auto same = [&](const ControlRule& r) {
      return r.kind == key.kind && r.subject == key.subject &&
             r.failure_class == key.failure_class;
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

  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) {
    internal::MutexLock lock(mu_);
    const std::size_t n = std::min(limit, control_audit_.size());
    return std::vector<std::string>(control_audit_.end() - static_cast<std::ptrdiff_t>(n),
                                    control_audit_.end());
  }

  Status StorePolicies(const std::vector<PublishedPolicy>& policies) {
    internal::MutexLock lock(mu_);
    for (const PublishedPolicy& p : policies) policies_[p.job_type] = p;
    return Status::Ok();
  }

  Result<std::vector<PublishedPolicy>> LoadPolicies() {
    internal::MutexLock lock(mu_);
    std::vector<PublishedPolicy> out;
    out.reserve(policies_.size());
    for (const auto& [type, p] : policies_) out.push_back(p);
    return out;
  }

  Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now) {
    std::vector<JobChange> out;
    internal::MutexLock lock(mu_);
    while (!leased_.empty() && leased_.begin()->first <= now) {
      auto it = jobs_.find(leased_.begin()->second);
      Entry& e = *it->second;
      Result<JobChange> c = engine::RecoverLease(e.record, max_recoveries, now);
      if (!c.ok()) return c.status();  // An index out of step with its record: a bug here.
      out.push_back(*c);  // The report keeps a copy; the store takes the original.
      Apply(it->first, e, std::move(*c));
    }
    return out;
  }

  Result<std::optional<JobRecord>> LoadJob(std::string_view job_id) {
    internal::MutexLock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(it->second->record);
  }

  Result<std::vector<JobRecord>> QueryJobs(const JobQuery& q) {
    std::vector<JobRecord> out;
    internal::MutexLock lock(mu_);
    auto consider = [&](const JobRecord& r) {
      if (q.status && r.status != *q.status) return;
      if (q.job_type && r.envelope.job_type != *q.job_type) return;
      if (q.queue && r.envelope.queue != *q.queue) return;
      if (q.after_job_id && r.envelope.job_id <= *q.after_job_id) return;
      if (q.reason && r.reason != *q.reason) return;
      if (q.failure_class &&
          (!r.last_failure || r.last_failure->failure_class != *q.failure_class)) {
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

  Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                      std::string_view self_job_id,
                                                      TimePoint since) {
    internal::MutexLock lock(mu_);
    const JobRecord* dup = FindLiveDuplicate(dedup_key, self_job_id, since);
    if (dup == nullptr) return std::optional<std::string>();
    return std::optional<std::string>(dup->envelope.job_id);
  }

  Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than) {
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

  Result<int> DeleteSurplusJobs(JobStatus status, std::int64_t keep, TimePoint dedup_floor,
                                int limit) {
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

  // Erases a stored job, its index entries and its dedup entry.
  void EraseJob(Id id) JOBPACT_REQUIRES(mu_) {
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

  Result<QueueStats> ReadStats(TimePoint now) {
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

  std::size_t Size() const {
    internal::MutexLock lock(mu_);
    return jobs_.size();
  }

  std::size_t ReadyCount(TimePoint now) {
    internal::MutexLock lock(mu_);
    PromoteDue(now);
    std::size_t n = 0;
    for (const auto& [key, q] : queues_) n += q.ready.size();
    return n;
  }

  Status ForceExpireLease(std::string_view job_id, TimePoint now) {
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

 private:
  static std::size_t Slot(JobStatus s) { return static_cast<std::size_t>(s); }

  // One conditional write.
  Status WriteLocked(JobWrite& w) JOBPACT_REQUIRES(mu_) {
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
  void Apply(Id id, Entry& e, JobChange&& c) JOBPACT_REQUIRES(mu_) {
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
  static void Store(JobRecord& to, JobRecord&& from, bool was_running) {
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

  QueueState* QueueOf(const JobRecord& r) JOBPACT_REQUIRES(mu_) {
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
  void Index(Id id, Entry& e, JobPlacement placement) JOBPACT_REQUIRES(mu_) {
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
  void Unindex(Id id, Entry& e) JOBPACT_REQUIRES(mu_) {
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
  std::set<TimeKey>& FinalSetOf(const Entry& e) JOBPACT_REQUIRES(mu_) {
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
  void PromoteDue(TimePoint now) JOBPACT_REQUIRES(mu_) {
    while (!scheduled_.empty() && scheduled_.begin()->first <= now) {
      auto it = jobs_.find(scheduled_.begin()->second);
      Unindex(it->first, *it->second);
      Index(it->first, *it->second, JobPlacement::kReady);
    }
  }

  static Status IdInUse(const std::string& job_id) {
    return Status::AlreadyExists("job id already in use: " + job_id);
  }

  // Indexes `e` by its dedup_key (see Entry::dedup_alone).
  void AddDedupHolder(Entry& e) JOBPACT_REQUIRES(mu_) {
    const std::string_view key = e.record.envelope.dedup_key;
    const auto [first, last] = dedup_.equal_range(key);
    e.dedup_alone = first == last;
    for (auto d = first; d != last; ++d) d->second->dedup_alone = false;
    dedup_.emplace_hint(first, key, &e);
  }

  // FindDuplicateJob's answer: the oldest other job with the key that is
  // running or succeeded at or after `since`.
  const JobRecord* FindLiveDuplicate(std::string_view dedup_key, std::string_view self_job_id,
                                     TimePoint since) const JOBPACT_REQUIRES(mu_) {
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
  std::optional<EnqueueResult> FindEnqueueDuplicate(std::string_view dedup_key,
                                                    const EnqueueOptions& options, TimePoint now)
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

  mutable internal::Mutex mu_;
  // Keyed by views of Entry::id, as are the indexes.
  std::unordered_map<Id, std::unique_ptr<Entry>> jobs_ JOBPACT_GUARDED_BY(mu_);
  // By (queue, job type); a set is never erased, so Entry::queue stays valid.
  std::map<QueueKey, QueueState, QueueKeyLess> queues_ JOBPACT_GUARDED_BY(mu_);
  // Per queue, whose turn it is (QueueState::turn points here; nodes of a
  // std::map stay put).
  std::map<std::string, QueueTurn, std::less<>> turns_ JOBPACT_GUARDED_BY(mu_);
  // The states whose ready set is not empty (QueueState::active is each
  // one's place here), so that a lease looks at those only.
  std::vector<QueueState*> active_ JOBPACT_GUARDED_BY(mu_);
  // The (queue, type) QueueOf found last, or null (see there).
  std::pair<const QueueKey, QueueState>* last_queue_ JOBPACT_GUARDED_BY(mu_) = nullptr;
  ControlState control_ JOBPACT_GUARDED_BY(mu_);
  // True while control_ holds a kMaxQueueDepth rule (spares every enqueue
  // a scan of the rules otherwise).
  bool has_depth_limits_ JOBPACT_GUARDED_BY(mu_) = false;
  // CompleteInPlace's scratch: its history entry's buffer is reused.
  JobChange rest_ JOBPACT_GUARDED_BY(mu_);
  std::deque<std::string> control_audit_ JOBPACT_GUARDED_BY(mu_);  // Newest last.
  std::map<std::string, PublishedPolicy, std::less<>> policies_ JOBPACT_GUARDED_BY(mu_);
  std::set<TimeKey> scheduled_ JOBPACT_GUARDED_BY(mu_);
  std::set<TimeKey> leased_ JOBPACT_GUARDED_BY(mu_);
  std::set<TimeKey> dlq_ JOBPACT_GUARDED_BY(mu_);
  // Never erased, so QueueState::finals stays valid.
  std::map<std::string, FinalSets, std::less<>> finals_ JOBPACT_GUARDED_BY(mu_);
  // The last node each kind of index gave up (see InsertKey).
  std::set<ReadyKey>::node_type spare_ready_ JOBPACT_GUARDED_BY(mu_);
  std::set<TimeKey>::node_type spare_time_ JOBPACT_GUARDED_BY(mu_);
  // Keyed by views of each job's own envelope.dedup_key (see the file comment).
  std::unordered_multimap<std::string_view, Entry*> dedup_ JOBPACT_GUARDED_BY(mu_);
  std::array<std::int64_t, std::size(kAllJobStatuses)> status_counts_ JOBPACT_GUARDED_BY(mu_){};
  std::uint64_t delivery_counter_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Delivery::store_note: this store's id, unique in the process (so a note
  // of another store never matches), and how many entries it has erased.
  const std::uint64_t id_ = NextStoreId();
  std::uint64_t erasures_ JOBPACT_GUARDED_BY(mu_) = 0;
};

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
                                                    TimePoint dedup_floor,
                                                    int limit) {
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
