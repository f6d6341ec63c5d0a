// File: jobpact/testing/cache_store_contract.h
//
// The CacheStore conformance suite (jobpact/cache_store.h): the TEST_P
// suite every CacheStore must pass, the one the in-memory store runs. A
// store of your own (or the Redis one) joins with a factory and one line:
//
//   #include "jobpact/testing/cache_store_contract.h"
//
//   JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(
//       MyCache, jobpact::testing::CacheStoreFactory{"my_cache", [](auto clock) {
//         return std::shared_ptr<jobpact::CacheStore>(std::make_shared<MyCacheStore>(clock));
//       }});
//
// linked against jobpact::contract and GTest::gtest_main, as for
// jobpact/testing/backend_contract.h.
//
// The factory contract: each make(clock) call returns a FRESH, EMPTY store
// on the given clock (every time it uses comes from it: the tests move it by
// hand), bounded loosely enough for a few hundred small entries. Null: the
// store's service is absent, and every test is skipped ("cache store
// unavailable").
//
// What the suite pins down: an entry is kept while now < expires_at() and
// never returned after; an entry already over is not stored and replaces
// nothing; keys are non-empty, at most 1024 bytes, without NUL
// (kInvalidArgument naming the problem); windows out of order are
// kInvalidArgument; Erase and EraseByPrefix report live entries only; an
// empty prefix is refused by EraseByPrefix and means "all" for
// CountByPrefix; concurrent calls are safe.
//
// Tests run as <Prefix>/CacheStoreContract.<Test>/<factory name>.
#ifndef JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_
#define JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "jobpact/cache_store.h"
#include "jobpact/export.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace testing {

struct CacheStoreFactory {
  std::string name;  // [A-Za-z0-9_]: part of the test names.
  std::function<std::shared_ptr<CacheStore>(std::shared_ptr<ManualClock>)> make;
};

// The fixture: a fresh store on a fresh ManualClock per test.
class CacheStoreContract : public ::testing::TestWithParam<CacheStoreFactory> {
 protected:
  void SetUp() override;

  // An entry stored now, fresh for `fresh`, then stale for `stale` more.
  CacheEntry Entry(std::string value, Duration fresh = Seconds(10),
                   Duration stale = Duration{0}) const;

  std::shared_ptr<ManualClock> clock_;
  std::shared_ptr<CacheStore> store_;
};

// The test-name generator for INSTANTIATE_TEST_SUITE_P.
struct CacheStoreFactoryName {
  std::string operator()(const ::testing::TestParamInfo<CacheStoreFactory>& info) const {
    return info.param.name;
  }
};

namespace contract_internal {
// Pulls the suite's object file out of the static library (see
// jobpact/testing/backend_contract.h, "How the suite gets into your program").
JOBPACT_EXPORT int CacheStoreContractAnchor();
}  // namespace contract_internal

}  // namespace testing
}  // namespace jobpact

#define JOBPACT_INSTANTIATE_CACHE_STORE_CONTRACT(Prefix, ...)                          \
  namespace jobpact {                                                                  \
  namespace testing {                                                                  \
  [[maybe_unused]] static const int jobpact_cache_contract_linked_##Prefix =           \
      contract_internal::CacheStoreContractAnchor();                                   \
  INSTANTIATE_TEST_SUITE_P(Prefix, CacheStoreContract, ::testing::Values(__VA_ARGS__), \
                           CacheStoreFactoryName());                                   \
  }                                                                                    \
  }

#endif  // JOBPACT_TESTING_CACHE_STORE_CONTRACT_H_
