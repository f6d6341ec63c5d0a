// RedisKeys (src/backends/redis/keys.h): the layout, one hash tag per
// namespace, and the checks that keep input from addressing another
// namespace or another kind of key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "jobpact/testing/matchers.h"
#include "src/backends/redis/keys.h"

namespace jobpact {
namespace redis_internal {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::HasSubstr;

// The Redis Cluster hash tag of a key: the part between the first '{' and
// the first '}' after it, if not empty; else the whole key.
std::string HashTag(const std::string& key) {
  const std::size_t open = key.find('{');
  if (open == std::string::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

RedisKeys MustCreate(const std::string& ns) {
  Result<RedisKeys> k = RedisKeys::Create(ns);
  EXPECT_THAT(k, IsOk()) << ns;
  return k.ok() ? *k : *RedisKeys::Create("x");
}

TEST(RedisKeysTest, EveryKeyOfANamespaceCarriesItsOneHashTag) {
  const RedisKeys keys = MustCreate("orders-v2.prod:eu");
  EXPECT_EQ(keys.prefix(), "jobpact:{orders-v2.prod:eu}:");
  const std::vector<Result<std::string>> named = {
      keys.Job("job_01HXYZ"),       keys.Queue("default"),
      keys.Lock("order:{ord_987}"), keys.Idempotency("invoice.generate:}{x"),
      keys.Dedup("a{b}c:d"),        keys.Named("type", "job type", "invoice.generate"),
      keys.RateLimit("dependency:payments-api")};
  for (const auto& k : named) {
    ASSERT_THAT(k, IsOk());
    EXPECT_EQ(HashTag(*k), "orders-v2.prod:eu") << *k;
  }
  for (const std::string& k : {keys.LockFence(), keys.LockIndex(), keys.IdempotencyIndex(),
                               keys.Control(), keys.ControlAudit(), keys.Policies(),
                               keys.RateLimitIndex()}) {
    EXPECT_EQ(HashTag(k), "orders-v2.prod:eu") << k;
  }
  EXPECT_EQ(*keys.Job("j1"), "jobpact:{orders-v2.prod:eu}:job:j1");
  EXPECT_EQ(*keys.Lock("order:1"), "jobpact:{orders-v2.prod:eu}:lock:order:1");
  EXPECT_EQ(*keys.Idempotency("k"), "jobpact:{orders-v2.prod:eu}:idem:k");
  EXPECT_EQ(keys.LockFence(), "jobpact:{orders-v2.prod:eu}:lock-fence");
  EXPECT_EQ(*keys.RateLimit("type:mail.send"), "jobpact:{orders-v2.prod:eu}:rate:type:mail.send");
  EXPECT_EQ(keys.RateLimitKeyPrefix() + "type:mail.send", *keys.RateLimit("type:mail.send"));
  EXPECT_EQ(keys.RateLimitIndex(), "jobpact:{orders-v2.prod:eu}:rate-keys");
}

TEST(RedisKeysTest, NamesCannotReachAnotherNamespaceOrKind) {
  const RedisKeys a = MustCreate("a");
  const RedisKeys b = MustCreate("b");
  // Whatever a lock key holds, its key stays a lock of namespace "a".
  for (const std::string evil : {"}:lock:x", "x}:{b}:lock:y", "{b}", ":{b}:idem:k", "../b"}) {
    Result<std::string> k = a.Lock(evil);
    ASSERT_THAT(k, IsOk()) << evil;
    EXPECT_EQ(HashTag(*k), "a") << *k;
    EXPECT_EQ(k->rfind(a.prefix() + "lock:", 0), 0u) << *k;
    EXPECT_NE(*k, *b.Lock("y"));
  }
  // A name can never equal a fixed key, or a key of another kind.
  EXPECT_NE(*a.Lock("fence"), a.LockFence());
  EXPECT_NE(*a.Named("lock", "x", "s"), *a.Named("locks", "x", "s"));
  EXPECT_NE(a.LockIndex(), *a.Lock("s"));
}

TEST(RedisKeysTest, BadNamespacesAreRefusedWithTheReason) {
  EXPECT_THAT(RedisKeys::Create(""), StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(RedisKeys::Create("a{b"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("holds '{' at offset 1")));
  EXPECT_THAT(RedisKeys::Create("a}b"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("holds '}' at offset 1")));
  EXPECT_THAT(RedisKeys::Create("a b"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a space at offset 1")));
  EXPECT_THAT(RedisKeys::Create("a\nb"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a newline at offset 1")));
  EXPECT_THAT(RedisKeys::Create(std::string("a\0b", 3)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a NUL byte at offset 1")));
  EXPECT_THAT(RedisKeys::Create("caf\xC3\xA9"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a non-ASCII byte")));
  EXPECT_THAT(RedisKeys::Create("*"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("'*'")));
  EXPECT_THAT(RedisKeys::Create(std::string(65, 'n')),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("65 characters long (at most 64)")));
  EXPECT_THAT(RedisKeys::Create(std::string(64, 'n')), IsOk());
  EXPECT_THAT(RedisKeys::Create("A-Z_a.z:0-9"), IsOk());
}

TEST(RedisKeysTest, NamesAndKeysAreChecked) {
  const RedisKeys k = MustCreate("ns");
  EXPECT_THAT(k.Job(""), StatusIs(StatusCode::kInvalidArgument, HasSubstr("job id is empty")));
  EXPECT_THAT(k.Job("a{b}"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("job id \"a{b}\" holds '{'")));
  EXPECT_THAT(k.Queue("q\r\nDEL x"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("queue name \"q\\x0D\\x0ADEL x\"")));
  EXPECT_THAT(k.Queue("a b"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("a space")));
  EXPECT_THAT(k.Lock("a b"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("lock key")));
  EXPECT_THAT(k.Lock(std::string("a\0", 2)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a NUL byte at offset 1")));
  EXPECT_THAT(k.Idempotency("x\ty"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a control character")));
  EXPECT_THAT(k.Dedup(std::string(1025, 'k')),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("1025 bytes long (at most 1024)")));
  EXPECT_THAT(k.Dedup(std::string(1024, 'k')), IsOk());
  EXPECT_THAT(k.Idempotency("\x7F"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("\\x7F")));
  // Keys may hold braces and colons (harmless after the tag); names may not hold braces.
  EXPECT_THAT(k.Lock("order:{1}"), IsOk());
  EXPECT_THAT(k.Job("job:1.a-b_c"), IsOk());
  // Rate limit keys are safe names: no braces.
  EXPECT_THAT(k.RateLimit("type:a{b}"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("rate limit key")));
}

}  // namespace
}  // namespace redis_internal
}  // namespace jobpact
