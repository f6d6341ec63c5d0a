// The CLI's cache-store commands (commands.h).
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
