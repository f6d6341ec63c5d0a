// InMemoryQueueBackend: the reference QueueBackend (see
// jobpact/in_memory/queue_backend.h for the semantics it pins down).
//
// Layout, chosen for O(log n) dequeue/complete at any backlog size and a
// small footprint per queued job:
//   - jobs_: id -> Job, a flat open-addressing table of (hash, Job*) (see
//     JobTable): a lookup in a table of a million jobs costs about one cache
//     miss, where a node-based unordered_map costs three or four, and the id
//     is stored once, in the Job.
//   - per queue, `ready`: the deliverable jobs ordered by (priority desc,
//     ready_at, id); Dequeue pops the front.
//   - scheduled_: queued / retry_scheduled jobs whose ready_at is still in
//     the future, by ready_at; moved to their queue's ready set as the clock
//     passes them (PromoteDue, at the start of Dequeue and Stats).
//   - running_: running jobs by lease expiry (RecoverExpiredLeases).
//   - dlq_: dead-lettered jobs by time dead-lettered (listing, purging).
//   - finished_: jobs in a final status by finished_at (PurgeFinished).
//   - dedup_heads_: dedup_key -> newest job with that key; the jobs with one
//     key form an intrusive list, newest first.
// A job is in at most one of ready/scheduled_/running_/dlq_/finished_, as
// recorded by Job::where; the time-ordered sets share one type so a Job keeps
// a single iterator into whichever it is in.
//
// Rarely set parts of a job (checkpoint, failure, result, DLQ audit, raw
// input) live in a separately allocated Cold block, and the creation entry
// of the history is implied (Job::creation_in_history) rather than stored,
// so a queued job that never ran costs no more allocations than its own
// record, its id and payload strings, and its two index nodes.
#include "jobpact/in_memory/queue_backend.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "jobpact/job_status.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace {

using internal::Guarded;

struct Job;

// Orders jobs by id; nullptr sorts first so it can bound a range search.
inline bool IdLess(const Job* a, const Job* b);

// Node allocator of the index sets: freed nodes go to a free list that the
// next insert reuses, so the steady churn of a queue (every job enters and
// leaves three sets) costs no malloc/free. The nodes of one set type are of
// one size; each type gets its own NodePool, owned by the backend and
// guarded by its mutex like the sets. Pooled memory is released when the
// backend is destroyed.
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    while (head_ != nullptr) {
      FreeNode* next = head_->next;
      ::operator delete(head_);
      head_ = next;
    }
  }
  void* Allocate(std::size_t bytes) {
    if (head_ != nullptr) {
      FreeNode* n = head_;
      head_ = n->next;
      return n;
    }
    return ::operator new(std::max(bytes, sizeof(FreeNode)));
  }
  void Free(void* p) { head_ = new (p) FreeNode{head_}; }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  FreeNode* head_ = nullptr;
};

template <typename T>
struct PoolAllocator {
  using value_type = T;
  explicit PoolAllocator(NodePool* p) : pool(p) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& other) : pool(other.pool) {}  // NOLINT: rebind.
  T* allocate(std::size_t n) {
    if (n == 1) return static_cast<T*>(pool->Allocate(sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) {
    if (n == 1) {
      pool->Free(p);
    } else {
      ::operator delete(p);
    }
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>& o) const { return pool == o.pool; }
  template <typename U>
  bool operator!=(const PoolAllocator<U>& o) const { return pool != o.pool; }
  NodePool* pool;
};

// Inserts `key`, with the end of the set as the hint when the key sorts last
// (the common case: a new time is usually the latest), which makes the
// insert amortized O(1) instead of a walk down the tree.
template <typename Set>
typename Set::iterator InsertNearEnd(Set& set, const typename Set::value_type& key) {
  if (set.empty() || set.value_comp()(*set.rbegin(), key)) return set.insert(set.end(), key);
  return set.insert(key).first;
}

// Ready-set key: priority desc, then ready_at, then id.
struct ReadyKey {
  int priority;
  TimePoint ready_at;
  Job* job;
};
struct ReadyLess {
  bool operator()(const ReadyKey& a, const ReadyKey& b) const {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.ready_at != b.ready_at) return a.ready_at < b.ready_at;
    return IdLess(a.job, b.job);
  }
};
using ReadySet = std::set<ReadyKey, ReadyLess, PoolAllocator<ReadyKey>>;

// Key of the time-ordered sets: time, then id.
struct TimeKey {
  TimePoint at;
  Job* job;
};
struct TimeLess {
  bool operator()(const TimeKey& a, const TimeKey& b) const {
    if (a.at != b.at) return a.at < b.at;
    return IdLess(a.job, b.job);
  }
};
using TimeSet = std::set<TimeKey, TimeLess, PoolAllocator<TimeKey>>;

struct QueueState {
  explicit QueueState(NodePool* pool) : ready(ReadyLess{}, PoolAllocator<ReadyKey>(pool)) {}
  ReadySet ready;
  std::int64_t scheduled = 0;  // Jobs of this queue in scheduled_.
  std::int64_t running = 0;
};

// Where a job is indexed (at most one place).
enum class Where : unsigned char { kNone, kReady, kScheduled, kRunning, kDlq, kFinished };

struct Cold {
  std::string checkpoint;
  std::optional<Failure> last_failure;
  std::string reason;
  std::string result;
  std::string raw_envelope;        // DeadLetterInvalid only.
  std::vector<std::string> audit;  // Replay / discard records.
};

struct Job {
  Envelope env;
  std::size_t id_hash = 0;  // JobTable::Hash(env.job_id).
  JobStatus status = JobStatus::kQueued;
  Where where = Where::kNone;
  bool invalid_envelope = false;
  // The creation entry ("enqueued", or "invalid_envelope") is implied as the
  // first history entry until the bound pushes it out; see FullHistory().
  bool creation_in_history = true;
  int lease_recoveries = 0;
  int lock_waits = 0;
  std::int64_t epoch = 0;
  TimePoint enqueued_at;
  TimePoint ready_at;
  TimePoint updated_at;
  // When the job reached a final status or the DLQ (meaningful only then;
  // also the time it was dead-lettered).
  TimePoint finished_at;
  TimePoint lease_expires;
  Duration previous_delay{};
  std::string lease_token;
  std::vector<Transition> history;
  std::unique_ptr<Cold> cold;
  QueueState* queue = nullptr;  // Null for invalid envelopes (never runnable).
  TimeSet::iterator index_it;   // Valid when where is kScheduled..kFinished.
  Job* dedup_prev = nullptr;    // Newer job with the same dedup_key.
  Job* dedup_next = nullptr;    // Older job with the same dedup_key.

  Cold& MutableCold() {
    if (!cold) cold = std::make_unique<Cold>();
    return *cold;
  }
};

// Id -> Job: open addressing with linear probing over (hash, Job*) slots,
// kept at most 70% full, deletion by backward shift (no tombstones). The
// key is the Job's own envelope.job_id, compared only when hashes match.
class JobTable {
 public:
  static std::size_t Hash(std::string_view id) { return std::hash<std::string_view>{}(id); }

  std::size_t size() const { return size_; }

  Job* Find(std::string_view id) const { return Find(id, Hash(id)); }
  Job* Find(std::string_view id, std::size_t hash) const;

  // REQUIRES: no job with this id is in the table.
  void Insert(Job* job, std::size_t hash) {
    if ((size_ + 1) * 10 > slots_.size() * 7) Grow();
    std::size_t i = hash & mask_;
    while (slots_[i].job != nullptr) i = (i + 1) & mask_;
    slots_[i] = Slot{hash, job};
    ++size_;
  }

  // REQUIRES: `job` is in the table.
  void Erase(const Job* job, std::size_t hash) {
    std::size_t hole = hash & mask_;
    while (slots_[hole].job != job) hole = (hole + 1) & mask_;
    // Backward shift: pull later entries of the probe run into the hole when
    // that does not move them before their home slot.
    for (std::size_t k = (hole + 1) & mask_; slots_[k].job != nullptr; k = (k + 1) & mask_) {
      const std::size_t home = slots_[k].hash & mask_;
      if (((k - home) & mask_) >= ((k - hole) & mask_)) {
        slots_[hole] = slots_[k];
        hole = k;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

  template <typename F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.job != nullptr) f(s.job);
    }
  }

 private:
  struct Slot {
    std::size_t hash = 0;
    Job* job = nullptr;
  };

  // Doubles the table. Strong guarantee: if the allocation throws, the
  // table is unchanged.
  void Grow() {
    std::vector<Slot> bigger(slots_.empty() ? 64 : slots_.size() * 2);
    const std::size_t mask = bigger.size() - 1;
    for (const Slot& s : slots_) {
      if (s.job == nullptr) continue;
      std::size_t i = s.hash & mask;
      while (bigger[i].job != nullptr) i = (i + 1) & mask;
      bigger[i] = s;
    }
    slots_.swap(bigger);
    mask_ = mask;
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

inline bool IdLess(const Job* a, const Job* b) {
  if (a == b) return false;
  if (a == nullptr) return true;
  if (b == nullptr) return false;
  return a->env.job_id < b->env.job_id;
}

Job* JobTable::Find(std::string_view id, std::size_t hash) const {
  if (size_ == 0) return nullptr;
  for (std::size_t i = hash & mask_; slots_[i].job != nullptr; i = (i + 1) & mask_) {
    if (slots_[i].hash == hash && slots_[i].job->env.job_id == id) return slots_[i].job;
  }
  return nullptr;
}

// Statuses a dedup match ignores (SPEC 6: the first attempt at the work
// ended without doing it, so a new message may try again).
bool EndedWithoutEffect(JobStatus s) {
  return s == JobStatus::kDiscarded || s == JobStatus::kFailed || s == JobStatus::kDeadLettered;
}

bool IsSafeName(std::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string AuditRecord(std::string_view verb, TimePoint now, const DlqAction& action) {
  std::string out = FormatRfc3339(now);
  out += ' ';
  out += verb;
  out += " by ";
  out += action.actor;
  out += ": ";
  out += action.reason;
  return out;
}

}  // namespace

class InMemoryQueueBackend::Impl {
 public:
  explicit Impl(std::shared_ptr<Clock> clock)
      : clock_(clock ? std::move(clock) : SystemClock::Default()) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    jobs_.ForEach([](Job* job) { delete job; });
  }

  Result<EnqueueResult> Enqueue(const Envelope& env, const EnqueueOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    JOBPACT_RETURN_IF_ERROR(CheckEnqueueInput(env));
    if (std::optional<EnqueueResult> dup = FindEnqueueDuplicate(env, options, now)) return *dup;
    const std::size_t hash = JobTable::Hash(env.job_id);
    if (jobs_.Find(env.job_id, hash) != nullptr) {
      return Status::AlreadyExists("job id already in use: " + env.job_id);
    }
    return Insert(env, now, hash);
  }

  Result<std::vector<EnqueueResult>> EnqueueBatch(const std::vector<Envelope>& envs,
                                                  const EnqueueOptions& options) {
    std::vector<EnqueueResult> results;
    results.reserve(envs.size());
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    // Check everything first so that the batch is stored whole or not at all.
    std::unordered_map<std::string_view, int> seen;
    seen.reserve(envs.size());
    for (const Envelope& env : envs) {
      JOBPACT_RETURN_IF_ERROR(CheckEnqueueInput(env));
      if (jobs_.Find(env.job_id) != nullptr || !seen.emplace(env.job_id, 0).second) {
        return Status::AlreadyExists("job id already in use: " + env.job_id);
      }
    }
    for (const Envelope& env : envs) {
      if (std::optional<EnqueueResult> dup = FindEnqueueDuplicate(env, options, now)) {
        results.push_back(std::move(*dup));
      } else {
        results.push_back(Insert(env, now, JobTable::Hash(env.job_id)));
      }
    }
    return results;
  }

  Result<std::string> DeadLetterInvalid(std::string_view raw,
                                        const std::vector<FieldError>& problems) {
    // Read what we can from the input before taking the lock.
    std::string id, job_type, trace_id;
    nlohmann::json doc = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object()) {
      auto read = [&doc](const char* field, std::string& out) {
        auto it = doc.find(field);
        if (it != doc.end() && it->is_string()) out = it->get<std::string>();
      };
      read("job_id", id);
      read("job_type", job_type);
      read("trace_id", trace_id);
    }
    if (!IsSafeName(id)) id.clear();
    if (job_type.size() > 255) job_type.resize(255);
    if (trace_id.size() > 255) trace_id.resize(255);
    std::string message = "invalid envelope:";
    for (const FieldError& p : problems) {
      message += ' ';
      message += p.field;
      message += ": ";
      message += p.message;
      message += ';';
    }
    if (problems.empty()) message += " (no problems given)";

    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    // A readable id that is already taken belongs to another job: never
    // overwrite it, file this input under a new id instead.
    while (id.empty() || jobs_.Find(id) != nullptr) id = NewJobId(now);

    auto job = std::make_unique<Job>();
    job->env.job_id = std::move(id);
    job->env.job_type = std::move(job_type);
    job->env.trace_id = std::move(trace_id);
    job->env.created_at = now;
    job->status = JobStatus::kDeadLettered;
    job->invalid_envelope = true;
    job->enqueued_at = job->ready_at = job->updated_at = job->finished_at = now;
    Cold& cold = job->MutableCold();
    cold.raw_envelope = std::string(raw);
    cold.reason = std::string(reason::kInvalidEnvelope);
    cold.last_failure = Failure{FailureClass::kPermanent, std::string(reason::kInvalidEnvelope),
                                std::move(message)};
    job->id_hash = JobTable::Hash(job->env.job_id);
    Job* j = job.get();
    jobs_.Insert(j, j->id_hash);
    job.release();  // Owned by jobs_ from here on.
    ++status_counts_[Index(JobStatus::kDeadLettered)];
    IndexTime(j, Where::kDlq, now);
    return j->env.job_id;
  }

  Result<std::vector<Delivery>> Dequeue(const DequeueRequest& request) {
    if (request.max_jobs < 1) return Status::InvalidArgument("max_jobs must be >= 1");
    std::vector<Delivery> out;
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    PromoteDue(now);
    // The queues to take from. One named queue is the common case.
    QueueState* single = nullptr;
    std::vector<QueueState*> several;
    if (request.queues.size() == 1) {
      auto it = queues_.find(request.queues.front());
      if (it == queues_.end()) return out;
      single = &it->second;
    } else if (request.queues.empty()) {
      several.reserve(queues_.size());
      for (auto& [name, q] : queues_) several.push_back(&q);
    } else {
      for (const std::string& name : request.queues) {
        auto it = queues_.find(name);
        if (it != queues_.end() &&
            std::find(several.begin(), several.end(), &it->second) == several.end()) {
          several.push_back(&it->second);
        }
      }
    }
    if (several.size() == 1) single = several.front();
    // Reserve no more than can be delivered: a Delivery is large, and an
    // oversized buffer per call would cost more than the deliveries.
    std::size_t ready = 0;
    if (single != nullptr) {
      ready = single->ready.size();
    } else {
      for (QueueState* q : several) ready += q->ready.size();
    }
    out.reserve(std::min({static_cast<std::size_t>(request.max_jobs), ready, std::size_t{64}}));
    // With a deep backlog the jobs at the front were last touched long ago
    // and are out of cache: ask for all of them at once so their misses
    // overlap, instead of paying for them one after another.
    if (single != nullptr) PrefetchFront(*single, request.max_jobs + 1);
    while (static_cast<int>(out.size()) < request.max_jobs) {
      QueueState* from = single;
      if (from == nullptr) {
        // The best head across the queues asked for.
        ReadyLess less;
        for (QueueState* q : several) {
          if (q->ready.empty()) continue;
          if (from == nullptr || less(*q->ready.begin(), *from->ready.begin())) from = q;
        }
        if (from == nullptr) break;
      }
      if (from->ready.empty()) break;
      Job* job = from->ready.begin()->job;
      from->ready.erase(from->ready.begin());
      job->where = Where::kNone;
      out.push_back(Deliver(job, now, request.worker_id));
    }
    return out;
  }

  Result<Lease> Renew(const Lease& lease, Duration extension, std::string_view checkpoint) {
    if (extension <= Duration::zero()) return Status::InvalidArgument("extension must be > 0");
    std::lock_guard<std::mutex> lock(mu_);
    JOBPACT_ASSIGN_OR_RETURN(Job * job, FindLeased(lease));
    const TimePoint now = clock_->Now();
    UnindexTime(job);
    job->lease_expires = now + extension;
    IndexTime(job, Where::kRunning, job->lease_expires);
    if (!checkpoint.empty()) job->MutableCold().checkpoint = std::string(checkpoint);
    job->updated_at = now;
    return MakeLease(*job);
  }

  Status Complete(const Lease& lease, const Completion& c) {
    std::lock_guard<std::mutex> lock(mu_);
    JOBPACT_ASSIGN_OR_RETURN(Job * job, FindLeased(lease));
    JOBPACT_RETURN_IF_ERROR(CheckTransition(JobStatus::kRunning, c.to));
    if (c.transactional_effect) {
      // Runs under mu_, so that its effect and the completion are one step.
      Status s;
      try {
        s = c.transactional_effect(nullptr);
      } catch (const std::exception& e) {
        s = Status::Internal(std::string("transactional_effect threw: ") + e.what());
      } catch (...) {
        s = Status::Internal("transactional_effect threw");
      }
      if (!s.ok()) return s;
    }
    const TimePoint now = clock_->Now();
    UnindexTime(job);
    if (!c.spend_attempt && job->env.attempt > 0) --job->env.attempt;
    if (c.lock_wait) ++job->lock_waits;
    if (c.failure || !c.checkpoint.empty() || !c.reason.empty() || !c.result.empty() || job->cold) {
      Cold& cold = job->MutableCold();
      if (c.failure) cold.last_failure = c.failure;
      if (!c.checkpoint.empty()) cold.checkpoint = c.checkpoint;
      cold.reason = c.reason;
      if (c.to == JobStatus::kSucceeded) cold.result = c.result;
    }
    SetStatus(job, c.to, now, c.reason);
    switch (c.to) {
      case JobStatus::kRetryScheduled:
        job->previous_delay = c.delay;
        [[fallthrough]];
      case JobStatus::kQueued:
        job->ready_at = std::max(c.ready_at.value_or(now), job->enqueued_at);
        Place(job, now);
        break;
      case JobStatus::kDeadLettered:
        job->finished_at = now;
        IndexTime(job, Where::kDlq, now);
        break;
      default:  // Final.
        job->finished_at = now;
        IndexTime(job, Where::kFinished, now);
        break;
    }
    return Status::Ok();
  }

  Result<std::vector<LeaseRecovery>> RecoverExpiredLeases(int max_recoveries) {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    std::vector<LeaseRecovery> recovered;
    while (!running_.empty() && running_.begin()->at <= now) {
      Job* job = running_.begin()->job;
      UnindexTime(job);
      ++job->lease_recoveries;
      if (job->lease_recoveries > max_recoveries) {
        Cold& cold = job->MutableCold();
        cold.reason = std::string(reason::kLeaseExpiredRepeatedly);
        cold.last_failure =
            Failure{FailureClass::kUnknown, std::string(reason::kLeaseExpiredRepeatedly),
                    "lease expired " + std::to_string(job->lease_recoveries) +
                        " times (max_recoveries " + std::to_string(max_recoveries) +
                        "): the job keeps killing or hanging its worker"};
        SetStatus(job, JobStatus::kDeadLettered, now, reason::kLeaseExpiredRepeatedly);
        job->finished_at = now;
        IndexTime(job, Where::kDlq, now);
      } else {
        job->MutableCold().reason = std::string(reason::kLeaseExpired);
        SetStatus(job, JobStatus::kQueued, now, reason::kLeaseExpired);
        job->ready_at = std::max(now, job->enqueued_at);
        Place(job, now);
      }
      LeaseRecovery r;
      r.job_id = job->env.job_id;
      r.to = job->status;
      r.reason = std::string(job->status == JobStatus::kDeadLettered
                                 ? reason::kLeaseExpiredRepeatedly
                                 : reason::kLeaseExpired);
      r.lease_recoveries = job->lease_recoveries;
      r.envelope = job->env;
      recovered.push_back(std::move(r));
    }
    return recovered;
  }

  Result<JobRecord> Get(std::string_view job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    const Job* job = jobs_.Find(job_id);
    if (job == nullptr) return Status::NotFound("no job " + std::string(job_id));
    return ToRecord(*job);
  }

  Result<std::optional<std::string>> FindDuplicate(std::string_view dedup_key,
                                                   std::string_view self_job_id,
                                                   TimePoint since) {
    std::optional<std::string> found;
    if (dedup_key.empty()) return found;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = dedup_heads_.find(dedup_key);
    if (it == dedup_heads_.end()) return found;
    for (Job* j = it->second; j != nullptr; j = j->dedup_next) {
      if (j->env.job_id == self_job_id) continue;
      if (j->status == JobStatus::kRunning ||
          (j->status == JobStatus::kSucceeded && j->finished_at >= since)) {
        found = j->env.job_id;
        break;
      }
    }
    return found;
  }

  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter& f) {
    std::vector<DlqEntry> out;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = f.dead_lettered_after ? dlq_.lower_bound(TimeKey{*f.dead_lettered_after, nullptr})
                                    : dlq_.begin();
    for (; it != dlq_.end() && out.size() < f.limit; ++it) {
      const Job& j = *it->job;
      if (f.dead_lettered_before && j.finished_at >= *f.dead_lettered_before) break;
      if (f.job_type && j.env.job_type != *f.job_type) continue;
      if (f.reason && (!j.cold || j.cold->reason != *f.reason)) continue;
      if (f.failure_class && (!j.cold || !j.cold->last_failure ||
                              j.cold->last_failure->failure_class != *f.failure_class)) {
        continue;
      }
      out.push_back(ToDlqEntry(j));
    }
    return out;
  }

  Result<DlqEntry> GetDeadLetter(std::string_view job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    Job* job = FindInDlq(job_id);
    if (job == nullptr) return Status::NotFound("not in the DLQ: " + std::string(job_id));
    return ToDlqEntry(*job);
  }

  Status Replay(std::string_view job_id, const DlqAction& action) {
    JOBPACT_RETURN_IF_ERROR(CheckAction(action));
    if (action.extra_attempts < 0) return Status::InvalidArgument("extra_attempts must be >= 0");
    std::lock_guard<std::mutex> lock(mu_);
    Job* job = FindInDlq(job_id);
    if (job == nullptr) return Status::NotFound("not in the DLQ: " + std::string(job_id));
    if (job->invalid_envelope) {
      return Status::FailedPrecondition(
          "an invalid envelope cannot run; fix it and enqueue it again: " + std::string(job_id));
    }
    JOBPACT_RETURN_IF_ERROR(CheckTransition(job->status, JobStatus::kQueued));
    const TimePoint now = clock_->Now();
    Cold& cold = job->MutableCold();
    std::string record = AuditRecord(reason::kReplay, now, action);
    record += action.reset_attempts ? " (attempts reset)"
                                    : " (extra_attempts " + std::to_string(action.extra_attempts) + ")";
    cold.audit.push_back(std::move(record));
    cold.reason = std::string(reason::kReplay);
    UnindexTime(job);
    if (action.reset_attempts) {
      job->env.attempt = 0;
    } else {
      job->env.max_attempts += action.extra_attempts;
    }
    // A replay is a fresh chance: crash and lock-wait budgets start again.
    job->lease_recoveries = 0;
    job->lock_waits = 0;
    job->previous_delay = Duration::zero();
    SetStatus(job, JobStatus::kQueued, now, reason::kReplay);
    job->ready_at = std::max(action.ready_at.value_or(now), job->enqueued_at);
    Place(job, now);
    return Status::Ok();
  }

  Status Discard(std::string_view job_id, const DlqAction& action) {
    JOBPACT_RETURN_IF_ERROR(CheckAction(action));
    std::lock_guard<std::mutex> lock(mu_);
    Job* job = FindInDlq(job_id);
    if (job == nullptr) return Status::NotFound("not in the DLQ: " + std::string(job_id));
    JOBPACT_RETURN_IF_ERROR(CheckTransition(job->status, JobStatus::kDiscarded));
    const TimePoint now = clock_->Now();
    Cold& cold = job->MutableCold();
    cold.audit.push_back(AuditRecord("discard", now, action));
    cold.reason = std::string(reason::kOperatorDiscard);
    UnindexTime(job);
    SetStatus(job, JobStatus::kDiscarded, now, reason::kOperatorDiscard);
    job->finished_at = now;
    IndexTime(job, Where::kFinished, now);
    return Status::Ok();
  }

  Result<int> PurgeDeadLetters(TimePoint older_than) {
    std::lock_guard<std::mutex> lock(mu_);
    return PurgeBefore(dlq_, older_than);
  }

  Result<int> PurgeFinished(TimePoint older_than) {
    std::lock_guard<std::mutex> lock(mu_);
    return PurgeBefore(finished_, older_than);
  }

  Result<QueueStats> Stats() {
    QueueStats stats;
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = clock_->Now();
    PromoteDue(now);
    for (const auto& [name, q] : queues_) {
      QueueStats::PerQueue& pq = stats.queues[name];
      pq.depth = static_cast<std::int64_t>(q.ready.size()) + q.scheduled;
      pq.running = q.running;
      // ready_at >= enqueued_at always holds here, so the oldest ready job
      // has the smallest ready_at; within one priority that is the first
      // entry, so look at the first entry of each priority level.
      std::optional<TimePoint> oldest;
      for (auto it = q.ready.begin(); it != q.ready.end();) {
        if (!oldest || it->ready_at < *oldest) oldest = it->ready_at;
        it = q.ready.lower_bound(ReadyKey{it->priority - 1, TimePoint::min(), nullptr});
      }
      if (oldest && now > *oldest) pq.oldest_ready_age = now - *oldest;
    }
    for (JobStatus s : kAllJobStatuses) stats.by_status[s] = status_counts_[Index(s)];
    stats.dead_letters = static_cast<std::int64_t>(dlq_.size());
    return stats;
  }

  std::size_t Size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }

  std::size_t ReadyCount() {
    std::lock_guard<std::mutex> lock(mu_);
    PromoteDue(clock_->Now());
    std::size_t n = 0;
    for (const auto& [name, q] : queues_) n += q.ready.size();
    return n;
  }

  Status ForceExpireLease(std::string_view job_id) {
    std::lock_guard<std::mutex> lock(mu_);
    Job* job = jobs_.Find(job_id);
    if (job == nullptr) return Status::NotFound("no job " + std::string(job_id));
    if (job->status != JobStatus::kRunning) {
      return Status::FailedPrecondition("job is not running: " + std::string(job_id));
    }
    UnindexTime(job);
    job->lease_expires = clock_->Now() - Duration(1);
    IndexTime(job, Where::kRunning, job->lease_expires);
    return Status::Ok();
  }

 private:
  static std::size_t Index(JobStatus s) { return static_cast<std::size_t>(s); }

  static Status CheckEnqueueInput(const Envelope& env) {
    if (env.job_id.empty()) {
      return Status::InvalidArgument("job_id is empty (call PrepareForEnqueue first)");
    }
    if (env.queue.empty()) return Status::InvalidArgument("queue is empty");
    return Status::Ok();
  }

  static Status CheckAction(const DlqAction& action) {
    if (action.actor.empty()) return Status::InvalidArgument("DLQ action needs an actor (who)");
    if (action.reason.empty()) return Status::InvalidArgument("DLQ action needs a reason (why)");
    return Status::Ok();
  }

  // The newest job with env's dedup_key enqueued within the window that did
  // not end without effect, as an EnqueueResult.
  std::optional<EnqueueResult> FindEnqueueDuplicate(const Envelope& env,
                                                    const EnqueueOptions& options, TimePoint now) {
    if (env.dedup_key.empty() || options.dedup_window <= Duration::zero()) return std::nullopt;
    auto it = dedup_heads_.find(env.dedup_key);
    if (it == dedup_heads_.end()) return std::nullopt;
    for (Job* j = it->second; j != nullptr; j = j->dedup_next) {
      if (now - j->enqueued_at < options.dedup_window && !EndedWithoutEffect(j->status)) {
        return EnqueueResult{j->env.job_id, true, j->status};
      }
    }
    return std::nullopt;
  }

  // Stores a new queued job. REQUIRES: mu_ held, input checked, id free.
  EnqueueResult Insert(const Envelope& env, TimePoint now, std::size_t hash) {
    auto job = std::make_unique<Job>();
    job->id_hash = hash;
    job->env = env;
    job->env.attempt = 0;  // A producer's value is never trusted.
    if (!job->env.created_at) job->env.created_at = now;
    job->enqueued_at = job->updated_at = now;
    // Never before the enqueue: a job scheduled in the past is ready from
    // now, in arrival order.
    job->ready_at = std::max(env.scheduled_at.value_or(now), now);
    job->queue = &QueueFor(job->env.queue);
    Job* j = job.get();
    jobs_.Insert(j, hash);
    job.release();  // Owned by jobs_ from here on.
    ++status_counts_[Index(JobStatus::kQueued)];
    Place(j, now);
    if (!j->env.dedup_key.empty()) LinkDedup(j);
    return EnqueueResult{j->env.job_id, false, JobStatus::kQueued};
  }

  QueueState& QueueFor(std::string_view name) {
    auto it = queues_.find(name);
    if (it == queues_.end()) {
      it = queues_.emplace(std::piecewise_construct, std::forward_as_tuple(name),
                           std::forward_as_tuple(&ready_pool_))
               .first;
    }
    return it->second;
  }

  // Prefetches the records of the first `n` ready jobs of `q`: first the Job
  // structs, then the heap strings they point to (which needs the structs,
  // so it is done in a second pass, by when most have arrived).
  static void PrefetchFront(const QueueState& q, int n) {
    Job* jobs[64];
    int count = 0;
    for (auto it = q.ready.begin(); it != q.ready.end() && count < std::min(n, 64); ++it) {
      Job* job = it->job;
      const char* p = reinterpret_cast<const char*>(job);
      for (std::size_t off = 0; off < sizeof(Job); off += 64) __builtin_prefetch(p + off);
      jobs[count++] = job;
    }
    for (int i = 0; i < count; ++i) {
      __builtin_prefetch(jobs[i]->env.job_id.data());
      __builtin_prefetch(jobs[i]->env.payload.data());
      __builtin_prefetch(jobs[i]->env.job_type.data());
    }
  }

  // Puts a queued / retry_scheduled job in its queue's ready set or in
  // scheduled_, by its ready_at.
  void Place(Job* job, TimePoint now) {
    if (job->ready_at <= now) {
      InsertNearEnd(job->queue->ready, ReadyKey{job->env.priority, job->ready_at, job});
      job->where = Where::kReady;
    } else {
      IndexTime(job, Where::kScheduled, job->ready_at);
    }
  }

  void IndexTime(Job* job, Where where, TimePoint at) {
    TimeSet* set = SetFor(where);
    job->index_it = InsertNearEnd(*set, TimeKey{at, job});
    job->where = where;
    if (where == Where::kScheduled) ++job->queue->scheduled;
    if (where == Where::kRunning) ++job->queue->running;
  }

  // Takes the job out of whatever index holds it.
  void UnindexTime(Job* job) {
    switch (job->where) {
      case Where::kNone:
        break;
      case Where::kReady:
        job->queue->ready.erase(ReadyKey{job->env.priority, job->ready_at, job});
        break;
      default:
        SetFor(job->where)->erase(job->index_it);
        if (job->where == Where::kScheduled) --job->queue->scheduled;
        if (job->where == Where::kRunning) --job->queue->running;
        break;
    }
    job->where = Where::kNone;
  }

  TimeSet* SetFor(Where where) {
    switch (where) {
      case Where::kScheduled:
        return &scheduled_;
      case Where::kRunning:
        return &running_;
      case Where::kDlq:
        return &dlq_;
      default:
        return &finished_;
    }
  }

  // Moves scheduled jobs whose time has come to their ready sets.
  void PromoteDue(TimePoint now) {
    while (!scheduled_.empty() && scheduled_.begin()->at <= now) {
      Job* job = scheduled_.begin()->job;
      UnindexTime(job);
      Place(job, now);
    }
  }

  // The one place a status changes: checked against the SPEC 2 table,
  // counted, and appended to the bounded history.
  void SetStatus(Job* job, JobStatus to, TimePoint now, std::string_view why) {
    // Callers check legality first (and return kFailedPrecondition); a
    // failure here would be a bug in this file.
    if (!IsLegalTransition(job->status, to)) std::terminate();
    --status_counts_[Index(job->status)];
    ++status_counts_[Index(to)];
    // Keep at most kMaxHistory entries, counting the implied creation one.
    if (job->history.size() + (job->creation_in_history ? 1 : 0) >= kMaxHistory) {
      if (job->creation_in_history) {
        job->creation_in_history = false;
      } else {
        job->history.erase(job->history.begin());
      }
    }
    // One allocation covers a typical life (delivered, then the outcome).
    if (job->history.capacity() == 0) job->history.reserve(4);
    job->history.push_back(Transition{job->status, to, now, std::string(why)});
    job->status = to;
    job->updated_at = now;
  }

  Delivery Deliver(Job* job, TimePoint now, const std::string& worker_id) {
    SetStatus(job, JobStatus::kRunning, now, reason::kDelivered);
    ++job->epoch;
    ++job->env.attempt;
    // Unique per delivery in this store; the worker id is kept for diagnosis.
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), ++delivery_counter_);
    (void)ec;
    job->lease_token.assign(worker_id);
    job->lease_token += '#';
    job->lease_token.append(digits, end);
    job->lease_expires = now + job->env.visibility_timeout;
    IndexTime(job, Where::kRunning, job->lease_expires);
    // The record without the history before this delivery (see
    // Delivery::job): copying up to kMaxHistory entries with their strings
    // on every delivery would cost more than the rest of the record.
    Delivery d{ToRecord(*job, /*with_history=*/false), MakeLease(*job)};
    d.job.history.push_back(job->history.back());
    return d;
  }

  // The running job that `lease` is the live lease of: kNotFound for an
  // unknown job, kAborted for a stale lease (fenced).
  Result<Job*> FindLeased(const Lease& lease) {
    Job* job = jobs_.Find(lease.job_id);
    if (job == nullptr) return Status::NotFound("no job " + lease.job_id);
    if (job->status != JobStatus::kRunning) {
      return Status::Aborted("stale lease: job " + lease.job_id + " is " +
                             std::string(JobStatusName(job->status)));
    }
    if (job->epoch != lease.epoch || job->lease_token != lease.token) {
      return Status::Aborted("stale lease: job " + lease.job_id + " epoch " +
                             std::to_string(lease.epoch) + " was superseded by epoch " +
                             std::to_string(job->epoch));
    }
    return job;
  }

  Job* FindInDlq(std::string_view job_id) {
    Job* job = jobs_.Find(job_id);
    if (job == nullptr || job->status != JobStatus::kDeadLettered) return nullptr;
    return job;
  }

  int PurgeBefore(TimeSet& set, TimePoint older_than) {
    int purged = 0;
    while (!set.empty() && set.begin()->at < older_than) {
      Remove(set.begin()->job);
      ++purged;
    }
    return purged;
  }

  void Remove(Job* job) {
    UnindexTime(job);
    if (!job->env.dedup_key.empty()) UnlinkDedup(job);
    --status_counts_[Index(job->status)];
    jobs_.Erase(job, job->id_hash);
    delete job;
  }

  // Dedup lists: newest first. The map key views the head's dedup_key, so
  // it is re-keyed when the head changes.
  void LinkDedup(Job* job) {
    auto it = dedup_heads_.find(job->env.dedup_key);
    if (it != dedup_heads_.end()) {
      Job* old = it->second;
      dedup_heads_.erase(it);
      job->dedup_next = old;
      old->dedup_prev = job;
    }
    dedup_heads_.emplace(std::string_view(job->env.dedup_key), job);
  }

  void UnlinkDedup(Job* job) {
    if (job->dedup_prev != nullptr) {
      job->dedup_prev->dedup_next = job->dedup_next;
      if (job->dedup_next != nullptr) job->dedup_next->dedup_prev = job->dedup_prev;
    } else {
      dedup_heads_.erase(std::string_view(job->env.dedup_key));
      if (job->dedup_next != nullptr) {
        job->dedup_next->dedup_prev = nullptr;
        dedup_heads_.emplace(std::string_view(job->dedup_next->env.dedup_key), job->dedup_next);
      }
    }
    job->dedup_prev = job->dedup_next = nullptr;
  }

  static bool HasFinished(const Job& job) {
    return job.status == JobStatus::kDeadLettered || IsFinal(job.status);
  }

  // The stored history with the implied creation entry in front: from == to,
  // "enqueued" (or "invalid_envelope" for input born dead-lettered).
  static std::vector<Transition> FullHistory(const Job& job) {
    std::vector<Transition> h;
    h.reserve(job.history.size() + 1);
    if (job.creation_in_history) {
      const JobStatus born = job.invalid_envelope ? JobStatus::kDeadLettered : JobStatus::kQueued;
      h.push_back(Transition{born, born, job.enqueued_at,
                             std::string(job.invalid_envelope ? reason::kInvalidEnvelope
                                                              : reason::kEnqueued)});
    }
    h.insert(h.end(), job.history.begin(), job.history.end());
    return h;
  }

  static Lease MakeLease(const Job& job) {
    return Lease{job.env.job_id, job.lease_token, job.epoch, job.lease_expires};
  }

  static JobRecord ToRecord(const Job& job, bool with_history = true) {
    JobRecord r;
    r.envelope = job.env;
    r.status = job.status;
    r.enqueued_at = job.enqueued_at;
    r.ready_at = job.ready_at;
    r.updated_at = job.updated_at;
    if (HasFinished(job)) r.finished_at = job.finished_at;
    r.epoch = job.epoch;
    r.lease_recoveries = job.lease_recoveries;
    r.lock_waits = job.lock_waits;
    r.previous_delay = job.previous_delay;
    if (job.cold) {
      r.checkpoint = job.cold->checkpoint;
      r.last_failure = job.cold->last_failure;
      r.reason = job.cold->reason;
      r.result = job.cold->result;
    }
    if (with_history) r.history = FullHistory(job);
    return r;
  }

  static DlqEntry ToDlqEntry(const Job& job) {
    DlqEntry e;
    e.job_id = job.env.job_id;
    e.job_type = job.env.job_type;
    e.created_at = job.env.created_at.value_or(job.enqueued_at);
    e.attempts = job.env.attempt;
    e.trace_id = job.env.trace_id;
    e.dead_lettered_at = job.finished_at;
    e.history = FullHistory(job);
    if (job.cold) {
      e.reason = job.cold->reason;
      e.last_failure = job.cold->last_failure;
      e.raw_envelope = job.cold->raw_envelope;
      e.audit = job.cold->audit;
    }
    e.payload = job.invalid_envelope ? e.raw_envelope : job.env.payload;
    return e;
  }

  // Immutable after construction.
  const std::shared_ptr<Clock> clock_;

  mutable std::mutex mu_;
  // Guarded by mu_. The pools come first: they outlive the sets using them.
  NodePool ready_pool_;
  NodePool time_pool_;
  JobTable jobs_;  // Owns the jobs.
  std::map<std::string, QueueState, std::less<>> queues_;
  TimeSet scheduled_{TimeLess{}, PoolAllocator<TimeKey>(&time_pool_)};
  TimeSet running_{TimeLess{}, PoolAllocator<TimeKey>(&time_pool_)};
  TimeSet dlq_{TimeLess{}, PoolAllocator<TimeKey>(&time_pool_)};
  TimeSet finished_{TimeLess{}, PoolAllocator<TimeKey>(&time_pool_)};
  std::unordered_map<std::string_view, Job*> dedup_heads_;
  std::array<std::int64_t, std::size(kAllJobStatuses)> status_counts_{};
  std::uint64_t delivery_counter_ = 0;
};

InMemoryQueueBackend::InMemoryQueueBackend(std::shared_ptr<Clock> clock)
    : impl_(std::make_unique<Impl>(std::move(clock))) {}
InMemoryQueueBackend::~InMemoryQueueBackend() = default;

Result<EnqueueResult> InMemoryQueueBackend::Enqueue(const Envelope& env,
                                                    const EnqueueOptions& options) {
  return Guarded("Enqueue", [&] { return impl_->Enqueue(env, options); });
}
Result<std::vector<EnqueueResult>> InMemoryQueueBackend::EnqueueBatch(
    const std::vector<Envelope>& envs, const EnqueueOptions& options) {
  return Guarded("EnqueueBatch", [&] { return impl_->EnqueueBatch(envs, options); });
}
Result<std::string> InMemoryQueueBackend::DeadLetterInvalid(
    std::string_view raw, const std::vector<FieldError>& problems) {
  return Guarded("DeadLetterInvalid", [&] { return impl_->DeadLetterInvalid(raw, problems); });
}
Result<std::vector<Delivery>> InMemoryQueueBackend::Dequeue(const DequeueRequest& request) {
  return Guarded("Dequeue", [&] { return impl_->Dequeue(request); });
}
Result<Lease> InMemoryQueueBackend::Renew(const Lease& lease, Duration extension,
                                          std::string_view checkpoint) {
  return Guarded("Renew", [&] { return impl_->Renew(lease, extension, checkpoint); });
}
Status InMemoryQueueBackend::Complete(const Lease& lease, const Completion& completion) {
  return Guarded("Complete", [&] { return impl_->Complete(lease, completion); });
}
Result<std::vector<LeaseRecovery>> InMemoryQueueBackend::RecoverExpiredLeases(
    int max_recoveries) {
  return Guarded("RecoverExpiredLeases", [&] { return impl_->RecoverExpiredLeases(max_recoveries); });
}
Result<JobRecord> InMemoryQueueBackend::Get(std::string_view job_id) {
  return Guarded("Get", [&] { return impl_->Get(job_id); });
}
Result<std::optional<std::string>> InMemoryQueueBackend::FindDuplicate(std::string_view dedup_key,
                                                                       std::string_view self_job_id,
                                                                       TimePoint since) {
  return Guarded("FindDuplicate",
                 [&] { return impl_->FindDuplicate(dedup_key, self_job_id, since); });
}
Result<std::vector<DlqEntry>> InMemoryQueueBackend::ListDeadLetters(const DlqFilter& filter) {
  return Guarded("ListDeadLetters", [&] { return impl_->ListDeadLetters(filter); });
}
Result<DlqEntry> InMemoryQueueBackend::GetDeadLetter(std::string_view job_id) {
  return Guarded("GetDeadLetter", [&] { return impl_->GetDeadLetter(job_id); });
}
Status InMemoryQueueBackend::Replay(std::string_view job_id, const DlqAction& action) {
  return Guarded("Replay", [&] { return impl_->Replay(job_id, action); });
}
Status InMemoryQueueBackend::Discard(std::string_view job_id, const DlqAction& action) {
  return Guarded("Discard", [&] { return impl_->Discard(job_id, action); });
}
Result<int> InMemoryQueueBackend::PurgeDeadLetters(TimePoint older_than) {
  return Guarded("PurgeDeadLetters", [&] { return impl_->PurgeDeadLetters(older_than); });
}
Result<int> InMemoryQueueBackend::PurgeFinished(TimePoint older_than) {
  return Guarded("PurgeFinished", [&] { return impl_->PurgeFinished(older_than); });
}
Result<QueueStats> InMemoryQueueBackend::Stats() {
  return Guarded("Stats", [&] { return impl_->Stats(); });
}
std::size_t InMemoryQueueBackend::Size() const { return impl_->Size(); }
std::size_t InMemoryQueueBackend::ReadyCount() {
  try {
    return impl_->ReadyCount();
  } catch (...) {
    return 0;
  }
}
Status InMemoryQueueBackend::ForceExpireLease(std::string_view job_id) {
  return Guarded("ForceExpireLease", [&] { return impl_->ForceExpireLease(job_id); });
}

}  // namespace jobpact
