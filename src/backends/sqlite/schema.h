// Private to the SQLite backend: the versioned schema and its migrations.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_SCHEMA_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_SCHEMA_H_

#include "jobpact/result.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "src/backends/sqlite/connection.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// Checks that the file is a jobpact database (or empty, or adoptable) and
// brings its schema to SqliteBackend::kSchemaVersion in one transaction, then
// switches the file to WAL. Returns the schema version. In read-only mode
// only checks (the version must be current). Errors name the path; an error
// leaves the file as it was.
Result<int> CheckAndMigrate(Connection& conn, const SqliteOptions& options);

// Runs SQLite's PRAGMA quick_check (the structure of every page of the
// file): OK, or CorruptionError ("database file is corrupt") listing the
// first problems it found. Reads the whole file; writes nothing.
Status QuickCheck(Connection& conn);

// The schema_version in jobpact_meta; kFailedPrecondition if the file has no
// jobpact_meta. Runs inside the caller's transaction, if any.
Result<int> ReadSchemaVersion(Connection& conn);

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_SCHEMA_H_
