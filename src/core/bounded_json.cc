// JSON with a depth bound and a duplicate-key check (bounded_json.h).
#include "src/core/bounded_json.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/internal/names.h"

namespace jobpact {
namespace internal {

// `text` in double quotes for an error message: bytes outside printable ASCII
// are written as \xNN, and long input is cut, so that a hostile value cannot
// inject control characters or megabytes into logs.
std::string Quote(std::string_view text) {
  constexpr std::size_t kMaxShown = 64;
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxShown) out += "...";
  out += '"';
  return out;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] ", which is
// noise for the reader of a validation error.
std::string StripJsonExceptionPrefix(const char* what) {
  std::string_view text(what);
  if (!text.empty() && text.front() == '[') {
    const std::size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// --- JSON with a depth bound --------------------------------------------------


// Parses `text` into `*out`. Arrays and objects more than `max_levels` deep
// (the root is level 1; REQUIRES: max_levels <= kMaxPayloadDepth + 1) are
// discarded as they are read, so the value kept in memory is never deeper
// than the bound; `too_deep` reports it. Never throws.
BoundedParse ParseBounded(std::string_view text, int max_levels, Json* out) {
  BoundedParse result;
  std::string current_key;
  // Keys read for each open object, by the depth of its keys. Counting is
  // all this hot path pays for duplicate detection; naming a duplicate is
  // left to FindDuplicateKeys, which runs only when a count is off.
  std::array<std::size_t, kMaxPayloadDepth + 2> keys_read{};
  const int counted = static_cast<int>(keys_read.size());
  // The callback's `depth` is the number of containers enclosing the event
  // (for a key: including its object; for object_end: as at object_start).
  Json::parser_callback_t bound = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::key:
        if (depth == 1 && parsed.is_string()) current_key = parsed.get_ref<const std::string&>();
        if (depth < counted) ++keys_read[depth];
        return true;
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth + 1 > max_levels) {
          if (!result.too_deep) {
            result.too_deep = true;
            if (depth >= 1) result.too_deep_key = current_key;
          }
          return false;
        }
        if (event == Json::parse_event_t::object_start && depth + 1 < counted) {
          keys_read[depth + 1] = 0;
        }
        return true;
      case Json::parse_event_t::object_end:
        if (depth + 1 < counted && parsed.size() != keys_read[depth + 1]) {
          result.duplicate_keys = true;
        }
        return true;
      default:
        return true;
    }
  };
  try {
    *out = Json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
    result.syntax_ok = true;
  } catch (const nlohmann::json::exception& e) {
    result.syntax_error = StripJsonExceptionPrefix(e.what());
  } catch (const std::exception& e) {  // std::bad_alloc on absurd input.
    result.syntax_error = e.what();
  }
  return result;
}

// Duplicate keys named in one report at most; more are summed up in one
// line, so that a hostile document cannot fill a log with them.
constexpr std::size_t kMaxDuplicateKeysReported = 10;

// One step of a path in an error: `.key` (bare if it is plain ASCII letters,
// digits, '_' or '-'; else `["key"]`, escaped and cut by Quote) or `[index]`.
void AppendPathKey(std::string_view key, std::string* path) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  if (!plain) {
    *path += '[' + Quote(key) + ']';
    return;
  }
  if (!path->empty()) *path += '.';
  *path += key;
}

// A SAX handler that keeps no value: it checks the nesting bound and finds
// keys repeated within one object, naming each by its JSON path. With
// `stop_at_first` it stops at the first problem (a yes/no check); otherwise
// it skips what lies deeper than `max_levels` and collects up to
// kMaxDuplicateKeysReported duplicates, each once however often it repeats.
class ShapeCheckSax {
 public:
  // `root` names the value of the whole text in paths: "" for an envelope,
  // whose keys are field names; "payload" for a payload.
  ShapeCheckSax(std::string root, int max_levels, bool stop_at_first)
      : root_(std::move(root)), max_levels_(max_levels), stop_at_first_(stop_at_first) {}

  bool null() { return Value(); }
  bool boolean(bool) { return Value(); }
  bool number_integer(Json::number_integer_t) { return Value(); }
  bool number_unsigned(Json::number_unsigned_t) { return Value(); }
  bool number_float(Json::number_float_t, const Json::string_t&) { return Value(); }
  bool string(Json::string_t&) { return Value(); }
  bool binary(Json::binary_t&) { return Value(); }
  bool start_object(std::size_t) { return Value() && Open(/*object=*/true); }
  bool key(Json::string_t& key) {
    if (depth_ > max_levels_) return true;  // Inside a skipped container.
    Frame& frame = frames_.back();
    frame.key = key;
    if (++frame.seen[key] != 2) return true;  // First time, or reported already.
    if (duplicates_.size() == kMaxDuplicateKeysReported) {
      more_duplicates_ = true;
      return false;  // Nothing more to learn.
    }
    duplicates_.push_back(Path());
    return !stop_at_first_;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Value() && Open(/*object=*/false); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  bool too_deep() const { return too_deep_; }
  // The paths of the duplicated keys, in document order.
  const std::vector<std::string>& duplicates() const { return duplicates_; }
  // More duplicates were found than are listed.
  bool more_duplicates() const { return more_duplicates_; }

 private:
  struct Frame {
    bool object = false;
    std::size_t index = 0;  // Arrays: the element being read.
    std::size_t next_index = 0;
    std::string key;                  // Objects: the key being read.
    std::map<std::string, int> seen;  // Objects: how often each key came.
  };

  // A value starts: in an array, it is the next element.
  bool Value() {
    if (depth_ > max_levels_ || frames_.empty()) return true;
    Frame& frame = frames_.back();
    if (!frame.object) frame.index = frame.next_index++;
    return true;
  }
  bool Open(bool object) {
    if (++depth_ > max_levels_) {
      too_deep_ = true;
      return !stop_at_first_;
    }
    frames_.emplace_back();
    frames_.back().object = object;
    return true;
  }
  bool Close() {
    if (depth_-- <= max_levels_) frames_.pop_back();
    return true;
  }
  // The path of the key being read in the innermost object.
  std::string Path() const {
    std::string path = root_;
    for (const Frame& frame : frames_) {
      if (frame.object) {
        AppendPathKey(frame.key, &path);
      } else {
        path += fmt::format("[{}]", frame.index);
      }
    }
    return path;
  }

  const std::string root_;
  const int max_levels_;
  const bool stop_at_first_;
  int depth_ = 0;
  std::vector<Frame> frames_;  // One per open container within the bound.
  bool too_deep_ = false;
  std::vector<std::string> duplicates_;
  bool more_duplicates_ = false;
};

// The keys repeated within one object anywhere in `text` (valid JSON), one
// FieldError per duplicated key, named by its path under `root`; parts
// deeper than `max_levels` are not looked at. Throws only std::bad_alloc.
std::vector<FieldError> FindDuplicateKeys(std::string_view text, const std::string& root,
                                          int max_levels) {
  ShapeCheckSax sax(root, max_levels, /*stop_at_first=*/false);
  try {
    Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                    /*strict=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception&) {
    // Not reached for text ParseBounded accepted; what was found still stands.
  }
  std::vector<FieldError> out;
  for (const std::string& path : sax.duplicates()) {
    out.push_back({path,
                   "is a duplicate key: a key may appear only once in an object (all "
                   "but its last value would be silently dropped)"});
  }
  if (sax.more_duplicates()) {
    out.push_back(
        {root.empty() ? std::string("$") : root,
         fmt::format("has more duplicate keys than the {} listed", kMaxDuplicateKeysReported)});
  }
  return out;
}

// The common case of IsValidBounded without the parser: a single pass over
// the text that returns true only for input it is sure nlohmann accepts
// within the bound, and false ("not sure") for anything else, which the
// caller then hands to the parser. So that "sure" is never wrong it accepts
// a strict subset of JSON: strings of printable ASCII and well-formed UTF-8
// with the two-character escapes (no backslash-u escapes), numbers without an
// exponent and at most 64 characters long (neither can overflow a double),
// and literals, nested at most min(max_levels, 64) deep, with no key
// repeated within an object. Keys are compared as raw text, so a key with a
// backslash (which may spell the same key another way) is "not sure", and
// so is an object with more keys than kMaxOpenKeys (with its open parents').
bool IsCertainlyValidJson(std::string_view text, int max_levels) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char* const end = p + text.size();
  if (max_levels > 64) max_levels = 64;
  std::uint64_t in_object = 0;  // Bit d: the container at depth d + 1 is an object.
  int depth = 0;
  // The keys of the objects now open, as spans of the text; an object's
  // keys start at first_key[its depth - 1] and are dropped when it closes.
  struct KeySpan {
    const unsigned char* data;
    std::size_t size;
  };
  constexpr std::size_t kMaxOpenKeys = 128;
  KeySpan keys[kMaxOpenKeys];
  std::size_t open_keys = 0;
  std::size_t first_key[64];
  auto skip_ws = [&] {
    while (p != end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  };
  bool escaped = false;  // Set by `string` when it meets a backslash.
  // A string starting at p (which is '"'); leaves p after its closing quote.
  auto string = [&]() -> bool {
    ++p;
    while (p != end) {
      const unsigned char c = *p;
      if (c == '"') {
        ++p;
        return true;
      }
      if (c == '\\') {
        escaped = true;
        if (end - p < 2) return false;
        switch (p[1]) {
          case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            continue;
          default:
            return false;  // backslash-u (surrogate rules), invalid escapes: not sure.
        }
      }
      if (c >= 0x20 && c < 0x7F) {
        ++p;
        continue;
      }
      // UTF-8; control characters and DEL are not (n == 0).
      const int n = Utf8SequenceLength(p, end);
      if (n == 0) return false;
      p += n;
    }
    return false;  // Unterminated.
  };
  // A key starting at p (which is '"') of the object at `depth`, not seen
  // before in it; leaves p after its closing quote.
  auto key = [&]() -> bool {
    const unsigned char* const start = p + 1;
    escaped = false;
    if (!string() || escaped || open_keys == kMaxOpenKeys) return false;
    const auto size = static_cast<std::size_t>(p - 1 - start);
    for (std::size_t i = first_key[depth - 1]; i < open_keys; ++i) {
      if (keys[i].size == size && std::memcmp(keys[i].data, start, size) == 0) return false;
    }
    keys[open_keys++] = {start, size};
    return true;
  };
  auto number = [&]() -> bool {
    const unsigned char* const start = p;
    if (*p == '-') ++p;
    if (p == end) return false;
    if (*p == '0') {
      ++p;
    } else if (*p >= '1' && *p <= '9') {
      while (p != end && *p >= '0' && *p <= '9') ++p;
    } else {
      return false;
    }
    if (p != end && *p == '.') {
      ++p;
      if (p == end || *p < '0' || *p > '9') return false;
      while (p != end && *p >= '0' && *p <= '9') ++p;
    }
    if (p != end && (*p == 'e' || *p == 'E')) return false;  // Could overflow.
    return p - start <= 64;
  };
  auto literal = [&](std::string_view word) -> bool {
    if (static_cast<std::size_t>(end - p) < word.size() ||
        std::memcmp(p, word.data(), word.size()) != 0) {
      return false;
    }
    p += word.size();
    return true;
  };

  skip_ws();
  for (;;) {
    // A value is expected at p.
    if (p == end) return false;
    bool scalar_ok = true;
    switch (*p) {
      case '{':
      case '[': {
        const bool object = *p == '{';
        if (depth >= max_levels) return false;
        if (object) {
          in_object |= std::uint64_t{1} << depth;
          first_key[depth] = open_keys;
        } else {
          in_object &= ~(std::uint64_t{1} << depth);
        }
        ++depth;
        ++p;
        skip_ws();
        if (p != end && *p == (object ? '}' : ']')) {
          ++p;
          --depth;
          break;  // An empty container is a complete value.
        }
        if (object) {
          if (p == end || *p != '"' || !key()) return false;
          skip_ws();
          if (p == end || *p != ':') return false;
          ++p;
          skip_ws();
        }
        continue;  // Its first value.
      }
      case '"':
        scalar_ok = string();
        break;
      case 't':
        scalar_ok = literal("true");
        break;
      case 'f':
        scalar_ok = literal("false");
        break;
      case 'n':
        scalar_ok = literal("null");
        break;
      default:
        scalar_ok = number();
        break;
    }
    if (!scalar_ok) return false;
    // After a complete value: close containers, or go on to the next value.
    for (;;) {
      skip_ws();
      if (depth == 0) return p == end;
      if (p == end) return false;
      const bool object = (in_object >> (depth - 1)) & 1;
      if (*p == (object ? '}' : ']')) {
        ++p;
        if (object) open_keys = first_key[depth - 1];
        --depth;
        continue;
      }
      if (*p != ',') return false;
      ++p;
      skip_ws();
      if (object) {
        if (p == end || *p != '"' || !key()) return false;
        skip_ws();
        if (p == end || *p != ':') return false;
        ++p;
        skip_ws();
      }
      break;  // The next value.
    }
  }
}

// True if `text` is valid JSON nested at most `max_levels` deep with no key
// repeated within an object: exactly when ParseBounded would report
// syntax_ok and neither too_deep nor duplicate_keys. It runs the same parser
// without building a value, so validating a well-formed payload costs a
// scan; callers that need the error messages fall back to ParseBounded and
// FindDuplicateKeys when it returns false.
bool IsValidBounded(std::string_view text, int max_levels) {
  return IsCertainlyValidJson(text, max_levels) || IsValidBoundedByParser(text, max_levels);
}

bool IsValidBoundedByParser(std::string_view text, int max_levels) {
  ShapeCheckSax sax("", max_levels, /*stop_at_first=*/true);
  try {
    return Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                           /*strict=*/true, /*ignore_comments=*/false) &&
           !sax.too_deep() && sax.duplicates().empty();
  } catch (const std::exception&) {  // Let ParseBounded report it.
    return false;
  }
}

std::string DumpCompact(const Json& value) {
  // `replace` rather than the default `strict`: a string that is not valid
  // UTF-8 (possible in an Envelope built in C++) must not make dump() throw.
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace internal
}  // namespace jobpact
