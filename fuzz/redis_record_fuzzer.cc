// Fuzzes the Redis store's record codec (src/backends/redis/queue_codec.cc):
// decoding the fields of a job hash (DecodeRecord), a stored history
// (DecodeHistory) and a record's raw form (RawFields), whatever the hash
// holds -- any bytes, missing (nil) fields, the wrong number of fields.
// Invariants: never a crash or a throw; a record that does not decode gives
// kInternal (the store quarantines it); its raw form is valid JSON; a
// record that decodes can be encoded again (AppendRecordArgs) or is
// refused with a Status, never a crash.
//
// Input: the fields of the hash in RecordField order (fuzz_util.h's
// format; 13 make a well-shaped record), then optionally one more field:
// a stored history.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/backends/redis/queue_codec.h"

namespace {

namespace ri = jobpact::redis_internal;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto fields = jobpact::fuzz::SplitFields(data, size);
  // A 14th field is the history; any other count is a wrongly shaped hash.
  std::string history;
  if (fields.size() == ri::kRecordFieldCount + 1) {
    history = fields.back().value_or(std::string());
    fields.pop_back();
  }
  ri::Reply f;
  f.type = ri::Reply::Type::kArray;
  for (const auto& field : fields) {
    ri::Reply e;
    if (field) {
      e.type = ri::Reply::Type::kString;
      e.str = *field;
    }
    f.elements.push_back(std::move(e));
  }
  jobpact::Result<jobpact::JobRecord> rec = ri::DecodeRecord("job_fuzz", f);
  if (!rec.ok()) {
    JOBPACT_FUZZ_CHECK(rec.status().code() == jobpact::StatusCode::kInternal,
                       rec.status().ToString());
  } else {
    std::vector<std::string> args;
    jobpact::Status s = ri::AppendRecordArgs(*rec, &args);
    (void)s;  // Refusing a record (a time before 1970) is allowed; crashing is not.
  }
  const std::string raw = ri::RawFields(f);
  JOBPACT_FUZZ_CHECK(nlohmann::json::accept(raw), raw);
  jobpact::Result<std::vector<jobpact::Transition>> h = ri::DecodeHistory(history);
  (void)h;
  return 0;
}
