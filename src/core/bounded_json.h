// Private: JSON with a depth bound and a duplicate-key check (SPEC 1
// "payload nesting depth is bounded"; a repeated key is refused, never "last
// wins"), for the envelope parser (job.cc). nlohmann's parser is iterative,
// but dump(), comparison and copying of a value recurse, so an unbounded
// nesting depth is a stack overflow waiting for the next caller.
//
// Nothing here throws: nlohmann's exceptions are caught inside.
#ifndef JOBPACT_SRC_CORE_BOUNDED_JSON_H_
#define JOBPACT_SRC_CORE_BOUNDED_JSON_H_

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "jobpact/job.h"

namespace jobpact {
namespace internal {

// ordered_json keeps the producer's key order inside the payload and the
// SPEC's field order in the output, which makes stored envelopes readable.
using Json = nlohmann::ordered_json;

// The payload may nest this many levels (the payload value itself is level
// 1); the envelope object adds one level around it.
inline constexpr int kMaxPayloadDepth = 64;

// `text` in double quotes for an error message: bytes outside printable
// ASCII are written as \xNN, and long input is cut, so that a hostile value
// cannot inject control characters or megabytes into logs.
std::string Quote(std::string_view text);

// nlohmann's what() without its "[json.exception.parse_error.101] " prefix.
std::string StripJsonExceptionPrefix(const char* what);

struct BoundedParse {
  bool syntax_ok = false;
  std::string syntax_error;  // When !syntax_ok: the parser's message with its position.
  bool too_deep = false;
  // The top-level key under which the nesting bound was hit, if the root is
  // an object; empty if it was hit elsewhere.
  std::string too_deep_key;
  // Some object ended with fewer members than keys were read for it: a key
  // was repeated (nlohmann keeps the last value and drops the others), or,
  // only when too_deep, a member was discarded. FindDuplicateKeys names them.
  bool duplicate_keys = false;
};

// Parses `text` into `*out`. Arrays and objects more than `max_levels` deep
// (the root is level 1; REQUIRES: max_levels <= kMaxPayloadDepth + 1) are
// discarded as they are read, so the value kept in memory is never deeper
// than the bound; `too_deep` reports it.
BoundedParse ParseBounded(std::string_view text, int max_levels, Json* out);

// One problem per repeated key of `text` (at most a bounded number), each
// named by its path below `root`.
std::vector<FieldError> FindDuplicateKeys(std::string_view text, const std::string& root,
                                          int max_levels);

// ParseBounded would give syntax_ok and neither too_deep nor duplicate_keys;
// checked without building a value: IsCertainlyValidJson first, then, when
// it is not sure, IsValidBoundedByParser.
bool IsValidBounded(std::string_view text, int max_levels);

// The hand-written single pass over the common case: true only for input
// it is sure IsValidBoundedByParser accepts, false ("not sure") otherwise.
bool IsCertainlyValidJson(std::string_view text, int max_levels);

// The same check by nlohmann's SAX parser alone (any valid JSON).
bool IsValidBoundedByParser(std::string_view text, int max_levels);

// value.dump() that never throws (invalid UTF-8 is replaced).
std::string DumpCompact(const Json& value);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_CORE_BOUNDED_JSON_H_
