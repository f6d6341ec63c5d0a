// The SPEC 7 guard-railed DLQ actions: ReplayDeadLetters and
// DiscardDeadLetter, each transition reported as one operator event.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

// --- DLQ operations (SPEC 7) ------------------------------------------------------

namespace {

bool MatchesFilter(const DlqEntry& e, const DlqFilter& f) {
  if (f.job_type && e.job_type != *f.job_type) return false;
  if (f.reason && e.reason != *f.reason) return false;
  if (f.failure_class && (!e.last_failure || e.last_failure->failure_class != *f.failure_class)) {
    return false;
  }
  if (f.dead_lettered_after && e.dead_lettered_at < *f.dead_lettered_after) return false;
  if (f.dead_lettered_before && e.dead_lettered_at >= *f.dead_lettered_before) return false;
  return true;
}

// The event of an operator's action on DLQ entry `e`. The entry does not
// name its queue (left empty).
TransitionEvent OperatorEvent(const DlqEntry& e, TimePoint at, std::string_view actor,
                              std::string_view why) {
  TransitionEvent event;
  event.job_id = e.job_id;
  event.job_type = e.job_type;
  event.trace_id = e.trace_id;
  event.attempt = e.attempts;
  event.origin = TransitionOrigin::kOperator;
  event.from = JobStatus::kDeadLettered;
  event.dlq_reason = e.reason;
  event.actor = actor;
  event.operator_reason = why;
  event.at = at;
  event.total = at - e.created_at;
  return event;
}

Status CheckReplayRequest(const ReplayRequest& req) {
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

Result<std::vector<DlqEntry>> RunnerCore::SelectDeadLetters(const ReplayRequest& req,
                                                            ReplayReport& report) {
  if (req.job_ids.empty()) {
    DlqFilter filter = req.selection;
    filter.limit = std::min(filter.limit, req.max_jobs);
    return options_.backend.admin->ListDeadLetters(filter);
  }
  std::vector<DlqEntry> selected;
  for (const std::string& id : req.job_ids) {
    if (selected.size() >= req.max_jobs) break;
    Result<DlqEntry> e = options_.backend.admin->GetDeadLetter(id);
    if (!e.ok()) {
      report.failed.emplace_back(id, e.status());
    } else if (!MatchesFilter(*e, req.selection)) {
      report.failed.emplace_back(id,
                                 Status::FailedPrecondition("does not match the selection: " + id));
    } else {
      selected.push_back(std::move(*e));
    }
  }
  return selected;
}

Result<ReplayReport> RunnerCore::ReplayDeadLetters(const ReplayRequest& req) {
  JOBPACT_RETURN_IF_ERROR(CheckReplayRequest(req));
  ReplayReport report;
  JOBPACT_ASSIGN_OR_RETURN(std::vector<DlqEntry> selected, SelectDeadLetters(req, report));

  const TimePoint now = clock().Now();
  const Duration spacing = req.max_per_second > 0
                               ? std::chrono::duration_cast<Duration>(
                                     std::chrono::duration<double>(1.0 / req.max_per_second))
                               : Duration::zero();
  for (DlqEntry& e : selected) {
    if (!e.raw_envelope.empty()) {
      // Input that never parsed as an envelope cannot run (the backend
      // refuses it too); said here so that a dry run reports it as well.
      report.failed.emplace_back(
          e.job_id,
          Status::FailedPrecondition(
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
    Status st = options_.backend.admin->Replay(e.job_id, action);
    if (!st.ok()) {
      report.failed.emplace_back(e.job_id, st);
      logger_.Log(LogLevel::kWarn, "dlq_replay_failed", nullptr,
                  {{"job_id", e.job_id},
                   {"job_type", e.job_type},
                   {"actor", req.actor},
                   {"reason", req.reason},
                   {"error", st.ToString()}});
      continue;
    }
    report.replayed.push_back(e.job_id);
    TransitionEvent event = OperatorEvent(e, clock().Now(), req.actor, req.reason);
    event.to = JobStatus::kQueued;
    event.reason = reason::kReplay;
    event.ready_at = ready_at;
    event.reset_attempts = req.reset_attempts;
    Emit(event);
  }
  if (req.dry_run) {
    logger_.Log(LogLevel::kInfo, "dlq_replay_dry_run", nullptr,
                {{"actor", req.actor},
                 {"reason", req.reason},
                 {"would_replay", static_cast<std::int64_t>(report.would_replay.size())},
                 {"failed", static_cast<std::int64_t>(report.failed.size())}});
  } else if (!report.replayed.empty()) {
    WakeOneWorker();
  }
  return report;
}

Status RunnerCore::DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                                     std::string_view why) {
  if (IsBlank(actor) || IsBlank(why)) {
    return Status::InvalidArgument(
        "DiscardDeadLetter: actor and reason are required (who discards, and why)");
  }
  JOBPACT_ASSIGN_OR_RETURN(DlqEntry e, options_.backend.admin->GetDeadLetter(job_id));
  // A DLQ entry does not name its queue; the job record does. Label the
  // counter like every other one: the job's queue, "default" if unknown (an
  // envelope that never parsed has none).
  std::string queue = Envelope{}.queue;
  if (Result<JobRecord> rec = options_.backend.admin->Get(job_id);
      rec.ok() && !rec->envelope.queue.empty()) {
    queue = std::move(rec->envelope.queue);
  }
  DlqAction action;
  action.actor = std::string(actor);
  action.reason = std::string(why);
  JOBPACT_RETURN_IF_ERROR(options_.backend.admin->Discard(job_id, action));
  TransitionEvent event = OperatorEvent(e, clock().Now(), actor, why);
  event.queue = queue;
  event.to = JobStatus::kDiscarded;
  event.reason = reason::kOperatorDiscard;
  Emit(event);
  return Status::Ok();
}

}  // namespace internal
}  // namespace jobpact
