// Fuzzes the SQLite store's row decoding: a row of the jobs table as the
// store reads it (src/backends/sqlite/job_row.h: CopiedRow, then the shared
// ReadJobRow of src/internal/job_row_codec.h), whatever a damaged or
// hand-edited file holds: any bytes in a text column, text where an integer
// belongs, NULL anywhere. Invariants: never a crash or a throw; a row that
// does not decode gives kInternal (the store quarantines it), and its raw
// form (RawRow, what the quarantined DLQ entry keeps) is valid JSON.
//
// Input: the 29 columns of kJobColumns in order (fuzz_util.h's format). An
// integer column whose text is a decimal number is stored as an INTEGER,
// anything else as TEXT, as SQLite's dynamic typing allows.
#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/backends/sqlite/job_row.h"

namespace {

using jobpact::sqlite::internal::CopiedRow;
using jobpact::sqlite::internal::Stmt;
namespace col = jobpact::internal::job_col;

constexpr int kColumns = col::kColCancelRequested + 1;

bool IsIntegerColumn(int c) {
  switch (c) {
    case col::kColAttempt: case col::kColMaxAttempts: case col::kColReadyAt:
    case col::kColEnqueuedAt: case col::kColUpdatedAt: case col::kColFinishedAt:
    case col::kColEpoch: case col::kColLeaseRecoveries: case col::kColLockWaits:
    case col::kColPreviousDelay: case col::kColLeaseExpiresAt: case col::kColDeadLetteredAt:
    case col::kColPriority: case col::kColCancelRequested:
      return true;
    default:
      return false;
  }
}

bool ParseInt64(const std::string& s, std::int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *v = n;
  return true;
}

struct Db {
  sqlite3* db = nullptr;
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* select = nullptr;
  sqlite3_stmt* clear = nullptr;
};

Db& TheDb() {
  static Db* db = [] {
    auto* d = new Db;
    JOBPACT_FUZZ_CHECK(sqlite3_open(":memory:", &d->db) == SQLITE_OK, "sqlite3_open");
    // Columns without a declared type: nothing converts what is bound.
    std::string create = "CREATE TABLE r (";
    std::string insert = "INSERT INTO r VALUES (";
    for (int c = 0; c < kColumns; ++c) {
      create += (c ? ", c" : "c") + std::to_string(c);
      insert += (c ? ", ?" : "?");
    }
    JOBPACT_FUZZ_CHECK(sqlite3_exec(d->db, (create + ")").c_str(), nullptr, nullptr, nullptr) ==
                           SQLITE_OK,
                       sqlite3_errmsg(d->db));
    sqlite3_prepare_v2(d->db, (insert + ")").c_str(), -1, &d->insert, nullptr);
    sqlite3_prepare_v2(d->db, "SELECT * FROM r", -1, &d->select, nullptr);
    sqlite3_prepare_v2(d->db, "DELETE FROM r", -1, &d->clear, nullptr);
    JOBPACT_FUZZ_CHECK(d->insert && d->select && d->clear, sqlite3_errmsg(d->db));
    return d;
  }();
  return *db;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto fields = jobpact::fuzz::SplitFields(data, size);
  fields.resize(kColumns, std::string());
  Db& db = TheDb();
  {
    Stmt clear(db.clear);
    JOBPACT_FUZZ_CHECK(clear.Step() == SQLITE_DONE, sqlite3_errmsg(db.db));
  }
  {
    Stmt insert(db.insert);
    for (int c = 0; c < kColumns; ++c) {
      const auto& f = fields[static_cast<std::size_t>(c)];
      std::int64_t v = 0;
      if (!f) {
        insert.BindNull(c + 1);
      } else if (IsIntegerColumn(c) && ParseInt64(*f, &v)) {
        insert.Bind(c + 1, v);
      } else {
        insert.Bind(c + 1, *f);
      }
    }
    JOBPACT_FUZZ_CHECK(insert.Step() == SQLITE_DONE, sqlite3_errmsg(db.db));
  }
  Stmt select(db.select);
  JOBPACT_FUZZ_CHECK(select.Step() == SQLITE_ROW, sqlite3_errmsg(db.db));
  const CopiedRow row(select);
  for (bool with_history : {true, false}) {
    jobpact::Result<jobpact::JobRecord> rec = jobpact::internal::ReadJobRow(row, with_history);
    if (!rec.ok()) {
      JOBPACT_FUZZ_CHECK(rec.status().code() == jobpact::StatusCode::kInternal,
                         rec.status().ToString());
    }
  }
  const std::string raw = jobpact::internal::RawRow(row);
  JOBPACT_FUZZ_CHECK(nlohmann::json::accept(raw), raw);
  return 0;
}
