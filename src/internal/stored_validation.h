// Private: the ValidationOptions of a stored envelope. A store must be able
// to decode again whatever it accepted, and a producer may have used looser
// bounds than the defaults, so the engine's storable check (CheckStorable)
// and a backend reading a stored envelope back apply no size or
// visibility-buffer bound: only what makes an envelope decodable.
#ifndef JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_
#define JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_

#include <chrono>
#include <cstddef>

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

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_STORED_VALIDATION_H_
