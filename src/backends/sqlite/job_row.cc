#include "src/backends/sqlite/job_row.h"

#include <string>
#include <utility>
#include <vector>

namespace jobpact {
namespace sqlite {
namespace internal {

Status StepDone(Connection& conn, Stmt& st, std::string_view what) {
  int rc = st.Step();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return conn.Error(rc, what);
  return Status::Ok();
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
