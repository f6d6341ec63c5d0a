// Private: the character sets of names and keys, in one place (SPEC 1
// "names in a safe character set"). The envelope validation, the runner's
// handler registration, the backends' reading of invalid input and the URL
// parser all check names with these.
#ifndef JOBPACT_SRC_INTERNAL_NAMES_H_
#define JOBPACT_SRC_INTERNAL_NAMES_H_

#include <algorithm>
#include <cstddef>
#include <string>
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

// The length of the well-formed UTF-8 sequence that starts at `p`, whose
// lead byte is from 0x80 up (RFC 3629, Unicode table 3-7: no overlong
// forms, surrogates or code points above U+10FFFF), or 0 when it is not
// one (a control byte below 0x80 is not either).
inline int Utf8SequenceLength(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = *p;
  int tail;
  unsigned char lo = 0x80, hi = 0xBF;  // The first continuation byte's range.
  if (c >= 0xC2 && c <= 0xDF) {
    tail = 1;
  } else if (c == 0xE0) {
    tail = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    tail = 2;
  } else if (c == 0xED) {
    tail = 2, hi = 0x9F;
  } else if (c == 0xF0) {
    tail = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    tail = 3;
  } else if (c == 0xF4) {
    tail = 3, hi = 0x8F;
  } else {
    return 0;
  }
  if (end - p <= tail || p[1] < lo || p[1] > hi) return 0;
  for (int k = 2; k <= tail; ++k) {
    if (p[k] < 0x80 || p[k] > 0xBF) return 0;
  }
  return tail + 1;
}

// Well-formed UTF-8. Free text that a store keeps inside JSON (the audit
// trail of operator actions) must be, or the JSON writer replaces the bytes
// it cannot encode and the text comes back changed.
inline bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const int n = Utf8SequenceLength(p, end);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

// Text every store can keep as text: valid UTF-8 without a NUL byte
// (PostgreSQL's text cannot hold NUL, nor its jsonb "\u0000"). Who and why
// of an operator action must be; so are the names read out of invalid
// input.
inline bool IsOperatorText(std::string_view s) {
  return s.find('\0') == std::string_view::npos && IsValidUtf8(s);
}

// `s` as text every store can hold: itself when it is (IsOperatorText),
// else with each NUL byte and each byte from 0x80 up written as \xNN. For
// diagnostics (a failure message that quotes binary input, a problem
// message), never for data that must come back byte for byte.
inline std::string StorableText(std::string s) {
  if (IsOperatorText(s)) return s;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string escaped;
  escaped.reserve(s.size());
  for (unsigned char ch : s) {
    if (ch == 0 || ch >= 0x80) {
      escaped += "\\x";
      escaped += kHex[ch >> 4];
      escaped += kHex[ch & 0xf];
    } else {
      escaped += static_cast<char>(ch);
    }
  }
  return escaped;
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_NAMES_H_
