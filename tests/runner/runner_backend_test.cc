// How JobRunner::Create takes its stores (JobRunnerOptions::backend, or one
// by one): a bundle is used whole, a bundle and loose stores together are
// refused, and a queue shared beyond this process never gets the in-memory
// fallback for its locks or idempotency store. (With SQLite, the same is
// checked on a real SQLite queue in tests/backends/backend_url_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jobpact/backend.h"
#include "jobpact/in_memory.h"
#include "jobpact/job_runner.h"
#include "jobpact/queue_backend_wrapper.h"
#include "jobpact/testing/failing_backends.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::ManualClock;
using testing::StatusIs;

// Stands for a queue that other processes share (SQLite, Redis, ...): the
// in-memory queue under another name.
class SharedLookingQueue final : public QueueBackendWrapper {
 public:
  using QueueBackendWrapper::QueueBackendWrapper;
  std::string_view Name() const override { return "shared_test"; }
};

class RunnerBackendTest : public ::testing::Test {
 protected:
  JobRunnerOptions Options() const {
    JobRunnerOptions o;
    o.clock = clock_;
    o.log_level = LogLevel::kOff;
    o.workers = 1;
    return o;
  }
  std::shared_ptr<QueueBackend> SharedQueue() const {
    return std::make_shared<SharedLookingQueue>(std::make_shared<InMemoryQueueBackend>(clock_));
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(RunnerBackendTest, UsesTheStoresOfTheBundle) {
  BackendBundle bundle = InMemoryBackend(clock_);
  JobRunnerOptions o = Options();
  o.backend = bundle;
  Result<std::unique_ptr<JobRunner>> runner = JobRunner::Create(o);
  ASSERT_THAT(runner, IsOk());
  const JobRunnerOptions& used = (*runner)->options();
  EXPECT_EQ(used.queue, bundle.queue);
  EXPECT_EQ(used.locks, bundle.locks);
  EXPECT_EQ(used.idempotency, bundle.idempotency);
  EXPECT_EQ(used.backend.queue, bundle.queue);
  EXPECT_EQ(used.backend.name, "in_memory");
  EXPECT_EQ(used.backend.url, "memory:");

  ASSERT_THAT((*runner)->Handle("t",
                                [](JobContext& ctx) {
                                  ctx.SetResult("done");
                                  return Status::Ok();
                                }),
              IsOk());
  Envelope env;
  env.job_type = "t";
  env.idempotency_key = "t:1";
  ASSERT_THAT((*runner)->Enqueue(env), IsOk());
  ASSERT_THAT((*runner)->RunUntilIdle(), IsOk());
  // The claim went to the bundle's store, not to one made up by Create.
  Result<std::optional<IdempotencyRecord>> record = bundle.idempotency->Get("t:1");
  ASSERT_THAT(record, IsOk());
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->result, "done");
}

TEST_F(RunnerBackendTest, RefusesABundleAndLooseStoresTogether) {
  JobRunnerOptions o = Options();
  o.backend = InMemoryBackend(clock_);
  o.queue = std::make_shared<InMemoryQueueBackend>(clock_);
  EXPECT_THAT(JobRunner::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("backend and queue/locks/idempotency are both set")));
  JobRunnerOptions locks_too = Options();
  locks_too.backend = InMemoryBackend(clock_);
  locks_too.locks = std::make_shared<InMemoryLockStore>(clock_);
  EXPECT_THAT(JobRunner::Create(locks_too).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("both set")));
}

TEST_F(RunnerBackendTest, RefusesNoQueueAtAll) {
  EXPECT_THAT(JobRunner::Create(Options()).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a QueueBackend is required")));
}

TEST_F(RunnerBackendTest, RefusesASharedQueueWithoutItsLocksAndIdempotency) {
  JobRunnerOptions o = Options();
  o.queue = SharedQueue();
  EXPECT_THAT(
      JobRunner::Create(o).status(),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(HasSubstr("the queue is \"shared_test\" but locks and idempotency "
                               "are not set"),
                     HasSubstr("must come from the same backend"), HasSubstr("pass the bundle"))));
  o.locks = std::make_shared<InMemoryLockStore>(clock_);
  EXPECT_THAT(JobRunner::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("but idempotency is not set")));
  o.locks = nullptr;
  o.idempotency = std::make_shared<InMemoryIdempotencyStore>(clock_);
  EXPECT_THAT(JobRunner::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("but locks is not set")));
}

TEST_F(RunnerBackendTest, AcceptsASharedQueueWithBothStoresGiven) {
  // Given explicitly, the stores are the caller's choice (a test may mix).
  JobRunnerOptions o = Options();
  o.queue = SharedQueue();
  o.locks = std::make_shared<InMemoryLockStore>(clock_);
  o.idempotency = std::make_shared<InMemoryIdempotencyStore>(clock_);
  Result<std::unique_ptr<JobRunner>> runner = JobRunner::Create(o);
  ASSERT_THAT(runner, IsOk());
  EXPECT_EQ((*runner)->options().backend.name, "shared_test");
}

TEST_F(RunnerBackendTest, RefusesAnIncompleteBundleOfASharedQueue) {
  JobRunnerOptions o = Options();
  o.backend.queue = SharedQueue();
  o.backend.locks = std::make_shared<InMemoryLockStore>(clock_);
  EXPECT_THAT(JobRunner::Create(o).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("but idempotency is not set")));
}

TEST_F(RunnerBackendTest, KeepsTheInMemoryFallbackForAnInMemoryQueue) {
  JobRunnerOptions o = Options();
  auto queue = std::make_shared<InMemoryQueueBackend>(clock_);
  o.queue = queue;
  Result<std::unique_ptr<JobRunner>> runner = JobRunner::Create(o);
  ASSERT_THAT(runner, IsOk());
  const JobRunnerOptions& used = (*runner)->options();
  ASSERT_NE(used.locks, nullptr);
  ASSERT_NE(used.idempotency, nullptr);
  EXPECT_EQ(used.locks->Name(), "in_memory");
  EXPECT_EQ(used.idempotency->Name(), "in_memory");
  EXPECT_EQ(used.backend.queue, queue);
  EXPECT_EQ(used.backend.locks, used.locks);
  EXPECT_EQ(used.backend.name, "in_memory");

  // A wrapper (fault injection) around the in-memory queue keeps its name,
  // and so the fallback.
  JobRunnerOptions wrapped = Options();
  wrapped.queue = std::make_shared<testing::FailingQueueBackend>(queue);
  EXPECT_THAT(JobRunner::Create(wrapped), IsOk());
}

}  // namespace
}  // namespace jobpact
