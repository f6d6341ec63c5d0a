// Writes the seed corpora of the stored-record fuzz targets from records
// the real encoders wrote: jobs in several states (queued, succeeded,
// retry scheduled, dead-lettered by a handler, quarantined raw input) run
// through a JobRunner over an SQLite file, then
//   - each row of its jobs table, as the SQLite and PostgreSQL row
//     targets read it (the two stores share the row layout), and
//   - each record in the Redis hash layout (AppendRecordArgs and
//     SerializeEnvelope, the Redis store's own encoders), with its history
//     as the Redis store keeps it,
// in fuzz_util.h's input format. Usage: make_fuzz_seeds <fuzz/corpus dir>.
// Run by scripts/fuzz --seeds after a change of a stored form; its output
// is checked in.
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/sqlite/sqlite_backend.h"
#include "src/backends/redis/queue_codec.h"
#include "src/internal/job_row_codec.h"

namespace {

using Fields = std::vector<std::optional<std::string>>;

constexpr char kSpecExample[] = R"({
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

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out << bytes;
  JOBPACT_FUZZ_CHECK(out.good(), dir + "/" + name);
}

// The record in the Redis hash's field order (queue_codec.h: RecordField),
// then its history as the Redis store keeps it (one entry per line).
Fields RedisFields(const jobpact::JobRecord& r) {
  namespace ri = jobpact::redis_internal;
  std::vector<std::string> args;  // st att upd fin ep cp tok lexp aud cx d
  jobpact::Status s = ri::AppendRecordArgs(r, &args);
  JOBPACT_FUZZ_CHECK(s.ok() && args.size() == 11, s.ToString());
  Fields f(ri::kRecordFieldCount);
  f[ri::kFEnv] = jobpact::SerializeEnvelope(r.envelope);
  f[ri::kFData] = args[10];
  f[ri::kFQueue] = r.envelope.queue;
  f[ri::kFType] = r.envelope.job_type;
  f[ri::kFStatus] = args[0];
  f[ri::kFAttempt] = args[1];
  f[ri::kFEpoch] = args[4];
  f[ri::kFUpdatedAt] = args[2];
  f[ri::kFCheckpoint] = args[5];
  f[ri::kFToken] = args[6];
  f[ri::kFLeaseExp] = args[7];
  f[ri::kFAudit] = args[8];
  f[ri::kFCancel] = args[9];
  std::string history;
  for (const jobpact::Transition& t : r.history) {
    if (!history.empty()) history += '\n';
    history += ri::HistoryEntryJson(t);
  }
  f.push_back(history);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds <fuzz/corpus dir>\n");
    return 2;
  }
  const std::string corpus = argv[1];
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/jobpact-seeds-XXXXXX";
  JOBPACT_FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, "mkdtemp");
  const std::string db_path = dir + "/jobs.db";
  {
    auto backend = jobpact::sqlite::SqliteBackend::Open(db_path, {}, jobpact::SystemClock::Default());
    JOBPACT_FUZZ_CHECK(backend.ok(), backend.status().ToString());
    jobpact::JobRunnerOptions options;
    options.backend = (*backend)->bundle();
    options.log_level = jobpact::LogLevel::kOff;
    auto runner = jobpact::JobRunner::Create(options);
    JOBPACT_FUZZ_CHECK(runner.ok(), runner.status().ToString());
    jobpact::JobRunner& r = **runner;
    JOBPACT_FUZZ_CHECK(r.Handle("ok", [](jobpact::JobContext&) { return jobpact::Status::Ok(); }).ok(), "");
    JOBPACT_FUZZ_CHECK(r.Handle("flaky", [](jobpact::JobContext&) {
                          return jobpact::Status::Unavailable("connection reset");
                        }).ok(), "");
    JOBPACT_FUZZ_CHECK(r.Handle("bad", [](jobpact::JobContext&) {
                          return jobpact::Status::InvalidArgument("no such order \"ord_1\"");
                        }).ok(), "");
    // The SPEC example, scheduled in the past so that it stays queued
    // (no handler for its type).
    JOBPACT_FUZZ_CHECK(r.EnqueueJson(kSpecExample).ok(), "the SPEC 1 example");
    for (const char* type : {"ok", "flaky", "bad"}) {
      jobpact::Envelope env;
      env.job_type = type;
      env.payload = R"({"order_id":"ord_1","note":"quote \" and \\ and \u00e9"})";
      env.idempotency_key = std::string(type) + ":ord_1";
      env.dedup_key = env.idempotency_key;
      env.lock_key = "order:ord_1";
      env.tenant_id = "tenant_1";
      JOBPACT_FUZZ_CHECK(r.Enqueue(env).ok(), type);
    }
    // Raw input that fails validation: quarantined whole.
    (void)r.EnqueueJson(R"({"job_type": "bad type!", "max_attempts": 0, "payload": [1,2)");
    (void)r.EnqueueJson("not json at all \x01\xff");
    JOBPACT_FUZZ_CHECK(r.RunUntilIdle().ok(), "RunUntilIdle");
  }
  // Every row of the jobs table, as the row targets take it.
  sqlite3* db = nullptr;
  JOBPACT_FUZZ_CHECK(sqlite3_open(db_path.c_str(), &db) == SQLITE_OK, db_path);
  sqlite3_stmt* st = nullptr;
  const std::string sql = std::string("SELECT ") + jobpact::internal::kJobColumns +
                          " FROM jobpact_jobs ORDER BY job_id";
  JOBPACT_FUZZ_CHECK(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK,
                     sqlite3_errmsg(db));
  int n = 0;
  std::vector<std::string> ids;
  while (sqlite3_step(st) == SQLITE_ROW) {
    Fields row;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      if (sqlite3_column_type(st, c) == SQLITE_NULL) {
        row.emplace_back(std::nullopt);
      } else {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
        row.emplace_back(std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(st, c))));
      }
    }
    ids.push_back(*row[0]);
    const std::string name = "row_" + std::to_string(n++);
    Write(corpus + "/sqlite_row_fuzzer", name, jobpact::fuzz::JoinFields(row));
    Write(corpus + "/postgres_row_fuzzer", name, jobpact::fuzz::JoinFields(row));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  JOBPACT_FUZZ_CHECK(n >= 6, "expected at least 6 rows, got " + std::to_string(n));
  // The same records in the Redis layout.
  {
    auto backend = jobpact::sqlite::SqliteBackend::Open(db_path, {}, jobpact::SystemClock::Default());
    JOBPACT_FUZZ_CHECK(backend.ok(), backend.status().ToString());
    n = 0;
    for (const std::string& id : ids) {
      jobpact::Result<jobpact::JobRecord> rec = (*backend)->bundle().admin->Get(id);
      JOBPACT_FUZZ_CHECK(rec.ok(), rec.status().ToString());
      Write(corpus + "/redis_record_fuzzer", "record_" + std::to_string(n++),
            jobpact::fuzz::JoinFields(RedisFields(*rec)));
    }
  }
  std::remove((db_path + "-wal").c_str());
  std::remove((db_path + "-shm").c_str());
  std::remove(db_path.c_str());
  std::remove(dir.c_str());
  std::printf("wrote %d records per target\n", n);
  return 0;
}
