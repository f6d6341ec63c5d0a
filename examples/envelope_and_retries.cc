// Envelope validation and the retry schedule of a job, with no runner.
//
// Shows: parsing the SPEC's reference envelope, the precise per-field errors
// of a broken one, the delays a failing job would wait under the default
// policy (with a pinned random source, so the output is reproducible), and
// the policy table with a documented per-type override.
#include <cstdio>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/random.h"
#include "jobpact/retry_policy.h"

namespace {

constexpr const char* kReferenceEnvelope = R"({
  "job_id": "job_01HXYZ",
  "job_type": "invoice.generate",
  "tenant_id": "tenant_123",
  "payload": { "order_id": "ord_987", "customer_id": "cus_456" },
  "idempotency_key": "invoice.generate:ord_987",
  "attempt": 1,
  "max_attempts": 5,
  "scheduled_at": "2026-08-17T10:00:00Z",
  "created_at": "2026-08-17T09:58:00Z",
  "trace_id": "trc_abcd1234",
  "timeout_seconds": 30,
  "visibility_timeout_seconds": 45,
  "lock_key": "order:ord_987",
  "dedup_key": "invoice.generate:ord_987",
  "retry_policy": { "backoff": "exponential", "base_delay_seconds": 5,
                    "max_delay_seconds": 300, "jitter": true }
})";

// Every field here is wrong in its own way.
constexpr const char* kBrokenEnvelope = R"({
  "job_type": "invoice generate!",
  "payload": {"order_id": "ord_1"},
  "max_attempts": 0,
  "timeout_seconds": 30,
  "visibility_timeout_seconds": 32,
  "scheduled_at": "2026-08-17 10:00",
  "retry_policy": {"backoff": "linear"}
})";

}  // namespace

int main() {
  std::printf("== 1. The reference envelope\n");
  jobpact::Result<jobpact::Envelope> env = jobpact::ParseEnvelope(kReferenceEnvelope);
  if (!env.ok()) {
    std::printf("unexpected: %s\n", env.status().ToString().c_str());
    return 1;
  }
  std::printf("parsed %s (%s), max_attempts=%d, timeout=%.0fs, lease=%.0fs\n",
              env->job_id.c_str(), env->job_type.c_str(), env->max_attempts,
              jobpact::ToSeconds(env->timeout), jobpact::ToSeconds(env->visibility_timeout));
  std::printf("re-serialised: %s\n\n", jobpact::SerializeEnvelope(*env).c_str());

  std::printf("== 2. A broken envelope: every problem, each naming its field\n");
  std::vector<jobpact::FieldError> problems;
  jobpact::Result<jobpact::Envelope> bad = jobpact::ParseEnvelope(kBrokenEnvelope, {}, &problems);
  std::printf("ok=%s\n", bad.ok() ? "true" : "false");
  for (const jobpact::FieldError& p : problems) {
    std::printf("  %-28s %s\n", p.field.c_str(), p.message.c_str());
  }
  std::printf("\n");

  std::printf("== 3. The retry schedule of a job that keeps failing transiently\n");
  jobpact::RetryPolicy policy;  // SPEC 11 defaults.
  policy.backoff = *env->retry_policy;
  auto random = jobpact::MakeSeededRandomSource(7);
  jobpact::Duration previous{};
  for (int attempt = 1; attempt <= policy.max_attempts; ++attempt) {
    jobpact::RetryDecision d = jobpact::DecideRetry(policy, jobpact::FailureClass::kTransient,
                                                    attempt, random->NextUnit(), previous);
    if (d.kind == jobpact::RetryDecision::Kind::kRetry) {
      std::printf("  attempt %d failed -> retry in %6.2fs\n", attempt,
                  jobpact::ToSeconds(d.delay));
      previous = d.delay;
    } else {
      std::printf("  attempt %d failed -> dead-lettered (%s)\n", attempt, d.reason.c_str());
    }
  }
  jobpact::RetryDecision poison = jobpact::DecideRetry(
      policy, jobpact::FailureClass::kPermanent, 1, random->NextUnit(), jobpact::Duration{});
  std::printf("  a permanent error on attempt 1 -> %s (%s)\n\n",
              poison.kind == jobpact::RetryDecision::Kind::kDeadLetter ? "dead-lettered" : "?",
              poison.reason.c_str());

  std::printf("== 4. Policies: the default and a documented override\n");
  jobpact::PolicyRegistry registry;
  jobpact::RetryPolicy slow = registry.Default();
  slow.max_attempts = 8;
  slow.backoff.max_delay = jobpact::Seconds(900);
  jobpact::Status s = registry.Override("report.build", slow, "");
  std::printf("override without a reason: %s\n", s.ToString().c_str());
  s = registry.Override("report.build", slow,
                        "warehouse queries queue for up to 15 min at month end");
  std::printf("override with a reason:    %s\n", s.ToString().c_str());
  std::printf("%s\n", registry.ToTable().c_str());
  return 0;
}
