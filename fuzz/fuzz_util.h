// Helpers shared by the libFuzzer targets in this directory (not part of
// any library): a check that aborts, so that libFuzzer records a broken
// invariant as a crash and saves its input, and the one input format of the
// stored-record targets.
#ifndef JOBPACT_FUZZ_FUZZ_UTIL_H_
#define JOBPACT_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Aborts with `what` when `cond` is false. Not assert(): the fuzz build may
// define NDEBUG, and a broken invariant must never pass silently.
#define JOBPACT_FUZZ_CHECK(cond, what)                                                   \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "JOBPACT_FUZZ_CHECK failed: %s (%s:%d): %s\n", #cond, __FILE__, \
                   __LINE__, std::string(what).c_str());                                 \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace jobpact {
namespace fuzz {

// The input of the stored-record targets: fields separated by the byte
// 0x1E (ASCII "record separator"); a field that is exactly the byte 0x1F
// stands for NULL (SQL) or nil (Redis). The seeds in corpus/ are records
// the real encoders wrote, in this form (make_seeds.cc).
inline constexpr char kFieldSeparator = '\x1e';
inline constexpr char kNullField = '\x1f';

inline std::vector<std::optional<std::string>> SplitFields(const std::uint8_t* data,
                                                           std::size_t size) {
  std::vector<std::optional<std::string>> fields;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (true) {
    const std::size_t sep = in.find(kFieldSeparator);
    const std::string_view field = in.substr(0, sep);
    if (field.size() == 1 && field[0] == kNullField) {
      fields.emplace_back(std::nullopt);
    } else {
      fields.emplace_back(std::string(field));
    }
    if (sep == std::string_view::npos) break;
    in.remove_prefix(sep + 1);
  }
  return fields;
}

inline std::string JoinFields(const std::vector<std::optional<std::string>>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += kFieldSeparator;
    out += fields[i] ? *fields[i] : std::string(1, kNullField);
  }
  return out;
}

}  // namespace fuzz
}  // namespace jobpact

#endif  // JOBPACT_FUZZ_FUZZ_UTIL_H_
