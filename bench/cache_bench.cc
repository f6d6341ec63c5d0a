// The cache guard (issue 11) against what it replaces:
//   - the hit path, ns per Get: CacheGuard over the in-memory CacheStore
//     (key check, store lookup under its lock, the XFetch draw, a metric)
//     beside a plain mutex-guarded std::unordered_map<std::string,
//     std::string> returning a copy of the value;
//   - a stampede: N threads Get one key that has just expired while the
//     origin takes 1 ms; the counter origin_calls is the loader calls per
//     stampede, for the guard and for naive cache-aside (check, miss, load,
//     put).
// docs/benchmarks.md, "Cache guard (issue 11)", has the figures.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "jobpact/cache.h"
#include "jobpact/in_memory/lock_store.h"

namespace jobpact {
namespace {

const std::string kKey = "user:42";
const std::string kValue(100, 'v');

// The baseline: a map under one mutex.
class MutexMap {
 public:
  bool Get(const std::string& key, std::string* out) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return false;
    *out = it->second;
    return true;
  }
  void Put(const std::string& key, std::string value) {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = std::move(value);
  }
  void Erase(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    map_.erase(key);
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::string> map_;
};

std::unique_ptr<CacheGuard> MakeGuard() {
  CacheGuardOptions o;
  o.store = MakeInMemoryCacheStore(SystemClock::Default()).value();
  o.locks = std::make_shared<InMemoryLockStore>();
  o.defaults.ttl = Seconds(3600);
  return CacheGuard::Create(std::move(o)).value();
}

void BM_MutexMap_Hit(benchmark::State& state) {
  static MutexMap* map = new MutexMap();
  if (state.thread_index() == 0) map->Put(kKey, kValue);
  std::string out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(map->Get(kKey, &out));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MutexMap_Hit)->Threads(1)->Threads(2)->UseRealTime();

void BM_CacheGuard_Hit(benchmark::State& state) {
  static CacheGuard* guard = MakeGuard().release();
  const CacheLoader loader = [] { return Result<CacheLoad>(CacheLoad::Found(kValue)); };
  if (state.thread_index() == 0) guard->Get(kKey, loader).status().IgnoreError();
  for (auto _ : state) {
    Result<CacheValue> v = guard->Get(kKey, loader);
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CacheGuard_Hit)->Threads(1)->Threads(2)->UseRealTime();

// One stampede: `threads` callers released at once on a missing key.
template <typename Call>
void Stampede(int threads, Call call) {
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      call();
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (std::thread& t : pool) t.join();
}

std::string SlowOrigin(std::atomic<int>* calls) {
  ++*calls;
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return kValue;
}

void BM_Stampede_NaiveCacheAside(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  MutexMap map;
  std::atomic<int> calls{0};
  std::int64_t stampedes = 0;
  for (auto _ : state) {
    map.Erase(kKey);  // The hot key expires.
    Stampede(threads, [&] {
      std::string out;
      if (!map.Get(kKey, &out)) map.Put(kKey, SlowOrigin(&calls));
    });
    ++stampedes;
  }
  state.counters["origin_calls"] =
      static_cast<double>(calls.load()) / static_cast<double>(stampedes);
}
BENCHMARK(BM_Stampede_NaiveCacheAside)->Arg(8)->Arg(64)->Arg(256)->Iterations(20)->UseRealTime();

void BM_Stampede_CacheGuard(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  auto guard = MakeGuard();
  std::atomic<int> calls{0};
  const CacheLoader loader = [&] {
    return Result<CacheLoad>(CacheLoad::Found(SlowOrigin(&calls)));
  };
  std::int64_t stampedes = 0;
  for (auto _ : state) {
    guard->Invalidate(kKey).status().IgnoreError();  // The hot key expires.
    Stampede(threads, [&] { guard->Get(kKey, loader).status().IgnoreError(); });
    ++stampedes;
  }
  state.counters["origin_calls"] =
      static_cast<double>(calls.load()) / static_cast<double>(stampedes);
}
BENCHMARK(BM_Stampede_CacheGuard)->Arg(8)->Arg(64)->Arg(256)->Iterations(20)->UseRealTime();

}  // namespace
}  // namespace jobpact

BENCHMARK_MAIN();
