// The JobRunner's threads: workers, the watchdog (lease renewal and hung
// handlers, SPEC 5), maintenance, graceful shutdown, and the thread-less
// RunUntilIdle() for tests.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {
namespace {

// How often the watchdog looks at running jobs. Renewals are due every third
// of a visibility timeout (>= 5 s with the default validation buffer) and
// hung detection has a grace of seconds, so a quarter second of lateness is
// immaterial, while a fixed tick keeps the hot path free of notifications.
constexpr Duration kWatchdogTick = std::chrono::milliseconds(250);

}  // namespace

RunnerStats RunnerCore::Stats() const {
  RunnerStats s;
  s.deliveries = deliveries_.load(std::memory_order_relaxed);
  s.busy_workers = busy_workers_.load(std::memory_order_relaxed);
  s.hung_workers = hung_workers_.load(std::memory_order_relaxed);
  s.hung_workers_total = hung_workers_total_.load(std::memory_order_relaxed);
  s.replacement_workers = replacement_workers_.load(std::memory_order_relaxed);
  return s;
}

void RunnerCore::SetWorkerGauges() {
  MutexLock l(gauges_mu_);
  options_.metrics->SetGauge(metric::kBusyWorkers, MetricLabels{},
                             busy_workers_.load(std::memory_order_relaxed));
  options_.metrics->SetGauge(metric::kHungWorkersNow, MetricLabels{},
                             hung_workers_.load(std::memory_order_relaxed));
}

Status RunnerCore::RunMaintenance() {
  const TimePoint now = clock().Now();
  Status first;
  auto note = [&](std::string_view what, const Status& s) {
    if (s.ok()) return;
    logger_.Log(LogLevel::kError, "maintenance_failed", nullptr,
                {{"step", what}, {"error", s.ToString()}});
    if (first.ok()) first = Status(s.code(), std::string(what) + ": " + s.message());
  };

  // The operator's control state and the policies tools show.
  note("read control state", control_->Refresh());
  note("publish retry policies", PublishPoliciesIfChanged());

  // Crash recovery first, so that recovered jobs are visible to the very
  // next Dequeue.
  Result<std::vector<LeaseRecovery>> recovered =
      options_.queue->RecoverExpiredLeases(options_.max_lease_recoveries);
  if (recovered.ok()) {
    for (const LeaseRecovery& r : *recovered) ReportLeaseRecovery(r);
    if (!recovered->empty()) {
      logger_.Log(LogLevel::kWarn, "leases_recovered", nullptr,
                  {{"count", static_cast<std::int64_t>(recovered->size())}});
    }
  } else {
    note("recover expired leases", recovered.status());
  }
  Result<int> purged_dlq = options_.backend.admin->PurgeDeadLetters(now - options_.dlq_retention);
  if (!purged_dlq.ok()) note("purge dead letters", purged_dlq.status());
  Result<int> purged = options_.backend.admin->PurgeFinished(now - options_.final_status_retention);
  if (!purged.ok()) note("purge finished jobs", purged.status());
  // Count retention, on top of the age: a store that cannot trim says so
  // once, and is then retained by age only.
  // A job that succeeded within the dedup window is kept: dedup still
  // finds it (SPEC 3 step 4).
  FinishedRetention keep = options_.finished_retention;
  keep.keep_succeeded_since = now - options_.dedup_window;
  if ((keep.succeeded || keep.failed || keep.discarded) &&
      store_trims_.load(std::memory_order_relaxed)) {
    Result<int> trimmed = options_.backend.admin->TrimFinished(keep);
    if (trimmed.status().code() == StatusCode::kUnimplemented) {
      store_trims_.store(false, std::memory_order_relaxed);
      logger_.Log(LogLevel::kWarn, "retention_by_age_only", nullptr,
                  {{"error", trimmed.status().ToString()}});
    } else if (!trimmed.ok()) {
      note("trim finished jobs", trimmed.status());
    }
  }
  Result<int> purged_keys = options_.idempotency->PurgeExpired();
  if (!purged_keys.ok()) note("purge idempotency records", purged_keys.status());

  Result<QueueStats> stats = options_.backend.admin->Stats();
  if (stats.ok()) {
    for (const auto& [queue, q] : stats->queues) {
      MetricLabels labels{{}, queue, {}, {}};
      options_.metrics->SetGauge(metric::kQueueDepth, labels, static_cast<double>(q.depth));
      options_.metrics->SetGauge(metric::kOldestJobAge, labels, ToSeconds(q.oldest_ready_age));
    }
  } else {
    note("stats", stats.status());
  }
  SetWorkerGauges();
  // Circuit states (open -> half_open happens lazily, on the next call).
  for (const auto& [dependency, snap] : options_.circuit_breakers->Snapshots()) {
    SetCircuitGauge(dependency, snap.state);
  }
  if (options_.retry_budgets != nullptr) {
    for (const auto& [job_type, snap] : options_.retry_budgets->Snapshots()) {
      options_.metrics->SetGauge(metric::kRetryBudgetBalance, MetricLabels{job_type, {}, {}, {}},
                                 snap.balance);
    }
  }
  return first;
}

Result<int> RunnerCore::RunUntilIdle() {
  {
    MutexLock l(mu_);
    if (state_ != State::kCreated) {
      return Status::FailedPrecondition(
          "RunUntilIdle: the runner was started or shut down; it runs jobs on its own threads");
    }
  }
  RunMaintenance().IgnoreError();  // Logged inside; a failing purge must not stop the run.
  HandlerCache cache;
  const DequeueRequest request = MakeDequeueRequest(options_.runner_id + "/caller");
  int processed = 0;
  while (true) {
    Result<std::vector<Delivery>> batch = options_.queue->Dequeue(request);
    if (!batch.ok()) {
      logger_.Log(LogLevel::kError, "dequeue_failed", nullptr,
                  {{"error", batch.status().ToString()}});
      return batch.status();
    }
    if (batch->empty()) break;
    for (Delivery& d : *batch) {
      ++processed;
      // Earlier jobs of the batch may have taken time (a ManualClock moved
      // by a handler): renew or skip a lease that is due.
      if (!EnsureLease(d)) continue;
      ProcessDelivery(d, nullptr, cache);
    }
  }
  return processed;
}

// --- Workers ----------------------------------------------------------------------

Status RunnerCore::Start() {
  MutexLock l(mu_);
  if (state_ != State::kCreated) {
    return Status::FailedPrecondition("Start: the runner was already started or shut down");
  }
  state_ = State::kRunning;
  auto self = shared_from_this();
  if (completions_ != nullptr) {
    // Before the workers, so that their first outcome is already grouped.
    completions_->Open();
    completion_writer_ = std::thread([self] { self->CompletionWriterLoop(); });
  }
  for (int i = 0; i < options_.workers; ++i) SpawnWorkerLocked(false);
  watchdog_ = std::thread([self] { self->WatchdogLoop(); });
  maintenance_ = std::thread([self] { self->MaintenanceLoop(); });
  logger_.Log(LogLevel::kInfo, "runner_started", nullptr,
              {{"runner_id", options_.runner_id},
               {"workers", options_.workers},
               {"queue_backend", options_.queue->Name()}});
  return Status::Ok();
}

void RunnerCore::SpawnWorkerLocked(bool replacement) {
  auto slot = std::make_shared<WorkerSlot>(
      worker_prefix_ + std::to_string(next_worker_index_++), replacement);
  live_workers_.fetch_add(1);
  // The thread holds the core: a hung handler's detached thread may return
  // after the JobRunner is destroyed.
  auto self = shared_from_this();
  slot->thread = std::thread([self, slot] { self->WorkerLoop(slot); });
  slots_.push_back(std::move(slot));
}

bool RunnerCore::WaitInStore(std::uint64_t seen_enqueues, TimePoint until) {
  // In slices, so that Shutdown and this runner's own enqueues (which the
  // store also wakes for) are noticed within one.
  constexpr Duration kSlice = std::chrono::milliseconds(100);
  while (!stopping_.load() && enqueue_seq_.load(std::memory_order_seq_cst) == seen_enqueues) {
    const TimePoint now = clock().Now();
    if (now >= until) return true;
    Result<bool> woken = options_.queue->WaitForWork(std::min(kSlice, until - now));
    if (!woken.ok()) {
      // Cannot wait there (or the store is down: the next Dequeue says so).
      if (woken.status().code() == StatusCode::kUnimplemented) store_wakes_.store(false);
      return false;
    }
    if (*woken) return true;
  }
  return true;
}

void RunnerCore::IdleWait(std::uint64_t seen_enqueues) {
  // One idle worker of this runner waits in the store (the watch); the
  // others sleep here. A wake-up from the store so brings one worker to the
  // store, not all of them: a herd of lease transactions of which all but
  // one would find nothing. The watcher, leaving with its wake-up, hands
  // the watch to a sleeper; a worker whose lease came back full wakes one
  // more (WakeIdleWorker), so a burst still spreads over the workers.
  // ~0 (after a failed Dequeue): the whole interval, whatever is enqueued,
  // so that a store that is down is not asked again at once, in a loop.
  const bool after_error = seen_enqueues == ~std::uint64_t{0};
  bool may_watch = !after_error;
  const TimePoint until = clock().Now() + options_.poll_interval;
  MutexLock l(work_mu_);
  idle_workers_.fetch_add(1, std::memory_order_seq_cst);
  while (!stopping_.load() &&
         (after_error || enqueue_seq_.load(std::memory_order_seq_cst) == seen_enqueues) &&
         clock().Now() < until) {
    if (wake_tokens_ > 0 && !after_error) {
      --wake_tokens_;
      break;
    }
    if (may_watch && !store_watched_ && store_wakes_.load()) {
      store_watched_ = true;
      bool waited;
      {
        MutexUnlock unlocked(work_mu_);
        waited = WaitInStore(seen_enqueues, until);
      }
      store_watched_ = false;
      work_cv_.NotifyOne();  // A sleeper takes the watch over.
      if (waited) break;
      may_watch = false;  // The store cannot wait now: sleep the interval.
      continue;
    }
    work_cv_.WaitUntil(work_mu_, clock(), until);
  }
  idle_workers_.fetch_sub(1, std::memory_order_seq_cst);
}

void RunnerCore::WakeIdleWorker() {
  if (idle_workers_.load(std::memory_order_seq_cst) <= 0) return;
  MutexLock l(work_mu_);
  // Tokens beyond the sleepers would wake later idlers for nothing.
  const int sleepers = idle_workers_.load(std::memory_order_seq_cst) - (store_watched_ ? 1 : 0);
  if (wake_tokens_ < sleepers) {
    ++wake_tokens_;
    work_cv_.NotifyOne();
  } else if (store_watched_) {
    // Only the watcher is idle: it looks at its next slice of the wait
    // (WaitInStore sees the sequence move).
    enqueue_seq_.fetch_add(1, std::memory_order_seq_cst);
  }
}

DequeueRequest RunnerCore::MakeDequeueRequest(std::string worker_id) const {
  DequeueRequest request;
  request.queues = options_.queues;
  request.max_jobs = options_.dequeue_batch;
  request.worker_id = std::move(worker_id);
  // Lets the store check dedup in the lease step (pipeline step 4) and,
  // where it keeps the locks and claims beside the jobs, take them there
  // too (steps 5 and 6): they then ride with the lease as step 9 rides
  // with the completion.
  request.dedup_window = options_.dedup_window;
  request.take_guards = guards_with_acks_;
  return request;
}

Status RunnerCore::TakeBatch(const DequeueRequest& request, std::vector<Delivery>* batch,
                             bool* full) {
  // Ten workers leasing each for itself are ten store transactions in
  // flight on the same first ready jobs: on PostgreSQL each skips the rows
  // the others locked (SKIP LOCKED), on SQLite and Redis they queue behind
  // each other, and each pays its transaction's fixed cost for 16 jobs. Here
  // a worker that needs work while another leases waits for that lease,
  // which asks for a batch for every such worker; the batches are the same
  // size as before, so no worker holds more jobs than it would alone.
  *full = false;
  std::vector<Delivery> spent;  // Freed after the lock is released.
  MutexLock l(lease_mu_);
  const std::uint64_t seen_lease = leases_ended_;
  while (leasing_ && leased_for_others_.empty()) {
    ++lease_waiters_;
    lease_cv_.Wait(lease_mu_);
    --lease_waiters_;
  }
  if (!leased_for_others_.empty()) {
    spent.swap(*batch);
    batch->swap(leased_for_others_.back());
    leased_for_others_.pop_back();
    return Status::Ok();
  }
  // Stopping: no new lease. Or a lease ended while this worker waited
  // without a batch for it: the store had no more ready then, or it
  // failed; the caller waits for work rather than leasing again at once.
  if (stopping_.load(std::memory_order_acquire) ||
      (leases_ended_ != seen_lease && last_lease_short_)) {
    spent.swap(*batch);
    return Status::Ok();
  }
  leasing_ = true;
  const int others = lease_waiters_;
  DequeueRequest shared = request;
  shared.max_jobs = request.max_jobs * (1 + others);
  Status s;
  {
    MutexUnlock unlocked(lease_mu_);
    s = options_.queue->DequeueInto(shared, batch);
  }
  leasing_ = false;
  ++leases_ended_;
  if (!s.ok()) batch->clear();
  *full = static_cast<int>(batch->size()) >= shared.max_jobs;
  last_lease_short_ = !*full;
  // This worker's batch is the first max_jobs; the rest, in batches of
  // max_jobs, wait for the others (each waiter takes one). Moved from the
  // tail, so the first jobs in lease order stay with this worker.
  const std::size_t per = static_cast<std::size_t>(request.max_jobs);
  while (batch->size() > per) {
    const std::size_t from = per + (batch->size() - per - 1) / per * per;
    std::vector<Delivery> theirs(std::make_move_iterator(batch->begin() + from),
                                 std::make_move_iterator(batch->end()));
    batch->erase(batch->begin() + from, batch->end());
    leased_for_others_.push_back(std::move(theirs));
  }
  lease_cv_.NotifyAll();
  return s;
}

void RunnerCore::WorkerLoop(const std::shared_ptr<WorkerSlot>& slot) {
  HandlerCache cache;
  const DequeueRequest request = MakeDequeueRequest(slot->id);
  // Swapped with slot->batch per batch, and back when the batch is done:
  // it then holds the spent deliveries, which the next Dequeue may copy
  // over (QueueBackend::DequeueInto), so neither the vector nor, on a store
  // that reuses them, the deliveries' strings are allocated again per job.
  std::vector<Delivery> batch;
  while (!stopping_.load(std::memory_order_acquire)) {
    const std::uint64_t seen = enqueue_seq_.load(std::memory_order_seq_cst);
    bool full = false;
    Status dequeued = TakeBatch(request, &batch, &full);
    if (!dequeued.ok()) {
      logger_.Log(LogLevel::kError, "dequeue_failed", nullptr,
                  {{"worker_id", slot->id}, {"error", dequeued.ToString()}});
      // Back off for a poll interval; an Enqueue does not help here.
      IdleWait(~std::uint64_t{0});
      continue;
    }
    if (batch.empty()) {
      IdleWait(seen);
      continue;
    }
    // A full lease: more may be ready than it took.
    if (full) WakeIdleWorker();
    {
      MutexLock l(slot->mu);
      slot->batch.swap(batch);
      slot->next = 0;
      slot->batch_lease_expires.clear();
      for (const Delivery& d : slot->batch) slot->batch_lease_expires.push_back(d.lease.expires_at);
    }
    busy_workers_.fetch_add(1, std::memory_order_relaxed);
    while (true) {
      // The delivery is processed where it is in slot->batch: the watchdog
      // and Shutdown() only touch the entries from slot->next on, and the
      // vector does not change until the batch is done.
      Delivery* d = nullptr;
      bool acks_kept = false;
      // Stop taking work: the rest of the batch goes back at once so other
      // runners can take it. Taken under the slot lock (next = size), so
      // Shutdown() never gives the same leases back twice.
      std::vector<Delivery> rest;
      {
        MutexLock l(slot->mu);
        // A hung worker's remaining batch is not renewed any more (see
        // WatchSlot): those leases expire and are recovered like the rest of
        // a lost worker's work.
        if (slot->next >= slot->batch.size() || slot->hung) break;
        if (stopping_.load(std::memory_order_acquire)) {
          for (std::size_t i = slot->next; i < slot->batch.size(); ++i) {
            rest.push_back(slot->batch[i]);
          }
          slot->next = slot->batch.size();
        } else {
          d = &slot->batch[slot->next];
          d->lease.expires_at = slot->batch_lease_expires[slot->next];
          ++slot->next;
          acks_kept = !slot->acks.empty();
        }
      }
      if (!rest.empty()) {
        for (const Delivery& r : rest) GiveBack(r, reason::kShutdown, false);
        break;
      }
      // The kept outcomes are of quick jobs of one type; a job of another
      // type may not be quick, so they are written before it starts.
      if (acks_kept && d->job.envelope.job_type != cache.acks_type) FlushAcks(*slot, true);
      if (!EnsureLease(*d)) continue;
      ProcessDelivery(*d, slot.get(), cache);
    }
    if (per_worker_acks_) FlushAcks(*slot, true);
    {
      MutexLock l(slot->mu);
      batch.swap(slot->batch);  // The spent deliveries, for the next Dequeue.
      slot->batch.clear();
      slot->batch_lease_expires.clear();
      slot->next = 0;
    }
    busy_workers_.fetch_sub(1, std::memory_order_relaxed);
    bool hung;
    {
      MutexLock l(slot->mu);
      hung = slot->hung;
    }
    if (hung) {
      // A replacement took this worker's place; its late outcome was
      // written (or fenced) above. The thread ends here, and the worker no
      // longer counts as hung (the lifetime counter keeps it).
      hung_workers_.fetch_sub(1);
      SetWorkerGauges();
      logger_.Log(LogLevel::kWarn, "hung_worker_returned", nullptr, {{"worker_id", slot->id}});
      break;
    }
  }
  live_workers_.fetch_sub(1);
  {
    MutexLock l(exit_mu_);
    slot->exited.store(true, std::memory_order_release);
    exit_cv_.NotifyAll();
  }
}

// --- Watchdog ------------------------------------------------------------------------

bool RunnerCore::WatchSlot(const std::shared_ptr<WorkerSlot>& slot, TimePoint now,
                           std::vector<HungWorkerInfo>* hung) {
  // The slot lock is held across the renewals: a worker that finishes its
  // job waits for an in-flight renewal instead of racing it, so a lease is
  // never renewed after its outcome is written.
  MutexLock l(slot->mu);
  const bool acks_overdue = !slot->acks.empty() && now - slot->acks_since >= kWatchdogTick;
  if (slot->hung || slot->given_back) return acks_overdue;
  if (slot->running) {
    RunningJob& job = slot->job;
    const Envelope& env = job.delivery->job.envelope;
    if (now >= job.deadline + options_.hung_grace) {
      // SPEC 5: a hung handler. Stop renewing (its lease expires and the job
      // is delivered again; a late completion is fenced), cancel it, and let
      // the caller start a replacement and call the hook.
      slot->hung = true;
      // Counted here, under the slot lock, so that the worker's decrement
      // (after it reads `hung` under the same lock) never comes first.
      hung_workers_.fetch_add(1);
      job.renewing = false;
      job.cancel->lost.store(true, std::memory_order_release);
      hung->push_back(HungWorkerInfo{slot->id, env.job_id, env.job_type, env.attempt, job.deadline});
      return acks_overdue;
    }
    if (job.renewing && now >= job.next_renew) {
      Status s = RenewDelivery(*job.delivery, job.lock_held, job.claim_held, job.dependency_slot,
                               {}, job.cancel);
      if (s.ok()) {
        job.next_renew = now + env.visibility_timeout / 3;
      } else if (s.code() == StatusCode::kAborted) {
        job.renewing = false;
        job.cancel->lost.store(true, std::memory_order_release);
        logger_.Log(LogLevel::kWarn, "lease_lost", &env, {{"error", s.ToString()}});
      } else {
        logger_.Log(LogLevel::kError, "lease_renewal_failed", &env, {{"error", s.ToString()}});
      }
    }
  }
  // Jobs waiting behind the running one keep their leases (and the guards
  // taken with them) too.
  for (std::size_t i = slot->next; i < slot->batch.size(); ++i) {
    Delivery& d = slot->batch[i];
    const Duration vis = d.job.envelope.visibility_timeout;
    if (slot->batch_lease_expires[i] - now > vis - vis / 3) continue;
    Result<Lease> renewed = RenewWaiting(d);
    if (renewed.ok()) slot->batch_lease_expires[i] = renewed->expires_at;
    // On failure EnsureLease() decides at start.
  }
  return acks_overdue;
}

void RunnerCore::WatchdogLoop() {
  while (!stop_background_.load(std::memory_order_acquire)) {
    const TimePoint now = clock().Now();
    std::vector<std::shared_ptr<WorkerSlot>> slots;
    {
      MutexLock l(mu_);
      slots = slots_;
    }
    std::vector<HungWorkerInfo> hung;
    for (const auto& slot : slots) {
      if (slot->exited.load(std::memory_order_acquire)) continue;
      // Outcomes kept while a job predicted quick runs long (or hangs).
      if (WatchSlot(slot, now, &hung)) FlushAcks(*slot, false);
    }
    for (const HungWorkerInfo& info : hung) {
      hung_workers_total_.fetch_add(1);
      options_.metrics->Increment(metric::kHungWorkers,
                                  MetricLabels{info.job_type, {}, {}, {}}, 1);
      bool replaced = false;
      {
        MutexLock l(mu_);
        if (state_ == State::kRunning &&
            replacement_workers_.load() < options_.max_replacement_workers) {
          replacement_workers_.fetch_add(1);
          SpawnWorkerLocked(true);
          replaced = true;
        }
      }
      logger_.Log(LogLevel::kError, "worker_hung", nullptr,
                  {{"worker_id", info.worker_id},
                   {"job_id", info.job_id},
                   {"job_type", info.job_type},
                   {"attempt", info.attempt},
                   {"deadline", FormatRfc3339(info.deadline)},
                   {"replacement_started", replaced ? "true" : "false"}});
      SetWorkerGauges();
      if (options_.on_hung_worker) {
        try {
          options_.on_hung_worker(info);
        } catch (...) {
          logger_.Log(LogLevel::kError, "hung_worker_hook_threw", nullptr,
                      {{"worker_id", info.worker_id}});
        }
      }
    }
    MutexLock l(background_mu_);
    const TimePoint until = clock().Now() + kWatchdogTick;
    while (!stop_background_.load(std::memory_order_acquire) && clock().Now() < until) {
      background_cv_.WaitUntil(background_mu_, clock(), until);
    }
  }
}

void RunnerCore::MaintenanceLoop() {
  while (!stop_background_.load(std::memory_order_acquire)) {
    RunMaintenance().IgnoreError();  // Logged inside.
    MutexLock l(background_mu_);
    const TimePoint until = clock().Now() + options_.maintenance_interval;
    while (!stop_background_.load(std::memory_order_acquire) && clock().Now() < until) {
      background_cv_.WaitUntil(background_mu_, clock(), until);
    }
  }
}

// --- Shutdown ------------------------------------------------------------------------

Status RunnerCore::Shutdown(Duration grace) {
  {
    MutexLock l(mu_);
    if (state_ == State::kStopped || state_ == State::kStopping) return Status::Ok();
    if (state_ == State::kCreated) {
      state_ = State::kStopped;
      return Status::Ok();
    }
    state_ = State::kStopping;
  }
  logger_.Log(LogLevel::kInfo, "runner_stopping", nullptr,
              {{"runner_id", options_.runner_id}, {"grace_ms", static_cast<std::int64_t>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(grace).count())}});
  // 1. Stop taking work; idle workers wake and exit, busy ones give the rest
  // of their batch back at the next job boundary.
  stopping_.store(true, std::memory_order_release);
  {
    MutexLock l(work_mu_);
    work_cv_.NotifyAll();
  }
  std::vector<std::shared_ptr<WorkerSlot>> slots;
  {
    MutexLock l(mu_);
    slots = slots_;
  }
  // 2. Let running jobs finish until now + grace. Hung workers are not
  // waited for: they are past their deadline by a grace period already.
  auto all_done = [&] {
    for (const auto& slot : slots) {
      if (slot->exited.load(std::memory_order_acquire)) continue;
      MutexLock l(slot->mu);
      if (!slot->hung) return false;
    }
    return true;
  };
  const TimePoint until = clock().Now() + grace;
  {
    MutexLock l(exit_mu_);
    while (!all_done() && clock().Now() < until) exit_cv_.WaitUntil(exit_mu_, clock(), until);
  }
  // 3. The watchdog renewed leases during the grace period; stop it and
  // maintenance now.
  stop_background_.store(true, std::memory_order_release);
  {
    MutexLock l(background_mu_);
    background_cv_.NotifyAll();
  }
  std::thread watchdog, maintenance;
  {
    MutexLock l(mu_);
    watchdog = std::move(watchdog_);
    maintenance = std::move(maintenance_);
    slots = slots_;  // Includes replacements started meanwhile.
  }
  if (watchdog.joinable()) watchdog.join();
  if (maintenance.joinable()) maintenance.join();
  // 4. Give back the leases of what is still running (or waiting in a
  // batch): running -> queued, no attempt spent. The handler is told it is
  // cancelled; its late outcome is not written. Its lock and idempotency
  // claim are left to expire with their TTL rather than released, because
  // the handler may still be writing.
  for (const auto& slot : slots) {
    // Outcomes a worker still inside a handler kept: written, not given back.
    if (per_worker_acks_) FlushAcks(*slot, false);
    std::optional<Delivery> running;
    std::vector<Delivery> waiting;
    {
      MutexLock l(slot->mu);
      if (slot->running && !slot->given_back) {
        slot->given_back = true;
        slot->job.cancel->shutdown.store(true, std::memory_order_release);
        running = *slot->job.delivery;
      }
      for (std::size_t i = slot->next; i < slot->batch.size(); ++i) {
        waiting.push_back(slot->batch[i]);
      }
      slot->next = slot->batch.size();
    }
    if (running) GiveBack(*running, reason::kShutdown, true);
    for (const Delivery& r : waiting) GiveBack(r, reason::kShutdown, false);
  }
  // Batches a shared lease took for workers that did not take them (none
  // when every waiter took its own, the usual case).
  std::vector<std::vector<Delivery>> unclaimed;
  {
    MutexLock l(lease_mu_);
    unclaimed.swap(leased_for_others_);
  }
  for (const std::vector<Delivery>& b : unclaimed) {
    for (const Delivery& r : b) GiveBack(r, reason::kShutdown, false);
  }
  // 5. Join what finished; detach what is still inside a handler (it holds
  // the core alive and exits when the handler returns).
  int detached = 0;
  for (const auto& slot : slots) {
    std::thread t;
    {
      MutexLock l(mu_);
      t = std::move(slot->thread);
    }
    if (!t.joinable()) continue;
    bool exited;
    {
      MutexLock l(exit_mu_);
      exited = slot->exited.load(std::memory_order_acquire);
    }
    bool in_handler;
    {
      MutexLock l(slot->mu);
      in_handler = slot->running;
    }
    if (exited || !in_handler) {
      // A worker outside a handler exits promptly (stopping_ is set).
      t.join();
    } else {
      t.detach();
      ++detached;
    }
  }
  // 6. Write the outcomes the workers handed over (a detached worker that
  // returns later writes its own, fenced).
  if (completions_ != nullptr) {
    completions_->Close();
    std::thread writer;
    {
      MutexLock l(mu_);
      writer = std::move(completion_writer_);
    }
    if (writer.joinable()) writer.join();
  }
  {
    MutexLock l(mu_);
    state_ = State::kStopped;
  }
  SetWorkerGauges();
  logger_.Log(LogLevel::kInfo, "runner_stopped", nullptr,
              {{"runner_id", options_.runner_id},
               {"detached_workers", static_cast<std::int64_t>(detached)}});
  return Status::Ok();
}

}  // namespace internal
}  // namespace jobpact
