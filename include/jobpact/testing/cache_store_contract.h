// File: jobpact/testing/cache_store_contract.h
//
// The CacheStore conformance suite: the TEST_P suites every CacheStore
// (jobpact/cache_store.h) must pass, the same ones the in-memory store and
// the Redis store run. A store of your own joins with a factory and one
// line in a test source of yours, as for the backend contract
// (jobpact/testing/backend_contract.h, whose "How the suite gets into your
// program" applies here too):
//
//   // my_cache_contract_test.cc
//   #include "jobpact/testing/cache_store_contract.h"
//   #include "my_cache_store.h"
//
//   JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(
//       MyCache, jobpact::testing::CacheStoreFactory{"my_cache", [](auto clock) {
//         return std::make_shared<MyCacheStore>(clock);
//       }});
//
//   # CMakeLists.txt: link jobpact::contract and GTest::gmock_main, as for
//   # the backend contract.
//
// The factory contract. Each make(clock) call returns a FRESH, EMPTY store
// on the given clock: every time it uses must come from it, since the tests
// move it by hand (a store that reads the real clock fails them: the
// ManualClock starts at 2026-01-01T00:00:00Z, which is not now). A factory
// whose server is absent (a Redis server not running) returns null and
// every test is skipped with "backend unavailable". make() may report its
// own failures with ADD_FAILURE().
//
// What the suites pin down, beyond the words of jobpact/cache_store.h:
//   - Time resolution: fresh_until, stale_until, error_until, as_of,
//     stored_at and load_duration come back from Get exactly as Put gave
//     them to the MICROSECOND (the resolution of Redis scripts' numbers and
//     of PostgreSQL's timestamptz); anything finer may be truncated. The
//     tests use times with a microsecond part.
//   - Expiry: an entry is kept while now < expires_at() and gone (Get
//     empty, not counted, Erase false) from now == expires_at() on, on
//     the store's clock.
//   - Put checks its arguments first: a bad key or windows out of order is
//     kInvalidArgument even when the entry has expired already; then an
//     entry whose expires_at() <= now returns OK, stores nothing and leaves
//     an entry already under the key as it was.
//   - Messages: a bad key's names the problem -- "empty", the bound "1024"
//     for a longer key, "NUL" for a key holding one -- and windows out of
//     order name the field ("stale_until", "error_until"). Any other byte
//     may be in a key (spaces, braces, '*', '%', bytes >= 0x80).
//   - Prefixes are bytes compared literally: no glob or pattern character
//     ('*', '?', '[', '%', '_', '\\', '.') means anything, and a key
//     matches only if it STARTS with the prefix.
//   - EraseByPrefix returns the number of LIVE entries it removed, the
//     number CountByPrefix gave just before (expired ones are not counted,
//     whether or not the store still held them).
// The suites do not pin eviction or kResourceExhausted (bounded stores
// only); a bounded store's factory must allow at least 16 MiB and 10,000
// entries.
//
// Tests run under the names <Prefix>/<Suite>.<Test>/<factory name>, the
// suites being CacheStoreContract and CacheStoreConcurrencyContract.
#ifndef JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_
#define JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace testing {

struct CacheStoreFactory {
  // Used in test names: letters, digits and '_' only.
  std::string name;
  // Each call gives a FRESH, EMPTY store on the given clock, or null when
  // the store's server is absent (see above).
  std::function<std::shared_ptr<CacheStore>(std::shared_ptr<ManualClock>)> make;
};

inline void PrintTo(const CacheStoreFactory& f, std::ostream* os) { *os << f.name; }

// gtest parameter names: the factory's name.
struct CacheStoreFactoryName {
  std::string operator()(const ::testing::TestParamInfo<CacheStoreFactory>& info) const {
    return info.param.name;
  }
};

// The fixture of both suites: a ManualClock at its fixed start and a fresh
// store made on it. Store-specific tests may derive from it too.
class JOBPACT_EXPORT CacheStoreContract : public ::testing::TestWithParam<CacheStoreFactory> {
 protected:
  void SetUp() override;

  TimePoint Now() const { return clock_->Now(); }
  void Advance(Duration d) { clock_->Advance(d); }

  // An entry of `value` loaded now: fresh for `fresh`, then stale-servable
  // until fresh + `stale`, servable on error until fresh + `error`; as_of a
  // minute and a bit ago, stored now, loaded in 1.234567 s.
  CacheEntry Entry(std::string value, Duration fresh = Seconds(60), Duration stale = Duration(0),
                   Duration error = Duration(0)) const;
  // Puts and expects success.
  void MustPut(const std::string& key, const CacheEntry& entry);
  // The value under `key`, or "<none>" if Get finds nothing (and the
  // error's text if Get fails, with a test failure).
  std::string ValueOf(const std::string& key);
  // CountByPrefix, expecting success (-1 on failure).
  long long Count(const std::string& prefix);

  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<CacheStore> store_;
};

// Many threads on one store.
class JOBPACT_EXPORT CacheStoreConcurrencyContract : public CacheStoreContract {};

namespace contract_internal {
// Defined next to the suites: a program that calls it links them (see
// backend_contract.h, "How the suite gets into your program"). Returns 0.
JOBPACT_EXPORT int LinkCacheStoreSuites();
}  // namespace contract_internal

}  // namespace testing
}  // namespace jobpact

// Instantiates the cache store suites for one factory (an expression of
// type jobpact::testing::CacheStoreFactory; commas are fine). Use at global
// namespace scope, once per store; Prefix (an identifier) starts the test
// names. May be used in the same program as
// JOBPACT_INSTANTIATE_BACKEND_CONTRACT, with the same Prefix or another.
#define JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(Prefix, ...)                                     \
  namespace jobpact {                                                                             \
  namespace testing {                                                                             \
  /* Pulls the suites out of the static library (see the file comment). */                        \
  [[maybe_unused]] static const int jobpact_cache_contract_linked_##Prefix =                      \
      contract_internal::LinkCacheStoreSuites();                                                  \
  INSTANTIATE_TEST_SUITE_P(Prefix, CacheStoreContract, ::testing::Values(__VA_ARGS__),            \
                           CacheStoreFactoryName());                                              \
  INSTANTIATE_TEST_SUITE_P(Prefix, CacheStoreConcurrencyContract, ::testing::Values(__VA_ARGS__), \
                           CacheStoreFactoryName());                                              \
  }                                                                                               \
  }                                                                                               \
  static_assert(true, "require a semicolon")

#endif  // JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_
