#include "src/backends/sqlite/control_store.h"

#include <string>
#include <utility>
#include <vector>

#include "src/backends/sqlite/core.h"
#include "src/backends/sqlite/job_row.h"

namespace jobpact {
namespace sqlite {
namespace internal {

namespace {

// Control audit lines kept in the file; older ones are dropped.
constexpr std::int64_t kMaxControlAudit = 10000;

// The stored failure_class column: a class name for routes, '' otherwise
// (part of the primary key, so never NULL).
std::string ClassColumn(ControlKind kind, FailureClass c) {
  return kind == ControlKind::kRouteToDlq ? std::string(FailureClassName(c)) : std::string();
}

}  // namespace

// The rules, read through `conn`.
static Result<ControlState> LoadControlOn(Connection& conn) {
  ControlState state;
  JOBPACT_ASSIGN_OR_RETURN(
      sqlite3_stmt * raw,
      conn.Prepare("SELECT kind, subject, failure_class, limit_value, actor, reason, set_at_ns "
                   "FROM jobpact_control ORDER BY kind, subject, failure_class"));
  Stmt st(raw);
  while (true) {
    int rc = st.Step();
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return conn.Error(rc, "ReadControl");
    ControlRule r;
    Result<ControlKind> kind = ParseControlKind(st.Text(0));
    // A kind from a newer library version: not ours to obey or show.
    if (!kind.ok()) continue;
    r.kind = *kind;
    r.subject = st.Text(1);
    if (r.kind == ControlKind::kRouteToDlq) {
      Result<FailureClass> c = ParseFailureClass(st.Text(2));
      if (!c.ok()) continue;
      r.failure_class = *c;
    }
    r.limit = static_cast<int>(st.Int(3));
    r.actor = st.Text(4);
    r.reason = st.Text(5);
    r.set_at = TimeFromNs(st.Int(6));
    state.rules.push_back(std::move(r));
  }
  return state;
}

Result<ControlState> LoadControl(SqliteBackend::Core& core) {
  ControlState state;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core.Read("ReadControl", false, [&](Connection& conn) -> Status {
    JOBPACT_ASSIGN_OR_RETURN(state, LoadControlOn(conn));
    return Status::Ok();
  }));
  return state;
}

Status WriteControl(SqliteBackend::Core& core, const ControlWrite& w) {
  return core.Write("WriteControl", [&](Connection& conn) -> Status {
    if (w.set) {
      const ControlRule& r = *w.set;
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("INSERT OR REPLACE INTO jobpact_control (kind, subject, failure_class, "
                       "limit_value, actor, reason, set_at_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                       "?7)"));
      Stmt st(raw);
      st.Bind(1, ControlKindName(r.kind))
          .Bind(2, r.subject)
          .Bind(3, ClassColumn(r.kind, r.failure_class))
          .Bind(4, r.limit)
          .Bind(5, r.actor)
          .Bind(6, r.reason)
          .Bind(7, ToNs(r.set_at));
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "SetControl"));
    } else if (w.clear) {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("DELETE FROM jobpact_control WHERE kind = ?1 AND subject = ?2 AND "
                       "failure_class = ?3"));
      Stmt st(raw);
      st.Bind(1, ControlKindName(w.clear->kind))
          .Bind(2, w.clear->subject)
          .Bind(3, ClassColumn(w.clear->kind, w.clear->failure_class));
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "ClearControl"));
      if (sqlite3_changes(conn.db()) == 0) return Status::NotFound("no such control rule");
    }
    {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw, conn.Prepare("INSERT INTO jobpact_control_audit (line) VALUES (?1)"));
      Stmt st(raw);
      st.Bind(1, w.audit_line);
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "control audit"));
    }
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("DELETE FROM jobpact_control_audit WHERE seq <= "
                     "(SELECT max(seq) FROM jobpact_control_audit) - ?1"));
    Stmt st(raw);
    st.Bind(1, kMaxControlAudit);
    return StepDone(conn, st, "control audit");
  });
}

Result<std::vector<std::string>> LoadControlAudit(SqliteBackend::Core& core, std::size_t limit) {
  std::vector<std::string> lines;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core.Read("ControlAudit", false, [&](Connection& conn) -> Status {
    lines.clear();
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("SELECT line FROM (SELECT seq, line FROM jobpact_control_audit ORDER BY seq "
                     "DESC LIMIT ?1) ORDER BY seq"));
    Stmt st(raw);
    st.Bind(1, static_cast<std::int64_t>(limit));
    while (true) {
      int rc = st.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "ControlAudit");
      lines.push_back(st.Text(0));
    }
    return Status::Ok();
  }));
  return lines;
}

Status StorePolicies(SqliteBackend::Core& core, const std::vector<PublishedPolicy>& policies) {
  return core.Write("PublishPolicies", [&](Connection& conn) -> Status {
    for (const PublishedPolicy& p : policies) {
      JOBPACT_ASSIGN_OR_RETURN(
          sqlite3_stmt * raw,
          conn.Prepare("INSERT OR REPLACE INTO jobpact_policies (job_type, policy, reason, "
                       "publisher, published_at_ns) VALUES (?1, ?2, ?3, ?4, ?5)"));
      Stmt st(raw);
      st.Bind(1, p.job_type)
          .Bind(2, RetryPolicyToJson(p.policy))
          .Bind(3, p.reason)
          .Bind(4, p.publisher)
          .Bind(5, ToNs(p.published_at));
      JOBPACT_RETURN_IF_ERROR(StepDone(conn, st, "PublishPolicies"));
    }
    return Status::Ok();
  });
}

Result<std::vector<PublishedPolicy>> LoadPolicies(SqliteBackend::Core& core) {
  std::vector<PublishedPolicy> out;
  JOBPACT_SQLITE_RETURN_IF_ERROR(core.Read("ReadPolicies", false, [&](Connection& conn) -> Status {
    out.clear();
    JOBPACT_ASSIGN_OR_RETURN(
        sqlite3_stmt * raw,
        conn.Prepare("SELECT job_type, policy, reason, publisher, published_at_ns FROM "
                     "jobpact_policies ORDER BY job_type"));
    Stmt st(raw);
    while (true) {
      int rc = st.Step();
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return conn.Error(rc, "ReadPolicies");
      PublishedPolicy p;
      p.job_type = st.Text(0);
      Result<RetryPolicy> policy = ParseRetryPolicyJson(st.Text(1));
      if (!policy.ok()) {
        return Status::Internal("ReadPolicies: the stored policy of " + p.job_type + " in " +
                                core.path() + " does not parse: " + policy.status().message());
      }
      p.policy = *policy;
      p.reason = st.Text(2);
      p.publisher = st.Text(3);
      p.published_at = TimeFromNs(st.Int(4));
      out.push_back(std::move(p));
    }
    return Status::Ok();
  }));
  return out;
}

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
