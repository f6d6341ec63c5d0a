// Private: percent-encoding of URL parts (RFC 3986 section 2.1), shared by
// the backend URL parser (src/backends/url) and the backends that print
// their own URL for logs (SqliteBackend::bundle()).
#ifndef JOBPACT_SRC_INTERNAL_PERCENT_ENCODING_H_
#define JOBPACT_SRC_INTERNAL_PERCENT_ENCODING_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace jobpact {
namespace internal {

inline int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The first byte a URL must not hold raw (a space or a control character),
// described with its offset and how to write it, or "" if there is none.
inline std::string UnencodedByteProblem(std::string_view url) {
  for (std::size_t i = 0; i < url.size(); ++i) {
    const auto c = static_cast<unsigned char>(url[i]);
    if (c <= 0x20 || c == 0x7F) {
      return std::string("the URL holds ") + (c == ' ' ? "a space" : "a control character") +
             " at offset " + std::to_string(i) +
             " (percent-encode it, e.g. %20 for a space; no spaces around the URL)";
    }
  }
  return std::string();
}

// Decodes every %XX in `s`. On a '%' not followed by two hex digits,
// returns nullopt and sets *bad_at to the offset of that '%' in `s`. '+' is
// kept as is (it means a space only in HTML forms, not in URLs).
inline std::optional<std::string> PercentDecode(std::string_view s, std::size_t* bad_at) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 1 < s.size() ? HexDigitValue(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? HexDigitValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      if (bad_at != nullptr) *bad_at = i;
      return std::nullopt;
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

// Encodes a file path for the path part of a URL: every byte except the
// unreserved characters (RFC 3986: A-Z a-z 0-9 - . _ ~) and '/' becomes %XX.
// (Stricter than needed; PercentDecode gives back exactly `path`.)
inline std::string PercentEncodePath(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(path.size());
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_PERCENT_ENCODING_H_
