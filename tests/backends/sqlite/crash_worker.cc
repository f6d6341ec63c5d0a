// A worker process for the SQLite crash test (crash_test.cc): a JobRunner on
// the shared database file that runs "crash.effect" jobs until SIGTERM (clean
// shutdown) or SIGKILL (the point of the test).
//
//   sqlite_crash_worker <db> <log_dir> <mode> [produce]
//     mode "tx":      the effect is a row in `effects`, written inside the
//                     transaction that completes the job (transactional
//                     completion) -> exactly once.
//     mode "outside": the effect is a line appended to <log_dir>/effects.txt
//                     before the job is acknowledged -> at least once.
//     "produce", "produce-until:<unix s>":
//                     a producer instead (RunProducer, crash_worker.h):
//                     enqueues batches of "crash.effect" jobs and exits.
//     "soak":         a worker of the soak test (soak_test.cc): backend
//                     faults and stalls injected at random (Chaos,
//                     soak_worker.h), its memory logged (RssLog).
//
// Before each handler runs, the job id is appended to
// <log_dir>/start-<pid>.log, so the test can tell which process started a
// job. Appends use write(2) on an O_APPEND descriptor: the data is in the
// kernel once write returns, so it survives SIGKILL of this process.
#include "tests/support/crash_worker.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "jobpact/clock.h"
#include "jobpact/job_runner.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "tests/support/soak_worker.h"

using jobpact::crash_testing::AppendLine;
using jobpact::crash_testing::OpenAppend;

int main(int argc, char** argv) {
  const std::optional<jobpact::crash_testing::ProducerPlan> producer =
      argc == 5 ? jobpact::crash_testing::ParseProducerPlan(argv[4]) : std::nullopt;
  if (argc != 4 && !producer && !(argc == 5 && std::string(argv[4]) == "soak")) {
    std::fprintf(stderr,
                 "usage: %s <db> <log_dir> <tx|outside> [produce|produce-until:<unix s>|soak]\n",
                 argv[0]);
    return 2;
  }
  const std::string db_path = argv[1];
  const std::string log_dir = argv[2];
  const std::string mode = argv[3];
  const bool transactional = mode == "tx";
  jobpact::crash_testing::CatchSigterm();

  const int start_fd = OpenAppend(log_dir + "/start-" + std::to_string(getpid()) + ".log");
  const int effects_fd = transactional ? -1 : OpenAppend(log_dir + "/effects.txt");
  if (start_fd < 0 || (!transactional && effects_fd < 0)) {
    std::perror("open log");
    return 2;
  }

  auto clock = jobpact::SystemClock::Default();
  jobpact::crash_testing::OpenLog open_log(log_dir);
  auto backend = jobpact::sqlite::SqliteBackend::Open(db_path, {}, clock);
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  open_log.Opened();
  if (producer) {
    return jobpact::crash_testing::RunProducer(*(*backend)->queue(), *clock, log_dir,
                                               "crash.effect", *producer);
  }

  jobpact::BackendBundle bundle = (*backend)->bundle();
  std::optional<jobpact::crash_testing::Chaos> chaos;
  std::optional<jobpact::crash_testing::RssLog> rss;
  if (argc == 5 && std::string(argv[4]) == "soak") {
    chaos.emplace(&bundle, jobpact::Seconds(3));  // CrashJob's lease.
    rss.emplace(log_dir);
  }
  jobpact::JobRunnerOptions options = jobpact::crash_testing::CrashWorkerOptions(bundle, clock);
  auto runner = jobpact::JobRunner::Create(options);
  if (!runner.ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().ToString().c_str());
    return 2;
  }

  const std::string pid = std::to_string(getpid());
  jobpact::Status handled =
      (*runner)->Handle("crash.effect", [&](jobpact::JobContext& ctx) -> jobpact::Status {
        const std::string& id = ctx.envelope().job_id;
        if (!AppendLine(start_fd, id + "\n")) return jobpact::Status::Unavailable("start log");
        jobpact::crash_testing::RandomPause();
        if (transactional) {
          ctx.SetTransactionalEffect([id, pid](void* native) -> jobpact::Status {
            auto* db = static_cast<sqlite3*>(native);
            if (db == nullptr) return jobpact::Status::Internal("no sqlite3 handle");
            sqlite3_stmt* st = nullptr;
            int rc = sqlite3_prepare_v2(db, "INSERT INTO effects (job_id, pid) VALUES (?1, ?2)", -1,
                                        &st, nullptr);
            if (rc == SQLITE_OK) {
              sqlite3_bind_text(st, 1, id.c_str(), -1, SQLITE_TRANSIENT);
              sqlite3_bind_text(st, 2, pid.c_str(), -1, SQLITE_TRANSIENT);
              rc = sqlite3_step(st);
            }
            sqlite3_finalize(st);
            if (rc != SQLITE_DONE) return jobpact::Status::Unavailable(sqlite3_errmsg(db));
            return jobpact::Status::Ok();
          });
        } else if (!AppendLine(effects_fd, id + " " + pid + "\n")) {
          return jobpact::Status::Unavailable("effects file");
        }
        return jobpact::Status::Ok();
      });
  if (!handled.ok()) {
    std::fprintf(stderr, "handle: %s\n", handled.ToString().c_str());
    return 2;
  }
  return jobpact::crash_testing::RunUntilSigterm(**runner);
}
