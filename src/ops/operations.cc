// Operations: the operator actions over one backend bundle, without a
// JobRunner (jobpact/operations.h).
#include "jobpact/operations.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "jobpact/job.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace {

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

bool MatchesFilter(const DlqEntry& e, const DlqFilter& f) {
  if (f.job_type && e.job_type != *f.job_type) return false;
  if (f.reason && e.reason != *f.reason) return false;
  if (f.failure_class &&
      (!e.last_failure || e.last_failure->failure_class != *f.failure_class)) {
    return false;
  }
  if (f.dead_lettered_after && e.dead_lettered_at < *f.dead_lettered_after) return false;
  if (f.dead_lettered_before && e.dead_lettered_at >= *f.dead_lettered_before) return false;
  return true;
}

// The queue label of an entry's counters, like every other counter's: the
// job's queue, "default" for input that never parsed (it has none).
std::string QueueLabel(const DlqEntry& e) {
  return e.queue.empty() ? Envelope{}.queue : e.queue;
}

Status CheckRequest(const ReplayRequest& req) {
  if (IsBlank(req.actor) || IsBlank(req.reason)) {
    return Status::InvalidArgument(
        "ReplayDeadLetters: actor and reason are required (who replays, and why)");
  }
  if (!(req.max_per_second >= 0) || std::isinf(req.max_per_second)) {
    return Status::InvalidArgument("ReplayDeadLetters: max_per_second must be >= 0 and finite");
  }
  if (req.max_jobs < 1) return Status::InvalidArgument("ReplayDeadLetters: max_jobs must be >= 1");
  if (req.extra_attempts < 0) {
    return Status::InvalidArgument("ReplayDeadLetters: extra_attempts must be >= 0");
  }
  return Status::Ok();
}

}  // namespace

OperationsListener::~OperationsListener() = default;
void OperationsListener::OnLockReleased(const LockReleaseReport&, std::string_view,
                                        std::string_view) {}
void OperationsListener::OnCacheInvalidated(const CacheInvalidation&, std::string_view,
                                            std::string_view) {}

Operations::Operations(BackendBundle backend, OperationsOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {}

Result<std::unique_ptr<Operations>> Operations::Open(BackendBundle backend,
                                                     OperationsOptions options) {
  if (backend.admin == nullptr) {
    return Status::InvalidArgument("Operations: the backend bundle has no operator side (admin)");
  }
  if (backend.locks == nullptr) {
    return Status::InvalidArgument("Operations: the backend bundle has no lock store");
  }
  if (options.clock == nullptr) options.clock = SystemClock::Default();
  return std::unique_ptr<Operations>(new Operations(std::move(backend), std::move(options)));
}

Result<QueueStats> Operations::Stats() { return backend_.admin->Stats(); }

Result<JobRecord> Operations::GetJob(std::string_view job_id) {
  return backend_.admin->Get(job_id);
}

Result<std::vector<JobRecord>> Operations::ListJobs(const JobFilter& filter) {
  return backend_.admin->ListJobs(filter);
}

Result<CancelOutcome> Operations::CancelJob(std::string_view job_id, std::string_view actor,
                                            std::string_view reason) {
  DlqAction who;
  who.actor = std::string(actor);
  who.reason = std::string(reason);
  return backend_.admin->Cancel(job_id, who);
}

Result<std::vector<DlqEntry>> Operations::ListDeadLetters(const DlqFilter& filter) {
  return backend_.admin->ListDeadLetters(filter);
}

Result<DlqEntry> Operations::GetDeadLetter(std::string_view job_id) {
  return backend_.admin->GetDeadLetter(job_id);
}

Result<ReplayReport> Operations::ReplayDeadLetters(const ReplayRequest& req) {
  JOBPACT_RETURN_IF_ERROR(CheckRequest(req));
  QueueAdmin& admin = *backend_.admin;
  ReplayReport report;
  std::vector<DlqEntry> selected;
  if (req.job_ids.empty()) {
    DlqFilter filter = req.selection;
    filter.limit = std::min(filter.limit, req.max_jobs);
    JOBPACT_ASSIGN_OR_RETURN(selected, admin.ListDeadLetters(filter));
  } else {
    for (const std::string& id : req.job_ids) {
      if (selected.size() >= req.max_jobs) break;
      Result<DlqEntry> e = admin.GetDeadLetter(id);
      if (!e.ok()) {
        report.failed.emplace_back(id, e.status());
      } else if (!MatchesFilter(*e, req.selection)) {
        report.failed.emplace_back(
            id, Status::FailedPrecondition("does not match the selection: " + id));
      } else {
        selected.push_back(std::move(*e));
      }
    }
  }

  const TimePoint now = options_.clock->Now();
  const Duration spacing = req.max_per_second > 0
                               ? std::chrono::duration_cast<Duration>(
                                     std::chrono::duration<double>(1.0 / req.max_per_second))
                               : Duration::zero();
  OperationsListener* listener = options_.listener.get();
  for (DlqEntry& e : selected) {
    if (!e.raw_envelope.empty()) {
      // Input that never parsed as an envelope cannot run (the backend
      // refuses it too); said here so that a dry run reports it as well.
      report.failed.emplace_back(
          e.job_id, Status::FailedPrecondition(
                        "an invalid envelope cannot run; fix it and enqueue it again: " + e.job_id));
      continue;
    }
    if (req.dry_run) {
      report.would_replay.push_back(e.job_id);
      continue;
    }
    DlqAction action;
    action.actor = req.actor;
    action.reason = req.reason;
    action.reset_attempts = req.reset_attempts;
    action.extra_attempts = req.extra_attempts;
    const TimePoint ready_at = now + spacing * static_cast<std::int64_t>(report.replayed.size());
    action.ready_at = ready_at;
    Status st = admin.Replay(e.job_id, action);
    if (!st.ok()) {
      report.failed.emplace_back(e.job_id, st);
      if (listener != nullptr) listener->OnReplayFailed(e, req, st);
      continue;
    }
    report.replayed.push_back(e.job_id);
    if (options_.metrics != nullptr) {
      options_.metrics->Increment(metric::kReplayed,
                                  MetricLabels{e.job_type, QueueLabel(e), e.reason, {}}, 1);
    }
    if (listener != nullptr) listener->OnReplayed(e, req, ready_at);
  }
  if (req.dry_run && listener != nullptr) listener->OnDryRun(req, report);
  return report;
}

Status Operations::DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                                     std::string_view why) {
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "DiscardDeadLetter: actor and reason are required (who discards, and why)");
  }
  JOBPACT_ASSIGN_OR_RETURN(DlqEntry e, backend_.admin->GetDeadLetter(job_id));
  const std::string queue = QueueLabel(e);
  DlqAction action;
  action.actor = std::string(actor);
  action.reason = std::string(why);
  JOBPACT_RETURN_IF_ERROR(backend_.admin->Discard(job_id, action));
  if (options_.metrics != nullptr) {
    options_.metrics->Increment(metric::kDiscarded,
                                MetricLabels{e.job_type, queue, reason::kOperatorDiscard, {}}, 1);
  }
  if (options_.listener != nullptr) options_.listener->OnDiscarded(e, queue, actor, why);
  return Status::Ok();
}

Result<int> Operations::PurgeDeadLetters(TimePoint older_than) {
  return backend_.admin->PurgeDeadLetters(older_than);
}

Result<int> Operations::PurgeFinished(TimePoint older_than) {
  return backend_.admin->PurgeFinished(older_than);
}

Result<int> Operations::TrimFinished(const FinishedRetention& keep) {
  return backend_.admin->TrimFinished(keep);
}

Status Operations::Set(ControlKind kind, std::string_view subject, int limit, FailureClass c,
                       std::string_view actor, std::string_view reason) {
  ControlRule rule;
  rule.kind = kind;
  rule.subject = std::string(subject);
  rule.limit = limit;
  rule.failure_class = c;
  rule.actor = std::string(actor);
  rule.reason = std::string(reason);
  return backend_.admin->SetControl(rule);
}

Status Operations::Clear(ControlKind kind, std::string_view subject, FailureClass c,
                         std::string_view actor, std::string_view reason) {
  return backend_.admin->ClearControl(ControlRuleKey{kind, std::string(subject), c}, actor,
                                      reason);
}

Status Operations::PauseType(std::string_view job_type, std::string_view actor,
                             std::string_view reason) {
  return Set(ControlKind::kPauseType, job_type, 0, FailureClass::kUnknown, actor, reason);
}

Status Operations::ResumeType(std::string_view job_type, std::string_view actor,
                              std::string_view reason) {
  return Clear(ControlKind::kPauseType, job_type, FailureClass::kUnknown, actor, reason);
}

Status Operations::PauseQueue(std::string_view queue, std::string_view actor,
                              std::string_view reason) {
  return Set(ControlKind::kPauseQueue, queue, 0, FailureClass::kUnknown, actor, reason);
}

Status Operations::ResumeQueue(std::string_view queue, std::string_view actor,
                               std::string_view reason) {
  return Clear(ControlKind::kPauseQueue, queue, FailureClass::kUnknown, actor, reason);
}

Status Operations::SetConcurrencyLimit(std::string_view job_type, int limit,
                                       std::string_view actor, std::string_view reason) {
  return Set(ControlKind::kConcurrencyLimit, job_type, limit, FailureClass::kUnknown, actor,
             reason);
}

Status Operations::ClearConcurrencyLimit(std::string_view job_type, std::string_view actor,
                                         std::string_view reason) {
  return Clear(ControlKind::kConcurrencyLimit, job_type, FailureClass::kUnknown, actor, reason);
}

Status Operations::SetTenantConcurrencyLimit(std::string_view queue, int limit,
                                             std::string_view actor, std::string_view reason) {
  return Set(ControlKind::kTenantConcurrencyLimit, queue, limit, FailureClass::kUnknown, actor,
             reason);
}

Status Operations::ClearTenantConcurrencyLimit(std::string_view queue, std::string_view actor,
                                               std::string_view reason) {
  return Clear(ControlKind::kTenantConcurrencyLimit, queue, FailureClass::kUnknown, actor,
               reason);
}

Status Operations::SetDependencyConcurrencyLimit(std::string_view dependency, int limit,
                                                 std::string_view actor,
                                                 std::string_view reason) {
  return Set(ControlKind::kDependencyConcurrencyLimit, dependency, limit, FailureClass::kUnknown,
             actor, reason);
}

Status Operations::ClearDependencyConcurrencyLimit(std::string_view dependency,
                                                   std::string_view actor,
                                                   std::string_view reason) {
  return Clear(ControlKind::kDependencyConcurrencyLimit, dependency, FailureClass::kUnknown, actor,
               reason);
}

Status Operations::SetMaxQueueDepth(std::string_view queue, int max_depth,
                                    std::string_view actor, std::string_view reason) {
  return Set(ControlKind::kMaxQueueDepth, queue, max_depth, FailureClass::kUnknown, actor, reason);
}

Status Operations::ClearMaxQueueDepth(std::string_view queue, std::string_view actor,
                                      std::string_view reason) {
  return Clear(ControlKind::kMaxQueueDepth, queue, FailureClass::kUnknown, actor, reason);
}

Status Operations::RouteToDlq(std::string_view job_type, FailureClass failure_class,
                              std::string_view actor, std::string_view reason) {
  return Set(ControlKind::kRouteToDlq, job_type, 0, failure_class, actor, reason);
}

Status Operations::ClearRoute(std::string_view job_type, FailureClass failure_class,
                              std::string_view actor, std::string_view reason) {
  return Clear(ControlKind::kRouteToDlq, job_type, failure_class, actor, reason);
}

Result<ControlState> Operations::Control() { return backend_.admin->ReadControl(); }

Result<std::vector<std::string>> Operations::ControlAudit(std::size_t limit) {
  return backend_.admin->ControlAudit(limit);
}

namespace {

Result<RateLimitStore*> RatesOf(const BackendBundle& b) {
  if (b.rate_limits == nullptr) {
    return Status::FailedPrecondition("the " + b.name + " backend has no rate limiters");
  }
  return b.rate_limits.get();
}

}  // namespace

Result<std::vector<RateLimiterState>> Operations::RateLimiters(std::size_t limit) {
  JOBPACT_ASSIGN_OR_RETURN(RateLimitStore * rates, RatesOf(backend_));
  return rates->List(limit);
}

Status Operations::OverrideRate(std::string_view key, std::optional<RateLimit> limit,
                                std::string_view actor, std::string_view reason) {
  JOBPACT_ASSIGN_OR_RETURN(RateLimitStore * rates, RatesOf(backend_));
  return rates->SetOverride(key, limit, actor, reason);
}

Status Operations::LiftBackoff(std::string_view key, std::string_view actor,
                               std::string_view reason) {
  JOBPACT_ASSIGN_OR_RETURN(RateLimitStore * rates, RatesOf(backend_));
  if (actor.empty() || reason.empty()) {
    return Status::InvalidArgument("LiftBackoff: an actor and a reason are required");
  }
  return rates->ClearBackoff(key);
}

Result<std::vector<LockLease>> Operations::ListLocks(std::size_t limit) {
  return backend_.locks->List(limit);
}

namespace {

std::string Ago(TimePoint then, TimePoint now) {
  const double s = ToSeconds(now - then);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f s", s < 0 ? 0.0 : s);
  return buf;
}

}  // namespace

Result<LockReleaseReport> Operations::ReleaseLock(std::string_view key, std::string_view owner,
                                                  std::string_view actor,
                                                  std::string_view why) {
  if (IsBlank(key) || IsBlank(owner)) {
    return Status::InvalidArgument("ReleaseLock: the lock key and its owner are required");
  }
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "ReleaseLock: actor and reason are required (who releases the lock, and why)");
  }
  const std::string k(key);
  JOBPACT_ASSIGN_OR_RETURN(std::optional<LockLease> held, backend_.locks->Inspect(key));
  if (!held) {
    return Status::NotFound("lock '" + k + "' is not held (it expired or was released)");
  }
  if (held->owner != owner) {
    return Status::FailedPrecondition("lock '" + k + "' is held by '" + held->owner +
                                      "', not by '" + std::string(owner) +
                                      "'; name the current owner (jobpact locks list)");
  }
  const TimePoint now = options_.clock->Now();
  QueueAdmin& admin = *backend_.admin;
  LockReleaseReport report;
  report.lock = *held;

  // 1. The running job whose delivery holds the token; and, on the way, a
  // running job with the lock's key.
  std::optional<JobRecord> holder;
  std::optional<JobRecord> same_key;
  JobFilter running;
  running.status = JobStatus::kRunning;
  running.limit = 10000;
  for (;;) {
    JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> page, admin.ListJobs(running));
    for (JobRecord& r : page) {
      if (r.lease_token == owner) {
        holder = std::move(r);
        break;
      }
      if (!same_key && r.envelope.lock_key == key) same_key = r;
    }
    if (holder || page.size() < running.limit) break;
    running.after_job_id = page.back().envelope.job_id;
  }
  if (holder) {
    report.job_id = holder->envelope.job_id;
    report.job_status = holder->status;
    if (now < holder->lease_expires_at) {
      return Status::FailedPrecondition(
          "refused: the owner of lock '" + k + "' is alive: job " + report.job_id + " (" +
          holder->envelope.job_type + ") is running with a live lease until " +
          FormatRfc3339(holder->lease_expires_at) +
          "; cancel the job (jobpact jobs cancel) or wait for the lease to expire");
    }
    report.verdict = "job " + report.job_id + " is running but its lease expired at " +
                     FormatRfc3339(holder->lease_expires_at) + " (" +
                     Ago(holder->lease_expires_at, now) + " ago): its worker is gone";
  } else {
    // 2. No delivery holds the token any more. Tie the lock to a job: one
    // with its key (running under another token, or anywhere else).
    if (!same_key) {
      JobFilter all;
      all.limit = 10000;
      std::size_t scanned = 0;
      while (!same_key && scanned < kLockReleaseScanLimit) {
        JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> page, admin.ListJobs(all));
        scanned += page.size();
        for (JobRecord& r : page) {
          if (r.envelope.lock_key == key) {
            same_key = std::move(r);
            break;
          }
        }
        if (page.size() < all.limit) break;
        all.after_job_id = page.back().envelope.job_id;
      }
    }
    if (!same_key) {
      return Status::FailedPrecondition(
          "refused: no job can be tied to lock '" + k + "' held by '" + std::string(owner) +
          "' (not a runner's lease token, or its job was purged), so its owner cannot be "
          "verified gone; the lock expires by itself at " + FormatRfc3339(held->expires_at));
    }
    report.job_id = same_key->envelope.job_id;
    report.job_status = same_key->status;
    report.verdict = "no running job holds lease token '" + std::string(owner) +
                     "' any more: its delivery is over (job " + report.job_id + " with lock key '" +
                     k + "' is " + std::string(JobStatusName(same_key->status)) + ")";
  }
  JOBPACT_RETURN_IF_ERROR(backend_.locks->Release(key, owner));
  if (options_.listener != nullptr) options_.listener->OnLockReleased(report, actor, why);
  return report;
}

Result<std::vector<PublishedPolicy>> Operations::Policies() {
  return backend_.admin->ReadPolicies();
}

// --- The cache store ---

Result<CacheStore*> Operations::Cache(std::string_view op) const {
  if (backend_.cache == nullptr) {
    const std::string name = backend_.name.empty() ? "this" : "the " + backend_.name;
    return Status::FailedPrecondition(
        std::string(op) + ": " + name +
        " backend has no cache store (the cache guard shares its entries through Redis; a "
        "process's in-memory cache cannot be reached from here)");
  }
  return backend_.cache.get();
}

Result<std::size_t> Operations::CountCacheEntries(std::string_view prefix) {
  JOBPACT_ASSIGN_OR_RETURN(CacheStore * cache, Cache("CountCacheEntries"));
  return cache->CountByPrefix(prefix);
}

Result<CacheInvalidation> Operations::InvalidateCacheKey(std::string_view key,
                                                         std::string_view actor,
                                                         std::string_view why) {
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "InvalidateCacheKey: actor and reason are required (who invalidates, and why)");
  }
  JOBPACT_ASSIGN_OR_RETURN(CacheStore * cache, Cache("InvalidateCacheKey"));
  JOBPACT_ASSIGN_OR_RETURN(bool removed, cache->Erase(key));
  if (!removed) {
    return Status::NotFound("no live cache entry has the key '" + std::string(key) +
                            "' (expired, removed already, or never cached): nothing removed");
  }
  CacheInvalidation done{std::string(key), false, 1};
  if (options_.listener != nullptr) options_.listener->OnCacheInvalidated(done, actor, why);
  return done;
}

Result<CacheInvalidation> Operations::InvalidateCachePrefix(std::string_view prefix,
                                                            std::string_view actor,
                                                            std::string_view why) {
  if (prefix.empty()) {
    return Status::InvalidArgument(
        "InvalidateCachePrefix: the prefix is empty; a whole flush is not a prefix "
        "invalidation (escalate it)");
  }
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "InvalidateCachePrefix: actor and reason are required (who invalidates, and why)");
  }
  JOBPACT_ASSIGN_OR_RETURN(CacheStore * cache, Cache("InvalidateCachePrefix"));
  JOBPACT_ASSIGN_OR_RETURN(std::size_t removed, cache->EraseByPrefix(prefix));
  CacheInvalidation done{std::string(prefix), true, removed};
  if (options_.listener != nullptr) options_.listener->OnCacheInvalidated(done, actor, why);
  return done;
}

}  // namespace jobpact
