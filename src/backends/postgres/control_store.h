// Private: the operator-side tables of a PostgreSQL schema: control (the
// rules every process obeys), control_audit and policies. The queue's
// storage primitives forward here (the lease step reads the rules in its
// own SQL, inside its transaction).
#ifndef JOBPACT_SRC_BACKENDS_POSTGRES_CONTROL_STORE_H_
#define JOBPACT_SRC_BACKENDS_POSTGRES_CONTROL_STORE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/queue_admin.h"
#include "jobpact/store_backend.h"

namespace jobpact {
namespace postgres {
namespace internal {

Result<ControlState> LoadControl(PostgresBackend::Core& core);
Status WriteControl(PostgresBackend::Core& core, const ControlWrite& write);
Result<std::vector<std::string>> LoadControlAudit(PostgresBackend::Core& core, std::size_t limit);
Status StorePolicies(PostgresBackend::Core& core, const std::vector<PublishedPolicy>& policies);
Result<std::vector<PublishedPolicy>> LoadPolicies(PostgresBackend::Core& core);

}  // namespace internal
}  // namespace postgres
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_POSTGRES_CONTROL_STORE_H_
