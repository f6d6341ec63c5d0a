// retries_and_classification: how a failed attempt becomes a retry, a
// dead letter or a success -- shown deterministically, with no threads and
// no sleeps.
//
// A handler says how it failed in one of three ways:
//   - return a non-OK Status (kUnavailable is transient, kInvalidArgument
//     permanent, ...: see failure.h),
//   - throw jobpact::TransientError / jobpact::PermanentError,
//   - throw anything else; the job type's Classifier decides (here:
//     std::system_error with errc::connection_reset -> transient), and an
//     exception no rule matches is "unknown" (retried on a smaller budget).
//
// The job type has a per-type retry policy override (fixed, jitter-free
// exponential backoff 2 s, 4 s, 8 s...) which must carry a written reason.
// A testing::Harness (in-memory backends + ManualClock, part of the core
// library) turns the crank: RunUntilIdle() runs what is due, and
// AdvanceToNextRetry() jumps the clock to the next retry, so the schedule is
// exact. Exit code 0 if every job ends exactly as the comments say.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "jobpact/failure.h"
#include "jobpact/testing/harness.h"

namespace {

using jobpact::Status;

// The payload scripts what each attempt does, e.g. {"script":"reset,503,ok"}.
std::string StepFor(const std::string& payload, int attempt) {
  std::string script = payload.substr(payload.find(":\"") + 2);
  script = script.substr(0, script.find('"')) + ",";
  for (int i = 1; i < attempt; ++i) script = script.substr(script.find(',') + 1);
  return script.substr(0, script.find(','));
}

Status CapturePayment(jobpact::JobContext& ctx) {
  const std::string step = StepFor(ctx.payload(), ctx.attempt());
  if (step == "reset")  // Not a jobpact type: the Classifier rule below decides.
    throw std::system_error(std::make_error_code(std::errc::connection_reset), "psp:443");
  if (step == "503") return Status::Unavailable("PSP answered 503");  // Transient by code.
  if (step == "429") throw jobpact::TransientError("PSP rate-limited us", "http_429");
  if (step == "declined") throw jobpact::PermanentError("card declined", "card_declined");
  if (step == "bug") throw std::logic_error("amount < 0");  // Matches no rule: unknown.
  return Status::Ok();
}

// Runs what is due; false (and says why) if the run was refused.
bool RunDue(jobpact::testing::Harness& h) {
  jobpact::Result<int> deliveries = h.RunUntilIdle();
  if (!deliveries.ok())
    std::printf("UNEXPECTED: the run was refused: %s\n", deliveries.status().ToString().c_str());
  return deliveries.ok();
}

// Runs one job to its end, printing each wait; returns the waits in seconds.
std::vector<double> RunToTheEnd(jobpact::testing::Harness& h, const std::string& id) {
  std::vector<double> waits;
  if (!RunDue(h)) return waits;
  while (h.StatusOf(id) == jobpact::JobStatus::kRetryScheduled) {
    waits.push_back(jobpact::ToSeconds(h.AdvanceToNextRetry()));
    if (!RunDue(h)) break;
  }
  jobpact::JobRecord r = h.Job(id);
  std::printf("\n%s: %s after %d attempt(s), reason %s\n", r.envelope.payload.c_str(),
              std::string(jobpact::JobStatusName(r.status)).c_str(), r.envelope.attempt,
              r.reason.c_str());
  for (const jobpact::Transition& t : r.history)
    std::printf("  +%3.0fs %-15s -> %-15s %s\n", jobpact::ToSeconds(t.at - r.enqueued_at),
                std::string(jobpact::JobStatusName(t.from)).c_str(),
                std::string(jobpact::JobStatusName(t.to)).c_str(), t.reason.c_str());
  if (r.last_failure)
    std::printf("  last failure: %s %s: %s\n",
                std::string(jobpact::FailureClassName(r.last_failure->failure_class)).c_str(),
                r.last_failure->code.c_str(), r.last_failure->message.c_str());
  return waits;
}

}  // namespace

int main() {
  jobpact::testing::Harness h([](jobpact::JobRunnerOptions& o) {
    o.log_level = jobpact::LogLevel::kOff;  // This example prints its own story.
  });

  // The classifier: exception rules for this job type, first match wins.
  jobpact::HandlerOptions options;
  options.classifier.AddSystemError(std::errc::connection_reset, jobpact::FailureClass::kTransient);
  // The policy override, and the reason the contract requires for it.
  jobpact::RetryPolicy policy = h.runner().policies().Default();
  policy.backoff.kind = jobpact::BackoffKind::kExponential;
  policy.backoff.base_delay = jobpact::Seconds(2);  // 2 s, 4 s, 8 s, ... capped at 60 s
  policy.backoff.max_delay = jobpact::Seconds(60);
  policy.backoff.jitter = jobpact::JitterKind::kNone;
  options.policy = policy;
  options.policy_reason = "PSP asks for evenly spaced retries, no jitter (ticket PAY-42)";
  if (!h.Handle("payment.capture", CapturePayment, options).ok()) return 1;

  for (const std::string& rule : options.classifier.Describe())
    std::printf("classifier rule: %s\n", rule.c_str());
  std::printf("%s", h.runner().policies().ToTable().c_str());

  bool ok = true;
  auto expect = [&](bool condition, const char* what) {
    if (!condition) std::printf("UNEXPECTED: %s\n", what);
    ok = ok && condition;
  };
  using jobpact::JobStatus;

  // 1. Three transient failures, three different ways, then success.
  std::string a = h.Enqueue("payment.capture", R"({"script":"reset,503,429,ok"})").value().job_id;
  expect(RunToTheEnd(h, a) == std::vector<double>{2, 4, 8}, "waits of 2, 4 and 8 s");
  expect(h.StatusOf(a) == JobStatus::kSucceeded && h.Job(a).envelope.attempt == 4,
         "succeeded on attempt 4");

  // 2. A permanent failure: never retried, dead-lettered at once.
  std::string b = h.Enqueue("payment.capture", R"({"script":"declined"})").value().job_id;
  expect(RunToTheEnd(h, b).empty(), "no retry for a permanent error");
  expect(h.Job(b).reason == "permanent_error" && h.Job(b).last_failure->code == "card_declined",
         "dead-lettered as permanent_error / card_declined");

  // 3. An unclassified exception: retried on the smaller "unknown" budget
  //    (3 attempts by default), then dead-lettered.
  std::string c = h.Enqueue("payment.capture", R"({"script":"bug,bug,bug,ok"})").value().job_id;
  expect(RunToTheEnd(h, c) == std::vector<double>{2, 4}, "waits of 2 and 4 s");
  expect(h.Job(c).reason == "unknown_non_retryable" && h.Job(c).envelope.attempt == 3,
         "dead-lettered as unknown_non_retryable after 3 attempts");

  std::printf("\n%s\n", ok ? "OK: every job ended as expected" : "FAILED");
  return ok ? 0 : 1;
}
