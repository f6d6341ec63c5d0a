// The CLI's commands (commands.h), by group: stats and jobs here, with
// the helpers every group shares (command_util.h); the DLQ in
// dlq_commands.cc; control state, locks, rate limits and policies in
// control_commands.cc; the cache store in cache_commands.cc.
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
#include "src/cli/command_util.h"
#include "src/cli/output.h"

namespace jobpact {
namespace cli {


TimePoint Now() { return SystemClock::Default()->Now(); }

void PrintJson(const Context& ctx, const Json& j) {
  // Cache keys may be any bytes: invalid UTF-8 is printed as U+FFFD rather
  // than throwing.
  std::fprintf(ctx.out, "%s\n", j.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
}

std::string ClassOf(const std::optional<Failure>& f) {
  return f ? std::string(FailureClassName(f->failure_class)) : "-";
}

std::string Or(const std::string& s, const char* dash) { return s.empty() ? dash : s; }

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

}  // namespace cli
}  // namespace jobpact
