// CacheGuard under a stampede: a thousand threads on one expired hot key
// make one loader call, and four guards (four "processes": distinct owners,
// one shared store and LockStore) make one refill per window. Time is a
// testing::ManualClock; the tests move it only when a guard waits on it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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

using testing::IsOk;

MetricLabels Labels(std::string_view cache) {
  MetricLabels l;
  l.cache = cache;
  return l;
}

// Releases every waiting thread at once.
class StartLine {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Spins (yielding) until `ready()`; false if `give_up()` comes first.
template <typename Ready, typename GiveUp>
bool SpinUntil(Ready ready, GiveUp give_up) {
  while (!ready()) {
    if (give_up()) return false;
    std::this_thread::yield();
  }
  return true;
}

class CacheGuardStampedeTest : public ::testing::Test {
 protected:
  std::unique_ptr<CacheGuard> MakeGuard(std::string owner = {}) {
    CacheGuardOptions o;
    o.store = store_;
    o.locks = locks_;
    o.clock = sleep_clock_;
    o.metrics = metrics_;
    o.random = MakeSeededRandomSource(3);
    o.owner = std::move(owner);
    o.defaults = Defaults();
    Result<std::unique_ptr<CacheGuard>> guard = CacheGuard::Create(std::move(o));
    EXPECT_THAT(guard.status(), IsOk());
    return guard.ok() ? *std::move(guard) : nullptr;
  }

  static CacheGetOptions Defaults() {
    CacheGetOptions o;
    o.ttl = Seconds(10);
    o.xfetch_beta = 0;
    o.lock_wait = Seconds(3600);
    o.lock_poll_interval = Millis(100);
    return o;
  }

  std::int64_t Count(std::string_view name) const { return metrics_->Counter(name, Labels("hot")); }

  // A loader that counts its calls into *calls and holds on until every
  // other of `callers` waits on it (coalesced), so that none of them can
  // have come late and found the new value as a hit; then returns
  // outcome(). A second call (no coalescing) ends the wait and is an error.
  CacheLoader OneLoadAwaitingAll(int callers, std::atomic<int>* calls,
                                 std::function<Result<CacheLoad>()> outcome) {
    return [this, callers, calls, outcome]() -> Result<CacheLoad> {
      ++*calls;
      const bool all_waiting =
          SpinUntil([&] { return Count(metric::kCacheCoalesced) == callers - 1; },
                    [&] { return calls->load() > 1; });
      if (!all_waiting) return Status::Internal("a second loader call");
      return outcome();
    };
  }

  // `callers` threads released at once, each calling Get("hot:key").
  std::vector<Result<CacheValue>> GetConcurrently(CacheGuard& guard, int callers,
                                                  const CacheLoader& loader,
                                                  const CacheGetOptions& options) {
    StartLine start;
    std::vector<Result<CacheValue>> results(callers, Status::Internal("not run"));
    std::vector<std::thread> threads;
    threads.reserve(callers);
    for (int i = 0; i < callers; ++i) {
      threads.emplace_back([&, i] {
        start.Wait();
        results[i] = guard.Get("hot:key", loader, options);
      });
    }
    start.Open();
    for (std::thread& t : threads) t.join();
    return results;
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  std::shared_ptr<cache_test::SleepCountingClock> sleep_clock_ =
      std::make_shared<cache_test::SleepCountingClock>(clock_);
  std::shared_ptr<CacheStore> store_ = *MakeInMemoryCacheStore(clock_);
  std::shared_ptr<InMemoryLockStore> locks_ = std::make_shared<InMemoryLockStore>(clock_);
  std::shared_ptr<InMemoryMetricsSink> metrics_ = std::make_shared<InMemoryMetricsSink>();
};

TEST_F(CacheGuardStampedeTest, AThousandCallersOnAnExpiredHotKeyMakeOneLoaderCall) {
  auto guard = MakeGuard();
  ASSERT_THAT(
      guard->Get("hot:key", [] { return Result<CacheLoad>(CacheLoad::Found("old")); }).status(),
      IsOk());
  clock_->Advance(Seconds(11));  // Expired; no stale window.
  metrics_->Reset();

  constexpr int kCallers = 1000;
  std::atomic<int> calls{0};
  const std::vector<Result<CacheValue>> results =
      GetConcurrently(*guard, kCallers,
                      OneLoadAwaitingAll(kCallers, &calls,
                                         [] { return Result<CacheLoad>(CacheLoad::Found("new")); }),
                      Defaults());

  EXPECT_EQ(calls, 1);
  std::map<CacheSource, int> by_source;
  for (const Result<CacheValue>& r : results) {
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->value, "new");
    ++by_source[r->source];
  }
  EXPECT_EQ(by_source[CacheSource::kLoaded], 1);
  EXPECT_EQ(by_source[CacheSource::kCoalesced], kCallers - 1);
  EXPECT_EQ(Count(metric::kCacheMisses), kCallers);
  EXPECT_EQ(Count(metric::kCacheCoalesced), kCallers - 1);
  EXPECT_EQ(metrics_->HistogramExact(metric::kCacheLoaderDuration, Labels("hot")).count, 1);
}

TEST_F(CacheGuardStampedeTest, CoalescedCallersShareTheLoadersError) {
  auto guard = MakeGuard();
  constexpr int kCallers = 50;
  std::atomic<int> calls{0};
  const std::vector<Result<CacheValue>> results = GetConcurrently(
      *guard, kCallers,
      OneLoadAwaitingAll(kCallers, &calls,
                         [] { return Result<CacheLoad>(Status::Unavailable("origin down")); }),
      Defaults());
  EXPECT_EQ(calls, 1);
  for (const Result<CacheValue>& r : results) {
    EXPECT_THAT(r.status(),
                testing::StatusIs(StatusCode::kUnavailable, ::testing::HasSubstr("origin down")));
  }
  EXPECT_EQ(Count(metric::kCacheLoaderErrors), 1);
}

TEST_F(CacheGuardStampedeTest, CoalescedCallersAllGetTheStaleValueWhenTheLoadFails) {
  auto guard = MakeGuard();
  CacheGetOptions o;
  o.ttl = Seconds(10);
  o.ttl_jitter = 0;
  o.xfetch_beta = 0;
  o.stale_if_error = Seconds(300);
  ASSERT_THAT(guard
                  ->Get(
                      "hot:key", [] { return Result<CacheLoad>(CacheLoad::Found("old")); }, o)
                  .status(),
              IsOk());
  clock_->Advance(Seconds(60));
  constexpr int kCallers = 20;
  std::atomic<int> calls{0};
  const std::vector<Result<CacheValue>> results = GetConcurrently(
      *guard, kCallers,
      OneLoadAwaitingAll(kCallers, &calls,
                         [] { return Result<CacheLoad>(Status::Unavailable("origin down")); }),
      o);
  EXPECT_EQ(calls, 1);
  for (const Result<CacheValue>& r : results) {
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->value, "old");
    EXPECT_EQ(r->source, CacheSource::kStaleOnError);
    EXPECT_EQ(r->age, Seconds(60));
  }
  EXPECT_EQ(metrics_->Counter(metric::kCacheStaleServed,
                              [] {
                                MetricLabels l;
                                l.cache = "hot";
                                l.reason = "error";
                                return l;
                              }()),
            kCallers);
}

TEST_F(CacheGuardStampedeTest, FourProcessesOnOneSharedStoreMakeOneRefillPerWindow) {
  constexpr int kGuards = 4;
  constexpr int kThreadsPerGuard = 16;
  std::vector<std::unique_ptr<CacheGuard>> guards;
  for (int g = 0; g < kGuards; ++g) guards.push_back(MakeGuard());
  for (int g = 1; g < kGuards; ++g) EXPECT_NE(guards[g]->owner(), guards[0]->owner());

  std::atomic<int> calls{0};
  for (int window = 1; window <= 3; ++window) {
    SCOPED_TRACE("window " + std::to_string(window));
    metrics_->Reset();
    std::atomic<bool> release{false};
    // The refill holds on until every other guard waits on its lock and
    // every other thread of its own guard is coalesced on it.
    auto loader = [&]() -> Result<CacheLoad> {
      const int n = ++calls;
      SpinUntil([&] { return release.load(); }, [&] { return calls.load() > window; });
      return CacheLoad::Found("v" + std::to_string(n));
    };
    std::atomic<int> finished{0};
    std::vector<Result<CacheValue>> results(kGuards * kThreadsPerGuard,
                                            Status::Internal("not run"));
    StartLine start;
    std::vector<std::thread> threads;
    for (int g = 0; g < kGuards; ++g) {
      for (int t = 0; t < kThreadsPerGuard; ++t) {
        threads.emplace_back([&, g, t] {
          start.Wait();
          results[g * kThreadsPerGuard + t] = guards[g]->Get("hot:key", loader);
          ++finished;
        });
      }
    }
    start.Open();
    // One guard loads; the three others wait on its refill lock, each with
    // its other callers coalesced behind it.
    ASSERT_TRUE(SpinUntil(
        [&] {
          return Count(metric::kCacheLockWaits) == kGuards - 1 &&
                 Count(metric::kCacheCoalesced) == kGuards * (kThreadsPerGuard - 1);
        },
        [&] { return calls.load() > window; }));
    release = true;
    // Time moves only once the refill has landed and its lock is free: a
    // clock moved while the loading thread is still descheduled (a loaded
    // machine, a sanitizer build) would run the lock's TTL out and let a
    // waiting guard refill a second time.
    ASSERT_TRUE(SpinUntil([&] { return locks_->HeldCount() == 0; },
                          [&] { return calls.load() > window; }));
    // The waiting guards look at the store every poll interval.
    sleep_clock_->AdvanceOnSleeps(Millis(100),
                                  [&] { return finished == kGuards * kThreadsPerGuard; });
    for (std::thread& t : threads) t.join();

    EXPECT_EQ(calls, window) << "one refill per window";
    std::map<CacheSource, int> by_source;
    for (const Result<CacheValue>& r : results) {
      ASSERT_THAT(r.status(), IsOk());
      EXPECT_EQ(r->value, "v" + std::to_string(window));
      ++by_source[r->source];
    }
    EXPECT_EQ(by_source[CacheSource::kLoaded], 1);
    EXPECT_EQ(by_source[CacheSource::kPeerFilled], kGuards - 1);
    EXPECT_EQ(by_source[CacheSource::kCoalesced], kGuards * (kThreadsPerGuard - 1));
    EXPECT_EQ(Count(metric::kCacheFallbackLoads), 0);
    EXPECT_EQ(locks_->HeldCount(), 0u);
    clock_->Advance(Seconds(20));  // The next window: the value expired.
  }
}

}  // namespace
}  // namespace jobpact
