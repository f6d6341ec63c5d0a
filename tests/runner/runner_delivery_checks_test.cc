// Step 1 of the pipeline on a store that delivers the envelopes it checked
// at enqueue (the in-memory store, used directly: StoreBackend::
// DeliversStoredEnvelopes). The runner skips only what the store checked for
// certain; its own bounds, which may be stricter than the producer's, still
// dead-letter a job at delivery (SPEC 1). ManualClock, no threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "jobpact/backend.h"
#include "jobpact/job_runner.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "jobpact/transitions.h"
#include "src/internal/stored_validation.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::ManualClock;

Envelope Job(std::string payload = R"({"order_id":"ord_1"})") {
  Envelope e;
  e.job_type = "email.send";
  e.payload = std::move(payload);
  return e;
}

// A producer with the default bounds stores `env` straight into the store;
// a runner with `bounds` on the same store then runs it.
struct Case {
  std::string name;
  ValidationOptions bounds;
  Envelope env;
  std::string problem;  // Empty: the job runs and succeeds.
};

TEST(RunnerDeliveryChecksTest, TheRunnersOwnBoundsStillApplyToWhatTheStoreChecked) {
  ValidationOptions small_payload;
  small_payload.max_payload_bytes = 8;
  ValidationOptions long_buffer;
  long_buffer.visibility_buffer = Seconds(600);
  ValidationOptions id_length;  // A generated job id (26) fits; this key does not.
  id_length.max_name_length = 26;
  Envelope keyed = Job();
  keyed.idempotency_key = "email.send:ord_1:and-a-long-tail";
  Envelope queued = Job();
  queued.queue = "billing-and-invoicing-queue-eu";
  std::vector<Case> cases = {
      {"within the bounds", ValidationOptions{}, Job(), ""},
      {"payload", small_payload, Job(), "payload"},
      {"queue name length", id_length, queued, "queue"},
      {"key length", id_length, keyed, "idempotency_key"},
      {"visibility buffer", long_buffer, Job(), "visibility_timeout_seconds"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto clock = std::make_shared<ManualClock>();
    BackendBundle store = InMemoryBackend(clock);
    Envelope env = c.env;
    PrepareForEnqueue(env, clock->Now());
    ASSERT_THAT(store.queue->Enqueue(env, EnqueueOptions{}).status(), IsOk());

    JobRunnerOptions o;
    o.backend = store;
    o.clock = clock;
    o.log_level = LogLevel::kOff;
    o.validation = c.bounds;
    auto runner = JobRunner::Create(o);
    ASSERT_THAT(runner.status(), IsOk());
    int runs = 0;
    ASSERT_THAT((*runner)->Handle("email.send",
                                  [&](JobContext&) {
                                    ++runs;
                                    return Status::Ok();
                                  }),
                IsOk());
    ASSERT_THAT((*runner)->RunUntilIdle().status(), IsOk());

    Result<JobRecord> r = store.admin->Get(env.job_id);
    ASSERT_THAT(r.status(), IsOk());
    if (c.problem.empty()) {
      EXPECT_EQ(r->status, JobStatus::kSucceeded);
      EXPECT_EQ(runs, 1);
      continue;
    }
    EXPECT_EQ(runs, 0);
    EXPECT_EQ(r->status, JobStatus::kDeadLettered);
    EXPECT_EQ(r->reason, reason::kInvalidEnvelope);
    ASSERT_TRUE(r->last_failure.has_value());
    EXPECT_THAT(r->last_failure->message, HasSubstr(c.problem));
  }
}

// The checks left out are those engine::CheckStorable makes: for anything
// it accepts, the bounds-only form finds exactly what ValidateEnvelope finds.
TEST(RunnerDeliveryChecksTest, BoundsOnlyFindsWhatTheFullCheckFindsInAStorableEnvelope) {
  Envelope env = Job(R"({"items":[{"sku":"a-1","qty":2}],"note":"x"})");
  env.idempotency_key = "email.send:ord_1";
  env.dedup_key = "email.send:ord_1";
  env.lock_key = "order:ord_1";
  env.tenant_id = "acme";
  PrepareForEnqueue(env, TimePoint{} + Seconds(1));
  ASSERT_THAT(engine::CheckStorable(env), IsOk());
  ValidationOptions tight;
  tight.max_payload_bytes = 10;
  tight.max_name_length = 6;
  tight.visibility_buffer = Seconds(3600);
  for (const ValidationOptions& bounds : {ValidationOptions{}, tight}) {
    std::vector<FieldError> full = ValidateEnvelope(env, bounds);
    std::vector<FieldError> quick = internal::ValidateStoredEnvelopeBounds(env, bounds);
    ASSERT_EQ(quick.size(), full.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      EXPECT_EQ(quick[i].field, full[i].field);
      EXPECT_EQ(quick[i].message, full[i].message);
    }
  }
  EXPECT_FALSE(ValidateEnvelope(env, tight).empty());
}

}  // namespace
}  // namespace jobpact
