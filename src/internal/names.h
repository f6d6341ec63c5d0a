// Private: the character sets of names and keys, in one place (SPEC 1
// "names in a safe character set"). The envelope validation, the runner's
// handler registration, the backends' reading of invalid input and the URL
// parser all check names with these.
#ifndef JOBPACT_SRC_INTERNAL_NAMES_H_
#define JOBPACT_SRC_INTERNAL_NAMES_H_

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace jobpact {
namespace internal {

// The default bound on names and keys (ValidationOptions::max_name_length).
inline constexpr std::size_t kMaxNameLength = 255;

// job_type, queue, tenant_id, dependency names and ids: [A-Za-z0-9._:-].
inline bool IsSafeNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == ':' || c == '-';
}

// Keys (idempotency, dedup, lock) and trace ids: printable ASCII without
// space. They end up in Redis keys, SQL, log lines and metric labels, where
// whitespace and control characters cause trouble.
inline bool IsKeyChar(char c) { return c > 0x20 && c < 0x7F; }

// A non-empty name of safe characters, at most `max_length` long.
inline bool IsSafeName(std::string_view s, std::size_t max_length = kMaxNameLength) {
  return !s.empty() && s.size() <= max_length && std::all_of(s.begin(), s.end(), IsSafeNameChar);
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_NAMES_H_
