// Fills a store (any backend URL) with a workload that leaves jobs in the
// states the jobpact command shows and acts on, then prints what it made as
// one JSON document for tests/cli/cli_test.cc:
//   - 5 mail.send jobs succeeded (a JobRunner ran them);
//   - dead letters of every failure class: 3 pdf.render (permanent,
//     "permanent_error"), 2 sms.send (transient, "max_attempts_exceeded"),
//     2 report.build (unknown), and 120 bulk.import (permanent) -- more than
//     the replay threshold;
//   - mail.send paused (by "filler"), with 2 more jobs of it queued;
//   - the runner's retry policies published, one override with its reason;
//   - three held locks, each owned as a runner owns them (by the delivery's
//     lease token), each outliving its lease as a stuck lock does:
//       order:live     its job is running with a live lease (1 h),
//       order:final    its job succeeded and the release was lost,
//       order:expired  its job is running but the lease expired an hour ago
//                      (delivered through a store clock set an hour back);
//   - where the backend has a cache store (Redis): cache entries live for an
//     hour, 3 under "user:", 120 under "product:" (more than a screenful),
//     and keys that merely contain or resemble "user:" ("users:9",
//     "account:user:1", "user"); "cache" in the output gives their count.
// Usage: cli_fill URL
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/backend.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/operations.h"
#include "jobpact/testing/manual_clock.h"

namespace {

using jobpact::Status;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "cli_fill: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

void Check(const std::string& what, const Status& s) {
  if (!s.ok()) Die(what, s);
}

jobpact::Envelope Job(const std::string& type, int max_attempts = 0) {
  jobpact::Envelope e;
  e.job_type = type;
  e.payload = R"({"n":1})";
  e.max_attempts = max_attempts;
  return e;
}

// Enqueues a job with `lock_key` on `bundle`, delivers it there (its store
// clock decides the lease expiry) and takes its lock in `locks` for an hour,
// owned by the delivery's lease token.
jobpact::Delivery DeliverHolding(const jobpact::BackendBundle& bundle,
                                 const std::shared_ptr<jobpact::LockStore>& locks,
                                 const std::string& key) {
  jobpact::Envelope e = Job("order.sync");
  e.lock_key = key;
  e.timeout = jobpact::Seconds(600);
  e.visibility_timeout = jobpact::Seconds(3600);
  e.queue = "orders";
  jobpact::PrepareForEnqueue(e, std::chrono::system_clock::now());
  auto r = bundle.queue->Enqueue(e, {});
  if (!r.ok()) Die("enqueue " + key, r.status());
  jobpact::DequeueRequest req;
  req.queues = {"orders"};
  req.worker_id = "filler-worker";
  auto d = bundle.queue->Dequeue(req);
  if (!d.ok()) Die("dequeue " + key, d.status());
  if (d->size() != 1) Die("dequeue " + key, Status::Internal("expected one delivery"));
  auto lock = locks->Acquire(key, (*d)[0].lease.token, jobpact::Seconds(3600));
  if (!lock.ok()) Die("lock " + key, lock.status());
  return (*d)[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cli_fill URL\n");
    return 2;
  }
  const std::string url = argv[1];
  auto backend = jobpact::OpenBackend(url);
  if (!backend.ok()) Die("open " + url, backend.status());

  jobpact::JobRunnerOptions ro;
  ro.backend = *backend;
  ro.log_level = jobpact::LogLevel::kOff;
  ro.runner_id = "filler-runner";
  auto runner_or = jobpact::JobRunner::Create(ro);
  if (!runner_or.ok()) Die("runner", runner_or.status());
  jobpact::JobRunner& runner = **runner_or;
  jobpact::RetryPolicy bulk = runner.policies().Default();
  bulk.max_attempts = 2;
  bulk.max_unknown_attempts = 2;
  Check("override", runner.policies().Override("bulk.import", bulk,
                                               "imports are re-sent by the partner; see RB-3"));

  Check("handle", runner.Handle("mail.send", [](jobpact::JobContext&) { return Status::Ok(); }));
  Check("handle", runner.Handle("pdf.render", [](jobpact::JobContext&) {
    return Status::InvalidArgument("template missing");
  }));
  Check("handle", runner.Handle("bulk.import", [](jobpact::JobContext&) {
    return Status::InvalidArgument("bad row");
  }));
  Check("handle", runner.Handle("sms.send", [](jobpact::JobContext&) -> Status {
    throw jobpact::TransientError("gateway 503", "http_503");
  }));
  Check("handle", runner.Handle("report.build", [](jobpact::JobContext&) -> Status {
    throw std::runtime_error("warehouse said something odd");
  }));

  nlohmann::json out;
  auto enqueue = [&](const jobpact::Envelope& e, const char* bucket) {
    auto r = runner.Enqueue(e);
    if (!r.ok()) Die("enqueue", r.status());
    out[bucket].push_back(r->job_id);
  };
  for (int i = 0; i < 5; ++i) enqueue(Job("mail.send"), "succeeded");
  for (int i = 0; i < 3; ++i) enqueue(Job("pdf.render"), "dlq_permanent");
  for (int i = 0; i < 2; ++i) enqueue(Job("sms.send", 1), "dlq_transient");
  for (int i = 0; i < 2; ++i) enqueue(Job("report.build", 1), "dlq_unknown");
  for (int i = 0; i < 120; ++i) enqueue(Job("bulk.import"), "dlq_bulk");
  auto ran = runner.RunUntilIdle();
  if (!ran.ok()) Die("run", ran.status());

  auto ops = jobpact::Operations::Open(*backend);
  if (!ops.ok()) Die("ops", ops.status());
  Check("pause", (*ops)->PauseType("mail.send", "filler", "INC-1: relay down"));
  for (int i = 0; i < 2; ++i) enqueue(Job("mail.send"), "queued");
  ran = runner.RunUntilIdle();  // Leaves the paused type alone; publishes again if needed.
  if (!ran.ok()) Die("run", ran.status());

  // The locks, outside the runner, as a runner holds them.
  jobpact::Delivery live = DeliverHolding(*backend, backend->locks, "order:live");
  jobpact::Delivery final_d = DeliverHolding(*backend, backend->locks, "order:final");
  jobpact::Completion done;
  done.to = jobpact::JobStatus::kSucceeded;
  done.reason = std::string(jobpact::reason::kSucceeded);
  Check("complete order:final", backend->queue->Complete(final_d, done));
  // An hour back: the lease (1 h) ends now minus a minute; the lock, taken
  // on the real clock, lives an hour more.
  auto past = std::make_shared<jobpact::testing::ManualClock>(std::chrono::system_clock::now() -
                                                             jobpact::Seconds(3660));
  jobpact::BackendOpenOptions bo;
  bo.clock = past;
  auto then = jobpact::OpenBackend(url, bo);
  if (!then.ok()) Die("open (past clock)", then.status());
  jobpact::Delivery expired = DeliverHolding(*then, backend->locks, "order:expired");

  auto lock = [](const jobpact::Delivery& d, const char* key) {
    return nlohmann::json{{"key", key}, {"owner", d.lease.token}, {"job_id", d.lease.job_id}};
  };
  out["locks"] = {{"live", lock(live, "order:live")},
                  {"final", lock(final_d, "order:final")},
                  {"expired", lock(expired, "order:expired")}};
  out["succeeded"].push_back(final_d.lease.job_id);

  if (backend->cache != nullptr) {
    const auto now = std::chrono::system_clock::now();
    auto put = [&](const std::string& key) {
      jobpact::CacheEntry e;
      e.value = R"({"cached":")" + key + R"("})";
      e.fresh_until = e.stale_until = e.error_until = now + jobpact::Seconds(3600);
      e.as_of = e.stored_at = now;
      Check("cache put " + key, backend->cache->Put(key, e));
    };
    for (int i = 1; i <= 3; ++i) put("user:" + std::to_string(i));
    for (int i = 0; i < 120; ++i) put("product:" + std::to_string(i));
    for (const char* k : {"users:9", "account:user:1", "user"}) put(k);
    out["cache"] = {{"user:", 3}, {"product:", 120}, {"all", 126}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
