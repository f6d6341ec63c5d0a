// Fuzzes the envelope parser and validator (SPEC 1), with both the
// producer's bounds and the stored ones the backends decode with.
// Invariants: never a crash or a throw; a refusal is kInvalidArgument with
// at least one problem listed; an accepted envelope validates, and
// serializes to a document that parses back to the same serialization; the
// hand-written JSON pre-scan says "certainly valid" only where nlohmann's
// parser agrees (its one promise: a mistake may cost speed, never accept
// bad input). The fast reader and writer of the stored form
// (src/core/envelope_fast.h) give exactly what the nlohmann path gives
// wherever they answer: the same envelope (compared by the nlohmann
// writer's bytes) or the same refusal, the same serialization, and a
// payload they call canonical is what the parser's compact dump of it is.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "jobpact/job.h"
#include "src/core/bounded_json.h"
#include "src/core/envelope_fast.h"
#include "src/internal/stored_validation.h"

namespace {

void CheckOne(std::string_view json, const jobpact::ValidationOptions& options) {
  std::vector<jobpact::FieldError> errors;
  jobpact::Result<jobpact::Envelope> env = jobpact::ParseEnvelope(json, options, &errors);
  // The fast path against the parser alone.
  jobpact::Result<jobpact::Envelope> slow =
      jobpact::internal::ParseEnvelopeByParser(json, options, nullptr);
  JOBPACT_FUZZ_CHECK(env.ok() == slow.ok(), "fast and parser paths disagree on acceptance");
  if (env.ok()) {
    JOBPACT_FUZZ_CHECK(jobpact::internal::SerializeEnvelopeByJson(*env) ==
                           jobpact::internal::SerializeEnvelopeByJson(*slow),
                       "fast and parser paths read different envelopes");
    JOBPACT_FUZZ_CHECK(env->payload == slow->payload, "fast and parser paths read different payloads");
    JOBPACT_FUZZ_CHECK(jobpact::SerializeEnvelope(*env) ==
                           jobpact::internal::SerializeEnvelopeByJson(*env),
                       "fast and nlohmann writers differ");
  } else {
    JOBPACT_FUZZ_CHECK(env.status().message() == slow.status().message(),
                       env.status().ToString());
  }
  if (!env.ok()) {
    JOBPACT_FUZZ_CHECK(env.status().code() == jobpact::StatusCode::kInvalidArgument,
                       env.status().ToString());
    JOBPACT_FUZZ_CHECK(!errors.empty(), env.status().ToString());
    return;
  }
  JOBPACT_FUZZ_CHECK(errors.empty(), errors.front().field + ": " + errors.front().message);
  const std::vector<jobpact::FieldError> problems = jobpact::ValidateEnvelope(*env, options);
  JOBPACT_FUZZ_CHECK(problems.empty(), problems.front().field + ": " + problems.front().message);
  const std::string serialized = jobpact::SerializeEnvelope(*env);
  jobpact::Result<jobpact::Envelope> back = jobpact::ParseEnvelope(serialized, options);
  JOBPACT_FUZZ_CHECK(back.ok(), back.status().ToString() + " for " + serialized);
  JOBPACT_FUZZ_CHECK(jobpact::SerializeEnvelope(*back) == serialized, serialized);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  CheckOne(json, jobpact::ValidationOptions{});
  CheckOne(json, jobpact::internal::StoredEnvelopeValidation());
  if (jobpact::internal::IsCanonicalJson(json)) {
    jobpact::internal::Json doc;
    const jobpact::internal::BoundedParse parsed =
        jobpact::internal::ParseBounded(json, jobpact::internal::kMaxPayloadDepth, &doc);
    JOBPACT_FUZZ_CHECK(parsed.syntax_ok && !parsed.too_deep && !parsed.duplicate_keys,
                       "canonical JSON the parser refuses");
    JOBPACT_FUZZ_CHECK(jobpact::internal::DumpCompact(doc) == json,
                       "canonical JSON the compact dump writes otherwise");
  }
  for (int levels : {1, 3, jobpact::internal::kMaxPayloadDepth + 1}) {
    if (jobpact::internal::IsCertainlyValidJson(json, levels)) {
      JOBPACT_FUZZ_CHECK(jobpact::internal::IsValidBoundedByParser(json, levels),
                         "the pre-scan accepted what the parser refuses at depth " +
                             std::to_string(levels));
    }
  }
  // The time parser on its own: what parses formats back to the same time.
  if (size <= 64) {
    jobpact::Result<jobpact::TimePoint> t = jobpact::ParseRfc3339(json);
    if (t.ok()) {
      const std::string formatted = jobpact::FormatRfc3339(*t);
      jobpact::Result<jobpact::TimePoint> again = jobpact::ParseRfc3339(formatted);
      JOBPACT_FUZZ_CHECK(again.ok() && *again == *t, formatted);
    }
  }
  return 0;
}
