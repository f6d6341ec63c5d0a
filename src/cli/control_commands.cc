// The CLI's control-state, lock, rate-limit and policy commands (commands.h).
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

}  // namespace cli
}  // namespace jobpact
