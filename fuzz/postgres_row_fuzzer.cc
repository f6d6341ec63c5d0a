// Fuzzes the PostgreSQL store's row decoding: a row of <schema>.jobs as
// libpq hands it over (text format, src/backends/postgres/connection.h:
// PgResult and PgRow), decoded by the shared ReadJobRow
// (src/internal/job_row_codec.h). The result is built with libpq's own
// PQmakeEmptyPGresult/PQsetvalue, so no server is needed and the accessors
// are the real ones. Invariants as for SQLite: never a crash or a throw; a
// row that does not decode gives kInternal (the store quarantines it), and
// its raw form is valid JSON.
//
// Input: the 29 columns of kJobColumns in order (fuzz_util.h's format),
// each as the text libpq would return; integers need not be numbers.
#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/backends/postgres/connection.h"
#include "src/internal/job_row_codec.h"

namespace {

namespace col = jobpact::internal::job_col;
constexpr int kColumns = col::kColCancelRequested + 1;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto fields = jobpact::fuzz::SplitFields(data, size);
  fields.resize(kColumns, std::string());
  PGresult* raw = PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK);
  JOBPACT_FUZZ_CHECK(raw != nullptr, "PQmakeEmptyPGresult");
  PGresAttDesc attrs[kColumns] = {};
  std::string names[kColumns];
  for (int c = 0; c < kColumns; ++c) {
    names[c] = "c" + std::to_string(c);
    attrs[c].name = names[c].data();
    attrs[c].format = 0;  // Text, as every query of the store asks.
    attrs[c].typlen = -1;
    attrs[c].atttypmod = -1;
  }
  JOBPACT_FUZZ_CHECK(PQsetResultAttrs(raw, kColumns, attrs) != 0, "PQsetResultAttrs");
  for (int c = 0; c < kColumns; ++c) {
    const auto& f = fields[static_cast<std::size_t>(c)];
    // A NULL is a length of -1; libpq keeps a NUL after every value, as a
    // server's reply would have it.
    const int ok = f ? PQsetvalue(raw, 0, c, const_cast<char*>(f->data()), static_cast<int>(f->size()))
                     : PQsetvalue(raw, 0, c, nullptr, -1);
    JOBPACT_FUZZ_CHECK(ok != 0, "PQsetvalue");
  }
  const jobpact::postgres::internal::PgResult result(raw);
  const jobpact::postgres::internal::PgRow row(result, 0);
  for (bool with_history : {true, false}) {
    jobpact::Result<jobpact::JobRecord> rec = jobpact::internal::ReadJobRow(row, with_history);
    if (!rec.ok()) {
      JOBPACT_FUZZ_CHECK(rec.status().code() == jobpact::StatusCode::kInternal,
                         rec.status().ToString());
    }
  }
  const std::string raw_row = jobpact::internal::RawRow(row);
  JOBPACT_FUZZ_CHECK(nlohmann::json::accept(raw_row), raw_row);
  return 0;
}
