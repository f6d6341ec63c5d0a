#include "src/backends/sqlite/job_row.h"

#include <string>
#include <utility>
#include <vector>

namespace jobpact {
namespace sqlite {
namespace internal {

Result<std::vector<Transition>> ParseHistory(const std::string& text) {
  std::vector<Transition> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return Status::Internal("stored job history is not a JSON array");
  out.reserve(j.size());
  for (const auto& e : j) {
    JOBPACT_ASSIGN_OR_RETURN(Transition t, HistoryEntryFromJson(e));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> ParseStringArray(const std::string& text) {
  std::vector<std::string> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

Status StepDone(Connection& conn, Stmt& st, std::string_view what) {
  int rc = st.Step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return conn.Error(rc, what);
  return Status::Ok();
}

std::string HistoryJson(const std::vector<Transition>& entries) {
  std::string out = "[";
  for (const Transition& t : entries) {
    if (out.size() > 1) out += ',';
    out += HistoryEntryJson(t, "");
  }
  out += ']';
  return out;
}

std::string AuditJson(const std::vector<std::string>& audit) {
  if (audit.empty()) return "[]";
  return nlohmann::json(audit).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void BindRecord(Stmt& st, const JobRecord& r) {
  st.Bind(5, JobStatusName(r.status))
      .Bind(6, r.envelope.attempt)
      .Bind(7, r.envelope.max_attempts)
      .Bind(8, ToNs(r.ready_at))
      .Bind(9, ToNs(r.updated_at));
  if (r.finished_at) {
    st.Bind(10, ToNs(*r.finished_at));
  } else {
    st.BindNull(10);
  }
  st.Bind(11, r.epoch)
      .Bind(12, r.lease_recoveries)
      .Bind(13, r.lock_waits)
      .Bind(14, ToNs(r.previous_delay))
      .Bind(15, r.checkpoint);
  if (r.last_failure) {
    st.Bind(16, FailureClassName(r.last_failure->failure_class))
        .Bind(17, r.last_failure->code)
        .Bind(18, r.last_failure->message);
  } else {
    st.BindNull(16).BindNull(17).BindNull(18);
  }
  st.Bind(19, r.reason).Bind(20, r.result).BindOrNull(21, r.lease_token);
  if (r.lease_token.empty()) {
    st.BindNull(22);
  } else {
    st.Bind(22, ToNs(r.lease_expires_at));
  }
  if (r.status == JobStatus::kDeadLettered && r.finished_at) {
    st.Bind(23, ToNs(*r.finished_at));
  } else {
    st.BindNull(23);
  }
  st.Bind(24, AuditJson(r.audit)).Bind(26, r.cancel_requested ? 1 : 0);
}

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
