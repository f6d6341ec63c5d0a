// dead_letter_queue: the DLQ is quarantine, not a bin (SPEC 7).
//
// A poison message (a report whose template does not exist) fails with a
// permanent error and is dead-lettered at once; a flaky fetch runs out of
// attempts; a malformed envelope is dead-lettered whole. The operator then:
//   - lists and filters the DLQ (by reason, failure class, job type),
//   - inspects an entry: reason, error class/code/message, attempts,
//     trace id, history,
//   - replays the poison message too early (it fails again and comes back,
//     now carrying an audit record of who replayed it, when and why),
//   - deploys the fix and replays it again: it succeeds,
//   - discards the fetch with a reason,
//   - purges entries past the retention period.
// The DLQ calls live on the QueueBackend (here the harness's in-memory one).
// Exit code 0 if everything behaves as described.
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "jobpact/testing/harness.h"

int main() {
  using jobpact::DlqAction;
  using jobpact::DlqFilter;
  using jobpact::JobContext;
  using jobpact::JobStatus;
  using jobpact::Status;
  jobpact::testing::Harness h([](jobpact::JobRunnerOptions& o) {
    o.log_level = jobpact::LogLevel::kOff;  // This example prints its own story.
  });
  jobpact::InMemoryQueueBackend& dlq = h.queue();  // Any QueueBackend has these calls.
  bool ok = true;
  auto expect = [&](bool condition, const char* what) {
    std::printf("%s %s\n", condition ? "ok  " : "FAIL", what);
    ok = ok && condition;
  };

  std::set<std::string> templates = {"monthly"};  // What is deployed.
  h.Handle("report.render", [&](JobContext& ctx) -> Status {
     const bool q3 = ctx.payload().find("q3") != std::string::npos;
     if (q3 && templates.count("q3") == 0)
       throw jobpact::PermanentError("template 'q3' does not exist", "no_template");
     return Status::Ok();
   }).IgnoreError();
  h.Handle("upstream.fetch", [](JobContext&) -> Status {
     return Status::Unavailable("upstream answered 503");  // Transient, every time.
   }).IgnoreError();

  jobpact::Envelope poison;
  poison.job_type = "report.render";
  poison.payload = R"({"template":"q3"})";
  poison.trace_id = "trc_q3_report";
  const std::string poison_id = h.Enqueue(poison).value().job_id;
  jobpact::Envelope fetch;
  fetch.job_type = "upstream.fetch";
  fetch.max_attempts = 2;
  const std::string fetch_id = h.Enqueue(fetch).value().job_id;
  // Malformed: EnqueueJson refuses it and keeps the raw text in the DLQ.
  Status bad = h.EnqueueJson(R"({"job_type":"report.render","timeout_seconds":-1})").status();
  std::printf("malformed envelope: %s\n", bad.ToString().c_str());
  // Run everything, jumping the clock over retry delays.
  expect(h.RunUntilSettled().ok(), "ran every job to its end");

  // --- List and filter -------------------------------------------------------
  expect(h.DeadLetters().size() == 3, "three entries in the DLQ");
  DlqFilter by_reason;
  by_reason.reason = "permanent_error";
  expect(h.DeadLetters(by_reason).size() == 1, "filter reason=permanent_error: 1");
  DlqFilter by_class;
  by_class.failure_class = jobpact::FailureClass::kTransient;
  expect(h.DeadLetters(by_class).size() == 1, "filter failure_class=transient: 1");
  DlqFilter by_type;
  by_type.job_type = "upstream.fetch";
  by_type.reason = "max_attempts_exceeded";
  expect(h.DeadLetters(by_type).size() == 1, "filter type=upstream.fetch, max_attempts: 1");

  // --- Inspect -----------------------------------------------------------------
  auto print_entry = [](const jobpact::DlqEntry& e) {
    std::printf("  %s %s, %d attempt(s), trace %s\n  reason %s: %s %s: %s\n", e.job_id.c_str(),
                e.job_type.c_str(), e.attempts, e.trace_id.c_str(), e.reason.c_str(),
                std::string(jobpact::FailureClassName(e.last_failure->failure_class)).c_str(),
                e.last_failure->code.c_str(), e.last_failure->message.c_str());
    for (const jobpact::Transition& t : e.history)
      std::printf("    %s %s -> %s (%s)\n", jobpact::FormatRfc3339(t.at).c_str(),
                  std::string(jobpact::JobStatusName(t.from)).c_str(),
                  std::string(jobpact::JobStatusName(t.to)).c_str(), t.reason.c_str());
    for (const std::string& a : e.audit) std::printf("    audit: %s\n", a.c_str());
  };
  jobpact::DlqEntry entry = dlq.GetDeadLetter(poison_id).value();
  print_entry(entry);
  expect(entry.last_failure->code == "no_template", "the error code is kept");

  // --- Replay: who and why are required, and recorded -----------------------
  DlqAction replay;
  expect(dlq.Replay(poison_id, replay).code() == jobpact::StatusCode::kInvalidArgument,
         "a replay without actor and reason is refused");
  replay.actor = "alice@oncall";
  replay.reason = "INC-311: retry after upstream fix";  // ...but the fix is not deployed yet.
  expect(dlq.Replay(poison_id, replay).ok(), "replayed (attempts reset)");
  expect(h.RunUntilSettled().ok(), "ran the replayed job");
  entry = dlq.GetDeadLetter(poison_id).value();  // Back in the DLQ, with its audit trail.
  print_entry(entry);
  expect(entry.audit.size() == 1, "the entry carries the replay's audit record");

  templates.insert("q3");  // Deploy the fix, then replay again.
  replay.reason = "INC-311: template q3 deployed in v1.4.2";
  expect(dlq.Replay(poison_id, replay).ok(), "replayed again");
  expect(h.RunUntilSettled().ok(), "ran the replayed job");
  expect(h.StatusOf(poison_id) == JobStatus::kSucceeded, "the report job succeeded");

  // --- Discard, and what cannot be replayed ---------------------------------
  DlqAction discard;
  discard.actor = "bob@oncall";
  discard.reason = "upstream item deleted; nothing to fetch";
  expect(dlq.Discard(fetch_id, discard).ok(), "the fetch was discarded");
  expect(h.Job(fetch_id).reason == "operator_discard", "its final reason: operator_discard");
  const std::string invalid_id = h.DeadLetters().at(0).job_id;
  expect(dlq.Replay(invalid_id, replay).code() == jobpact::StatusCode::kFailedPrecondition,
         "an invalid envelope cannot be replayed (fix it and enqueue it again)");

  // --- Purge after the retention period (14 days by default) ---------------
  // The runner's maintenance pass does this on its own (dlq_retention); here
  // it is called directly.
  h.clock().Advance(std::chrono::hours(24 * 15));
  jobpact::Result<int> purged = dlq.PurgeDeadLetters(h.clock().Now() - std::chrono::hours(24 * 14));
  expect(purged.ok() && *purged == 1 && h.DeadLetters().empty(), "the old entry was purged");

  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
