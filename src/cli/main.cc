// jobpact: the on-call command-line tool (SPEC 10). Every command goes
// through jobpact::Operations over the backend named by --backend URL (or
// JOBPACT_BACKEND), with no JobRunner: it works the same against every
// backend OpenBackend knows, from any machine that reaches the store.
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 refused by a guard rail.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "jobpact/backend.h"
#include "jobpact/operations.h"
#include "src/cli/commands.h"
#include "src/cli/output.h"

namespace jobpact {
namespace cli {
namespace {

constexpr const char* kFooter = R"(
Backend URLs: sqlite:///abs/path.db, sqlite:rel/path.db, redis://[user[:pw]@]host[:port][/db][?namespace=N],
redis+unix:///path.sock, postgres://... (where this build has it), memory: (empty, for trying it out).

Who and why: every command that changes something takes --actor (default: $USER) and --reason
(required); both are kept in the job's audit trail or the control audit (for `locks release`
and `cache invalidate` they are printed only: those stores keep no audit).

Guard rails: `dlq replay` and `dlq discard` over more than 100 entries need --yes (check with
--dry-run first); `locks release` refuses unless the owner's job is final or its lease expired;
`cache invalidate --prefix` only shows how many entries it would remove unless given --yes, and
refuses an empty prefix (a whole flush).

Times: RFC 3339 in UTC (2026-12-03T10:00:00Z) or an age (2h = two hours ago).
Durations: 90s, 15m, 2h, 7d, 1h30m. Rates: 5/s, 300/m.

Exit codes:
  0  ok
  1  error (the backend failed, an unknown job id, an entry that could not be changed)
  2  usage (a bad flag, filter, duration, time or URL)
  3  refused by a guard rail (nothing was changed; the message says why)

Output: tables for people; --json prints one JSON document for scripts.
See docs/operations.md, "The jobpact command".)";

// One line on stderr for a parse error, then exit 2 (or 0 for --help).
std::string OneLineFailure(const CLI::App*, const CLI::Error& e) {
  return "jobpact: usage: " + OneLine(e.what()) + " (see jobpact --help)\n";
}

void AddWho(CLI::App* sub, Who* who) {
  sub->add_option("--actor", who->actor, "Who does this (default: $USER)");
  sub->add_option("--reason", who->reason, "Why (required; kept in the audit)")->required();
}

// `reason_flag`: --reason for `dlq list`; --dlq-reason where --reason is
// the audit's why.
void AddSelection(CLI::App* sub, DlqSelection* sel, bool with_ids, const char* reason_flag) {
  if (with_ids) {
    sub->add_option("--id", sel->ids, "Exactly these entries (repeatable; filters still apply)");
  }
  sub->add_option("--type", sel->type, "Job type");
  sub->add_option(reason_flag, sel->reason,
                  "DLQ reason, e.g. max_attempts_exceeded, permanent_error, routed_to_dlq");
  sub->add_option("--class", sel->failure_class,
                  "Failure class of the last attempt: transient, permanent, unknown");
  sub->add_option("--since", sel->since, "Dead-lettered at or after (time or age)");
  sub->add_option("--until", sel->until, "Dead-lettered before (time or age)");
  sub->add_option("--limit", sel->limit, "At most this many entries (default 1000)");
}

int Main(int argc, char** argv) {
  CLI::App app{"jobpact: inspect and operate a jobpact job store (SPEC 10)", "jobpact"};
  app.failure_message(OneLineFailure);
  app.fallthrough();
  app.require_subcommand(1);
  app.footer(kFooter);

  std::string url;
  bool json = false;
  app.add_option("--backend", url, "Backend URL (or set JOBPACT_BACKEND)")
      ->envname("JOBPACT_BACKEND");
  app.add_flag("--json", json, "Print JSON for scripts instead of tables");

  // Each command sets `run`; the backend is opened only after a clean parse.
  std::function<int(const Context&)> run;
  Who who;
  Who* needs_who = nullptr;  // The mutating command's who and why.

  CLI::App* stats = app.add_subcommand(
      "stats", "Depth, running and oldest ready age per queue; jobs per status; DLQ size");
  stats->callback([&] { run = [](const Context& c) { return Stats(c); }; });

  // jobs
  CLI::App* jobs = app.add_subcommand("jobs", "Look at, cancel and purge jobs");
  jobs->require_subcommand(1);
  std::string job_id;
  CLI::App* jobs_show = jobs->add_subcommand("show", "A job's record, full history and audit");
  jobs_show->add_option("ID", job_id, "Job id")->required();
  jobs_show->callback([&] { run = [&](const Context& c) { return JobsShow(c, job_id); }; });
  JobsListArgs list_args;
  CLI::App* jobs_list = jobs->add_subcommand("list", "Jobs by id (enqueue order)");
  jobs_list->add_option("--status", list_args.status,
                        "queued, running, succeeded, retry_scheduled, failed, dead_lettered, "
                        "discarded");
  jobs_list->add_option("--type", list_args.type, "Job type");
  jobs_list->add_option("--queue", list_args.queue, "Queue");
  jobs_list->add_option("--limit", list_args.limit, "At most this many, 1..10000 (default 50)");
  jobs_list->add_option("--after", list_args.after, "The next page: jobs after this id");
  jobs_list->callback([&] { run = [&](const Context& c) { return JobsList(c, list_args); }; });
  CLI::App* jobs_cancel = jobs->add_subcommand(
      "cancel", "Cancel a job: discarded if not started, else cancelled at its next heartbeat");
  jobs_cancel->add_option("ID", job_id, "Job id")->required();
  AddWho(jobs_cancel, &who);
  jobs_cancel->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return JobsCancel(c, job_id, who); };
  });

  JobsPurgeArgs purge_args;
  CLI::App* jobs_purge = jobs->add_subcommand(
      "purge", "Delete finished jobs: older than DURATION, or beyond the newest N per type");
  jobs_purge->add_option("--older-than", purge_args.older_than,
                         "Jobs finished longer ago than this, e.g. 7d");
  jobs_purge->add_option("--keep", purge_args.keep,
                         "Keep the newest N finished jobs per job type and status");
  jobs_purge->add_option("--status", purge_args.statuses,
                         "With --keep: succeeded, failed or discarded (repeatable; default all)");
  jobs_purge->add_option("--dedup-window", purge_args.dedup_window,
                         "With --keep: succeeded jobs with a dedup key finished this recently "
                         "are kept, as the runners' dedup_window (default 5m)");
  jobs_purge->callback([&] { run = [&](const Context& c) { return JobsPurge(c, purge_args); }; });

  // dlq
  CLI::App* dlq = app.add_subcommand("dlq", "The dead-letter queue");
  dlq->require_subcommand(1);
  DlqSelection list_sel;
  CLI::App* dlq_list = dlq->add_subcommand("list", "Dead letters, oldest first");
  AddSelection(dlq_list, &list_sel, false, "--reason");
  dlq_list->callback([&] { run = [&](const Context& c) { return DlqList(c, list_sel); }; });
  CLI::App* dlq_show = dlq->add_subcommand("show", "One entry with its history and audit");
  dlq_show->add_option("ID", job_id, "Job id")->required();
  dlq_show->callback([&] { run = [&](const Context& c) { return DlqShow(c, job_id); }; });
  ReplayArgs replay;
  CLI::App* dlq_replay = dlq->add_subcommand(
      "replay", "Replay entries (--id ... or filters); over 100 entries needs --yes");
  AddSelection(dlq_replay, &replay.sel, true, "--dlq-reason");
  AddWho(dlq_replay, &replay.who);
  dlq_replay->add_flag("--dry-run", replay.dry_run, "List what would be replayed; change nothing");
  dlq_replay->add_flag("--yes", replay.yes, "Confirm a replay of more than 100 entries");
  dlq_replay->add_option("--rate", replay.rate, "At most N per second: 5/s, 300/m (no limit)");
  dlq_replay->add_flag("--keep-attempts", replay.keep_attempts,
                       "Keep the attempts spent (default: start again from attempt 0)");
  dlq_replay->add_option("--extra-attempts", replay.extra_attempts,
                         "With --keep-attempts: this many more attempts");
  dlq_replay->callback([&] {
    needs_who = &replay.who;
    run = [&](const Context& c) { return DlqReplay(c, replay); };
  });
  DiscardArgs discard;
  CLI::App* dlq_discard = dlq->add_subcommand(
      "discard", "Discard entries for good (--id ... or filters); over 100 needs --yes");
  AddSelection(dlq_discard, &discard.sel, true, "--dlq-reason");
  AddWho(dlq_discard, &discard.who);
  dlq_discard->add_flag("--dry-run", discard.dry_run, "List what would be discarded");
  dlq_discard->add_flag("--yes", discard.yes, "Confirm a discard of more than 100 entries");
  dlq_discard->callback([&] {
    needs_who = &discard.who;
    run = [&](const Context& c) { return DlqDiscard(c, discard); };
  });
  std::string older_than;
  CLI::App* dlq_purge =
      dlq->add_subcommand("purge", "Delete entries dead-lettered longer ago than DURATION");
  dlq_purge->add_option("--older-than", older_than, "e.g. 30d")->required();
  dlq_purge->callback([&] { run = [&](const Context& c) { return DlqPurge(c, older_than); }; });

  // Control state.
  std::string type, queue;
  CLI::App* pause = app.add_subcommand("pause", "Pause a job type (or --queue Q) everywhere");
  pause->add_option("TYPE", type, "Job type");
  pause->add_option("--queue", queue, "Pause this queue instead");
  AddWho(pause, &who);
  pause->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return Pause(c, true, type, queue, who); };
  });
  CLI::App* resume = app.add_subcommand("resume", "Resume a paused job type (or --queue Q)");
  resume->add_option("TYPE", type, "Job type");
  resume->add_option("--queue", queue, "Resume this queue instead");
  AddWho(resume, &who);
  resume->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return Pause(c, false, type, queue, who); };
  });
  std::string limit;
  bool clear = false;
  bool per_tenant = false;
  bool dependency = false;
  CLI::App* conc = app.add_subcommand(
      "concurrency",
      "At most N jobs of TYPE at once across all processes; with --per-tenant, at most N of each "
      "tenant's jobs of the queue TYPE names; with --dependency, at most N handlers calling the "
      "dependency TYPE names (--clear lifts it)");
  conc->add_option("TYPE", type, "Job type (a queue with --per-tenant, a dependency with "
                                 "--dependency)")
      ->required();
  conc->add_option("N", limit, "The limit, >= 0 (0 holds them all)");
  conc->add_flag("--per-tenant", per_tenant, "Cap each tenant of the queue TYPE names");
  conc->add_flag("--dependency", dependency, "Limit the handlers calling the dependency TYPE names");
  conc->add_flag("--clear", clear, "Lift the limit");
  AddWho(conc, &who);
  conc->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) {
      return Concurrency(c, type, per_tenant, dependency, limit, clear, who);
    };
  });
  std::string depth_queue;
  CLI::App* depth = app.add_subcommand(
      "depth-limit",
      "At most N waiting jobs in QUEUE; enqueues past it are refused (--clear lifts it)");
  depth->add_option("QUEUE", depth_queue, "Queue")->required();
  depth->add_option("N", limit, "The maximum depth, >= 0 (0 refuses every enqueue)");
  depth->add_flag("--clear", clear, "Lift the limit");
  AddWho(depth, &who);
  depth->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return DepthLimit(c, depth_queue, limit, clear, who); };
  });
  std::string route_class, route_to;
  CLI::App* route = app.add_subcommand(
      "route", "Send failures of a class of TYPE straight to the DLQ (--clear drops the route)");
  route->add_option("TYPE", type, "Job type")->required();
  route->add_option("--class", route_class, "transient, permanent or unknown")->required();
  route->add_option("--to", route_to, "dlq");
  route->add_flag("--clear", clear, "Drop the route");
  AddWho(route, &who);
  route->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return Route(c, type, route_class, route_to, clear, who); };
  });
  int audit_lines = 20;
  CLI::App* control = app.add_subcommand("control", "The control state every process obeys");
  control->require_subcommand(1);
  CLI::App* control_show =
      control->add_subcommand("show", "Pauses, limits and routes in force, and the audit");
  control_show->add_option("--audit", audit_lines, "Audit lines to show (default 20)");
  control_show->callback(
      [&] { run = [&](const Context& c) { return ControlShow(c, audit_lines); }; });

  // Locks and policies.
  CLI::App* locks = app.add_subcommand("locks", "Resource locks");
  locks->require_subcommand(1);
  int lock_limit = 1000;
  CLI::App* locks_list = locks->add_subcommand("list", "Live locks: key, owner, expiry, fencing");
  locks_list->add_option("--limit", lock_limit, "At most this many (default 1000)");
  locks_list->callback([&] { run = [&](const Context& c) { return LocksList(c, lock_limit); }; });
  std::string lock_key, owner;
  CLI::App* locks_release = locks->add_subcommand(
      "release", "Release a stuck lock; refused (exit 3) unless its owner is verified gone");
  locks_release->add_option("KEY", lock_key, "Lock key")->required();
  locks_release->add_option("--owner", owner, "The owner token shown by `locks list`")
      ->required();
  AddWho(locks_release, &who);
  locks_release->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return LocksRelease(c, lock_key, owner, who); };
  });
  CLI::App* ratelimit = app.add_subcommand("ratelimit", "Rate limiters shared by every process");
  ratelimit->require_subcommand(1);
  int rate_limit_count = 1000;
  CLI::App* rate_list =
      ratelimit->add_subcommand("list", "Limiters: key, operator override, backoff and why");
  rate_list->add_option("--limit", rate_limit_count, "At most this many (default 1000)");
  rate_list->callback(
      [&] { run = [&](const Context& c) { return RateLimitList(c, rate_limit_count); }; });
  std::string rate_key, rate;
  int burst = 1;
  bool unset = false;
  CLI::App* rate_set = ratelimit->add_subcommand(
      "set", "Set KEY's rate in every process, in place of the code's (--unset: back to it)");
  rate_set->add_option("KEY", rate_key, "type:<job type> or dependency:<name>")->required();
  rate_set->add_option("RATE", rate, "Starts per second (0: none, only backoffs hold it)");
  rate_set->add_option("--burst", burst, "Starts at once after a quiet spell (default 1)");
  rate_set->add_flag("--unset", unset, "Drop the override");
  AddWho(rate_set, &who);
  rate_set->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return RateLimitSet(c, rate_key, rate, burst, unset, who); };
  });
  CLI::App* rate_lift = ratelimit->add_subcommand(
      "lift", "End KEY's backoff now (the upstream is back): new deliveries pass at once");
  rate_lift->add_option("KEY", rate_key, "type:<job type> or dependency:<name>")->required();
  AddWho(rate_lift, &who);
  rate_lift->callback([&] {
    needs_who = &who;
    run = [&](const Context& c) { return RateLimitLift(c, rate_key, who); };
  });
  CLI::App* policy = app.add_subcommand("policy", "Retry policies");
  policy->require_subcommand(1);
  CLI::App* policy_show = policy->add_subcommand(
      "show", "The effective retry policy per type, with each override's written reason");
  policy_show->callback([&] { run = [](const Context& c) { return PolicyShow(c); }; });

  // The cache guard's shared store.
  CLI::App* cache = app.add_subcommand("cache", "The cache guard's shared entries (Redis)");
  cache->require_subcommand(1);
  std::string cache_prefix;
  CLI::App* cache_count =
      cache->add_subcommand("count", "Live cache entries whose key starts with a prefix");
  cache_count->add_option("--prefix", cache_prefix, "Key prefix (default: every entry)");
  cache_count->callback(
      [&] { run = [&](const Context& c) { return CacheCount(c, cache_prefix); }; });
  CacheInvalidateArgs inval;
  CLI::App* cache_inval = cache->add_subcommand(
      "invalidate", "Remove one entry (--key) or every entry of a prefix (--prefix, needs --yes)");
  CLI::Option* inval_key = cache_inval->add_option("--key", inval.key, "Exactly this key");
  CLI::Option* inval_prefix = cache_inval->add_option(
      "--prefix", inval.prefix, "Every key starting with this (not empty; literal bytes)");
  cache_inval->add_flag("--yes", inval.yes,
                        "Confirm a prefix invalidation (without it: show the count, change "
                        "nothing, exit 3)");
  AddWho(cache_inval, &inval.who);
  cache_inval->callback([&] {
    inval.has_key = inval_key->count() > 0;
    inval.has_prefix = inval_prefix->count() > 0;
    needs_who = &inval.who;
    run = [&](const Context& c) { return CacheInvalidate(c, inval); };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  Context ctx;
  ctx.json = json;
  if (needs_who != nullptr) {
    if (needs_who->actor.empty()) {
      const char* user = std::getenv("USER");
      if (user == nullptr || *user == '\0') {
        return FailWith(ctx, kExitUsage, "usage: --actor is required ($USER is not set)");
      }
      needs_who->actor = user;
    }
    for (const std::string* v : {&needs_who->actor, &needs_who->reason}) {
      if (v->find_first_not_of(" \t") == std::string::npos) {
        return FailWith(ctx, kExitUsage, "usage: --actor and --reason must not be blank");
      }
    }
  }
  if (url.empty()) {
    return FailWith(ctx, kExitUsage,
                    "usage: no backend: give --backend URL or set JOBPACT_BACKEND "
                    "(e.g. sqlite:///var/lib/app/jobs.db, redis://host:6379)");
  }
  Result<BackendBundle> backend = OpenBackend(url);
  // Not the URL itself: it may hold a password.
  if (!backend.ok()) return Fail(ctx, "backend", backend.status());
  Result<std::unique_ptr<Operations>> ops = Operations::Open(*backend);
  if (!ops.ok()) return Fail(ctx, "backend", ops.status());
  ctx.ops = ops->get();
  return run(ctx);
}

}  // namespace
}  // namespace cli
}  // namespace jobpact

int main(int argc, char** argv) { return jobpact::cli::Main(argc, argv); }
