// idempotency_and_locks: three different tools, three different problems
// (SPEC 6). Queues deliver at least once, so every job may run twice.
//
//   1. Idempotency key: the business effect happens once even when the same
//      work is enqueued twice. The second job is skipped ("idempotent_skip")
//      and gets the first one's stored result.
//   2. Lock + fencing token: a lock limits concurrency on a resource, but a
//      worker can stall past its lock's TTL. Each acquisition hands the
//      handler a strictly increasing fencing token; the resource refuses
//      writes carrying a token older than one it has already seen.
//   3. Dedup key: two equivalent messages become one job at enqueue
//      (duplicate = true, the existing job id is returned).
//
// Driven by a testing::Harness (in-memory backends + ManualClock): no
// threads, no sleeps. Exit code 0 if everything behaves as described.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "jobpact/testing/harness.h"

namespace {

// A resource that protects itself with fencing tokens (think: a database row
// with a "last_token" column, written with UPDATE ... WHERE last_token <= ?).
struct Account {
  std::uint64_t highest_token = 0;
  int balance = 0;
  bool Credit(std::uint64_t token, int amount) {
    if (token < highest_token) return false;  // A stale owner: refuse.
    highest_token = token;
    balance += amount;
    return true;
  }
};

}  // namespace

int main() {
  using jobpact::JobContext;
  using jobpact::JobStatus;
  using jobpact::Status;
  namespace metric = jobpact::metric;
  jobpact::testing::Harness h([](jobpact::JobRunnerOptions& o) {
    o.log_level = jobpact::LogLevel::kOff;  // This example prints its own story.
  });
  bool ok = true;
  auto expect = [&](bool condition, const char* what) {
    std::printf("%s %s\n", condition ? "ok  " : "FAIL", what);
    ok = ok && condition;
  };

  // --- 1. One idempotency key, enqueued twice -------------------------------
  std::map<std::string, int> invoices;  // The side effect we must not repeat.
  h.Handle("invoice.generate", [&](JobContext& ctx) -> Status {
     ++invoices[ctx.envelope().idempotency_key];
     ctx.SetResult(R"({"invoice_id":"inv_001"})");  // Stored with the key.
     return Status::Ok();
   }).IgnoreError();
  jobpact::Envelope invoice;
  invoice.job_type = "invoice.generate";
  invoice.payload = R"({"order_id":"ord_987"})";
  invoice.idempotency_key = "invoice.generate:ord_987";  // Stable: from the business id.
  std::string first = h.Enqueue(invoice).value().job_id;
  std::string second = h.Enqueue(invoice).value().job_id;  // e.g. a retried HTTP request.
  expect(h.RunUntilIdle().ok(), "ran both jobs");
  expect(invoices["invoice.generate:ord_987"] == 1, "the invoice was issued once");
  expect(h.Job(first).reason == "succeeded", "first job: succeeded (ran the handler)");
  expect(h.Job(second).status == JobStatus::kSucceeded && h.Job(second).reason == "idempotent_skip",
         "second job: succeeded with reason idempotent_skip");
  expect(h.Job(second).result == R"({"invoice_id":"inv_001"})", "...and the stored result");
  expect(h.metrics().CounterTotal(metric::kIdempotentSkips) == 1, "one idempotent skip counted");

  // --- 2. A lock and its fencing token ----------------------------------------
  // Attempt 1 stalls (a GC pause, a slow disk) for longer than its lease and
  // lock TTL (the visibility timeout, 45 s by default). Meanwhile another
  // worker recovers the job and runs it as attempt 2 with a newer token.
  Account account;
  h.Handle("account.credit", [&](JobContext& ctx) -> Status {
     std::printf("     attempt %d holds the lock with fencing token %llu\n", ctx.attempt(),
                 static_cast<unsigned long long>(ctx.fencing_token()));
     if (ctx.attempt() == 1) {
       h.clock().Advance(jobpact::Seconds(60));  // The stall...
       // ...while a second worker takes over.
       expect(h.RunUntilIdle().ok(), "a second worker ran meanwhile");
     }
     if (!account.Credit(ctx.fencing_token(), 100)) {
       std::printf("     attempt %d: write refused, token %llu is stale\n", ctx.attempt(),
                   static_cast<unsigned long long>(ctx.fencing_token()));
       return Status::Aborted("stale fencing token");
     }
     return Status::Ok();
   }).IgnoreError();
  jobpact::Envelope credit;
  credit.job_type = "account.credit";
  credit.lock_key = "account:42";  // One writer per account.
  std::string credit_id = h.Enqueue(credit).value().job_id;
  expect(h.RunUntilIdle().ok(), "ran the credit job");
  jobpact::JobRecord r = h.Job(credit_id);
  expect(account.balance == 100, "the account was credited once");
  expect(r.status == JobStatus::kSucceeded && r.envelope.attempt == 2,
         "the job succeeded on attempt 2");
  expect(r.lease_recoveries == 1, "one crash recovery recorded (reason lease_expired)");
  expect(h.metrics().CounterTotal(metric::kStaleCompletions) == 1,
         "the stalled attempt's late outcome was refused (fenced completion)");

  // --- 3. Dedup at enqueue ------------------------------------------------------
  h.Handle("email.welcome", [](JobContext&) { return Status::Ok(); }).IgnoreError();
  jobpact::Envelope email;
  email.job_type = "email.welcome";
  email.payload = R"({"customer_id":"cus_456"})";
  email.dedup_key = "email.welcome:cus_456";  // Equivalent messages share it.
  jobpact::EnqueueResult e1 = h.Enqueue(email).value();
  jobpact::EnqueueResult e2 = h.Enqueue(email).value();  // Within the 5 min window.
  expect(!e1.duplicate && e2.duplicate && e2.job_id == e1.job_id,
         "the second enqueue returned the existing job with duplicate=true");
  expect(h.metrics().CounterTotal(metric::kDedupHits) == 1, "one dedup hit counted");
  expect(h.RunUntilIdle().ok(), "ran the email job");
  expect(h.StatusOf(e1.job_id) == JobStatus::kSucceeded, "the one email job ran");

  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
