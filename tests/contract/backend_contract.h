// File: tests/contract/backend_contract.h
//
// The backend conformance suite (SPEC 9): one set of TEST_P suites that
// every QueueBackend / LockStore / IdempotencyStore implementation must pass.
// A backend joins with a factory and one line:
//
//   // tests/backends/sqlite/sqlite_contract_test.cc
//   #include "tests/contract/backend_contract.h"
//   JOBPACT_INSTANTIATE_BACKEND_CONTRACT(
//       Sqlite, jobpact::contract::BackendFactory{"sqlite", [](auto clock) {
//         return jobpact::contract::BackendSet{MakeSqliteQueue(clock), ...};
//       }});
//
//   # CMake (anywhere after tests/contract has been added)
//   jobpact_add_contract_test(sqlite_contract_test sqlite_contract_test.cc LIBS jobpact::sqlite)
//
// Each make() call must return a FRESH, EMPTY set of stores on the given
// clock (all time must come from it). A member left null skips the suites
// that need it; a factory whose service is absent (Redis, PostgreSQL not
// running) returns an all-null set and every test skips.
//
// The suites pin down the semantics the interface headers leave open, the
// same way the in-memory reference implements them (see
// jobpact/in_memory/*.h): a lease or lock is expired when now >= expires_at;
// a dedup match is now - enqueued_at < window; ready_at >= enqueued_at; the
// creation history entry has from == to.
#ifndef JOBPACT_TESTS_CONTRACT_BACKEND_CONTRACT_H_
#define JOBPACT_TESTS_CONTRACT_BACKEND_CONTRACT_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_backend.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace contract {

struct BackendSet {
  std::shared_ptr<QueueBackend> queue;
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
};

struct BackendFactory {
  // Used in test names: letters, digits and '_' only.
  std::string name;
  // Each call gives a FRESH, EMPTY set on the given clock.
  std::function<BackendSet(std::shared_ptr<jobpact::testing::ManualClock>)> make;
};

inline void PrintTo(const BackendFactory& f, std::ostream* os) { *os << f.name; }

// gtest parameter names: the factory's name.
struct BackendFactoryName {
  std::string operator()(const ::testing::TestParamInfo<BackendFactory>& info) const {
    return info.param.name;
  }
};

// The fixture every suite shares: a ManualClock at a fixed start and a fresh
// backend set made on it.
class BackendContractTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;

  TimePoint Now() const { return clock_->Now(); }
  void Advance(Duration d) { clock_->Advance(d); }

  // A ready-to-store envelope (as PrepareForEnqueue would leave it).
  Envelope MakeJob(std::string id, std::string type = "test.job", int priority = 0,
                   std::string queue = "default") const;
  // Enqueues (default options) and asserts success; returns the job id.
  std::string Put(const Envelope& env);
  // Dequeues up to max_jobs from `queues` (empty: all) as `worker`.
  std::vector<Delivery> Take(int max_jobs = 1, std::vector<std::string> queues = {},
                             std::string worker = "w1");
  // Dequeues exactly one job (from `queues`, empty: all) and asserts it is
  // `job_id`.
  Delivery TakeOne(const std::string& job_id, std::string worker = "w1",
                   std::vector<std::string> queues = {});
  // Gets a record and asserts it exists.
  JobRecord MustGet(const std::string& job_id);
  // Enqueues, delivers and dead-letters a job with `failure`.
  void PutInDlq(const Envelope& env, std::string why, Failure failure);

  std::shared_ptr<jobpact::testing::ManualClock> clock_;
  BackendSet set_;
  QueueBackend* queue_ = nullptr;
  LockStore* locks_ = nullptr;
  IdempotencyStore* idem_ = nullptr;
};

// One fixture class per suite so that each shows up (and can be filtered)
// on its own.
class QueueBackendContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class DeadLetterContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class LockStoreContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class IdempotencyStoreContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class ConcurrencyContract : public BackendContractTest {};

}  // namespace contract
}  // namespace jobpact

// Instantiates every contract suite for one backend factory (an expression
// of type jobpact::contract::BackendFactory; commas are fine). Use at
// namespace scope, once per backend.
#define JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Prefix, ...)                                   \
  namespace jobpact {                                                                       \
  namespace contract {                                                                      \
  INSTANTIATE_TEST_SUITE_P(Prefix, QueueBackendContract, ::testing::Values(__VA_ARGS__),     \
                           BackendFactoryName());                                           \
  INSTANTIATE_TEST_SUITE_P(Prefix, DeadLetterContract, ::testing::Values(__VA_ARGS__),       \
                           BackendFactoryName());                                           \
  INSTANTIATE_TEST_SUITE_P(Prefix, LockStoreContract, ::testing::Values(__VA_ARGS__),        \
                           BackendFactoryName());                                           \
  INSTANTIATE_TEST_SUITE_P(Prefix, IdempotencyStoreContract, ::testing::Values(__VA_ARGS__), \
                           BackendFactoryName());                                           \
  INSTANTIATE_TEST_SUITE_P(Prefix, ConcurrencyContract, ::testing::Values(__VA_ARGS__),      \
                           BackendFactoryName());                                           \
  }                                                                                         \
  }                                                                                         \
  static_assert(true, "require a semicolon")

#endif  // JOBPACT_TESTS_CONTRACT_BACKEND_CONTRACT_H_
