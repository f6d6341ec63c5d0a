// RedisEffect (jobpact/redis/redis_effect.h): the writes a transactional
// effect lists for the completion script.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "jobpact/redis/redis_effect.h"

namespace jobpact {
namespace redis {

RedisEffect::RedisEffect(std::string key_prefix) : prefix_(std::move(key_prefix)) {}

std::string RedisEffect::KeyOf(std::string_view key) const {
  std::string k = prefix_;
  k += key;
  return k;
}

Status RedisEffect::Add(std::string_view op, std::string_view key, std::string arg1,
                        std::string arg2) {
  if (!status_.ok()) return status_;
  Status s;
  if (key.empty() || key.size() > kMaxKeyLength) {
    s = Status::InvalidArgument("RedisEffect::" + std::string(op) + ": a key must have 1 to " +
                                std::to_string(kMaxKeyLength) + " characters, not " +
                                std::to_string(key.size()));
  } else if (!std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7F; })) {
    s = Status::InvalidArgument("RedisEffect::" + std::string(op) + ": key '" + std::string(key) +
                                "' has a space, a control character or a non-ASCII byte");
  } else if (writes_.size() >= kMaxWrites) {
    s = Status::InvalidArgument("RedisEffect: more than " + std::to_string(kMaxWrites) +
                                " writes in one effect");
  }
  if (!s.ok()) {
    status_ = s;
    return s;
  }
  writes_.push_back(Write{std::string(op), KeyOf(key), std::move(arg1), std::move(arg2)});
  return Status::Ok();
}

Status RedisEffect::Set(std::string_view key, std::string_view value, Duration ttl) {
  const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count();
  return Add("set", key, std::string(value), ms > 0 ? std::to_string(ms) : std::string());
}

Status RedisEffect::IncrBy(std::string_view key, long long by) {
  return Add("incrby", key, std::to_string(by), {});
}

Status RedisEffect::Del(std::string_view key) { return Add("del", key, {}, {}); }

Status RedisEffect::PExpire(std::string_view key, Duration ttl) {
  const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count();
  if (ms <= 0) {
    if (status_.ok()) status_ = Status::InvalidArgument("RedisEffect::PExpire: ttl must be >= 1 ms");
    return status_;
  }
  return Add("pexpire", key, std::to_string(ms), {});
}

Status RedisEffect::HSet(std::string_view key, std::string_view field, std::string_view value) {
  return Add("hset", key, std::string(field), std::string(value));
}

Status RedisEffect::HIncrBy(std::string_view key, std::string_view field, long long by) {
  return Add("hincrby", key, std::string(field), std::to_string(by));
}

Status RedisEffect::SAdd(std::string_view key, std::string_view member) {
  return Add("sadd", key, std::string(member), {});
}

Status RedisEffect::SRem(std::string_view key, std::string_view member) {
  return Add("srem", key, std::string(member), {});
}

Status RedisEffect::RPush(std::string_view key, std::string_view value) {
  return Add("rpush", key, std::string(value), {});
}

}  // namespace redis
}  // namespace jobpact
