// RedisBackend and its stores, beyond the conformance suites: namespaces
// isolate, two handles (processes) on one namespace share locks, the
// fencing counter and rate limiters, rate limiters count in microseconds,
// keys carry a garbage-collection TTL, bad names are refused, cache keys
// never leave their namespace and expired cache entries are collected, and
// a server that goes away gives kUnavailable.
#include "jobpact/redis/redis_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "tests/backends/redis/redis_test_server.h"
#include "tests/support/durable_runner_cases.h"

namespace jobpact {
namespace redis {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::ManualClock;
using ::jobpact::testing::StatusIs;
using redis_internal::RedisClient;
using redis_internal::Reply;
using ::testing::HasSubstr;

class RedisBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JOBPACT_REDIS_URL_OR_SKIP(url);
    clock_ = std::make_shared<ManualClock>();
    options_ = redis_testing::TestOptions();
    backend_ = MustOpen(options_);
    ASSERT_NE(backend_, nullptr);
    auto c = RedisClient::Connect(options_);
    ASSERT_THAT(c, IsOk());
    raw_ = *c;
  }

  std::shared_ptr<RedisBackend> MustOpen(const RedisOptions& o) {
    Result<std::shared_ptr<RedisBackend>> b = RedisBackend::Open(o, clock_);
    EXPECT_THAT(b, IsOk());
    return b.ok() ? *b : nullptr;
  }

  // Leaves nothing behind on a shared server: the test's namespace and any
  // other it used.
  void TearDown() override {
    if (!raw_) return;
    extra_namespaces_.push_back(options_.key_namespace);
    for (const std::string& ns : extra_namespaces_) {
      Result<Reply> keys = raw_->Command({"KEYS", "jobpact:{" + ns + "}:*"});
      if (keys.ok() && !keys->elements.empty()) {
        std::vector<std::string> del = {"DEL"};
        for (const Reply& k : keys->elements) del.push_back(k.str);
        (void)raw_->Command(del);
      }
    }
  }

  std::string Prefix() const { return "jobpact:{" + options_.key_namespace + "}:"; }

  std::shared_ptr<ManualClock> clock_;
  RedisOptions options_;
  std::shared_ptr<RedisBackend> backend_;
  std::shared_ptr<RedisClient> raw_;
  std::vector<std::string> extra_namespaces_;
};

TEST_F(RedisBackendTest, BundleNamesTheBackendAndItsUrl) {
  BackendBundle b = backend_->bundle();
  EXPECT_EQ(b.name, "redis");
  EXPECT_NE(b.locks, nullptr);
  EXPECT_EQ(b.url, backend_->url());
  EXPECT_THAT(b.url, HasSubstr("namespace=" + options_.key_namespace));
  EXPECT_EQ(b.url.rfind("redis://", 0), 0u) << b.url;
  // What url() prints opens the same place.
  Result<RedisOptions> back = ParseRedisUrl(b.url);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->host, options_.host);
  EXPECT_EQ(back->port, options_.port);
  EXPECT_EQ(back->database, options_.database);
  EXPECT_EQ(back->key_namespace, options_.key_namespace);
}

TEST(RedisBackendAclTest, AclUserAuthenticatesAndTheUrlNamesItWithoutThePassword) {
  redis_testing::PrivateRedisServer server;
  std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  RedisOptions admin;
  admin.port = server.port();
  auto c = RedisClient::Connect(admin);
  ASSERT_THAT(c, IsOk());
  Result<Reply> r =
      (*c)->Command({"ACL", "SETUSER", "app.user/1", "on", ">p@ss/w:rd", "~*", "+@all"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->str, "OK") << r->str;
  r = (*c)->Command({"CONFIG", "SET", "requirepass", "default-secret"});
  ASSERT_THAT(r, IsOk());

  auto clock = std::make_shared<ManualClock>();
  Result<RedisOptions> o = ParseRedisUrl("redis://app.user%2F1:p%40ss%2Fw%3Ard@127.0.0.1:" +
                                         std::to_string(server.port()) + "/1?namespace=acl");
  ASSERT_THAT(o, IsOk());
  Result<std::shared_ptr<RedisBackend>> b = RedisBackend::Open(*o, clock);
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT((*b)->locks()->Acquire("k", "w", Seconds(5)), IsOk());
  const std::string url = (*b)->url();
  EXPECT_EQ(url,
            "redis://app.user%2F1@127.0.0.1:" + std::to_string(server.port()) + "/1?namespace=acl");
  EXPECT_THAT(url, ::testing::Not(HasSubstr("p%40ss")));
  EXPECT_THAT((*b)->bundle().url, ::testing::Not(HasSubstr("ss")));

  // The default user with its password; then a wrong one, and none.
  RedisOptions def;
  def.port = server.port();
  def.password = "default-secret";
  EXPECT_THAT(RedisBackend::Open(def, clock), IsOk());
  def.password = "wrong-secret";
  Result<std::shared_ptr<RedisBackend>> wrong = RedisBackend::Open(def, clock);
  EXPECT_THAT(wrong,
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("AUTH (password) refused")));
  EXPECT_THAT(wrong.status().message(), ::testing::Not(HasSubstr("wrong-secret")));
  def.password.clear();
  EXPECT_THAT(RedisBackend::Open(def, clock),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("requires a password")));
}

TEST_F(RedisBackendTest, OpenRefusesBadNamespaceAndNullClock) {
  RedisOptions bad = options_;
  bad.key_namespace = "a}{b";
  EXPECT_THAT(RedisBackend::Open(bad, clock_),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("key namespace")));
  EXPECT_THAT(RedisBackend::Open(options_, nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("clock")));
}

TEST_F(RedisBackendTest, NamespacesDoNotSeeEachOthersLocks) {
  RedisOptions other = options_;
  other.key_namespace = redis_testing::FreshNamespace();
  extra_namespaces_.push_back(other.key_namespace);
  std::shared_ptr<RedisBackend> b = MustOpen(other);
  ASSERT_NE(b, nullptr);
  ASSERT_THAT(backend_->locks()->Acquire("order:1", "w1", Seconds(30)), IsOk());
  // The same lock key in another namespace is another lock.
  EXPECT_THAT(b->locks()->Acquire("order:1", "w2", Seconds(30)), IsOk());
  Result<std::vector<LockLease>> mine = backend_->locks()->List(10);
  ASSERT_THAT(mine, IsOk());
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].owner, "w1");
  // A key trying to escape its namespace stays inside it.
  ASSERT_THAT(backend_->locks()->Acquire("}:lock:order:1", "w3", Seconds(30)), IsOk());
  Result<std::optional<LockLease>> theirs = b->locks()->Inspect("order:1");
  ASSERT_THAT(theirs, IsOk());
  ASSERT_TRUE(theirs->has_value());
  EXPECT_EQ((*theirs)->owner, "w2");
}

TEST_F(RedisBackendTest, TwoHandlesShareLocksAndOneFencingCounter) {
  std::shared_ptr<RedisBackend> second = MustOpen(options_);  // Another process, say.
  ASSERT_NE(second, nullptr);
  Result<LockLease> a = backend_->locks()->Acquire("k1", "w1", Seconds(30));
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(second->locks()->Acquire("k1", "w2", Seconds(30)),
              StatusIs(StatusCode::kAborted, HasSubstr("held by w1")));
  Result<LockLease> b = second->locks()->Acquire("k2", "w2", Seconds(30));
  ASSERT_THAT(b, IsOk());
  EXPECT_GT(b->fencing_token, a->fencing_token);
  EXPECT_THAT(second->locks()->Release("k1", "w1"), IsOk());
}

TEST_F(RedisBackendTest, ExpiryFollowsTheStoreClockAndKeysOnlyGetAGcTtl) {
  ASSERT_THAT(backend_->locks()->Acquire("k", "w1", Seconds(5)), IsOk());
  Result<Reply> ttl = raw_->Command({"PTTL", Prefix() + "lock:k"});
  ASSERT_THAT(ttl, IsOk());
  // Far longer than the lock's 5 s: Redis only collects garbage.
  EXPECT_GT(ttl->integer, 3600 * 1000);
  clock_->Advance(Seconds(5));
  Result<std::optional<LockLease>> gone = backend_->locks()->Inspect("k");
  ASSERT_THAT(gone, IsOk());
  EXPECT_FALSE(gone->has_value());
  EXPECT_THAT(backend_->locks()->Acquire("k", "w2", Seconds(5)), IsOk());
}

TEST_F(RedisBackendTest, BadLockKeysAreRefusedBeforeReachingRedis) {
  EXPECT_THAT(backend_->locks()->Acquire("a b", "w", Seconds(5)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("lock key")));
  EXPECT_THAT(backend_->locks()->Acquire(std::string("a\0b", 3), "w", Seconds(5)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("NUL")));
  EXPECT_THAT(backend_->locks()->Renew("a\nb", "w", Seconds(5)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("newline")));
  EXPECT_THAT(backend_->locks()->Release(std::string(2000, 'k'), "w"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("at most 1024")));
  Result<Reply> keys = raw_->Command({"KEYS", Prefix() + "*"});
  ASSERT_THAT(keys, IsOk());
  EXPECT_TRUE(keys->elements.empty());
}

TEST_F(RedisBackendTest, KeysChangedBehindTheStoresBackAreInternalErrors) {
  ASSERT_THAT(raw_->Command({"SET", Prefix() + "lock:k", "not a hash"}), IsOk());
  EXPECT_THAT(backend_->locks()->Acquire("k", "w", Seconds(5)),
              StatusIs(StatusCode::kInternal, HasSubstr("WRONGTYPE")));
}

TEST_F(RedisBackendTest, TwoHandlesShareARateLimiterAndItsBackoff) {
  std::shared_ptr<RedisBackend> second = MustOpen(options_);  // Another process, say.
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(backend_->bundle().rate_limits, backend_->rate_limits());
  const RateLimit two_per_second_burst_two{2, 2};
  EXPECT_TRUE(backend_->rate_limits()->Take("type:mail.send", two_per_second_burst_two)->allowed);
  EXPECT_TRUE(second->rate_limits()->Take("type:mail.send", two_per_second_burst_two)->allowed);
  Result<RateDecision> refused =
      backend_->rate_limits()->Take("type:mail.send", two_per_second_burst_two);
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->allowed) << "the burst was shared by both handles";
  EXPECT_EQ(refused->retry_at, clock_->Now() + Millis(500));
  // One process's backoff holds the other.
  ASSERT_THAT(second->rate_limits()->Backoff("dependency:psp", clock_->Now() + Seconds(60), "429"),
              IsOk());
  EXPECT_FALSE(backend_->rate_limits()->Take("dependency:psp", RateLimit{})->allowed);
  Result<std::vector<RateLimiterState>> listed = backend_->rate_limits()->List(10);
  ASSERT_THAT(listed, IsOk());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "dependency:psp");
  EXPECT_EQ((*listed)[1].key, "type:mail.send");
}

TEST_F(RedisBackendTest, RateLimitersCountInMicrosecondsAndABackoffNeverEndsEarly) {
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  const TimePoint t0 = clock_->Now();
  ASSERT_EQ(t0.time_since_epoch() % microseconds(1), Duration::zero());
  // A backoff ending 1.5 us on is kept as 2 us on: rounded up, never early.
  ASSERT_THAT(backend_->rate_limits()->Backoff("dependency:x", t0 + nanoseconds(1500), "429"),
              IsOk());
  Result<Reply> bu = raw_->Command({"HGET", Prefix() + "rate:dependency:x", "bu"});
  ASSERT_THAT(bu, IsOk());
  EXPECT_EQ(bu->str,
            std::to_string(std::chrono::duration_cast<microseconds>(t0.time_since_epoch()).count() +
                           2));
  clock_->SetTime(t0 + nanoseconds(1999));  // Counts as t0 + 1 us.
  Result<RateDecision> held = backend_->rate_limits()->Take("dependency:x", RateLimit{});
  ASSERT_THAT(held, IsOk());
  EXPECT_FALSE(held->allowed);
  EXPECT_EQ(held->retry_at, t0 + microseconds(2));
  clock_->SetTime(t0 + microseconds(2));
  EXPECT_TRUE(backend_->rate_limits()->Take("dependency:x", RateLimit{})->allowed);
  // 3 per second: an interval of round(1e6 / 3) = 333333 us.
  EXPECT_TRUE(backend_->rate_limits()->Take("type:t", RateLimit{3, 1})->allowed);
  Result<RateDecision> next = backend_->rate_limits()->Take("type:t", RateLimit{3, 1});
  ASSERT_THAT(next, IsOk());
  EXPECT_FALSE(next->allowed);
  EXPECT_EQ(next->retry_at, t0 + microseconds(2) + microseconds(333333));
}

TEST_F(RedisBackendTest, RateLimiterKeysChangedBehindTheStoresBackAreInternalErrors) {
  ASSERT_THAT(raw_->Command({"SET", Prefix() + "rate:type:t", "not a hash"}), IsOk());
  EXPECT_THAT(backend_->rate_limits()->Take("type:t", RateLimit{1, 1}).status(),
              StatusIs(StatusCode::kInternal, HasSubstr("WRONGTYPE")));
}

TEST_F(RedisBackendTest, IdempotencyClaimsAreSharedAndResultsBinarySafe) {
  std::shared_ptr<RedisBackend> second = MustOpen(options_);
  ASSERT_NE(second, nullptr);
  std::shared_ptr<IdempotencyStore> a = backend_->idempotency();
  std::shared_ptr<IdempotencyStore> b = second->idempotency();
  ASSERT_NE(a, nullptr);
  Result<ClaimOutcome> mine = a->Claim("inv:ord_1", "w1", Seconds(45));
  ASSERT_THAT(mine, IsOk());
  EXPECT_EQ(mine->kind, ClaimOutcome::Kind::kClaimed);
  Result<ClaimOutcome> theirs = b->Claim("inv:ord_1", "w2", Seconds(45));
  ASSERT_THAT(theirs, IsOk());
  EXPECT_EQ(theirs->kind, ClaimOutcome::Kind::kInProgress);
  EXPECT_EQ(theirs->record.owner, "w1");
  const std::string result = std::string("{\"pdf\":\"\0\xff\"}", 12) + std::string(100000, 'r');
  ASSERT_THAT(a->Complete("inv:ord_1", "w1", result, std::chrono::hours(24)), IsOk());
  Result<ClaimOutcome> done = b->Claim("inv:ord_1", "w2", Seconds(45));
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->kind, ClaimOutcome::Kind::kCompleted);
  EXPECT_EQ(done->record.result, result);
  EXPECT_EQ(done->record.expires_at, clock_->Now() + std::chrono::hours(24));
  // Kept by Redis past the retention (GC only), decided by the clock.
  Result<Reply> ttl = raw_->Command({"PTTL", Prefix() + "idem:inv:ord_1"});
  ASSERT_THAT(ttl, IsOk());
  EXPECT_GT(ttl->integer, 24LL * 3600 * 1000);
  EXPECT_THAT(b->Claim("bad key", "w", Seconds(5)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("idempotency key")));
}

TEST_F(RedisBackendTest, PurgeExpiredDeletesTheRecordsFromRedis) {
  std::shared_ptr<IdempotencyStore> idem = backend_->idempotency();
  ASSERT_THAT(idem->Claim("short", "w1", Seconds(10)), IsOk());
  ASSERT_THAT(idem->Claim("long", "w1", Seconds(100)), IsOk());
  clock_->Advance(Seconds(10));
  Result<int> purged = idem->PurgeExpired();
  ASSERT_THAT(purged, IsOk());
  EXPECT_EQ(*purged, 1);
  Result<Reply> exists = raw_->Command({"EXISTS", Prefix() + "idem:short", Prefix() + "idem:long"});
  ASSERT_THAT(exists, IsOk());
  EXPECT_EQ(exists->integer, 1);
  Result<Reply> indexed = raw_->Command({"ZCARD", Prefix() + "idem-index"});
  ASSERT_THAT(indexed, IsOk());
  EXPECT_EQ(indexed->integer, 1);
}

CacheEntry CacheEntryFor(const ManualClock& clock, std::string value, Duration life) {
  CacheEntry e;
  e.value = std::move(value);
  e.fresh_until = e.stale_until = e.error_until = clock.Now() + life;
  e.as_of = e.stored_at = clock.Now();
  return e;
}

TEST_F(RedisBackendTest, CacheEntriesStayInTheirNamespaceWhateverTheKey) {
  std::shared_ptr<CacheStore> cache = backend_->cache();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(backend_->bundle().cache, cache);
  RedisOptions other = options_;
  other.key_namespace = redis_testing::FreshNamespace();
  extra_namespaces_.push_back(other.key_namespace);
  std::shared_ptr<RedisBackend> b = MustOpen(other);
  ASSERT_NE(b, nullptr);
  ASSERT_THAT(b->cache()->Put("user:1", CacheEntryFor(*clock_, "theirs", Seconds(60))), IsOk());
  ASSERT_THAT(b->locks()->Acquire("order:1", "w2", Seconds(30)), IsOk());
  // Keys that look like other keys of the layout, or of the other namespace.
  const std::vector<std::string> tricky = {"}:lock:order:1",
                                           "{" + other.key_namespace + "}:cache:user:1",
                                           "jobpact:{" + other.key_namespace + "}:cache:user:1",
                                           "user:1"};
  for (const std::string& key : tricky) {
    ASSERT_THAT(cache->Put(key, CacheEntryFor(*clock_, "mine", Seconds(60))), IsOk()) << key;
  }
  Result<std::size_t> removed = cache->EraseByPrefix("user:");
  ASSERT_THAT(removed, IsOk());
  EXPECT_EQ(*removed, 1u);
  Result<std::optional<CacheEntry>> theirs = b->cache()->Get("user:1");
  ASSERT_THAT(theirs, IsOk());
  ASSERT_TRUE(theirs->has_value());
  EXPECT_EQ((*theirs)->value, "theirs");
  Result<std::optional<LockLease>> lock = b->locks()->Inspect("order:1");
  ASSERT_THAT(lock, IsOk());
  EXPECT_TRUE(lock->has_value());
  // Every key this store wrote is under "<prefix>cache" (entries and indexes).
  Result<Reply> keys = raw_->Command({"KEYS", Prefix() + "*"});
  ASSERT_THAT(keys, IsOk());
  EXPECT_EQ(keys->elements.size(), 3u + 2u);  // 3 entries, 2 indexes.
  for (const Reply& k : keys->elements) {
    EXPECT_EQ(k.str.rfind(Prefix() + "cache", 0), 0u) << k.str;
  }
}

TEST_F(RedisBackendTest, CacheEntriesGetAGcTtlAndPutsCollectExpiredOnes) {
  std::shared_ptr<CacheStore> cache = backend_->cache();
  ASSERT_THAT(cache->Put("short:1", CacheEntryFor(*clock_, "v", Seconds(5))), IsOk());
  ASSERT_THAT(cache->Put("short:2", CacheEntryFor(*clock_, "v", Seconds(5))), IsOk());
  Result<Reply> ttl = raw_->Command({"PTTL", Prefix() + "cache:short:1"});
  ASSERT_THAT(ttl, IsOk());
  // Far longer than the entry's 5 s: Redis only collects garbage.
  EXPECT_GT(ttl->integer, 3600 * 1000);
  clock_->Advance(Seconds(5));
  // Expired on the clock, but another process's clock may run behind: a
  // Put (nor a count) does not delete them yet, only past the GC slack.
  ASSERT_THAT(cache->Put("long:0", CacheEntryFor(*clock_, "v", Seconds(7200))), IsOk());
  ASSERT_THAT(cache->CountByPrefix(""), IsOk());
  Result<Reply> kept =
      raw_->Command({"EXISTS", Prefix() + "cache:short:1", Prefix() + "cache:short:2"});
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->integer, 2);
  ASSERT_THAT(cache->Erase("long:0"), IsOk());
  // Nobody reads the expired entries again; past the slack the next Put
  // removes them, hashes and index members, so the indexes do not grow
  // without bound.
  clock_->Advance(std::chrono::hours(1));
  ASSERT_THAT(cache->Put("long:1", CacheEntryFor(*clock_, "v", Seconds(60))), IsOk());
  Result<Reply> exists =
      raw_->Command({"EXISTS", Prefix() + "cache:short:1", Prefix() + "cache:short:2"});
  ASSERT_THAT(exists, IsOk());
  EXPECT_EQ(exists->integer, 0);
  for (const char* index : {"cache-index", "cache-expiry"}) {
    Result<Reply> members = raw_->Command({"ZRANGE", Prefix() + index, "0", "-1"});
    ASSERT_THAT(members, IsOk());
    ASSERT_EQ(members->elements.size(), 1u) << index;
    EXPECT_EQ(members->elements[0].str, "long:1") << index;
  }
}

TEST_F(RedisBackendTest, CacheEntryChangedBehindTheStoresBackIsAnInternalError) {
  ASSERT_THAT(raw_->Command({"HSET", Prefix() + "cache:k", "v", "x", "x", "soon"}), IsOk());
  EXPECT_THAT(backend_->cache()->Get("k"),
              StatusIs(StatusCode::kInternal, HasSubstr("CacheStore::Get")));
}

TEST(RedisBackendDownTest, StoresReturnUnavailableWhileTheServerIsDown) {
  redis_testing::PrivateRedisServer server;
  std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  auto clock = std::make_shared<ManualClock>();
  RedisOptions o;
  o.port = server.port();
  o.reconnect_backoff_min = Millis(10);
  o.reconnect_backoff_max = Millis(50);
  Result<std::shared_ptr<RedisBackend>> b = RedisBackend::Open(o, clock);
  ASSERT_THAT(b, IsOk());
  std::shared_ptr<LockStore> locks = (*b)->locks();
  ASSERT_THAT(locks->Acquire("k", "w1", Seconds(30)), IsOk());
  server.Kill();
  const std::string name = "127.0.0.1:" + std::to_string(server.port());
  EXPECT_THAT(locks->Renew("k", "w1", Seconds(30)),
              StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT(locks->List(10), StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT((*b)->idempotency()->Claim("k", "w1", Seconds(30)),
              StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT((*b)->cache()->Get("k"), StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT((*b)->cache()->CountByPrefix("k"),
              StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  EXPECT_THAT(RedisBackend::Open(o, clock), StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
}

// --- The runner with the guards in the completion (as on SQLite and
// PostgreSQL) ---

// The bundle's lock and idempotency hashes live in the namespace beside the
// jobs: the runner releases and records them with each completion, and a
// job with both keys takes them in one script
// (tests/support/durable_runner_cases.h).
class RedisRunnerTest : public RedisBackendTest {
 protected:
  durable_runner_testing::StoreTarget Target() {
    durable_runner_testing::StoreTarget t;
    t.open = [o = options_](std::shared_ptr<Clock> clock) -> Result<BackendBundle> {
      JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<RedisBackend> b, RedisBackend::Open(o, std::move(clock)));
      return b->bundle();
    };
    t.drop_claims = [this] {
      Result<Reply> keys = raw_->Command({"KEYS", "jobpact:{" + options_.key_namespace + "}:idem:*"});
      ASSERT_THAT(keys, IsOk());
      for (const Reply& k : keys->elements) EXPECT_THAT(raw_->Command({"DEL", k.str}), IsOk());
    };
    return t;
  }
};

TEST_F(RedisRunnerTest, SameKeyJobsRunBackToBackAsIfReleasedAtOnce) {
  durable_runner_testing::ExpectSameKeyJobsRunBackToBack(Target());
}

TEST_F(RedisRunnerTest, AClaimLostWhileTheHandlerRanFailsTheAttemptInsteadOfAckingIt) {
  durable_runner_testing::ExpectAClaimLostFailsTheAttemptInsteadOfAckingIt(Target());
}

// Idle workers woken through the wake list: one per wake-up, and a full
// lease wakes the next.
TEST_F(RedisRunnerTest, AWakeUpBringsOneIdleWorkerNotAll) {
  durable_runner_testing::ExpectAWakeUpBringsOneIdleWorkerNotAll(Target());
}

TEST_F(RedisRunnerTest, AFullLeaseWakesTheNextIdleWorker) {
  durable_runner_testing::ExpectAFullLeaseWakesTheNextIdleWorker(Target());
}

TEST_F(RedisRunnerTest, TheLeaseStepAnswersTheDedupCheck) {
  durable_runner_testing::ExpectTheLeaseStepAnswersTheDedupCheck(Target());
}

TEST_F(RedisRunnerTest, TheLeaseStepTakesTheGuardsTheRunnerNeeds) {
  durable_runner_testing::ExpectTheLeaseStepTakesTheGuardsTheRunnerNeeds(Target());
}

TEST_F(RedisRunnerTest, ADuplicateDropsTheClaimItsLeaseTook) {
  durable_runner_testing::ExpectADuplicateDropsTheClaimItsLeaseTook(Target());
}

TEST_F(RedisRunnerTest, GuardsTakenWithTheLeaseAreRenewedWithIt) {
  durable_runner_testing::ExpectGuardsTakenWithTheLeaseAreRenewedWithIt(Target());
}

TEST_F(RedisRunnerTest, ShutdownGivesBackTheGuardsOfJobsThatDidNotStart) {
  durable_runner_testing::ExpectShutdownGivesBackTheGuardsOfJobsThatDidNotStart(Target());
}

}  // namespace
}  // namespace redis
}  // namespace jobpact
