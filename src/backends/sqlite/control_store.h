// Private: the operator-side tables of a SQLite file (schema version 2):
// jobpact_control (the rules every process obeys), jobpact_control_audit
// and jobpact_policies. The queue's storage primitives forward here (the
// lease step reads the rules in its own SQL, inside its transaction).
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_CONTROL_STORE_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_CONTROL_STORE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "jobpact/queue_admin.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/store_backend.h"
#include "src/backends/sqlite/connection.h"

namespace jobpact {
namespace sqlite {
namespace internal {

Result<ControlState> LoadControl(SqliteBackend::Core& core);
Status WriteControl(SqliteBackend::Core& core, const ControlWrite& write);
Result<std::vector<std::string>> LoadControlAudit(SqliteBackend::Core& core, std::size_t limit);
Status StorePolicies(SqliteBackend::Core& core, const std::vector<PublishedPolicy>& policies);
Result<std::vector<PublishedPolicy>> LoadPolicies(SqliteBackend::Core& core);

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_CONTROL_STORE_H_
