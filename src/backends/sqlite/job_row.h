// Private to the SQLite backend: how a job row is read and written here --
// a row copied out of a statement, and binding a record's mutable fields for
// the one conditional UPDATE every change is written with. The column layout
// and the row decoder are shared with the PostgreSQL store
// (src/internal/job_row_codec.h).
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/queue_backend.h"
#include "src/internal/history_json.h"
#include "src/internal/job_row_codec.h"
#include "src/backends/sqlite/connection.h"
#include "src/internal/stored_validation.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// The shared row codec (src/internal/job_row_codec.h).
using ::jobpact::internal::AuditJson;
using ::jobpact::internal::HistoryEntryFromJson;
using ::jobpact::internal::HistoryEntryJson;
using ::jobpact::internal::HistoryJson;
using ::jobpact::internal::JsonString;
using ::jobpact::internal::kJobColumns;
using ::jobpact::internal::ParseHistory;
using ::jobpact::internal::ParseStringArray;
using ::jobpact::internal::RawRow;
using ::jobpact::internal::ReadFailure;
using ::jobpact::internal::ReadJobRow;
using namespace ::jobpact::internal::job_col;  // NOLINT: the kCol* names

// A job row copied out of a statement, so that it can be turned into a
// JobRecord (JSON parsing) after the transaction, outside the write lock.
// Same accessors as Stmt.
class CopiedRow {
 public:
  explicit CopiedRow(const Stmt& st) {
    const int n = sqlite3_column_count(st.get());
    cols_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      Col& c = cols_[static_cast<std::size_t>(i)];
      c.null = st.IsNull(i);
      if (c.null) continue;
      if (sqlite3_column_type(st.get(), i) == SQLITE_INTEGER) {
        c.i = st.Int(i);
      } else {
        c.text = st.Text(i);
      }
    }
  }
  bool IsNull(int col) const { return cols_[static_cast<std::size_t>(col)].null; }
  std::int64_t Int(int col) const { return cols_[static_cast<std::size_t>(col)].i; }
  const std::string& Text(int col) const { return cols_[static_cast<std::size_t>(col)].text; }

 private:
  struct Col {
    bool null = true;
    std::int64_t i = 0;
    std::string text;
  };
  std::vector<Col> cols_;
};

// Steps a statement that returns no rows.
Status StepDone(Connection& conn, Stmt& st, std::string_view what);


// The columns a change writes: every field the engine may change. The
// envelope, job type, queue, priority, dedup key and visibility timeout are
// written once, at insert. An empty checkpoint keeps the stored one, and a
// change of a running job keeps the audit and a cancel request an operator
// stored meanwhile (JobChange).
inline constexpr const char* kUpdateSet =
    "status = ?5, attempt = ?6, max_attempts = ?7, ready_at_ns = ?8, updated_at_ns = ?9, "
    "finished_at_ns = ?10, epoch = ?11, lease_recoveries = ?12, lock_waits = ?13, "
    "previous_delay_ns = ?14, checkpoint = CASE WHEN ?15 = '' THEN checkpoint ELSE ?15 END, "
    "failure_class = ?16, failure_code = ?17, failure_message = ?18, reason = ?19, "
    "result = ?20, lease_token = ?21, lease_expires_at_ns = ?22, dead_lettered_at_ns = ?23, "
    "audit = CASE WHEN ?2 = 'running' THEN audit ELSE ?24 END, cancel_requested = CASE WHEN "
    "?2 = 'running' THEN max(cancel_requested, ?26) ELSE ?26 END";

// Binds ?5..?24 and ?26 (kUpdateSet) from `r`.
void BindRecord(Stmt& st, const JobRecord& r);

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_JOB_ROW_H_
