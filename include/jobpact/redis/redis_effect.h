// File: jobpact/redis/redis_effect.h
//
// The Redis form of the transactional effect (Completion::
// transactional_effect, SPEC 6): on the Redis backend the effect's `native`
// handle is a RedisEffect*. The effect does not talk to Redis itself; it
// lists a few writes, and the completion script applies them in the same
// atomic step as the ack, after the lease check. So the writes happen if
// and only if the job completes: a stale lease, a refused transition or an
// effect that returns an error writes none of them.
//
// The keys are the application's own, inside the backend's namespace:
// key "orders:42" is the Redis key "jobpact:{<namespace>}:app:orders:42"
// (KeyOf), so an effect can never touch the queue's records, another
// namespace, or a key of another Redis Cluster slot.
//
// Example:
//   jobpact::Completion done;
//   done.transactional_effect = [](void* native) -> jobpact::Status {
//     auto* fx = static_cast<jobpact::redis::RedisEffect*>(native);
//     JOBPACT_RETURN_IF_ERROR(fx->IncrBy("invoices:issued", 1));
//     return fx->Set("invoice:ord_987", "issued");
//   };
//
// What can go wrong, and what then happens:
//   - a bad key (empty, longer than kMaxKeyLength, a space or a control
//     character) or too many writes: the method returns kInvalidArgument
//     and the completion fails with it (nothing is written), even if the
//     effect ignores the returned Status;
//   - a write that cannot apply on the server (INCRBY of a key that holds
//     a list or a non-integer): the script checks every write before it
//     writes anything, and the completion fails with kFailedPrecondition;
//   - a key set with a TTL expires on the Redis server's own clock (the
//     one place where jobpact time is not the injected Clock's).
//
// Not thread-safe (one effect fills it, on the completing thread).
#ifndef JOBPACT_REDIS_REDIS_EFFECT_H_
#define JOBPACT_REDIS_REDIS_EFFECT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/status.h"

namespace jobpact {
namespace redis {

class JOBPACT_EXPORT RedisEffect {
 public:
  static constexpr std::size_t kMaxKeyLength = 512;
  static constexpr std::size_t kMaxWrites = 64;

  // One listed write: the command (set, del, pexpire, incrby, hset,
  // hincrby, sadd, srem, rpush), the full key and up to two arguments.
  struct Write {
    std::string op;
    std::string key;
    std::string arg1;
    std::string arg2;
  };

  // Made by the backend for each completion: `key_prefix` is the
  // namespace's application area ("jobpact:{<ns>}:app:").
  explicit RedisEffect(std::string key_prefix);

  // SET key value [PX ttl] (ttl zero or less: no expiry).
  Status Set(std::string_view key, std::string_view value, Duration ttl = Duration::zero());
  // INCRBY key by.
  Status IncrBy(std::string_view key, long long by = 1);
  Status Del(std::string_view key);
  // PEXPIRE key ttl. REQUIRES: ttl > 0.
  Status PExpire(std::string_view key, Duration ttl);
  Status HSet(std::string_view key, std::string_view field, std::string_view value);
  Status HIncrBy(std::string_view key, std::string_view field, long long by = 1);
  Status SAdd(std::string_view key, std::string_view member);
  Status SRem(std::string_view key, std::string_view member);
  Status RPush(std::string_view key, std::string_view value);

  // The Redis key an effect key names (for reading it back elsewhere).
  std::string KeyOf(std::string_view key) const;

  // The writes listed, in order.
  const std::vector<Write>& writes() const { return writes_; }
  // OK, or the first refusal (a refused effect writes nothing).
  const Status& status() const { return status_; }

 private:
  Status Add(std::string_view op, std::string_view key, std::string arg1, std::string arg2);

  std::string prefix_;
  std::vector<Write> writes_;
  Status status_;
};

}  // namespace redis
}  // namespace jobpact

#endif  // JOBPACT_REDIS_REDIS_EFFECT_H_
