// A worker process for the PostgreSQL crash test (postgres_crash_test.cc):
// a JobRunner on the PostgreSQL backend (one schema shared with the test
// and the other workers) that runs "crash.effect" jobs until SIGTERM (clean
// shutdown) or SIGKILL (the point of the test).
//
//   postgres_crash_worker <postgres url> <schema> <log_dir> [produce]
//
// Each job's effect is one row in <schema>.effects, inserted through the
// completion transaction's PGconn* (Completion::transactional_effect): it
// commits iff the completion does, so every succeeded job must end with
// exactly one row and every other job with none. With "produce", a
// producer instead (RunProducer, crash_worker.h): enqueues batches of
// "crash.effect" jobs and exits.
#include <libpq-fe.h>

#include <cstdio>
#include <optional>
#include <string>

#include "jobpact/clock.h"
#include "jobpact/job_runner.h"
#include "jobpact/postgres/postgres_backend.h"
#include "tests/support/crash_worker.h"

int main(int argc, char** argv) {
  const std::optional<jobpact::crash_testing::ProducerPlan> producer =
      argc == 5 ? jobpact::crash_testing::ParseProducerPlan(argv[4]) : std::nullopt;
  if (argc != 4 && !producer) {
    std::fprintf(stderr,
                 "usage: %s <postgres url> <schema> <log_dir> [produce|produce-until:<unix s>]\n",
                 argv[0]);
    return 2;
  }
  jobpact::crash_testing::CatchSigterm();
  auto options = jobpact::postgres::ParsePostgresUrl(argv[1]);
  if (!options.ok()) {
    std::fprintf(stderr, "url: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->schema = argv[2];
  options->pool_size = 4;
  auto clock = jobpact::SystemClock::Default();
  jobpact::crash_testing::OpenLog open_log(argv[3]);
  auto backend = jobpact::postgres::PostgresBackend::Open(*options, clock);
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  open_log.Opened();
  if (producer) {
    return jobpact::crash_testing::RunProducer(*(*backend)->queue(), *clock, argv[3],
                                               "crash.effect", *producer);
  }
  jobpact::JobRunnerOptions ro =
      jobpact::crash_testing::CrashWorkerOptions((*backend)->bundle(), clock);
  auto runner = jobpact::JobRunner::Create(ro);
  if (!runner.ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().ToString().c_str());
    return 2;
  }
  const std::string insert = "INSERT INTO \"" + options->schema + "\".effects (job_id) VALUES ($1)";
  jobpact::Status handled =
      (*runner)->Handle("crash.effect", [&](jobpact::JobContext& ctx) -> jobpact::Status {
        jobpact::crash_testing::RandomPause();
        const std::string id = ctx.envelope().job_id;
        ctx.SetTransactionalEffect([insert, id](void* native) -> jobpact::Status {
          auto* conn = static_cast<PGconn*>(native);
          if (conn == nullptr) return jobpact::Status::Internal("no PGconn handle");
          const char* values[1] = {id.c_str()};
          PGresult* r = PQexecParams(conn, insert.c_str(), 1, nullptr, values, nullptr, nullptr, 0);
          const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
          const std::string msg = PQresultErrorMessage(r);
          PQclear(r);
          return ok ? jobpact::Status::Ok() : jobpact::Status::Unavailable("effect: " + msg);
        });
        return jobpact::Status::Ok();
      });
  if (!handled.ok()) {
    std::fprintf(stderr, "handle: %s\n", handled.ToString().c_str());
    return 2;
  }
  return jobpact::crash_testing::RunUntilSigterm(**runner);
}
