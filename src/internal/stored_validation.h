// Private: the ValidationOptions of a stored envelope. A store must be able
// to decode again whatever it accepted, and a producer may have used looser
// bounds than the defaults, so the engine's storable check (CheckStorable)
// and a backend reading a stored envelope back apply no size or
// visibility-buffer bound: only what makes an envelope decodable.
#ifndef JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_
#define JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_

#include <chrono>
#include <cstddef>
#include <vector>

#include "jobpact/job.h"

namespace jobpact {
namespace internal {

inline const ValidationOptions& StoredEnvelopeValidation() {
  static const ValidationOptions options = [] {
    ValidationOptions o;
    o.visibility_buffer = -std::chrono::hours(24 * 365 * 100);
    o.max_payload_bytes = static_cast<std::size_t>(-1);
    o.max_name_length = static_cast<std::size_t>(-1);
    return o;
  }();
  return options;
}

// ValidateEnvelope(env, options) for an envelope known to have passed
// engine::CheckStorable unchanged since (a store that keeps it in process
// memory, StoreBackend::DeliversStoredEnvelopes): the rules CheckStorable
// does not apply (the sizes, lengths and visibility buffer of `options`,
// which may be stricter than the producer's) and the cheap rules, without
// the ones it applied for certain (the payload's JSON syntax, the character
// sets of names and keys). The same problems ValidateEnvelope would report
// for such an envelope.
std::vector<FieldError> ValidateStoredEnvelopeBounds(const Envelope& env,
                                                     const ValidationOptions& options);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_
