// RedisKeys: the key layout and the checks of every name put into a key.
#include "src/backends/redis/keys.h"

#include <cstdio>
#include <string>
#include <utility>

#include "src/internal/checks.h"
#include "src/internal/names.h"

namespace jobpact {
namespace redis_internal {
namespace {

// `s` for an error message: control characters and bytes >= 0x7F as \xNN,
// at most 80 characters of it.
std::string Printable(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > 80) out += "...";
  return out + "\"";
}

std::string CharAt(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ') return "a space";
  if (c == 0) return "a NUL byte";
  if (c == '\n') return "a newline";
  if (c < 0x20 || c == 0x7F) return "a control character";
  if (c >= 0x80) return "a non-ASCII byte";
  return std::string("'") + static_cast<char>(c) + "'";
}

Status Invalid(std::string msg) { return Status::InvalidArgument("redis: " + std::move(msg)); }

}  // namespace

Status RedisKeys::CheckNamespace(std::string_view ns) {
  if (ns.empty()) return Invalid("the key namespace is empty");
  if (ns.size() > kMaxNamespaceLength) {
    return Invalid("the key namespace " + Printable(ns) + " is " + std::to_string(ns.size()) +
                   " characters long (at most " + std::to_string(kMaxNamespaceLength) + ")");
  }
  for (std::size_t i = 0; i < ns.size(); ++i) {
    if (!internal::IsSafeNameChar(ns[i])) {
      return Invalid("the key namespace " + Printable(ns) + " holds " + CharAt(ns, i) +
                     " at offset " + std::to_string(i) +
                     " (allowed: letters, digits and _ - . :; no braces, which would change "
                     "the Redis Cluster hash tag)");
    }
  }
  return Status::Ok();
}

Status RedisKeys::CheckName(std::string_view what, std::string_view name) {
  if (name.empty()) return Invalid(std::string(what) + " is empty");
  if (name.size() > kMaxNameLength) {
    return Invalid(std::string(what) + " " + Printable(name) + " is " +
                   std::to_string(name.size()) + " bytes long (at most " +
                   std::to_string(kMaxNameLength) + ")");
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!internal::IsSafeNameChar(name[i])) {
      return Invalid(std::string(what) + " " + Printable(name) + " holds " + CharAt(name, i) +
                     " at offset " + std::to_string(i) + " (allowed: letters, digits and _ - . :)");
    }
  }
  return Status::Ok();
}

Status RedisKeys::CheckKey(std::string_view what, std::string_view key) {
  if (key.empty()) return Invalid(std::string(what) + " is empty");
  if (key.size() > kMaxNameLength) {
    return Invalid(std::string(what) + " " + Printable(key) + " is " + std::to_string(key.size()) +
                   " bytes long (at most " + std::to_string(kMaxNameLength) + ")");
  }
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (!internal::IsKeyChar(key[i])) {
      return Invalid(std::string(what) + " " + Printable(key) + " holds " + CharAt(key, i) +
                     " at offset " + std::to_string(i) +
                     " (allowed: printable ASCII without spaces)");
    }
  }
  return Status::Ok();
}

Result<RedisKeys> RedisKeys::Create(std::string_view key_namespace) {
  JOBPACT_RETURN_IF_ERROR(CheckNamespace(key_namespace));
  return RedisKeys(std::string(key_namespace));
}

RedisKeys::RedisKeys(std::string ns)
    : namespace_(std::move(ns)), prefix_("jobpact:{" + namespace_ + "}:") {}

std::string RedisKeys::Fixed(std::string_view kind) const {
  std::string k = prefix_;
  k += kind;
  return k;
}

Result<std::string> RedisKeys::Named(std::string_view kind, std::string_view what,
                                     std::string_view name) const {
  JOBPACT_RETURN_IF_ERROR(CheckName(what, name));
  std::string k = prefix_;
  k.append(kind).append(":").append(name);
  return k;
}

Result<std::string> RedisKeys::Keyed(std::string_view kind, std::string_view what,
                                     std::string_view key) const {
  JOBPACT_RETURN_IF_ERROR(CheckKey(what, key));
  std::string k = prefix_;
  k.append(kind).append(":").append(key);
  return k;
}

Result<std::string> RedisKeys::Job(std::string_view job_id) const {
  return Named("job", "job id", job_id);
}
Result<std::string> RedisKeys::Queue(std::string_view queue) const {
  return Named("queue", "queue name", queue);
}
Result<std::string> RedisKeys::Lock(std::string_view lock_key) const {
  return Keyed("lock", "lock key", lock_key);
}
Result<std::string> RedisKeys::Idempotency(std::string_view key) const {
  return Keyed("idem", "idempotency key", key);
}
Result<std::string> RedisKeys::Dedup(std::string_view dedup_key) const {
  return Keyed("dedup", "dedup key", dedup_key);
}
Result<std::string> RedisKeys::RateLimit(std::string_view rate_key) const {
  return Named("rate", "rate limit key", rate_key);
}

Result<std::string> RedisKeys::Cache(std::string_view op, std::string_view cache_key) const {
  JOBPACT_RETURN_IF_ERROR(internal::CheckCacheKey(op, cache_key));
  return CacheKeyPrefix().append(cache_key);
}

}  // namespace redis_internal
}  // namespace jobpact
