// Private to the in-memory queue store (InMemoryQueueBackend): the indexes'
// types and the store itself (InMemoryQueueBackend::Impl), shared by the
// files that implement it. The storage primitives of StoreBackend over
// standard containers under one mutex; every change of a record is the
// engine's (jobpact/transitions.h).
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
//
// By responsibility:
//   queue_backend.cc      the writes: insert (with backpressure), the
//                         conditional writes and in-place completions,
//                         cancel requests, the control state and policies
//   queue_lease.cc        the lease step (with tenant fairness), renewal,
//                         lease recovery
//   queue_indexes.cc      the indexes: ready sets, scheduled and leased
//                         jobs, DLQ and final sets, the dedup index
//   queue_store_admin.cc  the operator side: load, query, dedup lookup,
//                         purges and the count trim, stats
#ifndef JOBPACT_SRC_BACKENDS_IN_MEMORY_QUEUE_STORE_H_
#define JOBPACT_SRC_BACKENDS_IN_MEMORY_QUEUE_STORE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jobpact/in_memory/queue_backend.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace in_memory_internal {

using Id = std::string_view;  // A key of jobs_.

struct Entry;

// Ready order: priority desc, then ready_at, then id (unique, so the entry
// itself, kept to lease it without a lookup by id, is never compared).
using ReadyKey = std::tuple<int, TimePoint, Id, Entry*>;
// The time-ordered indexes: time, then id.
using TimeKey = std::pair<TimePoint, Id>;

// The final jobs of one job type: per final status (FinalSlot), by
// (finished_at, id).
using FinalSets = std::array<std::set<TimeKey>, 3>;
inline std::size_t FinalSlot(JobStatus s) {
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
  QueueTurn* turn = nullptr;    // The queue's, shared by its states.
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

// A new store's id, unique in the process (see Impl::id_).
std::uint64_t NextStoreId();

}  // namespace in_memory_internal

class InMemoryQueueBackend::Impl {
 public:
  // The types of the indexes (above).
  using Id = in_memory_internal::Id;
  using Entry = in_memory_internal::Entry;
  using ReadyKey = in_memory_internal::ReadyKey;
  using TimeKey = in_memory_internal::TimeKey;
  using FinalSets = in_memory_internal::FinalSets;
  using QueueTurn = in_memory_internal::QueueTurn;
  using QueueState = in_memory_internal::QueueState;
  using QueueKey = in_memory_internal::QueueKey;
  using QueueKeyView = in_memory_internal::QueueKeyView;
  using QueueKeyLess = in_memory_internal::QueueKeyLess;

  // queue_backend.cc
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options, TimePoint now);
  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes);
  void CompleteInPlace(InPlaceCompletion* items, std::size_t n, TimePoint now);
  Entry* EntryOf(const Delivery& d) JOBPACT_REQUIRES(mu_);
  Status CompleteLocked(const Delivery& d, const Completion& completion, TimePoint now)
      JOBPACT_REQUIRES(mu_);
  Status CheckDepthLimits(const std::vector<JobChange>& jobs) JOBPACT_REQUIRES(mu_);
  Status RequestCancel(const JobChange& c);
  Result<ControlState> LoadControl();
  Status WriteControl(const ControlWrite& w);
  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit);
  Status StorePolicies(const std::vector<PublishedPolicy>& policies);
  Result<std::vector<PublishedPolicy>> LoadPolicies();

  // queue_lease.cc
  Status LeaseJobs(const DequeueRequest& request, TimePoint now, std::vector<Delivery>& out);
  Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at, std::string_view checkpoint,
                           TimePoint now);
  Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now);
  Status ForceExpireLease(std::string_view job_id, TimePoint now);

  // queue_indexes.cc
  void EraseJob(Id id) JOBPACT_REQUIRES(mu_);

  // queue_store_admin.cc
  Result<std::optional<JobRecord>> LoadJob(std::string_view job_id);
  Result<std::vector<JobRecord>> QueryJobs(const JobQuery& q);
  Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                      std::string_view self_job_id,
                                                      TimePoint since);
  Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than);
  Result<int> DeleteSurplusJobs(JobStatus status, std::int64_t keep, TimePoint dedup_floor,
                                int limit);
  Result<QueueStats> ReadStats(TimePoint now);
  std::size_t Size() const;
  std::size_t ReadyCount(TimePoint now);

 private:
  static std::size_t Slot(JobStatus s) { return static_cast<std::size_t>(s); }

  // queue_backend.cc
  Status WriteLocked(JobWrite& w) JOBPACT_REQUIRES(mu_);
  void Apply(Id id, Entry& e, JobChange&& c) JOBPACT_REQUIRES(mu_);
  static void Store(JobRecord& to, JobRecord&& from, bool was_running);
  static Status IdInUse(const std::string& job_id);

  // queue_indexes.cc
  QueueState* QueueOf(const JobRecord& r) JOBPACT_REQUIRES(mu_);
  void Index(Id id, Entry& e, JobPlacement placement) JOBPACT_REQUIRES(mu_);
  void Unindex(Id id, Entry& e) JOBPACT_REQUIRES(mu_);
  std::set<TimeKey>& FinalSetOf(const Entry& e) JOBPACT_REQUIRES(mu_);
  void PromoteDue(TimePoint now) JOBPACT_REQUIRES(mu_);
  void AddDedupHolder(Entry& e) JOBPACT_REQUIRES(mu_);
  const JobRecord* FindLiveDuplicate(std::string_view dedup_key, std::string_view self_job_id,
                                     TimePoint since) const JOBPACT_REQUIRES(mu_);
  std::optional<EnqueueResult> FindEnqueueDuplicate(std::string_view dedup_key,
                                                    const EnqueueOptions& options, TimePoint now)
      JOBPACT_REQUIRES(mu_);

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
  // The last node each kind of index gave up (see InsertKey, queue_indexes.cc).
  std::set<ReadyKey>::node_type spare_ready_ JOBPACT_GUARDED_BY(mu_);
  std::set<TimeKey>::node_type spare_time_ JOBPACT_GUARDED_BY(mu_);
  // Keyed by views of each job's own envelope.dedup_key (see the file comment).
  std::unordered_multimap<std::string_view, Entry*> dedup_ JOBPACT_GUARDED_BY(mu_);
  std::array<std::int64_t, std::size(kAllJobStatuses)> status_counts_ JOBPACT_GUARDED_BY(mu_){};
  std::uint64_t delivery_counter_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Delivery::store_note: this store's id, unique in the process (so a note
  // of another store never matches), and how many entries it has erased.
  const std::uint64_t id_ = in_memory_internal::NextStoreId();
  std::uint64_t erasures_ JOBPACT_GUARDED_BY(mu_) = 0;
};

}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_IN_MEMORY_QUEUE_STORE_H_
