#include "src/cli/commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jobpact/job.h"
#include "src/cli/args.h"
#include "src/cli/output.h"

namespace jobpact {
namespace cli {
namespace {

TimePoint Now() { return SystemClock::Default()->Now(); }

void PrintJson(const Context& ctx, const Json& j) {
  // Cache keys may be any bytes: invalid UTF-8 is printed as U+FFFD rather
  // than throwing.
  std::fprintf(ctx.out, "%s\n", j.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
}

std::string ClassOf(const std::optional<Failure>& f) {
  return f ? std::string(FailureClassName(f->failure_class)) : "-";
}

std::string Or(const std::string& s, const char* dash = "-") { return s.empty() ? dash : s; }

// Reads a --limit value: within [1, max] or a usage error.
Status CheckLimit(int limit, int max) {
  if (limit < 1 || limit > max) {
    return Status::InvalidArgument("--limit: " + std::to_string(limit) + " is not within 1.." +
                                   std::to_string(max));
  }
  return Status::Ok();
}

// As the facade's replay selects ids: each must match the filters too.
bool Matches(const DlqEntry& e, const DlqFilter& f) {
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

int Done(const Context& ctx, const Json& j, const std::string& human) {
  if (ctx.json) {
    PrintJson(ctx, j);
  } else {
    std::fprintf(ctx.out, "%s\n", human.c_str());
  }
  return kExitOk;
}

Json FailedToJson(const std::vector<std::pair<std::string, Status>>& failed) {
  Json a = Json::array();
  for (const auto& [id, st] : failed) {
    a.push_back({{"job_id", id},
                 {"code", std::string(StatusCodeName(st.code()))},
                 {"error", OneLine(st.message())}});
  }
  return a;
}

void PrintFailed(const Context& ctx, const std::vector<std::pair<std::string, Status>>& failed) {
  for (const auto& [id, st] : failed) {
    std::fprintf(ctx.out, "  failed %s: %s\n", id.c_str(), OneLine(st.ToString()).c_str());
  }
}

std::string Refusal(std::size_t n, const char* verb) {
  return "refused: would " + std::string(verb) + " " + std::to_string(n) +
         " entries, more than " + std::to_string(kConfirmThreshold) +
         " at once; check them with --dry-run, narrow the selection, or add --yes "
         "(a mass " + verb + " is escalate-only in the runbook)";
}

}  // namespace

Result<DlqFilter> ToDlqFilter(const DlqSelection& sel, TimePoint now) {
  internal::DlqFilterText text;
  text.type = sel.type;
  text.reason = sel.reason;
  text.failure_class = sel.failure_class;
  text.since = sel.since;
  text.until = sel.until;
  text.limit = sel.limit;
  return internal::ParseDlqFilter(text, now, "--");
}

int Fail(const Context& ctx, const std::string& what, const Status& status) {
  std::fprintf(ctx.err, "jobpact: %s: %s\n", what.c_str(), OneLine(status.message()).c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
}

int FailWith(const Context& ctx, int code, const std::string& message) {
  std::fprintf(ctx.err, "jobpact: %s\n", OneLine(message).c_str());
  return code;
}

// --- stats, jobs ---

int Stats(const Context& ctx) {
  Result<QueueStats> s = ctx.ops->Stats();
  if (!s.ok()) return Fail(ctx, "stats", s.status());
  if (ctx.json) {
    PrintJson(ctx, StatsToJson(*s));
    return kExitOk;
  }
  Table queues({"QUEUE", "DEPTH", "RUNNING", "OLDEST READY"});
  for (const auto& [name, q] : s->queues) {
    queues.Add({name, std::to_string(q.depth), std::to_string(q.running),
                q.oldest_ready_age == Duration::zero() ? "-" : HumanDuration(q.oldest_ready_age)});
  }
  if (queues.empty()) {
    std::fprintf(ctx.out, "no queues\n");
  } else {
    queues.Print(ctx.out);
  }
  std::fprintf(ctx.out, "\n");
  Table statuses({"STATUS", "JOBS"});
  for (JobStatus st : kAllJobStatuses) {
    auto it = s->by_status.find(st);
    statuses.Add({std::string(JobStatusName(st)),
                  std::to_string(it == s->by_status.end() ? 0 : it->second)});
  }
  statuses.Print(ctx.out);
  std::fprintf(ctx.out, "\ndead letters: %lld\n", static_cast<long long>(s->dead_letters));
  return kExitOk;
}

int JobsShow(const Context& ctx, const std::string& id) {
  Result<JobRecord> r = ctx.ops->GetJob(id);
  if (!r.ok()) return Fail(ctx, "jobs show " + id, r.status());
  if (ctx.json) {
    PrintJson(ctx, JobToJson(*r));
    return kExitOk;
  }
  const Envelope& e = r->envelope;
  auto line = [&](const char* k, const std::string& v) {
    std::fprintf(ctx.out, "%-18s %s\n", k, v.c_str());
  };
  line("job id", e.job_id);
  line("type", e.job_type);
  line("queue", e.queue);
  line("status", std::string(JobStatusName(r->status)));
  line("reason", Or(r->reason));
  line("attempt", std::to_string(e.attempt) + " of " +
                      (e.max_attempts > 0 ? std::to_string(e.max_attempts) : "(policy)"));
  line("enqueued", HumanTime(r->enqueued_at));
  line("ready at", HumanTime(r->ready_at));
  line("updated", HumanTime(r->updated_at));
  line("finished", r->finished_at ? HumanTime(*r->finished_at) : "-");
  if (r->last_failure) {
    line("last failure", ClassOf(r->last_failure) + " " + r->last_failure->code + ": " +
                             OneLine(r->last_failure->message));
  }
  if (!e.lock_key.empty()) line("lock key", e.lock_key);
  if (!e.dedup_key.empty()) line("dedup key", e.dedup_key);
  if (!e.idempotency_key.empty()) line("idempotency key", e.idempotency_key);
  if (!r->lease_token.empty()) {
    line("lease", r->lease_token + " until " + HumanTime(r->lease_expires_at));
  }
  if (r->cancel_requested) line("cancel requested", "yes");
  line("deliveries", std::to_string(r->epoch) + " (lease recoveries " +
                         std::to_string(r->lease_recoveries) + ", lock waits " +
                         std::to_string(r->lock_waits) + ")");
  if (!r->result.empty()) line("result", OneLine(r->result));
  line("payload", OneLine(e.payload));
  std::fprintf(ctx.out, "\nhistory:\n");
  Table h({"AT", "FROM", "TO", "REASON"});
  for (const Transition& t : r->history) {
    h.Add({HumanTime(t.at), std::string(JobStatusName(t.from)), std::string(JobStatusName(t.to)),
           t.reason});
  }
  h.Print(ctx.out);
  if (!r->audit.empty()) {
    std::fprintf(ctx.out, "\naudit:\n");
    for (const std::string& a : r->audit) std::fprintf(ctx.out, "  %s\n", a.c_str());
  }
  return kExitOk;
}

int JobsList(const Context& ctx, const JobsListArgs& args) {
  JobFilter f;
  if (Status st = CheckLimit(args.limit, 10000); !st.ok()) return Fail(ctx, "jobs list", st);
  f.limit = static_cast<std::size_t>(args.limit);
  if (!args.status.empty()) {
    Result<JobStatus> s = ParseStatusArg("--status", args.status);
    if (!s.ok()) return Fail(ctx, "jobs list", s.status());
    f.status = *s;
  }
  if (!args.type.empty()) f.job_type = args.type;
  if (!args.queue.empty()) f.queue = args.queue;
  if (!args.after.empty()) f.after_job_id = args.after;
  Result<std::vector<JobRecord>> jobs = ctx.ops->ListJobs(f);
  if (!jobs.ok()) return Fail(ctx, "jobs list", jobs.status());
  if (ctx.json) {
    Json a = Json::array();
    for (const JobRecord& r : *jobs) a.push_back(JobSummaryToJson(r));
    PrintJson(ctx, a);
    return kExitOk;
  }
  if (jobs->empty()) {
    std::fprintf(ctx.out, "no jobs match\n");
    return kExitOk;
  }
  Table t({"JOB ID", "TYPE", "QUEUE", "STATUS", "ATTEMPT", "UPDATED", "REASON"});
  for (const JobRecord& r : *jobs) {
    t.Add({r.envelope.job_id, r.envelope.job_type, r.envelope.queue,
           std::string(JobStatusName(r.status)), std::to_string(r.envelope.attempt),
           HumanTime(r.updated_at), Or(r.reason)});
  }
  t.Print(ctx.out);
  return kExitOk;
}

int JobsCancel(const Context& ctx, const std::string& id, const Who& who) {
  Result<CancelOutcome> o = ctx.ops->CancelJob(id, who.actor, who.reason);
  if (!o.ok()) return Fail(ctx, "jobs cancel " + id, o.status());
  const std::string outcome(CancelOutcomeName(*o));
  return Done(ctx, Json{{"job_id", id}, {"outcome", outcome}},
              *o == CancelOutcome::kDiscarded
                  ? "job " + id + " discarded (it had not started)"
                  : "job " + id + ": cancel requested; its handler sees it at the next heartbeat");
}

int JobsPurge(const Context& ctx, const JobsPurgeArgs& args) {
  if (args.older_than.empty() && !args.keep) {
    return FailWith(ctx, kExitUsage, "jobs purge: give --older-than DURATION, --keep N or both");
  }
  const TimePoint now = Now();
  Json out = Json::object();
  std::string human;
  if (!args.older_than.empty()) {
    Result<Duration> d = ParseDuration("--older-than", args.older_than);
    if (!d.ok()) return Fail(ctx, "jobs purge", d.status());
    const TimePoint before = now - *d;
    Result<int> n = ctx.ops->PurgeFinished(before);
    if (!n.ok()) return Fail(ctx, "jobs purge", n.status());
    out["purged"] = *n;
    out["finished_before"] = TimeJson(before);
    human = "purged " + std::to_string(*n) + " jobs finished before " + HumanTime(before);
  }
  if (args.keep) {
    if (*args.keep < 0) {
      return FailWith(ctx, kExitUsage,
                      "jobs purge: --keep must be 0 or more, not " + std::to_string(*args.keep));
    }
    Result<Duration> window = ParseDuration("--dedup-window", args.dedup_window);
    if (!window.ok()) return Fail(ctx, "jobs purge", window.status());
    FinishedRetention keep;
    const std::vector<std::string> all = {"succeeded", "failed", "discarded"};
    for (const std::string& status : args.statuses.empty() ? all : args.statuses) {
      if (status == "succeeded") {
        keep.succeeded = *args.keep;
      } else if (status == "failed") {
        keep.failed = *args.keep;
      } else if (status == "discarded") {
        keep.discarded = *args.keep;
      } else {
        return FailWith(ctx, kExitUsage,
                        "jobs purge: --status '" + status +
                            "' is not a final status with count retention (succeeded, failed, "
                            "discarded; dead letters: dlq purge)");
      }
    }
    keep.keep_succeeded_since = now - *window;
    Result<int> n = ctx.ops->TrimFinished(keep);
    if (!n.ok()) return Fail(ctx, "jobs purge", n.status());
    out["trimmed"] = *n;
    out["kept_per_type"] = *args.keep;
    out["statuses"] = args.statuses.empty() ? all : args.statuses;
    out["dedup_kept_since"] = TimeJson(*keep.keep_succeeded_since);
    human += std::string(human.empty() ? "" : "; ") + "trimmed " + std::to_string(*n) +
             " jobs beyond the newest " + std::to_string(*args.keep) +
             " per job type and status (succeeded jobs with a dedup key finished since " +
             HumanTime(*keep.keep_succeeded_since) + " kept)";
  }
  return Done(ctx, out, human);
}

// --- the DLQ ---

int DlqList(const Context& ctx, const DlqSelection& sel) {
  Result<DlqFilter> f = ToDlqFilter(sel, Now());
  if (!f.ok()) return Fail(ctx, "dlq list", f.status());
  Result<std::vector<DlqEntry>> entries = ctx.ops->ListDeadLetters(*f);
  if (!entries.ok()) return Fail(ctx, "dlq list", entries.status());
  if (ctx.json) {
    Json a = Json::array();
    for (const DlqEntry& e : *entries) a.push_back(DlqToJson(e, false));
    PrintJson(ctx, a);
    return kExitOk;
  }
  if (entries->empty()) {
    std::fprintf(ctx.out, "no dead letters match\n");
    return kExitOk;
  }
  Table t({"JOB ID", "TYPE", "QUEUE", "REASON", "CLASS", "CODE", "ATTEMPTS", "DEAD-LETTERED"});
  for (const DlqEntry& e : *entries) {
    t.Add({e.job_id, Or(e.job_type), Or(e.queue), e.reason, ClassOf(e.last_failure),
           e.last_failure ? Or(e.last_failure->code) : "-", std::to_string(e.attempts),
           HumanTime(e.dead_lettered_at)});
  }
  t.Print(ctx.out);
  std::fprintf(ctx.out, "%zu entries\n", entries->size());
  return kExitOk;
}

int DlqShow(const Context& ctx, const std::string& id) {
  Result<DlqEntry> e = ctx.ops->GetDeadLetter(id);
  if (!e.ok()) return Fail(ctx, "dlq show " + id, e.status());
  if (ctx.json) {
    PrintJson(ctx, DlqToJson(*e, true));
    return kExitOk;
  }
  auto line = [&](const char* k, const std::string& v) {
    std::fprintf(ctx.out, "%-16s %s\n", k, v.c_str());
  };
  line("job id", e->job_id);
  line("type", Or(e->job_type));
  line("queue", Or(e->queue));
  line("reason", e->reason);
  if (e->last_failure) {
    line("last failure", ClassOf(e->last_failure) + " " + e->last_failure->code + ": " +
                             OneLine(e->last_failure->message));
  }
  line("attempts", std::to_string(e->attempts));
  line("created", HumanTime(e->created_at));
  line("dead-lettered", HumanTime(e->dead_lettered_at));
  if (!e->trace_id.empty()) line("trace id", e->trace_id);
  line(e->raw_envelope.empty() ? "payload" : "raw input",
       OneLine(e->raw_envelope.empty() ? e->payload : e->raw_envelope));
  std::fprintf(ctx.out, "\nhistory:\n");
  Table h({"AT", "FROM", "TO", "REASON"});
  for (const Transition& t : e->history) {
    h.Add({HumanTime(t.at), std::string(JobStatusName(t.from)), std::string(JobStatusName(t.to)),
           t.reason});
  }
  h.Print(ctx.out);
  if (!e->audit.empty()) {
    std::fprintf(ctx.out, "\naudit:\n");
    for (const std::string& a : e->audit) std::fprintf(ctx.out, "  %s\n", a.c_str());
  }
  return kExitOk;
}

int DlqReplay(const Context& ctx, const ReplayArgs& args) {
  Result<DlqFilter> f = ToDlqFilter(args.sel, Now());
  if (!f.ok()) return Fail(ctx, "dlq replay", f.status());
  ReplayRequest req;
  req.selection = *f;
  req.selection.limit = 1000000;  // max_jobs bounds the replay; the filter only selects.
  req.job_ids = args.sel.ids;
  req.actor = args.who.actor;
  req.reason = args.who.reason;
  req.max_jobs = f->limit;
  if (!args.rate.empty()) {
    Result<double> r = ParseRate("--rate", args.rate);
    if (!r.ok()) return Fail(ctx, "dlq replay", r.status());
    req.max_per_second = *r;
  }
  if (args.extra_attempts < 0) {
    return Fail(ctx, "dlq replay", Status::InvalidArgument("--extra-attempts must be >= 0"));
  }
  if (args.extra_attempts > 0 && !args.keep_attempts) {
    return Fail(ctx, "dlq replay",
                Status::InvalidArgument("--extra-attempts needs --keep-attempts (a replay "
                                        "otherwise starts again from attempt 0)"));
  }
  req.reset_attempts = !args.keep_attempts;
  req.extra_attempts = args.extra_attempts;

  // The dry run first: what the replay would take, for the threshold.
  req.dry_run = true;
  Result<ReplayReport> dry = ctx.ops->ReplayDeadLetters(req);
  if (!dry.ok()) return Fail(ctx, "dlq replay", dry.status());
  if (args.dry_run) {
    if (ctx.json) {
      PrintJson(ctx, Json{{"dry_run", true},
                          {"would_replay", dry->would_replay},
                          {"failed", FailedToJson(dry->failed)}});
    } else {
      std::fprintf(ctx.out, "dry run: would replay %zu entries\n", dry->would_replay.size());
      for (const std::string& id : dry->would_replay) std::fprintf(ctx.out, "  %s\n", id.c_str());
      PrintFailed(ctx, dry->failed);
    }
    return dry->failed.empty() ? kExitOk : kExitError;
  }
  if (dry->would_replay.size() > kConfirmThreshold && !args.yes) {
    return FailWith(ctx, kExitRefused, Refusal(dry->would_replay.size(), "replay"));
  }
  req.dry_run = false;
  Result<ReplayReport> done = ctx.ops->ReplayDeadLetters(req);
  if (!done.ok()) return Fail(ctx, "dlq replay", done.status());
  if (ctx.json) {
    PrintJson(ctx, Json{{"dry_run", false},
                        {"replayed", done->replayed},
                        {"rate_per_second", req.max_per_second},
                        {"failed", FailedToJson(done->failed)}});
  } else {
    std::fprintf(ctx.out, "replayed %zu entries", done->replayed.size());
    if (req.max_per_second > 0 && !done->replayed.empty()) {
      std::fprintf(ctx.out, ", %g per second (the last ready in %s)", req.max_per_second,
                   HumanDuration(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(
                                     (done->replayed.size() - 1) / req.max_per_second)))
                       .c_str());
    }
    std::fprintf(ctx.out, "\n");
    for (const std::string& id : done->replayed) std::fprintf(ctx.out, "  %s\n", id.c_str());
    PrintFailed(ctx, done->failed);
  }
  if (!done->failed.empty()) {
    return FailWith(ctx, kExitError,
                    "dlq replay: " + std::to_string(done->failed.size()) +
                        " entries could not be replayed (listed above)");
  }
  return kExitOk;
}

int DlqDiscard(const Context& ctx, const DiscardArgs& args) {
  Result<DlqFilter> f = ToDlqFilter(args.sel, Now());
  if (!f.ok()) return Fail(ctx, "dlq discard", f.status());
  if (args.who.actor.empty() || args.who.reason.empty()) {
    return Fail(ctx, "dlq discard", Status::InvalidArgument("--actor and --reason are required"));
  }
  std::vector<std::string> selected;
  std::vector<std::pair<std::string, Status>> failed;
  if (!args.sel.ids.empty()) {
    // Each id must be in the DLQ and match the filters, as for a replay.
    for (const std::string& id : args.sel.ids) {
      Result<DlqEntry> e = ctx.ops->GetDeadLetter(id);
      if (!e.ok()) {
        failed.emplace_back(id, e.status());
        continue;
      }
      if (!Matches(*e, *f)) {
        failed.emplace_back(id, Status::FailedPrecondition("does not match the selection: " + id));
      } else {
        selected.push_back(id);
      }
    }
  } else {
    Result<std::vector<DlqEntry>> entries = ctx.ops->ListDeadLetters(*f);
    if (!entries.ok()) return Fail(ctx, "dlq discard", entries.status());
    for (const DlqEntry& e : *entries) selected.push_back(e.job_id);
  }
  if (args.dry_run) {
    if (ctx.json) {
      PrintJson(ctx, Json{{"dry_run", true},
                          {"would_discard", selected},
                          {"failed", FailedToJson(failed)}});
    } else {
      std::fprintf(ctx.out, "dry run: would discard %zu entries\n", selected.size());
      for (const std::string& id : selected) std::fprintf(ctx.out, "  %s\n", id.c_str());
      PrintFailed(ctx, failed);
    }
    return failed.empty() ? kExitOk : kExitError;
  }
  if (selected.size() > kConfirmThreshold && !args.yes) {
    return FailWith(ctx, kExitRefused, Refusal(selected.size(), "discard"));
  }
  std::vector<std::string> discarded;
  for (const std::string& id : selected) {
    Status st = ctx.ops->DiscardDeadLetter(id, args.who.actor, args.who.reason);
    if (st.ok()) {
      discarded.push_back(id);
    } else {
      failed.emplace_back(id, st);
    }
  }
  if (ctx.json) {
    PrintJson(ctx, Json{{"dry_run", false},
                        {"discarded", discarded},
                        {"failed", FailedToJson(failed)}});
  } else {
    std::fprintf(ctx.out, "discarded %zu entries\n", discarded.size());
    for (const std::string& id : discarded) std::fprintf(ctx.out, "  %s\n", id.c_str());
    PrintFailed(ctx, failed);
  }
  if (!failed.empty()) {
    if (failed.size() == 1 && discarded.empty() && args.sel.ids.size() == 1) {
      return Fail(ctx, "dlq discard " + failed[0].first, failed[0].second);
    }
    return FailWith(ctx, kExitError,
                    "dlq discard: " + std::to_string(failed.size()) +
                        " entries could not be discarded (listed above)");
  }
  return kExitOk;
}

int DlqPurge(const Context& ctx, const std::string& older_than) {
  Result<Duration> d = ParseDuration("--older-than", older_than);
  if (!d.ok()) return Fail(ctx, "dlq purge", d.status());
  const TimePoint before = Now() - *d;
  Result<int> n = ctx.ops->PurgeDeadLetters(before);
  if (!n.ok()) return Fail(ctx, "dlq purge", n.status());
  return Done(ctx, Json{{"purged", *n}, {"dead_lettered_before", TimeJson(before)}},
              "purged " + std::to_string(*n) + " dead letters dead-lettered before " +
                  HumanTime(before));
}

// --- control state ---

int Pause(const Context& ctx, bool pause, const std::string& type, const std::string& queue,
          const Who& who) {
  const char* verb = pause ? "pause" : "resume";
  if (type.empty() == queue.empty()) {
    return Fail(ctx, verb,
                Status::InvalidArgument("name a job type or --queue Q (exactly one of them)"));
  }
  Status st = type.empty() ? (pause ? ctx.ops->PauseQueue(queue, who.actor, who.reason)
                                    : ctx.ops->ResumeQueue(queue, who.actor, who.reason))
                           : (pause ? ctx.ops->PauseType(type, who.actor, who.reason)
                                    : ctx.ops->ResumeType(type, who.actor, who.reason));
  const std::string what = type.empty() ? "queue " + queue : "job type " + type;
  if (!st.ok()) return Fail(ctx, std::string(verb) + " " + what, st);
  return Done(ctx,
              Json{{"action", verb},
                   {type.empty() ? "queue" : "job_type", type.empty() ? queue : type},
                   {"actor", who.actor},
                   {"reason", who.reason}},
              std::string(pause ? "paused " : "resumed ") + what +
                  (pause ? " (every process sharing the store stops leasing it)" : ""));
}

namespace {

// A limit given on the command line: a whole number in 0..max.
Result<int> ParseLimit(const std::string& limit, long max, std::string_view zero_means) {
  char* end = nullptr;
  const long n = std::strtol(limit.c_str(), &end, 10);
  if (limit.empty() || end != limit.c_str() + limit.size() || n < 0 || n > max) {
    return Status::InvalidArgument("limit: '" + limit + "' is not a whole number in 0.." +
                                   std::to_string(max) + " (0 " + std::string(zero_means) + ")");
  }
  return static_cast<int>(n);
}

}  // namespace

int Concurrency(const Context& ctx, const std::string& subject, bool per_tenant,
                bool dependency, const std::string& limit, bool clear, const Who& who) {
  const std::string what = std::string("concurrency ") +
                           (per_tenant ? "--per-tenant " : dependency ? "--dependency " : "") +
                           subject;
  if (per_tenant && dependency) {
    return Fail(ctx, what,
                Status::InvalidArgument("give --per-tenant or --dependency, not both"));
  }
  if (clear == !limit.empty()) {
    return Fail(ctx, what, Status::InvalidArgument("give a limit N or --clear (exactly one of them)"));
  }
  // What the limit applies to: a job type, each tenant of a queue, or a
  // dependency; the control rule's kind and the words for it.
  const ControlKind kind = per_tenant   ? ControlKind::kTenantConcurrencyLimit
                           : dependency ? ControlKind::kDependencyConcurrencyLimit
                                        : ControlKind::kConcurrencyLimit;
  const char* field = per_tenant ? "queue" : dependency ? "dependency" : "job_type";
  const std::string whose = per_tenant   ? "each tenant of queue " + subject
                            : dependency ? "dependency " + subject
                                         : subject;
  Json out{{field, subject}};
  if (clear) {
    Status st = per_tenant   ? ctx.ops->ClearTenantConcurrencyLimit(subject, who.actor, who.reason)
                : dependency ? ctx.ops->ClearDependencyConcurrencyLimit(subject, who.actor,
                                                                        who.reason)
                             : ctx.ops->ClearConcurrencyLimit(subject, who.actor, who.reason);
    if (!st.ok()) return Fail(ctx, what, st);
    out["limit"] = nullptr;
    out["kind"] = std::string(ControlKindName(kind));
    return Done(ctx, out, "cleared the concurrency limit of " + whose);
  }
  Result<int> n = ParseLimit(limit, 1000000, dependency ? "holds every job calling it"
                                             : per_tenant ? "holds the queue"
                                                          : "holds the type");
  if (!n.ok()) return Fail(ctx, what, n.status());
  Status st =
      per_tenant   ? ctx.ops->SetTenantConcurrencyLimit(subject, *n, who.actor, who.reason)
      : dependency ? ctx.ops->SetDependencyConcurrencyLimit(subject, *n, who.actor, who.reason)
                   : ctx.ops->SetConcurrencyLimit(subject, *n, who.actor, who.reason);
  if (!st.ok()) return Fail(ctx, what, st);
  out["limit"] = *n;
  out["kind"] = std::string(ControlKindName(kind));
  return Done(ctx, out,
              "at most " + std::to_string(*n) + (dependency ? " handlers calling " : " jobs of ") +
                  whose + " run at once, across every process");
}

int DepthLimit(const Context& ctx, const std::string& queue, const std::string& limit, bool clear,
               const Who& who) {
  const std::string what = "depth-limit " + queue;
  if (clear == !limit.empty()) {
    return Fail(ctx, what, Status::InvalidArgument("give a limit N or --clear (exactly one of them)"));
  }
  if (clear) {
    Status st = ctx.ops->ClearMaxQueueDepth(queue, who.actor, who.reason);
    if (!st.ok()) return Fail(ctx, what, st);
    return Done(ctx, Json{{"queue", queue}, {"max_depth", nullptr}},
                "cleared the maximum depth of queue " + queue);
  }
  Result<int> n = ParseLimit(limit, 1000000000, "refuses every enqueue");
  if (!n.ok()) return Fail(ctx, what, n.status());
  Status st = ctx.ops->SetMaxQueueDepth(queue, *n, who.actor, who.reason);
  if (!st.ok()) return Fail(ctx, what, st);
  return Done(ctx, Json{{"queue", queue}, {"max_depth", *n}},
              "queue " + queue + " takes at most " + std::to_string(*n) +
                  " waiting jobs; past that, enqueues fail with resource_exhausted");
}

int Route(const Context& ctx, const std::string& type, const std::string& failure_class,
          const std::string& to, bool clear, const Who& who) {
  Result<FailureClass> c = ParseClassArg("--class", failure_class);
  if (!c.ok()) return Fail(ctx, "route " + type, c.status());
  if (clear == !to.empty()) {
    return Fail(ctx, "route " + type,
                Status::InvalidArgument("give --to dlq or --clear (exactly one of them)"));
  }
  if (!clear && to != "dlq") {
    return Fail(ctx, "route " + type,
                Status::InvalidArgument("--to: '" + to + "' is not a destination (only dlq)"));
  }
  Status st = clear ? ctx.ops->ClearRoute(type, *c, who.actor, who.reason)
                    : ctx.ops->RouteToDlq(type, *c, who.actor, who.reason);
  if (!st.ok()) return Fail(ctx, "route " + type, st);
  return Done(ctx,
              Json{{"job_type", type},
                   {"failure_class", failure_class},
                   {"to", clear ? Json(nullptr) : Json("dlq")}},
              clear ? "cleared: " + failure_class + " failures of " + type +
                          " follow the retry policy again"
                    : failure_class + " failures of " + type + " now go straight to the DLQ");
}

int ControlShow(const Context& ctx, int audit_lines) {
  Result<ControlState> s = ctx.ops->Control();
  if (!s.ok()) return Fail(ctx, "control show", s.status());
  if (audit_lines < 0) {
    return Fail(ctx, "control show", Status::InvalidArgument("--audit must be >= 0"));
  }
  std::vector<std::string> audit;
  if (audit_lines > 0) {
    Result<std::vector<std::string>> a = ctx.ops->ControlAudit(audit_lines);
    if (!a.ok()) return Fail(ctx, "control show", a.status());
    audit = std::move(*a);
  }
  if (ctx.json) {
    Json j = ControlToJson(*s);
    j["audit"] = audit;
    PrintJson(ctx, j);
    return kExitOk;
  }
  if (s->rules.empty()) {
    std::fprintf(ctx.out, "no control rules: nothing paused, limited or routed\n");
  } else {
    Table t({"RULE", "SUBJECT", "DETAIL", "SET", "BY", "REASON"});
    for (const ControlRule& r : s->rules) {
      std::string detail = "-";
      if (r.kind == ControlKind::kConcurrencyLimit) detail = "limit " + std::to_string(r.limit);
      if (r.kind == ControlKind::kMaxQueueDepth) detail = "max depth " + std::to_string(r.limit);
      if (r.kind == ControlKind::kTenantConcurrencyLimit) {
        detail = "limit " + std::to_string(r.limit) + " per tenant";
      }
      if (r.kind == ControlKind::kDependencyConcurrencyLimit) {
        detail = "limit " + std::to_string(r.limit) + " handlers";
      }
      if (r.kind == ControlKind::kRouteToDlq) {
        detail = std::string(FailureClassName(r.failure_class)) + " -> dlq";
      }
      t.Add({std::string(ControlKindName(r.kind)), r.subject, detail, HumanTime(r.set_at), r.actor,
             r.reason});
    }
    t.Print(ctx.out);
  }
  if (!audit.empty()) {
    std::fprintf(ctx.out, "\naudit (oldest first):\n");
    for (const std::string& a : audit) std::fprintf(ctx.out, "  %s\n", a.c_str());
  }
  return kExitOk;
}

// --- locks, policies ---

int LocksList(const Context& ctx, int limit) {
  if (Status st = CheckLimit(limit, 100000); !st.ok()) return Fail(ctx, "locks list", st);
  Result<std::vector<LockLease>> locks = ctx.ops->ListLocks(static_cast<std::size_t>(limit));
  if (!locks.ok()) return Fail(ctx, "locks list", locks.status());
  const TimePoint now = Now();
  if (ctx.json) {
    Json a = Json::array();
    for (const LockLease& l : *locks) a.push_back(LockToJson(l, now));
    PrintJson(ctx, a);
    return kExitOk;
  }
  if (locks->empty()) {
    std::fprintf(ctx.out, "no locks held\n");
    return kExitOk;
  }
  Table t({"KEY", "OWNER", "FENCING", "EXPIRES", "IN"});
  for (const LockLease& l : *locks) {
    t.Add({l.key, l.owner, std::to_string(l.fencing_token), HumanTime(l.expires_at),
           HumanDuration(l.expires_at - now)});
  }
  t.Print(ctx.out);
  return kExitOk;
}

int RateLimitList(const Context& ctx, int limit) {
  if (Status st = CheckLimit(limit, 100000); !st.ok()) return Fail(ctx, "ratelimit list", st);
  Result<std::vector<RateLimiterState>> rates =
      ctx.ops->RateLimiters(static_cast<std::size_t>(limit));
  if (!rates.ok()) return Fail(ctx, "ratelimit list", rates.status());
  const TimePoint now = Now();
  if (ctx.json) {
    Json a = Json::array();
    for (const RateLimiterState& r : *rates) a.push_back(RateLimiterToJson(r));
    PrintJson(ctx, a);
    return kExitOk;
  }
  if (rates->empty()) {
    std::fprintf(ctx.out, "no rate limiters in use\n");
    return kExitOk;
  }
  Table t({"KEY", "OVERRIDE", "BACKOFF", "WHY"});
  for (const RateLimiterState& r : *rates) {
    std::string over = "-";
    if (r.override_limit) {
      over = fmt::format("{}/s burst {} by {}: {}", r.override_limit->per_second,
                         r.override_limit->burst, r.override_actor, r.override_reason);
    }
    t.Add({r.key, over,
           r.backoff_until ? "until " + HumanTime(*r.backoff_until) + " (" +
                                 HumanDuration(*r.backoff_until - now) + ")"
                           : "-",
           r.backoff_until ? r.backoff_reason : "-"});
  }
  t.Print(ctx.out);
  return kExitOk;
}

int RateLimitSet(const Context& ctx, const std::string& key, const std::string& rate, int burst,
                 bool unset, const Who& who) {
  const std::string what = "ratelimit set " + key;
  std::optional<RateLimit> limit;
  if (unset == !rate.empty()) {
    return Fail(ctx, what, Status::InvalidArgument("give a RATE or --unset (exactly one of them)"));
  }
  if (!unset) {
    char* end = nullptr;
    const double per_second = std::strtod(rate.c_str(), &end);
    if (end != rate.c_str() + rate.size()) {
      return Fail(ctx, what,
                  Status::InvalidArgument("RATE: '" + rate + "' is not a number of starts per second"));
    }
    limit = RateLimit{per_second, burst};
  }
  Status st = ctx.ops->OverrideRate(key, limit, who.actor, who.reason);
  if (!st.ok()) return Fail(ctx, what, st);
  if (!limit) {
    return Done(ctx, Json{{"key", key}, {"override", nullptr}},
                key + " follows the rate in the code again");
  }
  return Done(ctx, Json{{"key", key}, {"override", {{"per_second", limit->per_second},
                                                     {"burst", limit->burst}}}},
              fmt::format("{} allows {}/s (burst {}) in every process", key, limit->per_second,
                          limit->burst));
}

int RateLimitLift(const Context& ctx, const std::string& key, const Who& who) {
  Status st = ctx.ops->LiftBackoff(key, who.actor, who.reason);
  if (!st.ok()) return Fail(ctx, "ratelimit lift " + key, st);
  return Done(ctx, Json{{"key", key}, {"backoff_until", nullptr}},
              "lifted the backoff of " + key + ": new deliveries pass at once (jobs it already held keep their scheduled time)");
}

int LocksRelease(const Context& ctx, const std::string& key, const std::string& owner,
                 const Who& who) {
  Result<LockReleaseReport> r = ctx.ops->ReleaseLock(key, owner, who.actor, who.reason);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kFailedPrecondition) {
      return FailWith(ctx, kExitRefused, "locks release " + key + ": " + r.status().message());
    }
    return Fail(ctx, "locks release " + key, r.status());
  }
  return Done(ctx,
              Json{{"released", true},
                   {"key", r->lock.key},
                   {"owner", r->lock.owner},
                   {"fencing_token", r->lock.fencing_token},
                   {"job_id", r->job_id},
                   {"job_status", std::string(JobStatusName(r->job_status))},
                   {"verdict", r->verdict},
                   {"actor", who.actor},
                   {"reason", who.reason}},
              "released lock " + key + " (owner " + owner + "): " + r->verdict);
}

int PolicyShow(const Context& ctx) {
  Result<std::vector<PublishedPolicy>> p = ctx.ops->Policies();
  if (!p.ok()) return Fail(ctx, "policy show", p.status());
  if (ctx.json) {
    Json a = Json::array();
    for (const PublishedPolicy& x : *p) a.push_back(PolicyToJson(x));
    PrintJson(ctx, a);
    return kExitOk;
  }
  if (p->empty()) {
    std::fprintf(ctx.out,
                 "no policies published (a JobRunner publishes its policies when it starts)\n");
    return kExitOk;
  }
  Table t({"TYPE", "ATTEMPTS", "UNKNOWN", "BACKOFF", "TRANSIENT", "PERMANENT", "UNKNOWN ACTION",
           "REASON", "PUBLISHED BY"});
  for (const PublishedPolicy& x : *p) {
    const BackoffSpec& b = x.policy.backoff;
    char mult[32];
    std::snprintf(mult, sizeof mult, "%g", b.multiplier);
    const std::string backoff = std::string(BackoffKindName(b.kind)) + " " +
                                HumanDuration(b.base_delay) + " x" + mult + " cap " +
                                HumanDuration(b.max_delay) + " jitter " +
                                std::string(JitterKindName(b.jitter));
    t.Add({x.job_type, std::to_string(x.policy.max_attempts),
           std::to_string(x.policy.max_unknown_attempts), backoff,
           std::string(FailureActionName(x.policy.on_transient)),
           std::string(FailureActionName(x.policy.on_permanent)),
           std::string(FailureActionName(x.policy.on_unknown)),
           x.job_type == kDefaultPolicyType ? "(default)" : Or(x.reason),
           x.publisher + " " + HumanTime(x.published_at)});
  }
  t.Print(ctx.out);
  return kExitOk;
}

// --- the cache store ---

namespace {

// A key or prefix for a message: quoted, control bytes as \xNN.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

}  // namespace

int CacheCount(const Context& ctx, const std::string& prefix) {
  Result<std::size_t> n = ctx.ops->CountCacheEntries(prefix);
  if (!n.ok()) return Fail(ctx, "cache count", n.status());
  return Done(ctx, Json{{"prefix", prefix}, {"entries", *n}},
              std::to_string(*n) + " live cache entries" +
                  (prefix.empty() ? "" : " start with " + Quoted(prefix)));
}

int CacheInvalidate(const Context& ctx, const CacheInvalidateArgs& args) {
  if (args.has_key == args.has_prefix) {
    return Fail(ctx, "cache invalidate",
                Status::InvalidArgument("give --key K or --prefix P (exactly one of them)"));
  }
  if (args.has_key) {
    Result<CacheInvalidation> r =
        ctx.ops->InvalidateCacheKey(args.key, args.who.actor, args.who.reason);
    if (!r.ok()) return Fail(ctx, "cache invalidate --key " + Quoted(args.key), r.status());
    return Done(ctx,
                Json{{"key", args.key},
                     {"removed", r->removed},
                     {"actor", args.who.actor},
                     {"reason", args.who.reason}},
                "removed the cache entry " + Quoted(args.key) +
                    " (its next read loads it from the origin)");
  }
  if (args.prefix.empty()) {
    return Fail(ctx, "cache invalidate",
                Status::InvalidArgument("--prefix is empty: a whole flush is not a prefix "
                                        "invalidation (escalate-only in the runbook)"));
  }
  const std::string what = "cache invalidate --prefix " + Quoted(args.prefix);
  if (!args.yes) {
    // The guard rail: show what it would remove, change nothing.
    Result<std::size_t> n = ctx.ops->CountCacheEntries(args.prefix);
    if (!n.ok()) return Fail(ctx, what, n.status());
    if (ctx.json) {
      PrintJson(ctx, Json{{"dry_run", true}, {"prefix", args.prefix}, {"would_remove", *n}});
    }
    return FailWith(ctx, kExitRefused,
                    "refused: would remove " + std::to_string(*n) +
                        " cache entries starting with " + Quoted(args.prefix) +
                        "; nothing removed. Each becomes a miss the origin has to reload: "
                        "add --yes to remove them");
  }
  Result<CacheInvalidation> r =
      ctx.ops->InvalidateCachePrefix(args.prefix, args.who.actor, args.who.reason);
  if (!r.ok()) return Fail(ctx, what, r.status());
  return Done(ctx,
              Json{{"dry_run", false},
                   {"prefix", args.prefix},
                   {"removed", r->removed},
                   {"actor", args.who.actor},
                   {"reason", args.who.reason}},
              "removed " + std::to_string(r->removed) + " cache entries starting with " +
                  Quoted(args.prefix) + " (each next read loads from the origin)");
}

}  // namespace cli
}  // namespace jobpact
