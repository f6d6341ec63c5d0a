// hello_job: the smallest complete jobpact program.
//
// It wires a JobRunner to the in-memory backends (no server needed),
// registers one handler, enqueues one job, starts the worker threads, waits
// until the job reaches a final status, shuts down gracefully, and prints
// the job's record: its status and its history (every transition the job
// went through, each with a time and a reason).
//
// Run it:   ./build/examples/hello_job
// Exit code: 0 if the job succeeded, 1 otherwise (it doubles as a smoke test).
//
// While it runs, the runner writes one structured log line per transition
// to stderr (job_id, job_type, attempt, ... on every line).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "jobpact/in_memory.h"   // InMemoryQueueBackend, InMemoryMetricsSink, ...
#include "jobpact/job_runner.h"  // JobRunner, JobContext, Envelope, Status

int main() {
  // 1. Backends. Every piece of state lives behind an interface; for a
  //    single process the in-memory implementations are enough. The clock is
  //    injected too (tests use a ManualClock instead; see retries example).
  std::shared_ptr<jobpact::Clock> clock = jobpact::SystemClock::Default();
  auto queue = std::make_shared<jobpact::InMemoryQueueBackend>(clock);

  jobpact::JobRunnerOptions options;
  options.queue = queue;  // Required. Locks and idempotency default to in-memory.
  options.clock = clock;
  options.workers = 2;

  // 2. The runner. Create() validates the options and says which one is bad.
  jobpact::Result<std::unique_ptr<jobpact::JobRunner>> created =
      jobpact::JobRunner::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "Create: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<jobpact::JobRunner> runner = std::move(created).value();

  // 3. A handler: business logic only. It reads the JSON payload, does its
  //    work and returns Status::Ok(). (Returning an error Status or throwing
  //    fails the attempt; the runner decides whether to retry.)
  jobpact::Status s =
      runner->Handle("greeting.send", [](jobpact::JobContext& ctx) -> jobpact::Status {
        std::printf("handler: attempt %d, payload %s\n", ctx.attempt(), ctx.payload().c_str());
        ctx.SetResult(R"({"sent":true})");  // Kept in the job record.
        return jobpact::Status::Ok();
      });
  if (!s.ok()) {
    std::fprintf(stderr, "Handle: %s\n", s.ToString().c_str());
    return 1;
  }

  // 4. Enqueue a job. Only job_type and payload are needed; job_id,
  //    created_at, attempt, timeouts... are filled with the contract defaults.
  jobpact::Envelope job;
  job.job_type = "greeting.send";
  job.payload = R"({"to":"ada@example.com"})";
  job.trace_id = "trc_hello";  // Optional: carried into every log line.
  jobpact::Result<jobpact::EnqueueResult> enqueued = runner->Enqueue(job);
  if (!enqueued.ok()) {
    std::fprintf(stderr, "Enqueue: %s\n", enqueued.status().ToString().c_str());
    return 1;
  }
  const std::string job_id = enqueued->job_id;
  std::printf("enqueued %s\n", job_id.c_str());

  // 5. Start the worker threads and wait (at most 3 s) until the job is in a
  //    final status: succeeded, failed or discarded.
  s = runner->Start();
  if (!s.ok()) {
    std::fprintf(stderr, "Start: %s\n", s.ToString().c_str());
    return 1;
  }
  jobpact::JobRecord record;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < give_up) {
    jobpact::Result<jobpact::JobRecord> r = queue->Get(job_id);
    if (r.ok()) record = *r;
    if (r.ok() && jobpact::IsFinal(r->status)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // 6. Graceful shutdown: stop taking work, give running jobs up to 5 s.
  s = runner->Shutdown(jobpact::Seconds(5));
  if (!s.ok()) std::fprintf(stderr, "Shutdown: %s\n", s.ToString().c_str());

  // 7. The record: status, attempts, stored result and history.
  std::printf("\nstatus:  %s\n", std::string(jobpact::JobStatusName(record.status)).c_str());
  std::printf("attempt: %d of %d\n", record.envelope.attempt, record.envelope.max_attempts);
  std::printf("result:  %s\n", record.result.c_str());
  std::printf("history:\n");
  for (const jobpact::Transition& t : record.history) {
    std::printf("  %s  %-15s -> %-15s (%s)\n", jobpact::FormatRfc3339(t.at).c_str(),
                std::string(jobpact::JobStatusName(t.from)).c_str(),
                std::string(jobpact::JobStatusName(t.to)).c_str(), t.reason.c_str());
  }
  return record.status == jobpact::JobStatus::kSucceeded ? 0 : 1;
}
