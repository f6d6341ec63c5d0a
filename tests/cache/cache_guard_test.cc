// CacheGuard on one process: argument checks, hits and ages, stale-while-
// revalidate (inline and on an executor), stale-if-error, negative caching,
// TTL jitter, XFetch's threshold and probability, the refill lock (held by
// a live owner, by a dead one), invalidation, metrics and a failing store.
// Time is a testing::ManualClock throughout; randomness an injected source.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/cache.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "tests/cache/sleep_counting_clock.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

MetricLabels Labels(std::string_view cache, std::string_view reason = {}) {
  MetricLabels l;
  l.cache = cache;
  l.reason = reason;
  return l;
}

using cache_test::SleepCountingClock;

class CacheGuardTest : public ::testing::Test {
 protected:
  std::unique_ptr<CacheGuard> MakeGuard(std::shared_ptr<RandomSource> random = nullptr,
                                        std::function<void(CacheGuardOptions&)> tweak = {}) {
    CacheGuardOptions o;
    o.store = store_;
    o.locks = locks_;
    o.clock = sleep_clock_;
    o.metrics = metrics_;
    o.random = random ? std::move(random) : MakeSeededRandomSource(7);
    o.defaults = NoJitter();
    if (tweak) tweak(o);
    Result<std::unique_ptr<CacheGuard>> guard = CacheGuard::Create(std::move(o));
    EXPECT_THAT(guard.status(), IsOk());
    return guard.ok() ? *std::move(guard) : nullptr;
  }

  static CacheGetOptions NoJitter() {
    CacheGetOptions o;
    o.ttl = Seconds(10);
    o.ttl_jitter = 0;
    o.xfetch_beta = 0;
    return o;
  }

  // A loader returning "v1", "v2", ... and counting its calls.
  CacheLoader Counting() {
    return [this]() -> Result<CacheLoad> {
      const int n = ++loads_;
      return CacheLoad::Found("v" + std::to_string(n));
    };
  }

  std::int64_t Count(std::string_view name, std::string_view cache = "user",
                     std::string_view reason = {}) const {
    return metrics_->Counter(name, Labels(cache, reason));
  }

  // Runs `body` on a thread and moves the clock forward by `step` each time
  // it starts a sleep, until it returns: for a Get that polls the store.
  void RunAdvancing(const std::function<void()>& body, Duration step) {
    std::atomic<bool> done{false};
    std::thread t([&] {
      body();
      done = true;
    });
    sleep_clock_->AdvanceOnSleeps(step, [&] { return done.load(); });
    t.join();
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  std::shared_ptr<SleepCountingClock> sleep_clock_ = std::make_shared<SleepCountingClock>(clock_);
  std::shared_ptr<CacheStore> store_ = *MakeInMemoryCacheStore(clock_);
  std::shared_ptr<InMemoryLockStore> locks_ = std::make_shared<InMemoryLockStore>(clock_);
  std::shared_ptr<InMemoryMetricsSink> metrics_ = std::make_shared<InMemoryMetricsSink>();
  std::atomic<int> loads_{0};
};

TEST_F(CacheGuardTest, RefusesBadKeysANullLoaderAndOptionsOutOfRangeByName) {
  auto guard = MakeGuard();
  EXPECT_THAT(guard->Get("", Counting()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("key is empty")));
  EXPECT_THAT(guard->Get(std::string(1025, 'k'), Counting()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("1025 bytes")));
  EXPECT_THAT(guard->Get(std::string("a\0b", 3), Counting()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("NUL")));
  EXPECT_THAT(guard->Get("user:1", CacheLoader()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("loader is null")));
  auto refused = [&](std::function<void(CacheGetOptions&)> set, std::string_view field) {
    CacheGetOptions o;
    set(o);
    EXPECT_THAT(guard->Get("user:1", Counting(), o).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(std::string(field))));
  };
  refused([](CacheGetOptions& o) { o.ttl = Seconds(0); }, "CacheGetOptions.ttl");
  refused([](CacheGetOptions& o) { o.negative_ttl = Seconds(-1); }, "negative_ttl");
  refused([](CacheGetOptions& o) { o.stale_while_revalidate = Seconds(-1); },
          "stale_while_revalidate");
  refused([](CacheGetOptions& o) { o.stale_if_error = Seconds(-1); }, "stale_if_error");
  refused([](CacheGetOptions& o) { o.ttl_jitter = 1.0; }, "ttl_jitter");
  refused([](CacheGetOptions& o) { o.xfetch_beta = -1; }, "xfetch_beta");
  refused([](CacheGetOptions& o) { o.xfetch_beta = std::nan(""); }, "xfetch_beta");
  refused([](CacheGetOptions& o) { o.lock_ttl = Seconds(0); }, "lock_ttl");
  refused([](CacheGetOptions& o) { o.lock_wait = Seconds(-1); }, "lock_wait");
  refused([](CacheGetOptions& o) { o.lock_poll_interval = Seconds(0); }, "lock_poll_interval");
  EXPECT_EQ(loads_, 0);

  EXPECT_THAT(CacheGuard::Create({}).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("store is null")));
  CacheGuardOptions bad;
  bad.store = store_;
  bad.defaults.ttl_jitter = -0.5;
  EXPECT_THAT(
      CacheGuard::Create(bad).status(),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("defaults: CacheGetOptions.ttl_jitter")));
}

TEST_F(CacheGuardTest, LoadsOnceThenServesHitsCarryingTheirAge) {
  auto guard = MakeGuard();
  Result<CacheValue> first = guard->Get("user:1", Counting());
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_EQ(first->value, "v1");
  EXPECT_EQ(first->source, CacheSource::kLoaded);
  EXPECT_EQ(first->age, Duration{0});
  clock_->Advance(Seconds(4));
  Result<CacheValue> second = guard->Get("user:1", Counting());
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_EQ(second->value, "v1");
  EXPECT_EQ(second->source, CacheSource::kHit);
  EXPECT_EQ(second->age, Seconds(4));
  EXPECT_FALSE(second->stale());
  EXPECT_EQ(loads_, 1);
  clock_->Advance(Seconds(6));  // The fresh window (10 s) is over: no stale windows.
  EXPECT_EQ(guard->Get("user:1", Counting())->value, "v2");
}

TEST_F(CacheGuardTest, TheLoaderSaysHowOldItsDataIs) {
  auto guard = MakeGuard();
  const TimePoint produced = clock_->Now() - Seconds(90);
  auto loader = [&]() -> Result<CacheLoad> {
    CacheLoad l = CacheLoad::Found("replica row");
    l.as_of = produced;
    return l;
  };
  EXPECT_EQ(guard->Get("user:1", loader)->age, Seconds(90));
  clock_->Advance(Seconds(5));
  Result<CacheValue> hit = guard->Get("user:1", loader);
  EXPECT_EQ(hit->age, Seconds(95));
  EXPECT_EQ(hit->as_of, produced);
}

TEST_F(CacheGuardTest, StaleWhileRevalidateServesStaleToAllButTheOneRefresher) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.stale_while_revalidate = Seconds(20);
  ASSERT_EQ(guard->Get("user:1", Counting(), o)->value, "v1");
  clock_->Advance(Seconds(15));  // Stale, within stale-while-revalidate.

  std::atomic<bool> entered{false}, release{false};
  auto slow = [&]() -> Result<CacheLoad> {
    entered = true;
    while (!release) std::this_thread::yield();
    ++loads_;
    return CacheLoad::Found("v2");
  };
  Result<CacheValue> refreshed = Status::Internal("not run");
  std::thread refresher([&] { refreshed = guard->Get("user:1", slow, o); });
  while (!entered) std::this_thread::yield();
  for (int i = 0; i < 5; ++i) {
    Result<CacheValue> stale = guard->Get("user:1", slow, o);
    ASSERT_THAT(stale.status(), IsOk());
    EXPECT_EQ(stale->value, "v1");
    EXPECT_EQ(stale->source, CacheSource::kStaleRevalidating);
    EXPECT_TRUE(stale->stale());
    EXPECT_EQ(stale->age, Seconds(15));
  }
  release = true;
  refresher.join();
  ASSERT_THAT(refreshed.status(), IsOk());
  EXPECT_EQ(refreshed->value, "v2");
  EXPECT_EQ(refreshed->source, CacheSource::kLoaded);
  EXPECT_EQ(loads_, 2);
  EXPECT_EQ(Count(metric::kCacheStaleServed, "user", "revalidate"), 5);
  EXPECT_EQ(guard->Get("user:1", slow, o)->source, CacheSource::kHit);
  // Past the window, the next Get loads before answering.
  clock_->Advance(Seconds(31));
  Result<CacheValue> late = guard->Get("user:1", Counting(), o);
  EXPECT_EQ(late->source, CacheSource::kLoaded);
  EXPECT_EQ(late->value, "v3");
}

TEST_F(CacheGuardTest, StaleWhileRevalidateOnAnExecutorAnswersAtOnceAndRefreshesOnce) {
  std::vector<std::function<void()>> tasks;
  auto guard = MakeGuard(nullptr, [&](CacheGuardOptions& g) {
    g.refresh_executor = [&](std::function<void()> task) { tasks.push_back(std::move(task)); };
  });
  CacheGetOptions o = NoJitter();
  o.stale_while_revalidate = Seconds(20);
  ASSERT_EQ(guard->Get("user:1", Counting(), o)->value, "v1");
  clock_->Advance(Seconds(12));
  for (int i = 0; i < 3; ++i) {
    Result<CacheValue> v = guard->Get("user:1", Counting(), o);
    EXPECT_EQ(v->value, "v1");
    EXPECT_EQ(v->source, CacheSource::kStaleRevalidating);
  }
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(loads_, 1);
  tasks[0]();
  EXPECT_EQ(loads_, 2);
  Result<CacheValue> after = guard->Get("user:1", Counting(), o);
  EXPECT_EQ(after->value, "v2");
  EXPECT_EQ(after->source, CacheSource::kHit);
  EXPECT_EQ(locks_->HeldCount(), 0u);
}

TEST_F(CacheGuardTest, ADroppedBackgroundRefreshEndsItsFlight) {
  auto guard = MakeGuard(nullptr, [&](CacheGuardOptions& g) {
    g.refresh_executor = [](std::function<void()>) {};  // Drops every task.
  });
  CacheGetOptions o = NoJitter();
  o.stale_while_revalidate = Seconds(20);
  ASSERT_THAT(guard->Get("user:1", Counting(), o).status(), IsOk());
  clock_->Advance(Seconds(12));
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kStaleRevalidating);
  // No flight is left behind: the next caller refreshes (and drops) again.
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kStaleRevalidating);
  clock_->Advance(Seconds(30));
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kLoaded);
}

TEST_F(CacheGuardTest, StaleIfErrorServesStaleOnLoaderErrorAndTheErrorPastTheWindow) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.stale_if_error = Seconds(60);
  ASSERT_THAT(guard->Get("user:1", Counting(), o).status(), IsOk());
  auto failing = [&]() -> Result<CacheLoad> {
    ++loads_;
    return Status::Unavailable("origin down");
  };
  clock_->Advance(Seconds(30));
  Result<CacheValue> stale = guard->Get("user:1", failing, o);
  ASSERT_THAT(stale.status(), IsOk());
  EXPECT_EQ(stale->value, "v1");
  EXPECT_EQ(stale->source, CacheSource::kStaleOnError);
  EXPECT_EQ(stale->age, Seconds(30));
  EXPECT_EQ(Count(metric::kCacheStaleServed, "user", "error"), 1);
  EXPECT_EQ(Count(metric::kCacheLoaderErrors), 1);

  clock_->Advance(Seconds(40));  // 70 s: past fresh (10 s) + stale-if-error (60 s).
  EXPECT_THAT(guard->Get("user:1", failing, o).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr("origin down")));
  EXPECT_EQ(Count(metric::kCacheLoaderErrors), 2);
  EXPECT_EQ(locks_->HeldCount(), 0u);
}

TEST_F(CacheGuardTest, ALoaderThrowIsItsErrorAndStillServesStale) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.stale_if_error = Seconds(60);
  auto throws_runtime = []() -> Result<CacheLoad> { throw std::runtime_error("boom"); };
  auto throws_int = []() -> Result<CacheLoad> { throw 42; };
  EXPECT_THAT(guard->Get("user:1", throws_runtime, o).status(),
              StatusIs(StatusCode::kUnknown, HasSubstr("runtime_error: boom")));
  EXPECT_THAT(guard->Get("user:1", throws_int, o).status(),
              StatusIs(StatusCode::kUnknown, HasSubstr("loader threw int")));
  ASSERT_THAT(guard->Get("user:1", Counting(), o).status(), IsOk());
  clock_->Advance(Seconds(11));
  Result<CacheValue> stale = guard->Get("user:1", throws_runtime, o);
  ASSERT_THAT(stale.status(), IsOk());
  EXPECT_EQ(stale->source, CacheSource::kStaleOnError);
  EXPECT_EQ(Count(metric::kCacheLoaderErrors), 3);
}

TEST_F(CacheGuardTest, NotFoundIsCachedForItsOwnTtl) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.ttl = Seconds(60);
  o.negative_ttl = Seconds(5);
  o.stale_while_revalidate = Seconds(100);
  auto missing = [&]() -> Result<CacheLoad> {
    ++loads_;
    return CacheLoad::NotFound();
  };
  Result<CacheValue> first = guard->Get("user:404", missing, o);
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_TRUE(first->not_found);
  EXPECT_EQ(first->value, "");
  clock_->Advance(Seconds(4));
  Result<CacheValue> cached = guard->Get("user:404", missing, o);
  EXPECT_TRUE(cached->not_found);
  EXPECT_EQ(cached->source, CacheSource::kHit);
  EXPECT_EQ(loads_, 1);
  // A negative entry has no stale window: past 5 s it is loaded again.
  clock_->Advance(Seconds(1));
  EXPECT_EQ(guard->Get("user:404", missing, o)->source, CacheSource::kLoaded);
  EXPECT_EQ(loads_, 2);
}

TEST_F(CacheGuardTest, TheLoadersOwnTtlReplacesTheOptions) {
  auto guard = MakeGuard();
  auto short_lived = [&]() -> Result<CacheLoad> {
    ++loads_;
    CacheLoad l = CacheLoad::Found("x");
    l.ttl = Seconds(3);
    return l;
  };
  ASSERT_THAT(guard->Get("user:1", short_lived).status(), IsOk());
  clock_->Advance(Seconds(2));
  EXPECT_EQ(guard->Get("user:1", short_lived)->source, CacheSource::kHit);
  clock_->Advance(Seconds(1));
  EXPECT_EQ(guard->Get("user:1", short_lived)->source, CacheSource::kLoaded);
  auto bad_ttl = []() -> Result<CacheLoad> {
    CacheLoad l = CacheLoad::Found("x");
    l.ttl = Seconds(0);
    return l;
  };
  EXPECT_THAT(guard->Get("user:2", bad_ttl).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CacheLoad.ttl")));
}

TEST_F(CacheGuardTest, TtlJitterIsTenPercentByDefaultFromTheRandomSource) {
  // Pinned samples: U = 0 gives -10%, U = 0.75 gives +5%.
  auto guard = MakeGuard(MakeSequenceRandomSource({0.0, 0.75}));
  CacheGetOptions o;  // Default jitter (0.1).
  o.ttl = Seconds(100);
  o.xfetch_beta = 0;
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->fresh_until, clock_->Now() + Seconds(90));
  EXPECT_EQ(guard->Get("user:2", Counting(), o)->fresh_until, clock_->Now() + Seconds(105));

  // Seeded samples: every TTL within ±10%, spread over the range.
  auto spread = MakeGuard(MakeSeededRandomSource(11));
  Duration lo = Seconds(1000), hi{0};
  for (int i = 0; i < 500; ++i) {
    const Duration ttl =
        spread->Get("order:" + std::to_string(i), Counting(), o)->fresh_until - clock_->Now();
    lo = std::min(lo, ttl);
    hi = std::max(hi, ttl);
  }
  EXPECT_GE(lo, Seconds(90));
  EXPECT_LE(hi, Seconds(110));
  EXPECT_LT(lo, Seconds(91));
  EXPECT_GT(hi, Seconds(109));
}

TEST_F(CacheGuardTest, XFetchRefreshesEarlyExactlyAtItsThreshold) {
  // U = 0.5 always: a refresh comes when fresh_until - now <= delta * beta * ln 2.
  auto guard = MakeGuard(MakeSequenceRandomSource({0.5}));
  CacheGetOptions o = NoJitter();
  o.ttl = Seconds(60);
  o.xfetch_beta = 1.0;
  auto one_second_loader = [&]() -> Result<CacheLoad> {
    clock_->Advance(Seconds(1));  // delta = 1 s.
    return CacheLoad::Found("v" + std::to_string(++loads_));
  };
  const TimePoint fresh_until = guard->Get("user:1", one_second_loader, o)->fresh_until;
  const double threshold = std::log(2.0);  // 0.6931 s before fresh_until.

  clock_->SetTime(fresh_until - Seconds(threshold + 0.001));
  EXPECT_EQ(guard->Get("user:1", one_second_loader, o)->source, CacheSource::kHit);
  EXPECT_EQ(loads_, 1);
  clock_->SetTime(fresh_until - Seconds(threshold - 0.001));
  Result<CacheValue> early = guard->Get("user:1", one_second_loader, o);
  EXPECT_EQ(early->source, CacheSource::kLoaded);
  EXPECT_EQ(early->value, "v2");
  EXPECT_EQ(Count(metric::kCacheEarlyRefreshes), 1);

  // beta = 2 doubles the lead.
  o.xfetch_beta = 2.0;
  const TimePoint next = early->fresh_until;
  clock_->SetTime(next - Seconds(2 * threshold + 0.001));
  EXPECT_EQ(guard->Get("user:1", one_second_loader, o)->source, CacheSource::kHit);
  clock_->SetTime(next - Seconds(2 * threshold - 0.001));
  EXPECT_EQ(guard->Get("user:1", one_second_loader, o)->source, CacheSource::kLoaded);
  EXPECT_EQ(loads_, 3);
}

TEST_F(CacheGuardTest, XFetchRefreshesWithProbabilityExpOfMinusGapOverDeltaBeta) {
  // P(early) = exp(-(fresh_until - now) / (delta * beta)).
  auto guard = MakeGuard(MakeSeededRandomSource(2015));
  for (double beta : {1.0, 2.0}) {
    for (double gap : {0.5, 1.0, 3.0}) {
      CacheGetOptions o = NoJitter();
      o.xfetch_beta = beta;
      const int kTrials = 20000;
      const int before = loads_;
      for (int i = 0; i < kTrials; ++i) {
        CacheEntry e;
        e.value = "v";
        e.stored_at = e.as_of = clock_->Now();
        e.fresh_until = e.stale_until = e.error_until = clock_->Now() + Seconds(gap);
        e.load_duration = Seconds(1);
        ASSERT_THAT(store_->Put("user:1", e), IsOk());
        ASSERT_THAT(guard->Get("user:1", Counting(), o).status(), IsOk());
      }
      const double observed = static_cast<double>(loads_ - before) / kTrials;
      const double expected = std::exp(-gap / beta);
      EXPECT_NEAR(observed, expected, 0.015) << "beta " << beta << " gap " << gap;
    }
  }
}

TEST_F(CacheGuardTest, XFetchCannotRefreshFurtherThanItsLargestLeadFromTheEnd) {
  // U = 0 (clamped to the least normal double) gives the largest lead:
  // delta * beta * 708.4. Beyond it a hit is a hit and draws nothing.
  auto guard = MakeGuard(MakeSequenceRandomSource({0.0}));
  CacheGetOptions o = NoJitter();
  o.xfetch_beta = 1.0;
  auto put = [&](Duration gap) {
    CacheEntry e;
    e.value = "v";
    e.stored_at = e.as_of = clock_->Now();
    e.fresh_until = e.stale_until = e.error_until = clock_->Now() + gap;
    e.load_duration = Millis(1);
    ASSERT_THAT(store_->Put("user:1", e), IsOk());
  };
  put(Millis(709));
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kHit);
  put(Millis(708));
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kLoaded);
  EXPECT_EQ(loads_, 1);
}

TEST_F(CacheGuardTest, TheRefillLockIsHeldByThisGuardWhileLoadingAndReleasedAfter) {
  auto guard = MakeGuard();
  auto other = MakeGuard();
  EXPECT_NE(guard->owner(), other->owner());
  std::optional<LockLease> seen;
  auto loader = [&]() -> Result<CacheLoad> {
    seen = *locks_->Inspect("cache-refill:user:1");
    return CacheLoad::Found("x");
  };
  ASSERT_THAT(guard->Get("user:1", loader).status(), IsOk());
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->owner, guard->owner());
  EXPECT_EQ(locks_->HeldCount(), 0u);
}

TEST_F(CacheGuardTest, ARefillLockWhoseOwnerDiedExpiresAndTheNextCallerRefills) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.lock_wait = Seconds(60);
  o.lock_poll_interval = Millis(100);
  // A process took the lock for 5 s and died without releasing it.
  ASSERT_THAT(locks_->Acquire("cache-refill:user:1", "dead-process", Seconds(5)).status(), IsOk());
  Result<CacheValue> got = Status::Internal("not run");
  RunAdvancing([&] { got = guard->Get("user:1", Counting(), o); }, Millis(100));
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->source, CacheSource::kLoaded);
  EXPECT_EQ(loads_, 1);
  EXPECT_EQ(Count(metric::kCacheLockWaits), 1);
  EXPECT_EQ(Count(metric::kCacheLockFailures, "user", "timeout"), 0);
  EXPECT_EQ(locks_->HeldCount(), 0u);

  // Once expired before anyone asks, the next caller takes it at once.
  clock_->Advance(Seconds(11));
  ASSERT_THAT(locks_->Acquire("cache-refill:user:1", "dead-process", Seconds(5)).status(), IsOk());
  clock_->Advance(Seconds(6));
  EXPECT_EQ(guard->Get("user:1", Counting(), o)->source, CacheSource::kLoaded);
  EXPECT_EQ(Count(metric::kCacheLockWaits), 1);
}

TEST_F(CacheGuardTest, ALockHeldPastTheWaitServesStaleElseFallsBackToLoading) {
  auto guard = MakeGuard();
  CacheGetOptions o = NoJitter();
  o.stale_if_error = Seconds(600);
  o.lock_wait = Seconds(1);
  o.lock_poll_interval = Millis(100);
  ASSERT_THAT(guard->Get("user:1", Counting(), o).status(), IsOk());
  clock_->Advance(Seconds(20));  // Stale; within stale-if-error.
  ASSERT_THAT(locks_->Acquire("cache-refill:user:1", "busy-process", Seconds(3600)).status(),
              IsOk());
  Result<CacheValue> got = Status::Internal("not run");
  RunAdvancing([&] { got = guard->Get("user:1", Counting(), o); }, Millis(100));
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->source, CacheSource::kStaleAfterLockWait);
  EXPECT_EQ(got->value, "v1");
  EXPECT_EQ(loads_, 1);
  EXPECT_EQ(Count(metric::kCacheStaleServed, "user", "lock_wait"), 1);
  EXPECT_EQ(Count(metric::kCacheLockFailures, "user", "timeout"), 1);

  // No stale entry at all: the caller loads without the lock, and says so.
  ASSERT_THAT(locks_->Acquire("cache-refill:user:2", "busy-process", Seconds(3600)).status(),
              IsOk());
  RunAdvancing([&] { got = guard->Get("user:2", Counting(), o); }, Millis(100));
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->source, CacheSource::kFallbackLoaded);
  EXPECT_EQ(loads_, 2);
  EXPECT_EQ(Count(metric::kCacheFallbackLoads), 1);
  EXPECT_EQ(Count(metric::kCacheLockFailures, "user", "timeout"), 2);
  EXPECT_EQ(locks_->Inspect("cache-refill:user:2")->value().owner, "busy-process");
}

TEST_F(CacheGuardTest, InvalidatesByKeyAndByPrefix) {
  auto guard = MakeGuard();
  for (const char* k : {"user:1", "user:2", "order:1"}) {
    ASSERT_THAT(guard->Get(k, Counting()).status(), IsOk());
  }
  EXPECT_EQ(*guard->Invalidate("user:1"), true);
  EXPECT_EQ(guard->Get("user:1", Counting())->source, CacheSource::kLoaded);
  EXPECT_EQ(*guard->InvalidatePrefix("user:"), 2u);
  EXPECT_EQ(guard->Get("user:2", Counting())->source, CacheSource::kLoaded);
  EXPECT_EQ(guard->Get("order:1", Counting())->source, CacheSource::kHit);
  EXPECT_THAT(guard->InvalidatePrefix("").status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(guard->Invalidate("").status(), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(CacheGuardTest, MetricsMoveByKeyPrefix) {
  auto guard = MakeGuard();
  auto loader = [&]() -> Result<CacheLoad> {
    clock_->Advance(Millis(250));
    return CacheLoad::Found("x");
  };
  ASSERT_THAT(guard->Get("user:1", loader).status(), IsOk());
  ASSERT_THAT(guard->Get("user:1", loader).status(), IsOk());
  ASSERT_THAT(guard->Get("user:1", loader).status(), IsOk());
  ASSERT_THAT(guard->Get("order:9", loader).status(), IsOk());
  EXPECT_EQ(Count(metric::kCacheHits, "user"), 2);
  EXPECT_EQ(Count(metric::kCacheMisses, "user"), 1);
  EXPECT_EQ(Count(metric::kCacheMisses, "order"), 1);
  EXPECT_EQ(Count(metric::kCacheHits, "order"), 0);
  const HistogramSnapshot h =
      metrics_->HistogramExact(metric::kCacheLoaderDuration, Labels("user"));
  EXPECT_EQ(h.count, 1);
  EXPECT_DOUBLE_EQ(h.sum, 0.25);

  auto labelled = MakeGuard(nullptr, [](CacheGuardOptions& g) {
    g.label_of = [](std::string_view key) { return std::string(key.substr(0, 4)); };
  });
  ASSERT_THAT(labelled->Get("tenant-a/x", loader).status(), IsOk());
  EXPECT_EQ(Count(metric::kCacheMisses, "tena"), 1);
  ASSERT_THAT(labelled->Get("nocolon", loader).status(), IsOk());
  ASSERT_THAT(guard->Get("nocolon", loader).status(), IsOk());
  EXPECT_EQ(Count(metric::kCacheHits, "nocolon"), 1);  // No ':': the whole key.
}

// A store whose every call fails, as an unreachable Redis would.
class UnreachableCacheStore final : public CacheStore {
 public:
  std::string_view Name() const override { return "unreachable"; }
  Result<std::optional<CacheEntry>> Get(std::string_view) override { return Down(); }
  Status Put(std::string_view, const CacheEntry&) override { return Down(); }
  Result<bool> Erase(std::string_view) override { return Down(); }
  Result<std::size_t> EraseByPrefix(std::string_view) override { return Down(); }
  Result<std::size_t> CountByPrefix(std::string_view) override { return Down(); }

 private:
  static Status Down() { return Status::Unavailable("store unreachable"); }
};

TEST_F(CacheGuardTest, AFailingStoreCountsAsAMissNotAsTheCallersError) {
  store_ = std::make_shared<UnreachableCacheStore>();
  auto guard = MakeGuard();
  Result<CacheValue> got = guard->Get("user:1", Counting());
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->source, CacheSource::kLoaded);
  EXPECT_GE(Count(metric::kCacheStoreErrors), 2);  // The read(s) and the write.
  EXPECT_THAT(guard->Invalidate("user:1").status(), StatusIs(StatusCode::kUnavailable));
}

TEST(CacheSourceNameTest, NamesEverySource) {
  EXPECT_EQ(CacheSourceName(CacheSource::kHit), "hit");
  EXPECT_EQ(CacheSourceName(CacheSource::kCoalesced), "coalesced");
  EXPECT_EQ(CacheSourceName(CacheSource::kStaleAfterLockWait), "stale_after_lock_wait");
}

}  // namespace
}  // namespace jobpact
