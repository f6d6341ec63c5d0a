// What the SQLite crash test (crash_test.cc) and soak test (soak_test.cc)
// share: the table of the transactional effect and the jobs' stored
// histories read back for the checks of tests/support/crash_rig.h.
#ifndef JOBPACT_TESTS_BACKENDS_SQLITE_CRASH_SUPPORT_H_
#define JOBPACT_TESTS_BACKENDS_SQLITE_CRASH_SUPPORT_H_

#include <sqlite3.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/support/crash_rig.h"

namespace jobpact {
namespace sqlite {

// The business table the workers' transactional effect writes (a row of
// job id and pid per effect; crash_worker.cc). No unique constraint, so a
// second commit of an effect would show as a second row.
inline Status CreateEffectsTable(SqliteBackend& backend) {
  return backend.RunInTransaction([](sqlite3* h) -> Status {
    return sqlite3_exec(h, "CREATE TABLE effects (job_id TEXT, pid TEXT)", nullptr, nullptr,
                        nullptr) == SQLITE_OK
               ? Status::Ok()
               : Status::Internal(sqlite3_errmsg(h));
  });
}

// The stored history of each job through `raw` (a connection of the
// test's own to the file): every row of jobpact_jobs is read on the first
// call, after the kill loop; later calls look up what it read.
inline crash_testing::RawHistory StoredHistories(sqlite3* raw) {
  auto histories = std::make_shared<std::map<std::string, std::vector<nlohmann::json>>>();
  return [raw, histories](const std::string& id) -> Result<std::vector<nlohmann::json>> {
    if (histories->empty()) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(raw, "SELECT job_id, history FROM jobpact_jobs", -1, &st, nullptr) !=
          SQLITE_OK) {
        return Status::Internal(sqlite3_errmsg(raw));
      }
      while (sqlite3_step(st) == SQLITE_ROW) {
        nlohmann::json h = nlohmann::json::parse(
            reinterpret_cast<const char*>(sqlite3_column_text(st, 1)), nullptr, false);
        if (!h.is_array()) continue;  // Unreadable: the check names the job.
        (*histories)[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))] =
            h.get<std::vector<nlohmann::json>>();
      }
      sqlite3_finalize(st);
    }
    auto it = histories->find(id);
    if (it == histories->end()) return Status::NotFound("no readable stored history for " + id);
    return it->second;
  };
}

}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_SQLITE_CRASH_SUPPORT_H_
