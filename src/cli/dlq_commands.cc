// The CLI's DLQ commands (commands.h): list, show, replay, discard, purge.
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

}  // namespace cli
}  // namespace jobpact
