// shutdown_and_timeouts: cooperative cancellation, heartbeats with a
// checkpoint, the execution timeout, and graceful shutdown (SPEC 5).
//
// C++ cannot kill a thread, so a long handler cooperates: it works in
// chunks, polls ctx.cancelled() between them (true once its deadline has
// passed, its lease was lost, or the runner is shutting down), and
// heartbeats with a small checkpoint that the next attempt can read.
//
//   Part 1: an export needs ~400 ms of work but has a 300 ms execution
//           timeout. Attempt 1 stops at its deadline: that is a transient
//           failure with reason "timeout". Attempt 2 resumes from the
//           checkpoint and finishes.
//   Part 2: Shutdown(grace) while a job runs and another waits in the
//           worker's batch: the running job finishes within the grace
//           period; the waiting one is given back (running -> queued,
//           reason "shutdown", no attempt spent) for another process.
//
// Real threads and the real clock, with short timeouts; well under 2 s.
// Exit code 0 if both parts behave as described.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "jobpact/in_memory.h"
#include "jobpact/job_runner.h"

namespace {

using jobpact::JobContext;
using jobpact::Status;
using std::chrono::milliseconds;

// Waits (at most 4 s) until the job's status satisfies `done`.
template <typename Pred>
jobpact::JobRecord WaitFor(jobpact::QueueAdmin& q, const std::string& id, Pred done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  jobpact::JobRecord r;
  while (std::chrono::steady_clock::now() < give_up) {
    if (auto got = q.Get(id); got.ok()) r = *got;
    if (done(r.status)) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return r;
}

}  // namespace

int main() {
  auto clock = jobpact::SystemClock::Default();
  auto queue = std::make_shared<jobpact::InMemoryQueueBackend>(clock);
  auto metrics = std::make_shared<jobpact::InMemoryMetricsSink>();
  jobpact::JobRunnerOptions options;
  options.queue = queue;
  options.metrics = metrics;
  options.workers = 1;
  options.log_level = jobpact::LogLevel::kWarn;  // Shows the timeout line.
  // The lease must exceed the execution timeout plus a buffer (default 5 s);
  // this example shrinks the buffer so its timeouts can be short.
  options.validation.visibility_buffer = milliseconds(100);

  // --- Part 1: timeout, heartbeat, checkpoint ----------------------------------
  auto runner = jobpact::JobRunner::Create(options).value();
  runner
      ->Handle("export.rows",
               [](JobContext& ctx) -> Status {
                 const int total_chunks = 16;  // 25 ms each: 400 ms of work.
                 int chunk = ctx.checkpoint().empty() ? 0 : std::stoi(ctx.checkpoint());
                 std::printf("attempt %d starts at chunk %d\n", ctx.attempt(), chunk);
                 while (chunk < total_chunks) {
                   if (ctx.cancelled()) {  // Deadline passed, lease lost, or shutdown.
                     std::printf("attempt %d cancelled at chunk %d\n", ctx.attempt(), chunk);
                     return Status::DeadlineExceeded("stopped at chunk " + std::to_string(chunk));
                   }
                   std::this_thread::sleep_for(milliseconds(25));  // One chunk of real work.
                   ++chunk;
                   // Renews the lease now and stores the progress; kAborted means the
                   // lease was lost: stop, the job runs elsewhere.
                   if (ctx.Heartbeat(std::to_string(chunk)).code() == jobpact::StatusCode::kAborted)
                     return Status::Aborted("lease lost");
                 }
                 return Status::Ok();
               })
      .IgnoreError();

  jobpact::Envelope job;
  job.job_type = "export.rows";
  job.timeout = milliseconds(300);             // Execution timeout per attempt.
  job.visibility_timeout = milliseconds(800);  // The lease, renewed while it runs.
  job.retry_policy = jobpact::BackoffSpec{jobpact::BackoffKind::kFixed, milliseconds(50), 1.0,
                                          milliseconds(50), jobpact::JitterKind::kNone};
  const std::string export_id = runner->Enqueue(job).value().job_id;
  runner->Start().IgnoreError();
  jobpact::JobRecord r = WaitFor(*queue, export_id, jobpact::IsFinal);
  runner->Shutdown(jobpact::Seconds(2)).IgnoreError();

  bool ok = r.status == jobpact::JobStatus::kSucceeded && r.envelope.attempt >= 2 &&
            r.history.size() > 2 && r.history[2].reason == "timeout" &&
            metrics->CounterTotal(jobpact::metric::kTimeouts) >= 1;
  std::printf("export: %s on attempt %d; attempt 1 ended with reason '%s'\n\n",
              std::string(jobpact::JobStatusName(r.status)).c_str(), r.envelope.attempt,
              r.history.size() > 2 ? r.history[2].reason.c_str() : "?");

  // --- Part 2: graceful shutdown ---------------------------------------------
  runner = jobpact::JobRunner::Create(options).value();
  std::atomic<bool> started{false};
  runner
      ->Handle("email.digest",
               [&](JobContext&) -> Status {
                 started = true;
                 std::this_thread::sleep_for(milliseconds(150));  // Finishes within the grace.
                 return Status::Ok();
               })
      .IgnoreError();
  jobpact::Envelope digest;
  digest.job_type = "email.digest";
  const std::string first = runner->Enqueue(digest).value().job_id;
  const std::string second = runner->Enqueue(digest).value().job_id;
  runner->Start().IgnoreError();  // One worker leases both, runs the first.
  while (!started) std::this_thread::sleep_for(milliseconds(1));
  runner->Shutdown(jobpact::Seconds(2)).IgnoreError();  // Stop taking work; wait <= 2 s.

  jobpact::JobRecord a = queue->Get(first).value();
  jobpact::JobRecord b = queue->Get(second).value();
  std::printf("running job: %s; waiting job: %s (reason '%s', attempt %d)\n",
              std::string(jobpact::JobStatusName(a.status)).c_str(),
              std::string(jobpact::JobStatusName(b.status)).c_str(), b.reason.c_str(),
              b.envelope.attempt);
  ok = ok && a.status == jobpact::JobStatus::kSucceeded &&
       b.status == jobpact::JobStatus::kQueued && b.reason == "shutdown" && b.envelope.attempt == 0;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
