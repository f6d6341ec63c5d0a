// A worker process for the PostgreSQL crash test (postgres_crash_test.cc):
// a JobRunner on the PostgreSQL backend (one schema shared with the test
// and the other workers) that runs "crash.effect" jobs until SIGTERM (clean
// shutdown) or SIGKILL (the point of the test).
//
//   postgres_crash_worker <postgres url> <schema> <log_dir>
//
// Each job's effect is one row in <schema>.effects, inserted through the
// completion transaction's PGconn* (Completion::transactional_effect): it
// commits iff the completion does, so every succeeded job must end with
// exactly one row and every other job with none.
#include <libpq-fe.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "jobpact/clock.h"
#include "jobpact/job_runner.h"
#include "jobpact/postgres/postgres_backend.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSigterm(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <postgres url> <schema> <log_dir>\n", argv[0]);
    return 2;
  }
  std::signal(SIGTERM, OnSigterm);
  auto options = jobpact::postgres::ParsePostgresUrl(argv[1]);
  if (!options.ok()) {
    std::fprintf(stderr, "url: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->schema = argv[2];
  options->pool_size = 4;
  auto clock = jobpact::SystemClock::Default();
  auto backend = jobpact::postgres::PostgresBackend::Open(*options, clock);
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  jobpact::JobRunnerOptions ro;
  ro.backend = (*backend)->bundle();
  ro.clock = clock;
  ro.workers = 2;
  ro.dequeue_batch = 8;
  ro.poll_interval = jobpact::Millis(20);
  ro.maintenance_interval = jobpact::Millis(200);
  // Short leases (set per job by the test); the buffer rule relaxed to match.
  ro.validation.visibility_buffer = jobpact::Millis(500);
  // Kills are random: a job may lose its worker more than 3 times.
  ro.max_lease_recoveries = 10;
  ro.runner_id = "crash-worker-" + std::to_string(getpid());
  ro.log_level = jobpact::LogLevel::kWarn;
  auto runner = jobpact::JobRunner::Create(ro);
  if (!runner.ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().ToString().c_str());
    return 2;
  }
  const std::string insert =
      "INSERT INTO \"" + options->schema + "\".effects (job_id) VALUES ($1)";
  jobpact::Status handled =
      (*runner)->Handle("crash.effect", [&](jobpact::JobContext& ctx) -> jobpact::Status {
        thread_local std::minstd_rand rng(std::random_device{}());
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
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
  jobpact::Status started = (*runner)->Start();
  if (!started.ok()) {
    std::fprintf(stderr, "start: %s\n", started.ToString().c_str());
    return 2;
  }
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  jobpact::Status stopped = (*runner)->Shutdown(jobpact::Seconds(5));
  if (!stopped.ok()) std::fprintf(stderr, "shutdown: %s\n", stopped.ToString().c_str());
  return 0;
}
