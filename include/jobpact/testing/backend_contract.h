// File: jobpact/testing/backend_contract.h
//
// The backend conformance suite (SPEC 9): the TEST_P suites that every
// QueueBackend, LockStore and IdempotencyStore must pass, the same ones the
// in-memory and SQLite backends run. A backend of your own joins with a
// factory and one line in a test source of yours:
//
//   // my_store_contract_test.cc
//   #include "jobpact/testing/backend_contract.h"
//   #include "my_store.h"
//
//   JOBPACT_INSTANTIATE_BACKEND_CONTRACT(
//       MyStore, jobpact::testing::BackendFactory{"my_store", [](auto clock) {
//         return jobpact::testing::BackendSet{std::make_shared<MyQueueBackend>(clock),
//                                             std::make_shared<MyLockStore>(clock),
//                                             std::make_shared<MyIdempotencyStore>(clock)};
//       }});
//
//   # CMakeLists.txt
//   find_package(jobpact CONFIG REQUIRED COMPONENTS contract)  # finds GTest too
//   add_executable(my_store_contract_test my_store_contract_test.cc)
//   target_link_libraries(my_store_contract_test PRIVATE my_store jobpact::contract
//                         GTest::gtest_main)
//   include(GoogleTest)
//   gtest_discover_tests(my_store_contract_test)
//
// The suite brings no main(): link GTest::gtest_main (or GTest::gmock_main)
// or your own. In this source tree, tests/contract/CMakeLists.txt defines
// jobpact_add_contract_test(<target> <source> LIBS <libs>) for the same.
//
// The factory contract. Each make(clock) call must return a FRESH, EMPTY set
// of stores (no job, lock or claim left by an earlier test), all on the given
// clock: every time they use must come from it, since the tests move it by
// hand. The stores are shared_ptrs, so a set may alias one object that owns
// them all (and, say, removes a temp directory when the last goes). A member
// left null skips the suites that need it (a queue-only backend passes
// nullptr locks and idempotency); a factory whose service is absent (a
// Redis or PostgreSQL server not running) returns an all-null set and every
// test is skipped with "backend unavailable". make() may report its own
// failures with ADD_FAILURE(). One line per backend: several backends may
// be instantiated in one program, each under its own Prefix and name.
//
// The suites pin down what the interface headers leave open, as the
// in-memory reference implements it (see jobpact/in_memory/*.h): a lease or
// lock is expired when now >= expires_at; a dedup match is
// now - enqueued_at < window; ready_at >= enqueued_at; the creation history
// entry has from == to. A StoreBackend (jobpact/store_backend.h) gets most
// of this from the engine; the suite checks what its storage primitives do.
//
// How the suite gets into your program. The TEST_P suites are compiled into
// the static library jobpact::contract. A linker takes an object file out of
// a static library only when something already linked refers to a symbol it
// defines, and nothing refers to a file that only registers tests, so those
// registrations could silently be dropped (a program with 0 tests, passing).
// JOBPACT_INSTANTIATE_BACKEND_CONTRACT therefore calls
// contract_internal::LinkAllSuites(), which is defined next to the fixture and
// calls one anchor function defined in each suite source: the linker must
// then pull every suite's object file in. This works with any linker and
// any build system (a plain -ljobpact_contract too), with no
// --whole-archive and no OBJECT library.
//
// Tests run under the names <Prefix>/<Suite>.<Test>/<factory name>, the
// suites being QueueBackendContract, DeadLetterContract, LockStoreContract,
// IdempotencyStoreContract, ConcurrencyContract and CompletionGuardsContract
// (among others), so
// --gtest_filter='*LockStoreContract*' runs one of them.
#ifndef JOBPACT_TESTING_BACKEND_CONTRACT_H_
#define JOBPACT_TESTING_BACKEND_CONTRACT_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace testing {

// The stores one backend offers; any may be null (its suites are skipped).
struct BackendSet {
  std::shared_ptr<QueueBackend> queue;
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
  // The queue's operator side; null: the queue itself if it is a QueueAdmin
  // (every StoreBackend is). A queue without one fails the suites.
  std::shared_ptr<QueueAdmin> admin = nullptr;
  // The shared rate limiters (jobpact/rate_limit_store.h); null skips
  // RateLimitStoreContract.
  std::shared_ptr<RateLimitStore> rate_limits = nullptr;
};

struct BackendFactory {
  // Used in test names: letters, digits and '_' only.
  std::string name;
  // Each call gives a FRESH, EMPTY set on the given clock (see above).
  std::function<BackendSet(std::shared_ptr<ManualClock>)> make;
};

inline void PrintTo(const BackendFactory& f, std::ostream* os) { *os << f.name; }

// gtest parameter names: the factory's name.
struct BackendFactoryName {
  std::string operator()(const ::testing::TestParamInfo<BackendFactory>& info) const {
    return info.param.name;
  }
};

// The fixture every suite shares: a ManualClock at a fixed start and a fresh
// backend set made on it. Backend-specific tests may derive from it too.
class JOBPACT_EXPORT BackendContractTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;

  TimePoint Now() const { return clock_->Now(); }
  void Advance(Duration d) { clock_->Advance(d); }

  // A ready-to-store envelope (as PrepareForEnqueue would leave it).
  Envelope MakeJob(std::string id, std::string type = "test.job", int priority = 0,
                   std::string queue = "default") const;
  // Enqueues (default options) and expects success; returns the job id.
  std::string Put(const Envelope& env);
  // Dequeues up to max_jobs from `queues` (empty: all) as `worker`.
  std::vector<Delivery> Take(int max_jobs = 1, std::vector<std::string> queues = {},
                             std::string worker = "w1");
  // Dequeues exactly one job (from `queues`, empty: all) and expects it to
  // be `job_id`.
  Delivery TakeOne(const std::string& job_id, std::string worker = "w1",
                   std::vector<std::string> queues = {});
  // Gets a record and expects it to exist.
  JobRecord MustGet(const std::string& job_id);
  // Enqueues, delivers and dead-letters a job with `failure`.
  void PutInDlq(const Envelope& env, std::string why, Failure failure);
  // A completion to `to` with `reason` (nothing else set).
  static Completion Outcome(JobStatus to, std::string reason);

  std::shared_ptr<ManualClock> clock_;
  BackendSet set_;
  QueueBackend* queue_ = nullptr;
  QueueAdmin* admin_ = nullptr;
  LockStore* locks_ = nullptr;
  IdempotencyStore* idem_ = nullptr;
  RateLimitStore* rates_ = nullptr;
};

// One fixture class per suite so that each shows up (and can be filtered)
// on its own; each skips its tests when the set lacks its store.
class JOBPACT_EXPORT QueueBackendContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class JOBPACT_EXPORT DeadLetterContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
// The operator side: listing, cancel, control state obeyed by the lease
// step, published policies.
class JOBPACT_EXPORT QueueAdminContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class JOBPACT_EXPORT LockStoreContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class JOBPACT_EXPORT IdempotencyStoreContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class JOBPACT_EXPORT RateLimitStoreContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
class JOBPACT_EXPORT ConcurrencyContract : public BackendContractTest {};
// Completion::guards: a store that keeps locks and claims beside its jobs
// releases and records them with the completion; a StoreBackend that does
// not refuses them. Needs the queue, the lock store and the idempotency
// store.
class JOBPACT_EXPORT CompletionGuardsContract : public BackendContractTest {
 protected:
  void SetUp() override;
};
// Count retention of finished jobs (QueueAdmin::TrimFinished). Skipped for
// a store that does not implement it (StoreBackend::DeleteSurplusJobs'
// default: kUnimplemented), which is retained by age only.
class JOBPACT_EXPORT FinishedRetentionContract : public BackendContractTest {
 protected:
  void SetUp() override;
  // Enqueues (with `dedup_key`, if any), delivers and ends a job of `type`
  // in final `status`, then moves the clock one second (each job finishes
  // at its own time).
  void Finish(const std::string& id, const std::string& type, JobStatus status,
              const std::string& dedup_key = "");
  // Those of `ids` still stored, in the order given.
  std::vector<std::string> Present(const std::vector<std::string>& ids);
};

namespace contract_internal {
// Calls the anchor of every suite source, so that a program calling it links
// every suite (see "How the suite gets into your program" above). Returns 0.
JOBPACT_EXPORT int LinkAllSuites();
}  // namespace contract_internal

}  // namespace testing
}  // namespace jobpact

// Instantiates every contract suite for one backend factory (an expression
// of type jobpact::testing::BackendFactory; commas are fine). Use at global
// namespace scope, once per backend; Prefix (an identifier) starts the test
// names.
#define JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Prefix, ...)                                     \
  namespace jobpact {                                                                         \
  namespace testing {                                                                         \
  /* Pulls every suite out of the static library (see the file comment). */                   \
  [[maybe_unused]] static const int jobpact_contract_linked_##Prefix =                        \
      contract_internal::LinkAllSuites();                                                     \
  INSTANTIATE_TEST_SUITE_P(Prefix, QueueBackendContract, ::testing::Values(__VA_ARGS__),      \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, DeadLetterContract, ::testing::Values(__VA_ARGS__),        \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, QueueAdminContract, ::testing::Values(__VA_ARGS__),        \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, RateLimitStoreContract, ::testing::Values(__VA_ARGS__),    \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, LockStoreContract, ::testing::Values(__VA_ARGS__),         \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, IdempotencyStoreContract, ::testing::Values(__VA_ARGS__),  \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, ConcurrencyContract, ::testing::Values(__VA_ARGS__),       \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, CompletionGuardsContract, ::testing::Values(__VA_ARGS__),  \
                           BackendFactoryName());                                             \
  INSTANTIATE_TEST_SUITE_P(Prefix, FinishedRetentionContract, ::testing::Values(__VA_ARGS__), \
                           BackendFactoryName());                                             \
  }                                                                                           \
  }                                                                                           \
  static_assert(true, "require a semicolon")

#endif  // JOBPACT_TESTING_BACKEND_CONTRACT_H_
