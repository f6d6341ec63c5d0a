// The job envelope (SPEC 1): parsing, validation, serialisation, enqueue
// preparation, job ids and RFC 3339 times. The depth-bounded JSON parsing
// and the duplicate-key check are in bounded_json.cc.
//
// Error handling: nlohmann_json reports problems by throwing; every call into
// it is made inside this file and caught here, so nothing escapes the public
// functions (house style: Status/Result, never exceptions).
#include "jobpact/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/bounded_json.h"
#include "src/core/envelope_fast.h"
#include "src/internal/names.h"
#include "src/internal/stored_validation.h"
#include "src/internal/ulid.h"

namespace jobpact {
namespace {

using internal::BoundedParse;
using internal::DumpCompact;
using internal::FindDuplicateKeys;
using internal::IsValidBounded;
using internal::Json;
using internal::kMaxPayloadDepth;
using internal::ParseBounded;
using internal::Quote;
using internal::StripJsonExceptionPrefix;

constexpr int kMinPriority = -1000;
constexpr int kMaxPriority = 1000;

// Durations in seconds are bounded to about 100 years so that converting them
// to Duration (64-bit nanoseconds, about 292 years) can never overflow.
constexpr double kMaxAbsSeconds = 3155760000.0;

constexpr std::int64_t kNanosPerSecond = 1000000000;
constexpr std::int64_t kSecondsPerDay = 86400;

// --- Small text helpers -------------------------------------------------------

// A character for an error message: 'x' when printable, else "byte 0xNN".
std::string DescribeChar(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  if (c > 0x20 && c < 0x7F) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("byte 0x{:02X}", c);
}

// Seconds the way a person writes them: "30", "0.25", "-3".
std::string FormatSecondsValue(Duration d) { return fmt::format("{}", ToSeconds(d)); }

// --- Civil date arithmetic ----------------------------------------------------
//
// Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian),
// so that no locale- or TZ-dependent libc call (timegm, gmtime) is involved.

std::int64_t DaysFromCivil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

struct CivilDate {
  std::int64_t year;
  unsigned month;
  unsigned day;
};

CivilDate CivilFromDays(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2 ? 1 : 0), m, d};
}

bool IsLeapYear(int y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

unsigned DaysInMonth(int y, int m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeapYear(y) ? 29 : kDays[m - 1];
}

std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// --- Validation ---------------------------------------------------------------

// The character sets are those of src/internal/names.h, shared with the
// backends and the runner.
using internal::IsKeyChar;
using internal::IsSafeNameChar;

void CheckLength(std::string_view field, std::string_view value, std::size_t max_length,
                 std::vector<FieldError>* out) {
  if (value.size() > max_length) {
    out->push_back({std::string(field), fmt::format("is {} characters long, over the limit of {}",
                                                    value.size(), max_length)});
  }
}

// job_type and queue: [A-Za-z0-9._:-]+, bounded. Finds and reports what
// is wrong (CheckSafeName below is the entry point).
void ReportSafeName(std::string_view field, std::string_view value,
                    const ValidationOptions& options, bool check_chars,
                    std::vector<FieldError>* out) {
  if (value.empty()) {
    out->push_back({std::string(field), "is required and must not be empty"});
    return;
  }
  CheckLength(field, value, options.max_name_length, out);
  if (!check_chars) return;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!IsSafeNameChar(value[i])) {
      out->push_back({std::string(field),
                      fmt::format("contains {} at offset {}; allowed characters are A-Z a-z 0-9 "
                                  "and . _ : -",
                                  DescribeChar(value[i]), i)});
      return;
    }
  }
}

// True if every byte of `value` IsKeyChar (0x21-0x7E), tested eight bytes at
// a time: keys and ids are checked at every enqueue and delivery, by the
// runner and again by the store (engine::CheckStorable). False is exact too;
// ReportKey then finds the offending byte one by one.
inline bool AllKeyChars(std::string_view value) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
  std::size_t i = 0;
  for (; i + 8 <= value.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, value.data() + i, 8);
    // Some byte < 0x21 (borrows into its high bit; bytes >= 0x80 excluded
    // by ~w), or > 0x7E (0x7F + 1 and every byte >= 0x80 have it set). A
    // borrow or carry only crosses a byte that is itself out of range.
    const std::uint64_t below = (w - kOnes * 0x21) & ~w & kHigh;
    const std::uint64_t above = ((w + kOnes * (0x7F - 0x7E)) | w) & kHigh;
    if ((below | above) != 0) return false;
  }
  for (; i < value.size(); ++i) {
    if (!IsKeyChar(value[i])) return false;
  }
  return true;
}

// Optional keys and ids: empty, or printable ASCII without whitespace, bounded.
void ReportKey(std::string_view field, std::string_view value, const ValidationOptions& options,
               bool check_chars, std::vector<FieldError>* out) {
  CheckLength(field, value, options.max_name_length, out);
  if (!check_chars || AllKeyChars(value)) return;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!IsKeyChar(value[i])) {
      out->push_back(
          {std::string(field),
           fmt::format("contains {} at offset {}; only printable ASCII without whitespace is "
                       "allowed",
                       DescribeChar(value[i]), i)});
      return;
    }
  }
}

// The common case of every envelope, inline (IsSafeNameChar as a table): eight names and keys are
// checked per validation, three validations per job (the runner's at
// enqueue, the store's, the runner's bounds at delivery), and a name within
// its bound with the allowed bytes adds nothing. Anything else goes to the
// Report functions, which check again and describe the problem.
inline bool AllSafeNameChars(std::string_view value) {
  static const std::array<bool, 256> kSafe = [] {
    std::array<bool, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = IsSafeNameChar(static_cast<char>(c));
    return t;
  }();
  bool all_safe = true;
  for (const char c : value) all_safe &= kSafe[static_cast<unsigned char>(c)];
  return all_safe;
}
inline void CheckSafeName(std::string_view field, std::string_view value,
                          const ValidationOptions& options, bool check_chars,
                          std::vector<FieldError>* out) {
  if (!value.empty() && value.size() <= options.max_name_length &&
      (!check_chars || AllSafeNameChars(value))) {
    return;
  }
  ReportSafeName(field, value, options, check_chars, out);
}
inline void CheckKey(std::string_view field, std::string_view value,
                     const ValidationOptions& options, bool check_chars,
                     std::vector<FieldError>* out) {
  if (value.size() <= options.max_name_length && (!check_chars || AllKeyChars(value))) return;
  ReportKey(field, value, options, check_chars, out);
}

void CheckPositive(std::string_view field, Duration d, std::vector<FieldError>* out) {
  if (d <= Duration::zero()) {
    out->push_back({std::string(field), fmt::format("must be > 0, got {}", FormatSecondsValue(d))});
  }
}

void CheckBackoff(const BackoffSpec& spec, std::vector<FieldError>* out) {
  // Each field is checked here so that every problem is reported under its
  // own name; ValidateBackoff (which stops at the first) stays the authority
  // for anything these checks do not cover.
  const std::size_t before = out->size();
  if (spec.base_delay < Duration::zero()) {  // 0: an immediate retry.
    out->push_back({"retry_policy.base_delay_seconds",
                    fmt::format("must be >= 0, got {}", FormatSecondsValue(spec.base_delay))});
  }
  if (spec.max_delay < spec.base_delay) {
    out->push_back({"retry_policy.max_delay_seconds",
                    fmt::format("must be >= base_delay_seconds ({}), got {}",
                                FormatSecondsValue(spec.base_delay),
                                FormatSecondsValue(spec.max_delay))});
  }
  if (!(spec.multiplier >= 1.0) || std::isinf(spec.multiplier)) {  // `!(>=)` also refuses NaN.
    out->push_back(
        {"retry_policy.multiplier", fmt::format("must be finite and >= 1, got {}", spec.multiplier)});
  }
  if (out->size() != before) return;
  const Status status = ValidateBackoff(spec);
  if (status.ok()) return;
  // ValidateBackoff names its field first ("retry_policy.jitter is not ...").
  std::string_view message = status.message();
  std::string field = "retry_policy";
  if (message.rfind("retry_policy.", 0) == 0) {
    const std::size_t space = message.find(' ');
    if (space != std::string_view::npos) {
      field = std::string(message.substr(0, space));
      message.remove_prefix(space + 1);
    }
  }
  out->push_back({field, std::string(message)});
}

// Which rules ValidateInto applies beyond the bounds (sizes, lengths,
// timeouts, priority, backoff), which it always applies.
struct Checks {
  bool payload_syntax = true;  // The payload is JSON within the depth bound.
  bool characters = true;      // Names and keys are in their character sets.
};

void ValidateInto(const Envelope& env, const ValidationOptions& options, Checks checks,
                  std::vector<FieldError>* out) {
  const bool chars = checks.characters;
  const bool check_payload_syntax = checks.payload_syntax;
  CheckKey("job_id", env.job_id, options, chars, out);
  CheckSafeName("job_type", env.job_type, options, chars, out);
  CheckKey("tenant_id", env.tenant_id, options, chars, out);

  if (env.payload.size() > options.max_payload_bytes) {
    out->push_back({"payload", fmt::format("is {} bytes, over the limit of {} bytes",
                                           env.payload.size(), options.max_payload_bytes)});
  } else if (check_payload_syntax && !IsValidBounded(env.payload, kMaxPayloadDepth)) {
    // The slow path only for a payload with a problem, to describe it.
    Json ignored;
    const BoundedParse parsed = ParseBounded(env.payload, kMaxPayloadDepth, &ignored);
    if (parsed.too_deep) {
      out->push_back({"payload", fmt::format("is nested deeper than {} levels", kMaxPayloadDepth)});
    }
    if (!parsed.syntax_ok) {
      out->push_back({"payload", "is not valid JSON: " + parsed.syntax_error});
    } else if (parsed.duplicate_keys) {
      for (FieldError& e : FindDuplicateKeys(env.payload, "payload", kMaxPayloadDepth)) {
        out->push_back(std::move(e));
      }
    }
  }

  CheckKey("idempotency_key", env.idempotency_key, options, chars, out);
  if (env.attempt < 0) {
    out->push_back({"attempt", fmt::format("must be >= 0, got {}", env.attempt)});
  }
  // 0 means "not given" in the struct (the job type's policy decides); a
  // value given in JSON is checked by ParseEnvelope, which refuses 0 too.
  if (env.max_attempts < 0) {
    out->push_back({"max_attempts", fmt::format("must be >= 1, got {}", env.max_attempts)});
  }
  CheckKey("trace_id", env.trace_id, options, chars, out);
  CheckPositive("timeout_seconds", env.timeout, out);
  CheckPositive("visibility_timeout_seconds", env.visibility_timeout, out);
  if (env.timeout > Duration::zero() && env.visibility_timeout > Duration::zero() &&
      env.visibility_timeout <= env.timeout + options.visibility_buffer) {
    // SPEC 5: the lease must outlast the handler plus the time to ack and
    // commit, or a second worker takes over a job that is about to succeed.
    out->push_back(
        {"visibility_timeout_seconds",
         fmt::format("must be > timeout_seconds + buffer ({} + {} = {}), got {}",
                     FormatSecondsValue(env.timeout), FormatSecondsValue(options.visibility_buffer),
                     FormatSecondsValue(env.timeout + options.visibility_buffer),
                     FormatSecondsValue(env.visibility_timeout))});
  }
  CheckKey("lock_key", env.lock_key, options, chars, out);
  CheckKey("dedup_key", env.dedup_key, options, chars, out);
  if (env.retry_policy) CheckBackoff(*env.retry_policy, out);
  if (env.ttl) {
    CheckPositive("ttl_seconds", *env.ttl, out);
    if (env.expires_at) {
      out->push_back({"ttl_seconds", "must not be given together with expires_at"});
    }
  }
  CheckSafeName("queue", env.queue, options, chars, out);
  if (env.priority < kMinPriority || env.priority > kMaxPriority) {
    out->push_back({"priority", fmt::format("must be within [{}, {}], got {}", kMinPriority,
                                            kMaxPriority, env.priority)});
  }
}

// --- Reading an envelope from a parsed document -------------------------------

// Reads typed fields of one JSON object into C++ values, recording a
// FieldError per problem. JSON null counts as absent for optional fields.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string prefix, std::vector<FieldError>* errors,
              std::set<std::string>* failed)
      : object_(object), prefix_(std::move(prefix)), errors_(errors), failed_(failed) {}

  // The value of `key`, or nullptr when absent, null, or already reported
  // (e.g. discarded for being nested too deep).
  const Json* Find(const char* key) const {
    if (!failed_->empty() && failed_->count(Name(key)) != 0) return nullptr;
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool Has(const char* key) const { return object_.contains(key); }

  void Error(const char* key, std::string message) {
    std::string name = Name(key);
    failed_->insert(name);
    errors_->push_back({std::move(name), std::move(message)});
  }

  void TypeError(const char* key, std::string_view expected, const Json& got) {
    Error(key, fmt::format("must be {}, got {}", expected, got.type_name()));
  }

  void String(const char* key, std::string* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) return TypeError(key, "a string", *v);
    *out = v->get_ref<const std::string&>();
  }

  // True if a value was read into `*out`; false if absent, null or reported
  // (the caller then adds no rule of its own on top of the one problem).
  bool Int(const char* key, int* out) {
    const Json* v = Find(key);
    if (v == nullptr) return false;
    constexpr auto kMin = std::numeric_limits<int>::min();
    constexpr auto kMax = std::numeric_limits<int>::max();
    if (v->is_number_unsigned()) {
      const auto n = v->get<std::uint64_t>();
      if (n <= static_cast<std::uint64_t>(kMax)) {
        *out = static_cast<int>(n);
        return true;
      }
    } else if (v->is_number_integer()) {
      const auto n = v->get<std::int64_t>();
      if (n >= kMin && n <= kMax) {
        *out = static_cast<int>(n);
        return true;
      }
    } else if (v->is_number_float()) {
      // 5.0 is accepted as 5: some JSON encoders write every number as a float.
      const auto d = v->get<double>();
      if (d == std::trunc(d) && d >= kMin && d <= kMax) {
        *out = static_cast<int>(d);
        return true;
      }
      if (d != std::trunc(d)) {
        Error(key, fmt::format("must be an integer, got {}", d));
        return false;
      }
    } else {
      TypeError(key, "an integer", *v);
      return false;
    }
    Error(key, fmt::format("must be an integer within [{}, {}], got {}", kMin, kMax, v->dump()));
    return false;
  }

  void Number(const char* key, double* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number()) return TypeError(key, "a number", *v);
    *out = v->get<double>();
  }

  // Whole or fractional seconds.
  void Seconds(const char* key, Duration* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number()) return TypeError(key, "a number of seconds", *v);
    const auto s = v->get<double>();
    if (!(std::fabs(s) <= kMaxAbsSeconds)) {
      return Error(key, fmt::format("must be within +/-{} seconds, got {}", kMaxAbsSeconds, s));
    }
    if (v->is_number_integer()) {
      *out = std::chrono::duration_cast<Duration>(std::chrono::seconds(v->get<std::int64_t>()));
    } else {
      // Rounded, not truncated: 0.3 s is 299999999.99999994 ns as a double.
      *out = std::chrono::round<Duration>(std::chrono::duration<double>(s));
    }
  }

  void OptionalSeconds(const char* key, std::optional<Duration>* out) {
    if (Find(key) == nullptr) return;
    Duration d{};
    const std::size_t before = errors_->size();
    Seconds(key, &d);
    if (errors_->size() == before) *out = d;
  }

  void Time(const char* key, std::optional<TimePoint>* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) return TypeError(key, "an RFC 3339 time string", *v);
    Result<TimePoint> t = ParseRfc3339(v->get_ref<const std::string&>());
    if (!t.ok()) return Error(key, t.status().message());
    *out = *t;
  }

 private:
  std::string Name(const char* key) const { return prefix_ + key; }

  const Json& object_;
  const std::string prefix_;
  std::vector<FieldError>* const errors_;
  std::set<std::string>* const failed_;
};

void ReadRetryPolicy(FieldReader& top, const Json& object, std::vector<FieldError>* errors,
                     std::set<std::string>* failed, Envelope* env) {
  if (!object.is_object()) return top.TypeError("retry_policy", "an object", object);
  BackoffSpec spec;
  FieldReader r(object, "retry_policy.", errors, failed);
  if (const Json* v = r.Find("backoff")) {
    if (!v->is_string()) {
      r.TypeError("backoff", "a string", *v);
    } else if (Result<BackoffKind> kind = ParseBackoffKind(v->get_ref<const std::string&>());
               kind.ok()) {
      spec.kind = *kind;
    } else {
      r.Error("backoff", fmt::format("unknown backoff {}; expected fixed, exponential or "
                                     "decorrelated",
                                     Quote(v->get_ref<const std::string&>())));
    }
  }
  r.Seconds("base_delay_seconds", &spec.base_delay);
  r.Seconds("max_delay_seconds", &spec.max_delay);
  r.Number("multiplier", &spec.multiplier);
  if (const Json* v = r.Find("jitter")) {
    // The SPEC's reference example writes `"jitter": true`: a boolean means
    // full jitter or none; the other kinds need their names.
    if (v->is_boolean()) {
      spec.jitter = v->get<bool>() ? JitterKind::kFull : JitterKind::kNone;
    } else if (!v->is_string()) {
      r.TypeError("jitter", "a boolean or a string", *v);
    } else if (Result<JitterKind> kind = ParseJitterKind(v->get_ref<const std::string&>());
               kind.ok()) {
      spec.jitter = *kind;
    } else {
      r.Error("jitter", fmt::format("unknown jitter {}; expected none, full, equal, decorrelated, "
                                    "true or false",
                                    Quote(v->get_ref<const std::string&>())));
    }
  }
  env->retry_policy = spec;
}

// Fills `env` from `text`, appending every problem to `errors`.
void ParseInto(std::string_view text, const ValidationOptions& options, Envelope* env,
               std::vector<FieldError>* errors) {
  Json doc;
  const BoundedParse parsed = ParseBounded(text, kMaxPayloadDepth + 1, &doc);
  std::set<std::string> failed;  // Fields already reported: no second error for them.
  if (parsed.too_deep) {
    if (parsed.too_deep_key.empty()) {
      errors->push_back({"$", fmt::format("is nested deeper than {} levels", kMaxPayloadDepth + 1)});
    } else {
      failed.insert(parsed.too_deep_key);
      errors->push_back(
          {parsed.too_deep_key, fmt::format("is nested deeper than {} levels", kMaxPayloadDepth)});
    }
  }
  if (!parsed.syntax_ok) {
    errors->push_back({"$", "malformed JSON: " + parsed.syntax_error});
    return;
  }
  if (!doc.is_object()) {
    if (!parsed.too_deep) {
      errors->push_back({"$", fmt::format("must be a JSON object, got {}", doc.type_name())});
    }
    return;
  }
  if (parsed.duplicate_keys) {
    // Anywhere: a top-level field, retry_policy, the payload, an unknown
    // field. A duplicated field is not read further, since which of its
    // values the producer meant is unknown.
    for (FieldError& e : FindDuplicateKeys(text, "", kMaxPayloadDepth + 1)) {
      failed.insert(e.field);
      errors->push_back(std::move(e));
    }
  }

  FieldReader r(doc, "", errors, &failed);
  r.String("job_id", &env->job_id);
  if (!r.Has("job_type")) {
    r.Error("job_type", "is required");
  } else {
    r.String("job_type", &env->job_type);  // null or "": ValidateInto reports it.
  }
  r.String("tenant_id", &env->tenant_id);
  if (!r.Has("payload")) {
    r.Error("payload", "is required");
  } else if (failed.count("payload") == 0) {
    // Any JSON value, kept as compact text; null is a value here, not absence.
    env->payload = DumpCompact(doc["payload"]);
  }
  r.String("idempotency_key", &env->idempotency_key);
  r.Int("attempt", &env->attempt);
  // 0 in the struct means "not given", so a given 0 is refused here. Only a
  // value that was read is checked: one Int already reported (2.5, 1e20, "5")
  // left the field at 0 and must not earn a second, spurious ">= 1" problem.
  if (r.Int("max_attempts", &env->max_attempts) && env->max_attempts == 0) {
    r.Error("max_attempts", "must be >= 1, got 0");
  }
  r.Time("scheduled_at", &env->scheduled_at);
  r.Time("created_at", &env->created_at);
  r.String("trace_id", &env->trace_id);
  r.Seconds("timeout_seconds", &env->timeout);
  r.Seconds("visibility_timeout_seconds", &env->visibility_timeout);
  r.String("lock_key", &env->lock_key);
  r.String("dedup_key", &env->dedup_key);
  if (const Json* v = r.Find("retry_policy")) ReadRetryPolicy(r, *v, errors, &failed, env);
  r.Time("expires_at", &env->expires_at);
  r.OptionalSeconds("ttl_seconds", &env->ttl);
  r.Time("start_by", &env->start_by);
  r.Time("deadline", &env->deadline);
  r.String("queue", &env->queue);
  r.Int("priority", &env->priority);

  // A rule over two fields must not judge the default standing in for a
  // value that could not be read (that field is reported already): a zero
  // duration skips the timeout / visibility-timeout rule, and its own
  // "must be > 0" is filtered out below with the field.
  if (failed.count("timeout_seconds") != 0) env->timeout = Duration::zero();
  if (failed.count("visibility_timeout_seconds") != 0) env->visibility_timeout = Duration::zero();

  // The payload was just produced by dump(), so only its size needs checking.
  std::vector<FieldError> rule_errors;
  ValidateInto(*env, options, Checks{/*payload_syntax=*/false, /*characters=*/true}, &rule_errors);
  for (FieldError& e : rule_errors) {
    if (failed.count(e.field) == 0) errors->push_back(std::move(e));
  }
}

// Durations as JSON seconds: an integer when whole, so that "30" stays 30.
Json SecondsJson(Duration d) {
  if (d % std::chrono::seconds(1) == Duration::zero()) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
  }
  return ToSeconds(d);
}

Json NumberJson(double x) {
  if (x == std::trunc(x) && std::fabs(x) < 1e15) return static_cast<std::int64_t>(x);
  return x;
}

}  // namespace

std::vector<FieldError> ValidateEnvelope(const Envelope& env, const ValidationOptions& options) {
  std::vector<FieldError> errors;
  try {
    ValidateInto(env, options, Checks{}, &errors);
  } catch (const std::exception& e) {  // Allocation failure: report, do not throw.
    errors.push_back({"$", std::string("validation failed: ") + e.what()});
  }
  return errors;
}

namespace internal {

std::vector<FieldError> ValidateStoredEnvelopeBounds(const Envelope& env,
                                                     const ValidationOptions& options) {
  std::vector<FieldError> errors;
  try {
    ValidateInto(env, options, Checks{/*payload_syntax=*/false, /*characters=*/false}, &errors);
  } catch (const std::exception& e) {
    errors.push_back({"$", std::string("validation failed: ") + e.what()});
  }
  return errors;
}

}  // namespace internal

Result<Envelope> ParseEnvelope(std::string_view json, const ValidationOptions& options,
                               std::vector<FieldError>* errors) {
  // The stored form first (envelope_fast.h); anything else, and anything
  // with a problem to report, through the parser.
  try {
    Envelope env;
    if (internal::ParseCanonicalEnvelope(json, &env)) {
      std::vector<FieldError> rule_errors;
      ValidateInto(env, options, Checks{/*payload_syntax=*/false, /*characters=*/true},
                   &rule_errors);
      if (rule_errors.empty()) return env;
    }
  } catch (const std::exception&) {  // Allocation failure: the parser path reports it.
  }
  return internal::ParseEnvelopeByParser(json, options, errors);
}

namespace internal {

Result<Envelope> ParseEnvelopeByParser(std::string_view json, const ValidationOptions& options,
                                       std::vector<FieldError>* errors) {
  Envelope env;
  std::vector<FieldError> problems;
  try {
    ParseInto(json, options, &env, &problems);
  } catch (const std::exception& e) {
    problems.push_back({"$", std::string("could not be parsed: ") + e.what()});
  }
  if (problems.empty()) return env;
  std::string message = "invalid envelope: ";
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (i > 0) message += "; ";
    message += problems[i].field;
    message += ": ";
    message += problems[i].message;
  }
  if (errors != nullptr) {
    errors->insert(errors->end(), std::make_move_iterator(problems.begin()),
                   std::make_move_iterator(problems.end()));
  }
  return Status::InvalidArgument(std::move(message));
}

}  // namespace internal

std::string SerializeEnvelope(const Envelope& env) {
  std::string out;
  if (internal::SerializeCanonicalEnvelope(env, &out)) return out;
  return internal::SerializeEnvelopeByJson(env);
}

namespace internal {

std::string SerializeEnvelopeByJson(const Envelope& env) {
  Json j = Json::object();
  if (!env.job_id.empty()) j["job_id"] = env.job_id;
  j["job_type"] = env.job_type;
  if (!env.tenant_id.empty()) j["tenant_id"] = env.tenant_id;
  Json payload;
  const BoundedParse parsed = ParseBounded(env.payload, kMaxPayloadDepth, &payload);
  if (parsed.syntax_ok && !parsed.too_deep && !parsed.duplicate_keys) {
    j["payload"] = std::move(payload);
  } else {
    // Kept, as a string, for whoever inspects it: re-encoding a payload with
    // a duplicate key would drop all but its last value.
    j["payload"] = env.payload;
  }
  if (!env.idempotency_key.empty()) j["idempotency_key"] = env.idempotency_key;
  j["attempt"] = env.attempt;
  if (env.max_attempts > 0) j["max_attempts"] = env.max_attempts;
  if (env.scheduled_at) j["scheduled_at"] = FormatRfc3339(*env.scheduled_at);
  if (env.created_at) j["created_at"] = FormatRfc3339(*env.created_at);
  if (!env.trace_id.empty()) j["trace_id"] = env.trace_id;
  j["timeout_seconds"] = SecondsJson(env.timeout);
  j["visibility_timeout_seconds"] = SecondsJson(env.visibility_timeout);
  if (!env.lock_key.empty()) j["lock_key"] = env.lock_key;
  if (!env.dedup_key.empty()) j["dedup_key"] = env.dedup_key;
  if (env.retry_policy) {
    const BackoffSpec& spec = *env.retry_policy;
    Json rp = Json::object();
    rp["backoff"] = std::string(BackoffKindName(spec.kind));
    rp["base_delay_seconds"] = SecondsJson(spec.base_delay);
    rp["max_delay_seconds"] = SecondsJson(spec.max_delay);
    rp["multiplier"] = NumberJson(spec.multiplier);
    // Booleans for full/none, as the SPEC's reference example writes them.
    switch (spec.jitter) {
      case JitterKind::kFull:
        rp["jitter"] = true;
        break;
      case JitterKind::kNone:
        rp["jitter"] = false;
        break;
      default:
        rp["jitter"] = std::string(JitterKindName(spec.jitter));
        break;
    }
    j["retry_policy"] = std::move(rp);
  }
  if (env.expires_at) j["expires_at"] = FormatRfc3339(*env.expires_at);
  if (env.ttl) j["ttl_seconds"] = SecondsJson(*env.ttl);
  if (env.start_by) j["start_by"] = FormatRfc3339(*env.start_by);
  if (env.deadline) j["deadline"] = FormatRfc3339(*env.deadline);
  j["queue"] = env.queue;
  j["priority"] = env.priority;
  return DumpCompact(j);
}

}  // namespace internal

void PrepareForEnqueue(Envelope& env, TimePoint now) {
  if (env.job_id.empty()) env.job_id = NewJobId(now);
  if (!env.created_at) env.created_at = now;
  if (env.ttl) {
    env.expires_at = now + *env.ttl;
    env.ttl.reset();
  }
  env.attempt = 0;  // A producer's value is never trusted (SPEC 1).
}

std::string NewJobId(TimePoint now) {
  // Never destroyed, so that ids can still be made during static destruction.
  static internal::UlidGenerator* const generator = new internal::UlidGenerator();
  std::string id;
  id.reserve(4 + internal::kUlidLength);  // No reallocation when the ULID is appended.
  id += "job_";
  generator->AppendTo(now, &id);
  return id;
}

std::string FormatRfc3339(TimePoint t) {
  const std::int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::int64_t secs = FloorDiv(ns, kNanosPerSecond);
  std::int64_t frac = ns - secs * kNanosPerSecond;  // [0, 1e9)
  const std::int64_t days = FloorDiv(secs, kSecondsPerDay);
  const std::int64_t sod = secs - days * kSecondsPerDay;
  const CivilDate date = CivilFromDays(days);

  // Written by hand: this runs for every time field of every envelope
  // serialised, and fmt::format costs several times more here.
  char buf[32];  // "YYYY-MM-DDThh:mm:ss.nnnnnnnnnZ" is 30 characters.
  auto put = [](char* p, std::int64_t value, int width) {
    for (int i = width - 1; i >= 0; --i, value /= 10) p[i] = static_cast<char>('0' + value % 10);
  };
  put(buf, date.year, 4);  // TimePoint's range keeps the year within 1677..2262.
  buf[4] = '-';
  put(buf + 5, date.month, 2);
  buf[7] = '-';
  put(buf + 8, date.day, 2);
  buf[10] = 'T';
  put(buf + 11, sod / 3600, 2);
  buf[13] = ':';
  put(buf + 14, sod / 60 % 60, 2);
  buf[16] = ':';
  put(buf + 17, sod % 60, 2);
  std::size_t len = 19;
  if (frac != 0) {
    // The fewest of 3, 6 or 9 digits that are exact, so parsing gives back
    // the same time point.
    int digits = 9;
    while (digits > 3 && frac % 1000 == 0) {
      frac /= 1000;
      digits -= 3;
    }
    buf[len++] = '.';
    put(buf + len, frac, digits);
    len += static_cast<std::size_t>(digits);
  }
  buf[len++] = 'Z';
  return std::string(buf, len);
}

Result<TimePoint> ParseRfc3339(std::string_view text) {
  auto fail = [&](const std::string& why) -> Status {
    return Status::InvalidArgument(
        fmt::format("{} is not an RFC 3339 time: {}", Quote(text), why));
  };
  std::size_t i = 0;
  auto digits = [&](std::size_t n, int* out) {
    if (text.size() - i < n) return false;
    int value = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char c = text[i + k];
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    i += n;
    *out = value;
    return true;
  };
  auto expect = [&](char c) {
    if (i < text.size() && text[i] == c) {
      ++i;
      return true;
    }
    return false;
  };

  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digits(4, &year) || !expect('-') || !digits(2, &month) || !expect('-') ||
      !digits(2, &day)) {
    return fail("expected a date YYYY-MM-DD at the start");
  }
  if (i >= text.size() || (text[i] != 'T' && text[i] != 't')) {
    return fail(fmt::format("expected 'T' between date and time at offset {}", i));
  }
  ++i;
  if (!digits(2, &hour) || !expect(':') || !digits(2, &minute) || !expect(':') ||
      !digits(2, &second)) {
    return fail("expected a time hh:mm:ss after 'T'");
  }
  std::int64_t nanos = 0;
  if (expect('.')) {
    int n = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (++n > 9) return fail("more than 9 fractional digits");
      nanos = nanos * 10 + (text[i] - '0');
      ++i;
    }
    if (n == 0) return fail(fmt::format("expected digits after '.' at offset {}", i));
    for (; n < 9; ++n) nanos *= 10;
  }
  int offset_seconds = 0;
  if (expect('Z') || expect('z')) {
    // UTC.
  } else if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    const int sign = text[i] == '-' ? -1 : 1;
    ++i;
    int oh = 0, om = 0;
    if (!digits(2, &oh) || !expect(':') || !digits(2, &om)) {
      return fail("expected an offset +hh:mm or -hh:mm");
    }
    if (oh > 23 || om > 59) return fail(fmt::format("offset {:02}:{:02} is out of range", oh, om));
    offset_seconds = sign * (oh * 3600 + om * 60);
  } else {
    return fail(fmt::format("expected 'Z' or an offset +hh:mm or -hh:mm at offset {}", i));
  }
  if (i != text.size()) return fail(fmt::format("unexpected text at offset {}", i));

  if (month < 1 || month > 12) return fail(fmt::format("month {:02} is out of range 01-12", month));
  if (day < 1 || static_cast<unsigned>(day) > DaysInMonth(year, month)) {
    return fail(fmt::format("day {:02} does not exist in {:04}-{:02}", day, year, month));
  }
  if (hour > 23) return fail(fmt::format("hour {:02} is out of range 00-23", hour));
  if (minute > 59) return fail(fmt::format("minute {:02} is out of range 00-59", minute));
  if (second == 60) return fail("leap second 60 is not supported");
  if (second > 59) return fail(fmt::format("second {:02} is out of range 00-59", second));

  const std::int64_t secs = DaysFromCivil(year, static_cast<unsigned>(month),
                                          static_cast<unsigned>(day)) *
                                kSecondsPerDay +
                            hour * 3600 + minute * 60 + second - offset_seconds;
  // TimePoint counts 64-bit nanoseconds on common platforms: 1677..2262.
  const std::int64_t max_secs =
      std::chrono::duration_cast<std::chrono::seconds>(Duration::max()).count() - 1;
  if (secs > max_secs || secs < -max_secs) {
    return fail("outside the range this platform's clock can represent");
  }
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::seconds(secs)) +
                   std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(nanos)));
}

}  // namespace jobpact
