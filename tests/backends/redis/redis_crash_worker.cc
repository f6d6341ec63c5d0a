// A worker process for the Redis crash test (redis_crash_test.cc): a
// JobRunner on the Redis backend (one namespace shared with the test and
// the other workers) that runs "crash.effect" jobs until SIGTERM (clean
// shutdown) or SIGKILL (the point of the test).
//
//   redis_crash_worker <redis url> <namespace> <log_dir> [produce]
//
// With "produce", a producer instead (RunProducer, crash_worker.h):
// enqueues batches of "crash.effect" jobs and exits.
//
// Each job's effect is INCR of its own counter (RedisEffect key
// "effect:<job id>"), attached to the completion: the completion script
// applies it with the ack, so every counter must end at exactly 1.
// Before each handler runs, the job id is appended to
// <log_dir>/start-<pid>.log (write(2) on an O_APPEND descriptor: it is in
// the kernel once write returns, so it survives SIGKILL).
//
// "crash.plain" jobs carry an idempotency key and do a plain effect instead:
// the handler INCRs "plain:<job id>" itself, on its own connection, outside
// the completion. Just before, it appends "<job id>" to
// <log_dir>/plain-<pid>.log, so that the test can explain every duplicate
// effect by a worker it killed between the effect and the ack.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "jobpact/clock.h"
#include "jobpact/job_runner.h"
#include "jobpact/redis/redis_backend.h"
#include "jobpact/redis/redis_effect.h"
#include "src/backends/redis/client.h"
#include "tests/support/crash_worker.h"

using jobpact::crash_testing::AppendLine;
using jobpact::crash_testing::OpenAppend;

int main(int argc, char** argv) {
  const std::optional<jobpact::crash_testing::ProducerPlan> producer =
      argc == 5 ? jobpact::crash_testing::ParseProducerPlan(argv[4]) : std::nullopt;
  if (argc != 4 && !producer) {
    std::fprintf(stderr,
                 "usage: %s <redis url> <namespace> <log_dir> [produce|produce-until:<unix s>]\n",
                 argv[0]);
    return 2;
  }
  jobpact::crash_testing::CatchSigterm();
  const std::string log_dir = argv[3];
  const int start_fd = OpenAppend(log_dir + "/start-" + std::to_string(getpid()) + ".log");
  const int plain_fd = OpenAppend(log_dir + "/plain-" + std::to_string(getpid()) + ".log");
  if (start_fd < 0 || plain_fd < 0) {
    std::perror("open log");
    return 2;
  }
  auto options = jobpact::redis::ParseRedisUrl(argv[1]);
  if (!options.ok()) {
    std::fprintf(stderr, "url: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->key_namespace = argv[2];
  auto clock = jobpact::SystemClock::Default();
  jobpact::crash_testing::OpenLog open_log(log_dir);
  auto backend = jobpact::redis::RedisBackend::Open(*options, clock);
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  open_log.Opened();
  if (producer) {
    return jobpact::crash_testing::RunProducer(*(*backend)->queue(), *clock, log_dir,
                                               "crash.effect", *producer);
  }
  jobpact::JobRunnerOptions ro =
      jobpact::crash_testing::CrashWorkerOptions((*backend)->bundle(), clock);
  auto runner = jobpact::JobRunner::Create(ro);
  if (!runner.ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().ToString().c_str());
    return 2;
  }
  jobpact::Status handled =
      (*runner)->Handle("crash.effect", [&](jobpact::JobContext& ctx) -> jobpact::Status {
        if (!AppendLine(start_fd, ctx.envelope().job_id + "\n")) {
          return jobpact::Status::Unavailable("start log");
        }
        jobpact::crash_testing::RandomPause();
        const std::string key = "effect:" + ctx.envelope().job_id;
        ctx.SetTransactionalEffect([key](void* native) -> jobpact::Status {
          auto* fx = static_cast<jobpact::redis::RedisEffect*>(native);
          if (fx == nullptr) return jobpact::Status::Internal("no RedisEffect handle");
          return fx->IncrBy(key, 1);
        });
        return jobpact::Status::Ok();
      });
  if (!handled.ok()) {
    std::fprintf(stderr, "handle: %s\n", handled.ToString().c_str());
    return 2;
  }
  // The plain effect's own connection, as a handler would have one.
  auto app = jobpact::redis_internal::RedisClient::Connect(*options);
  if (!app.ok()) {
    std::fprintf(stderr, "connect: %s\n", app.status().ToString().c_str());
    return 2;
  }
  const std::string app_key_prefix = "jobpact:{" + options->key_namespace + "}:app:plain:";
  handled = (*runner)->Handle("crash.plain", [&](jobpact::JobContext& ctx) -> jobpact::Status {
    const std::string& id = ctx.envelope().job_id;
    if (!AppendLine(plain_fd, id + "\n")) return jobpact::Status::Unavailable("plain log");
    auto r = (*app)->Command({"INCR", app_key_prefix + id});
    if (!r.ok()) return r.status();
    jobpact::crash_testing::RandomPause();  // Time for a kill between the effect and the ack.
    return jobpact::Status::Ok();
  });
  if (!handled.ok()) {
    std::fprintf(stderr, "handle: %s\n", handled.ToString().c_str());
    return 2;
  }
  return jobpact::crash_testing::RunUntilSigterm(**runner);
}
