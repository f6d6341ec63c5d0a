// Private: the envelope's stored form read and written without building a
// JSON document (job.cc's ParseEnvelope and SerializeEnvelope try these
// first).
//
// Why: every durable store keeps the envelope as the JSON SerializeEnvelope
// writes and reads it back with ParseEnvelope on every delivery. Through
// nlohmann's document that cost 64 k instructions a job on a lease and 33 k
// on an enqueue (callgrind, bench/peers on Redis), more than the whole
// in-memory contract. The envelopes a store holds are almost always in one
// narrow form -- compact, plain ASCII strings, whole seconds, a compact
// payload -- which these read and write in one pass.
//
// The contract that makes them safe: each either gives exactly what the
// nlohmann path gives (same Envelope, same bytes) or declines (false), and
// the caller then takes the nlohmann path, which also produces every error
// message. They never report an error of their own. The envelope fuzzer
// checks the equality on every input it generates.
#ifndef JOBPACT_SRC_CORE_ENVELOPE_FAST_H_
#define JOBPACT_SRC_CORE_ENVELOPE_FAST_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/job.h"

namespace jobpact {
namespace internal {

// True if `text` is a JSON value that nlohmann's compact dump of its parse
// gives back byte for byte, valid within the payload's depth bound and with
// no key repeated: no whitespace outside strings, integers only (no
// fraction, exponent or "-0", at most 18 digits), strings of printable
// ASCII or well-formed UTF-8 with only the escapes the dump writes
// (\" \\ \b \f \n \r \t).
bool IsCanonicalJson(std::string_view text);

// Fills `*env` from `text` if it is in the canonical form (see above), and
// leaves it untouched otherwise. The rules of ValidateEnvelope are not
// applied here.
bool ParseCanonicalEnvelope(std::string_view text, Envelope* env);

// Writes SerializeEnvelope's output for `env` into `*out` if every string of
// it is plain printable ASCII without '"' or '\\', every duration whole
// seconds, its payload canonical JSON and it has no retry policy; false
// (and `*out` unspecified) otherwise.
bool SerializeCanonicalEnvelope(const Envelope& env, std::string* out);

// The nlohmann paths alone (job.cc), for the tests and the fuzzer that
// compare the two.
Result<Envelope> ParseEnvelopeByParser(std::string_view json, const ValidationOptions& options,
                                       std::vector<FieldError>* errors);
std::string SerializeEnvelopeByJson(const Envelope& env);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_CORE_ENVELOPE_FAST_H_
