// The jobpact commands, each over the Operations facade (no JobRunner):
// what main.cc's parser fills in, and what each command does and returns.
#ifndef JOBPACT_SRC_CLI_COMMANDS_H_
#define JOBPACT_SRC_CLI_COMMANDS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/operations.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {
namespace cli {

// The exit codes, documented in --help and docs/operations.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;    // The backend failed or refused the input.
inline constexpr int kExitUsage = 2;    // Bad arguments (flags, filters, the URL).
inline constexpr int kExitRefused = 3;  // A guard rail refused (nothing changed).

// `dlq replay` and `dlq discard` without --dry-run over more entries than
// this need --yes (the runbook marks a mass replay as escalate-only).
inline constexpr std::size_t kConfirmThreshold = 100;

struct Context {
  Operations* ops = nullptr;
  bool json = false;
  std::FILE* out = stdout;
  std::FILE* err = stderr;
};

// Prints "jobpact: <what>: <message>" as one line on ctx.err and returns
// the exit code for `status`: kExitUsage for kInvalidArgument (bad input),
// kExitError otherwise.
int Fail(const Context& ctx, const std::string& what, const Status& status);
// Prints "jobpact: <message>" and returns `code`.
int FailWith(const Context& ctx, int code, const std::string& message);

// Who and why, for every change.
struct Who {
  std::string actor;
  std::string reason;
};

int Stats(const Context& ctx);

int JobsShow(const Context& ctx, const std::string& id);
struct JobsListArgs {
  std::string status, type, queue, after;
  int limit = 50;
};
int JobsList(const Context& ctx, const JobsListArgs& args);
int JobsCancel(const Context& ctx, const std::string& id, const Who& who);
// jobs purge: finished jobs deleted by age (--older-than) and/or by count
// (--keep the newest N per job type and final status).
struct JobsPurgeArgs {
  std::string older_than;             // Empty: no age limit.
  std::optional<std::int64_t> keep;   // No value: no count limit.
  std::vector<std::string> statuses;  // Of succeeded, failed, discarded; empty: all three.
  std::string dedup_window = "5m";    // Succeeded jobs with a dedup key kept this long.
};
int JobsPurge(const Context& ctx, const JobsPurgeArgs& args);

// The DLQ selection of list, replay and discard.
struct DlqSelection {
  std::string type, reason, failure_class, since, until;
  std::vector<std::string> ids;
  int limit = 1000;
};
// The DLQ filter of a selection, with --since and --until read relative to
// `now` (the commands pass the system clock's): kInvalidArgument naming the
// bad flag (--limit, --class, --since, --until). Split out so that tests
// and fuzz/ can reach the parsing without a backend.
Result<DlqFilter> ToDlqFilter(const DlqSelection& sel, TimePoint now);
int DlqList(const Context& ctx, const DlqSelection& sel);
int DlqShow(const Context& ctx, const std::string& id);
struct ReplayArgs {
  DlqSelection sel;
  Who who;
  bool dry_run = false;
  bool yes = false;
  std::string rate;  // N/s; empty: no limit.
  bool keep_attempts = false;
  int extra_attempts = 0;
};
int DlqReplay(const Context& ctx, const ReplayArgs& args);
struct DiscardArgs {
  DlqSelection sel;
  Who who;
  bool dry_run = false;
  bool yes = false;
};
int DlqDiscard(const Context& ctx, const DiscardArgs& args);
int DlqPurge(const Context& ctx, const std::string& older_than);

// Pause or resume a type (`type` set) or a queue (`queue` set).
int Pause(const Context& ctx, bool pause, const std::string& type, const std::string& queue,
          const Who& who);
// Sets the concurrency limit of a job type, or with `per_tenant` the cap of
// each tenant of the queue `subject`, or with `dependency` the limit of
// the dependency `subject`; or clears it (`clear`).
int Concurrency(const Context& ctx, const std::string& subject, bool per_tenant, bool dependency,
                const std::string& limit, bool clear, const Who& who);
// Sets (N) or clears (--clear) the maximum depth of QUEUE: backpressure at
// enqueue in every process.
int DepthLimit(const Context& ctx, const std::string& queue, const std::string& limit, bool clear,
               const Who& who);
// Routes the class to the DLQ (`to` must be "dlq"), or clears the route.
int Route(const Context& ctx, const std::string& type, const std::string& failure_class,
          const std::string& to, bool clear, const Who& who);
int ControlShow(const Context& ctx, int audit_lines);

int LocksList(const Context& ctx, int limit);
// `ratelimit list`: the shared rate limiters (key, override, backoff).
int RateLimitList(const Context& ctx, int limit);
// `ratelimit set KEY RATE [--burst B]` / `--unset`: an operator's rate for
// a limiter in every process, or back to the code's.
int RateLimitSet(const Context& ctx, const std::string& key, const std::string& rate, int burst,
                 bool unset, const Who& who);
// `ratelimit lift KEY`: ends a limiter's backoff now.
int RateLimitLift(const Context& ctx, const std::string& key, const Who& who);
int LocksRelease(const Context& ctx, const std::string& key, const std::string& owner,
                 const Who& who);

int PolicyShow(const Context& ctx);

// The cache guard's shared store (Operations' cache methods). `count`
// counts the live entries starting with `prefix` (empty: all).
int CacheCount(const Context& ctx, const std::string& prefix);
// `invalidate`: exactly one of --key and --prefix (has_key / has_prefix
// say which was given, an empty value included). A key is removed at once;
// a prefix only with `yes`: without it the command shows how many entries
// it would remove and refuses (kExitRefused), changing nothing. An empty
// prefix is a usage error (a whole flush is escalate-only).
struct CacheInvalidateArgs {
  std::string key;
  std::string prefix;
  bool has_key = false;
  bool has_prefix = false;
  bool yes = false;
  Who who;
};
int CacheInvalidate(const Context& ctx, const CacheInvalidateArgs& args);

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_COMMANDS_H_
