#include "src/core/envelope_fast.h"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "src/core/bounded_json.h"

namespace jobpact {
namespace internal {
namespace {

// The seconds a duration field may hold (job.cc's bound for every
// duration: 100 years).
constexpr std::int64_t kMaxWholeSeconds = 3155760000;

// A canonical integer at the start of `t`: -?(0|[1-9][0-9]*), not "-0", at
// most `max_digits` digits. Its length (0: not one), its value in `*value`.
std::size_t CanonicalInteger(std::string_view t, int max_digits, std::int64_t* value) {
  std::size_t i = 0;
  const bool negative = i < t.size() && t[i] == '-';
  if (negative) ++i;
  const std::size_t first = i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  const std::size_t digits = i - first;
  if (digits == 0 || digits > static_cast<std::size_t>(max_digits)) return 0;
  if (t[first] == '0' && (digits > 1 || negative)) return 0;  // 01, -0.
  // A fraction or an exponent: a double, which the dump may write otherwise.
  if (i < t.size() && (t[i] == '.' || t[i] == 'e' || t[i] == 'E')) return 0;
  std::int64_t v = 0;
  std::from_chars(t.data() + first, t.data() + i, v);
  *value = negative ? -v : v;
  return i;
}

// A canonical string at the start of `t` (which is '"'): its length with
// both quotes (0: not one). `plain`: only printable ASCII without escapes,
// whose text is then its value; otherwise also UTF-8 bytes and the escapes
// the dump writes (whose validity IsCertainlyValidJson then checks).
std::size_t CanonicalString(std::string_view t, bool plain) {
  std::size_t i = 1;
  while (i < t.size()) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c == '"') return i + 1;
    if (c == '\\') {
      if (plain || i + 1 >= t.size()) return 0;
      switch (t[i + 1]) {
        case '"': case '\\': case 'b': case 'f': case 'n': case 'r': case 't':
          i += 2;
          continue;
        default:
          return 0;  // \/ and \u: the dump writes those characters otherwise.
      }
    }
    if (c < 0x20 || c == 0x7F || (plain && c > 0x7F)) return 0;
    ++i;
  }
  return 0;
}

// The length of the canonical compact JSON value at the start of `t` (0:
// not one). Checks the form only; validity (UTF-8, depth, repeated keys)
// is IsCertainlyValidJson's.
std::size_t CanonicalValueLength(std::string_view t) {
  std::uint64_t in_object = 0;  // Bit d: the container at depth d + 1 is an object.
  int depth = 0;
  std::size_t p = 0;
  auto key = [&]() -> bool {
    if (p >= t.size() || t[p] != '"') return false;
    const std::size_t n = CanonicalString(t.substr(p), false);
    if (n == 0) return false;
    p += n;
    if (p >= t.size() || t[p] != ':') return false;
    ++p;
    return true;
  };
  for (;;) {
    if (p >= t.size()) return 0;
    const char c = t[p];
    if (c == '{' || c == '[') {
      if (depth >= kMaxPayloadDepth) return 0;
      const bool object = c == '{';
      if (object) {
        in_object |= std::uint64_t{1} << depth;
      } else {
        in_object &= ~(std::uint64_t{1} << depth);
      }
      ++depth;
      ++p;
      if (p < t.size() && t[p] == (object ? '}' : ']')) {
        ++p;
        --depth;
      } else {
        if (object && !key()) return 0;
        continue;  // Its first value.
      }
    } else if (c == '"') {
      const std::size_t n = CanonicalString(t.substr(p), false);
      if (n == 0) return 0;
      p += n;
    } else if (c == 't' || c == 'f' || c == 'n') {
      const std::string_view word = c == 't' ? "true" : c == 'f' ? "false" : "null";
      if (t.substr(p, word.size()) != word) return 0;
      p += word.size();
    } else {
      std::int64_t ignored = 0;
      const std::size_t n = CanonicalInteger(t.substr(p), 18, &ignored);
      if (n == 0) return 0;
      p += n;
    }
    // After a complete value: close containers, or go on to the next value.
    for (;;) {
      if (depth == 0) return p;
      if (p >= t.size()) return 0;
      const bool object = (in_object >> (depth - 1)) & 1;
      if (t[p] == (object ? '}' : ']')) {
        ++p;
        --depth;
        continue;
      }
      if (t[p] != ',') return 0;
      ++p;
      if (object && !key()) return 0;
      break;
    }
  }
}

// The envelope's fields, one bit each, to refuse a repeated one.
enum Field : std::uint32_t {
  kJobId = 1u << 0,
  kJobType = 1u << 1,
  kTenantId = 1u << 2,
  kPayload = 1u << 3,
  kIdempotencyKey = 1u << 4,
  kAttempt = 1u << 5,
  kMaxAttempts = 1u << 6,
  kScheduledAt = 1u << 7,
  kCreatedAt = 1u << 8,
  kTraceId = 1u << 9,
  kTimeout = 1u << 10,
  kVisibilityTimeout = 1u << 11,
  kLockKey = 1u << 12,
  kDedupKey = 1u << 13,
  kExpiresAt = 1u << 14,
  kTtl = 1u << 15,
  kStartBy = 1u << 16,
  kDeadline = 1u << 17,
  kQueue = 1u << 18,
  kPriority = 1u << 19,
};

enum class Kind { kString, kInt, kSeconds, kTime, kPayload };

struct FieldSpec {
  std::string_view name;
  Field bit;
  Kind kind;
};

constexpr FieldSpec kFields[] = {
    {"job_id", kJobId, Kind::kString},
    {"job_type", kJobType, Kind::kString},
    {"tenant_id", kTenantId, Kind::kString},
    {"payload", kPayload, Kind::kPayload},
    {"idempotency_key", kIdempotencyKey, Kind::kString},
    {"attempt", kAttempt, Kind::kInt},
    {"max_attempts", kMaxAttempts, Kind::kInt},
    {"scheduled_at", kScheduledAt, Kind::kTime},
    {"created_at", kCreatedAt, Kind::kTime},
    {"trace_id", kTraceId, Kind::kString},
    {"timeout_seconds", kTimeout, Kind::kSeconds},
    {"visibility_timeout_seconds", kVisibilityTimeout, Kind::kSeconds},
    {"lock_key", kLockKey, Kind::kString},
    {"dedup_key", kDedupKey, Kind::kString},
    {"expires_at", kExpiresAt, Kind::kTime},
    {"ttl_seconds", kTtl, Kind::kSeconds},
    {"start_by", kStartBy, Kind::kTime},
    {"deadline", kDeadline, Kind::kTime},
    {"queue", kQueue, Kind::kString},
    {"priority", kPriority, Kind::kInt},
};

std::string* StringField(Field f, Envelope* env) {
  switch (f) {
    case kJobId: return &env->job_id;
    case kJobType: return &env->job_type;
    case kTenantId: return &env->tenant_id;
    case kIdempotencyKey: return &env->idempotency_key;
    case kTraceId: return &env->trace_id;
    case kLockKey: return &env->lock_key;
    case kDedupKey: return &env->dedup_key;
    default: return &env->queue;
  }
}

std::optional<TimePoint>* TimeField(Field f, Envelope* env) {
  switch (f) {
    case kScheduledAt: return &env->scheduled_at;
    case kCreatedAt: return &env->created_at;
    case kExpiresAt: return &env->expires_at;
    case kStartBy: return &env->start_by;
    default: return &env->deadline;
  }
}

bool IsPlain(std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') return false;
  }
  return true;
}

void AppendInt(std::string* out, std::int64_t v) {
  char digits[24];
  out->append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
}

}  // namespace

bool IsCanonicalJson(std::string_view text) {
  return !text.empty() && CanonicalValueLength(text) == text.size() &&
         IsCertainlyValidJson(text, kMaxPayloadDepth);
}

bool ParseCanonicalEnvelope(std::string_view text, Envelope* out) {
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') return false;
  Envelope env;
  std::uint32_t seen = 0;
  std::size_t p = 1;
  if (text[p] == '}') return false;  // No job_type, no payload: the parser reports it.
  for (;;) {
    // A key.
    if (text[p] != '"') return false;
    const std::size_t kn = CanonicalString(text.substr(p), true);
    if (kn == 0 || p + kn >= text.size() || text[p + kn] != ':') return false;
    const std::string_view key = text.substr(p + 1, kn - 2);
    p += kn + 1;
    const FieldSpec* spec = nullptr;
    for (const FieldSpec& f : kFields) {
      if (f.name == key) {
        spec = &f;
        break;
      }
    }
    if (spec == nullptr || (seen & spec->bit) != 0) return false;  // Unknown or repeated.
    seen |= spec->bit;
    // Its value.
    const std::string_view rest = text.substr(p, text.size() - 1 - p);
    std::size_t n = 0;
    switch (spec->kind) {
      case Kind::kString:
      case Kind::kTime: {
        if (rest.empty() || rest.front() != '"') return false;
        n = CanonicalString(rest, true);
        if (n == 0) return false;
        const std::string_view value = rest.substr(1, n - 2);
        if (spec->kind == Kind::kString) {
          StringField(spec->bit, &env)->assign(value.data(), value.size());
        } else {
          Result<TimePoint> t = ParseRfc3339(value);
          if (!t.ok()) return false;
          *TimeField(spec->bit, &env) = *t;
        }
        break;
      }
      case Kind::kInt: {
        std::int64_t v = 0;
        n = CanonicalInteger(rest, 9, &v);
        if (n == 0) return false;
        if (spec->bit == kAttempt) {
          env.attempt = static_cast<int>(v);
        } else if (spec->bit == kMaxAttempts) {
          if (v == 0) return false;  // The parser's "must be >= 1".
          env.max_attempts = static_cast<int>(v);
        } else {
          env.priority = static_cast<int>(v);
        }
        break;
      }
      case Kind::kSeconds: {
        std::int64_t v = 0;
        n = CanonicalInteger(rest, 12, &v);
        if (n == 0 || v > kMaxWholeSeconds || v < -kMaxWholeSeconds) return false;
        const Duration d = std::chrono::seconds(v);
        if (spec->bit == kTimeout) {
          env.timeout = d;
        } else if (spec->bit == kVisibilityTimeout) {
          env.visibility_timeout = d;
        } else {
          env.ttl = d;
        }
        break;
      }
      case Kind::kPayload: {
        n = CanonicalValueLength(rest);
        if (n == 0 || !IsCertainlyValidJson(rest.substr(0, n), kMaxPayloadDepth)) return false;
        env.payload.assign(rest.data(), n);
        break;
      }
    }
    p += n;
    if (p == text.size() - 1) break;  // The closing brace.
    if (text[p] != ',') return false;
    ++p;
  }
  if ((seen & kJobType) == 0 || (seen & kPayload) == 0) return false;
  *out = std::move(env);
  return true;
}

bool SerializeCanonicalEnvelope(const Envelope& env, std::string* out) {
  if (env.retry_policy) return false;
  if (!IsCanonicalJson(env.payload)) return false;
  for (const std::string* s : {&env.job_id, &env.job_type, &env.tenant_id, &env.idempotency_key,
                               &env.trace_id, &env.lock_key, &env.dedup_key, &env.queue}) {
    if (!IsPlain(*s)) return false;
  }
  for (const Duration* d : {&env.timeout, &env.visibility_timeout}) {
    if (*d % std::chrono::seconds(1) != Duration::zero()) return false;
  }
  if (env.ttl && *env.ttl % std::chrono::seconds(1) != Duration::zero()) return false;

  std::string& o = *out;
  o.clear();
  o.reserve(env.payload.size() + 256);
  bool first = true;
  auto key = [&](std::string_view name) {
    o += first ? "{\"" : ",\"";
    first = false;
    o += name;
    o += "\":";
  };
  auto string = [&](std::string_view name, const std::string& value) {
    key(name);
    o += '"';
    o += value;
    o += '"';
  };
  auto time = [&](std::string_view name, const std::optional<TimePoint>& t) {
    if (t) string(name, FormatRfc3339(*t));
  };
  auto seconds = [&](std::string_view name, Duration d) {
    key(name);
    AppendInt(&o, std::chrono::duration_cast<std::chrono::seconds>(d).count());
  };
  if (!env.job_id.empty()) string("job_id", env.job_id);
  string("job_type", env.job_type);
  if (!env.tenant_id.empty()) string("tenant_id", env.tenant_id);
  key("payload");
  o += env.payload;
  if (!env.idempotency_key.empty()) string("idempotency_key", env.idempotency_key);
  key("attempt");
  AppendInt(&o, env.attempt);
  if (env.max_attempts > 0) {
    key("max_attempts");
    AppendInt(&o, env.max_attempts);
  }
  time("scheduled_at", env.scheduled_at);
  time("created_at", env.created_at);
  if (!env.trace_id.empty()) string("trace_id", env.trace_id);
  seconds("timeout_seconds", env.timeout);
  seconds("visibility_timeout_seconds", env.visibility_timeout);
  if (!env.lock_key.empty()) string("lock_key", env.lock_key);
  if (!env.dedup_key.empty()) string("dedup_key", env.dedup_key);
  time("expires_at", env.expires_at);
  if (env.ttl) seconds("ttl_seconds", *env.ttl);
  time("start_by", env.start_by);
  time("deadline", env.deadline);
  string("queue", env.queue);
  key("priority");
  AppendInt(&o, env.priority);
  o += '}';
  return true;
}

}  // namespace internal
}  // namespace jobpact
