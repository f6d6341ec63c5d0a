// The README's code, compiled and run. ReadmeTest.EveryCodeBlockIsHere fails
// if a README block no longer appears verbatim below.
#include <gtest/gtest.h>

#include <string>

#include "tests/docs/doc_blocks.h"
// The README's includes:
#include "jobpact/jobpact.h"
#include "jobpact/testing/harness.h"

namespace {

void ServiceSnippet() {
  auto clock = jobpact::SystemClock::Default();
  jobpact::JobRunnerOptions opts;
  opts.backend = jobpact::InMemoryBackend(clock);  // or jobpact::OpenBackend("sqlite:///...")
  opts.workers = 4;
  auto runner = jobpact::JobRunner::Create(opts).value();

  jobpact::Status s = runner->Handle("invoice.generate", [](jobpact::JobContext& ctx) {
    // ctx.payload() is the JSON payload. Return a Status or throw:
    // TransientError retries with backoff, PermanentError dead-letters at once.
    ctx.Log(jobpact::LogLevel::kInfo, "issuing the invoice");
    return jobpact::Status::Ok();
  });

  jobpact::Envelope job;
  job.job_type = "invoice.generate";
  job.payload = R"({"order_id":"ord_987"})";
  job.idempotency_key = "invoice.generate:ord_987";  // the effect happens once
  job.lock_key = "order:ord_987";                    // one worker per order
  auto queued = runner->Enqueue(job);  // queued->job_id, or queued.status() says what is wrong
  s = runner->Start();
  // ... on shutdown:
  s = runner->Shutdown(jobpact::Seconds(30));

  // Not in the README: what the snippet must have achieved.
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(queued.ok()) << queued.status();
  auto record = opts.backend.admin->Get(queued->job_id);
  ASSERT_TRUE(record.ok()) << record.status();
  // Shutdown let the running job finish or gave its lease back.
  EXPECT_TRUE(record->status == jobpact::JobStatus::kSucceeded ||
              record->status == jobpact::JobStatus::kQueued)
      << jobpact::JobStatusName(record->status);
}

TEST(ReadmeTest, ServiceSnippetRuns) { ServiceSnippet(); }

TEST(ReadmeTest, TestingSnippetPasses) {
  jobpact::testing::Harness h;              // in-memory backends + manual clock
  int calls = 0;
  ASSERT_TRUE(h.Handle("invoice.generate", [&](jobpact::JobContext&) {
    return ++calls < 3 ? jobpact::Status::Unavailable("upstream 503") : jobpact::Status::Ok();
  }).ok());
  auto queued = h.Enqueue("invoice.generate", R"({"order_id":"ord_987"})");
  ASSERT_TRUE(queued.ok()) << queued.status();  // says which field is wrong
  std::string id = queued->job_id;
  ASSERT_TRUE(h.RunUntilIdle().ok());  // attempt 1 fails (transient) -> retry_scheduled
  h.AdvanceToNextRetry();              // move the manual clock to the retry time
  ASSERT_TRUE(h.RunUntilIdle().ok());  // attempt 2 fails
  h.AdvanceToNextRetry();
  ASSERT_TRUE(h.RunUntilIdle().ok());  // attempt 3 succeeds
  EXPECT_EQ(h.Job(id).status, jobpact::JobStatus::kSucceeded);
  EXPECT_EQ(calls, 3);
}

TEST(ReadmeTest, EveryCodeBlockIsHere) {
  const std::string root = jobpact::doc_blocks::SourceRoot();
  jobpact::doc_blocks::ExpectEveryCodeBlockIn(root + "README.md", root + "tests/docs/readme_test.cc", 2);
}

}  // namespace
