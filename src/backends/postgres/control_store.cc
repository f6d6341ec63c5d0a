#include "src/backends/postgres/control_store.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/retry_policy.h"
#include "src/backends/postgres/core.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {
namespace internal {

using ::jobpact::internal::TimeFromNs;
using ::jobpact::internal::ToNs;

namespace {

// Control audit lines kept; older ones are dropped.
constexpr std::int64_t kMaxControlAudit = 10000;

// The stored failure_class column: a class name for routes, '' otherwise
// (part of the primary key, so never NULL).
std::string ClassColumn(ControlKind kind, FailureClass c) {
  return kind == ControlKind::kRouteToDlq ? std::string(FailureClassName(c)) : std::string();
}

}  // namespace

Result<ControlState> LoadControl(PostgresBackend::Core& core) {
  ControlState state;
  JOBPACT_PG_RETURN_IF_ERROR(core.Read("ReadControl", [&](Connection& conn) -> Status {
    state.rules.clear();
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core.Sql("SELECT kind, subject, failure_class, limit_value, actor, reason, "
                           "set_at_ns FROM {t}control ORDER BY kind, subject, failure_class"),
                  Params(), "ReadControl"));
    for (int i = 0; i < r.rows(); ++i) {
      ControlRule rule;
      Result<ControlKind> kind = ParseControlKind(r.Text(i, 0));
      // A kind from a newer library version: not ours to obey or show.
      if (!kind.ok()) continue;
      rule.kind = *kind;
      rule.subject = r.Text(i, 1);
      if (rule.kind == ControlKind::kRouteToDlq) {
        Result<FailureClass> c = ParseFailureClass(r.Text(i, 2));
        if (!c.ok()) continue;
        rule.failure_class = *c;
      }
      rule.limit = static_cast<int>(r.Int(i, 3));
      rule.actor = r.Text(i, 4);
      rule.reason = r.Text(i, 5);
      rule.set_at = TimeFromNs(r.Int(i, 6));
      state.rules.push_back(std::move(rule));
    }
    return Status::Ok();
  }));
  return state;
}

Status WriteControl(PostgresBackend::Core& core, const ControlWrite& w) {
  return core.Tx("WriteControl", [&](Connection& conn) -> Status {
    if (w.set) {
      const ControlRule& r = *w.set;
      JOBPACT_RETURN_IF_ERROR(
          conn.Exec(core.Sql("INSERT INTO {t}control (kind, subject, failure_class, limit_value, "
                             "actor, reason, set_at_ns) VALUES ($1, $2, $3, $4, $5, $6, $7) ON "
                             "CONFLICT (kind, subject, failure_class) DO UPDATE SET limit_value "
                             "= EXCLUDED.limit_value, actor = EXCLUDED.actor, reason = "
                             "EXCLUDED.reason, set_at_ns = EXCLUDED.set_at_ns"),
                    Params()
                        .Add(ControlKindName(r.kind))
                        .Add(r.subject)
                        .Add(ClassColumn(r.kind, r.failure_class))
                        .Add(r.limit)
                        .Add(r.actor)
                        .Add(r.reason)
                        .Add(ToNs(r.set_at)),
                    "SetControl")
              .status());
    } else if (w.clear) {
      JOBPACT_ASSIGN_OR_RETURN(
          PgResult r,
          conn.Exec(core.Sql("DELETE FROM {t}control WHERE kind = $1 AND subject = $2 AND "
                             "failure_class = $3"),
                    Params()
                        .Add(ControlKindName(w.clear->kind))
                        .Add(w.clear->subject)
                        .Add(ClassColumn(w.clear->kind, w.clear->failure_class)),
                    "ClearControl"));
      if (r.affected() == 0) return Status::NotFound("no such control rule");
    }
    JOBPACT_RETURN_IF_ERROR(
        conn.Exec(core.Sql("INSERT INTO {t}control_audit (line) VALUES ($1)"),
                  Params().Add(w.audit_line), "control audit")
            .status());
    return conn
        .Exec(core.Sql("DELETE FROM {t}control_audit WHERE seq <= (SELECT max(seq) FROM "
                       "{t}control_audit) - $1"),
              Params().Add(kMaxControlAudit), "control audit")
        .status();
  });
}

Result<std::vector<std::string>> LoadControlAudit(PostgresBackend::Core& core,
                                                  std::size_t limit) {
  std::vector<std::string> lines;
  JOBPACT_PG_RETURN_IF_ERROR(core.Read("ControlAudit", [&](Connection& conn) -> Status {
    lines.clear();
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core.Sql("SELECT line FROM (SELECT seq, line FROM {t}control_audit ORDER BY "
                           "seq DESC LIMIT $1) newest ORDER BY seq"),
                  Params().Add(static_cast<std::int64_t>(
                      std::min<std::size_t>(limit, static_cast<std::size_t>(INT64_MAX)))),
                  "ControlAudit"));
    for (int i = 0; i < r.rows(); ++i) lines.push_back(r.Text(i, 0));
    return Status::Ok();
  }));
  return lines;
}

Status StorePolicies(PostgresBackend::Core& core, const std::vector<PublishedPolicy>& policies) {
  return core.Tx("PublishPolicies", [&](Connection& conn) -> Status {
    for (const PublishedPolicy& p : policies) {
      JOBPACT_RETURN_IF_ERROR(
          conn.Exec(core.Sql("INSERT INTO {t}policies (job_type, policy, reason, publisher, "
                             "published_at_ns) VALUES ($1, $2, $3, $4, $5) ON CONFLICT "
                             "(job_type) DO UPDATE SET policy = EXCLUDED.policy, reason = "
                             "EXCLUDED.reason, publisher = EXCLUDED.publisher, published_at_ns "
                             "= EXCLUDED.published_at_ns"),
                    Params()
                        .Add(p.job_type)
                        .Add(RetryPolicyToJson(p.policy))
                        .Add(p.reason)
                        .Add(p.publisher)
                        .Add(ToNs(p.published_at)),
                    "PublishPolicies")
              .status());
    }
    return Status::Ok();
  });
}

Result<std::vector<PublishedPolicy>> LoadPolicies(PostgresBackend::Core& core) {
  std::vector<PublishedPolicy> out;
  JOBPACT_PG_RETURN_IF_ERROR(core.Read("ReadPolicies", [&](Connection& conn) -> Status {
    out.clear();
    JOBPACT_ASSIGN_OR_RETURN(
        PgResult r,
        conn.Exec(core.Sql("SELECT job_type, policy, reason, publisher, published_at_ns FROM "
                           "{t}policies ORDER BY job_type"),
                  Params(), "ReadPolicies"));
    for (int i = 0; i < r.rows(); ++i) {
      PublishedPolicy p;
      p.job_type = r.Text(i, 0);
      Result<RetryPolicy> policy = ParseRetryPolicyJson(r.Text(i, 1));
      if (!policy.ok()) {
        return Status::Internal("ReadPolicies: the stored policy of " + p.job_type +
                                " does not parse: " + policy.status().message());
      }
      p.policy = *policy;
      p.reason = r.Text(i, 2);
      p.publisher = r.Text(i, 3);
      p.published_at = TimeFromNs(r.Int(i, 4));
      out.push_back(std::move(p));
    }
    return Status::Ok();
  }));
  return out;
}

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact
