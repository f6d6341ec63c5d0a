// Fuzzes the raw-JSON enqueue (JobRunner::EnqueueJson, and through it the
// backend's Enqueue and DeadLetterInvalid) on the in-memory store and,
// where built, SQLite. SPEC 1: an invalid envelope is never dropped and
// never crashes anything: it is dead-lettered with reason
// "invalid_envelope" and the raw input kept byte for byte.
// Invariants: a valid envelope is stored (or found to be a duplicate); an
// invalid one gives kInvalidArgument naming a DLQ entry whose raw form is
// the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#ifdef JOBPACT_FUZZ_WITH_SQLITE
#include "jobpact/sqlite/sqlite_backend.h"
#endif

namespace {

std::unique_ptr<jobpact::JobRunner> NewRunner(jobpact::BackendBundle backend) {
  jobpact::JobRunnerOptions options;
  options.backend = std::move(backend);
  options.log_level = jobpact::LogLevel::kOff;
  jobpact::Result<std::unique_ptr<jobpact::JobRunner>> runner =
      jobpact::JobRunner::Create(options);
  JOBPACT_FUZZ_CHECK(runner.ok(), runner.status().ToString());
  return std::move(*runner);
}

void CheckEnqueue(jobpact::JobRunner& runner, jobpact::QueueAdmin& admin, std::string_view raw,
                  bool ids_may_repeat) {
  const bool valid = jobpact::ParseEnvelope(raw, runner.options().validation).ok();
  jobpact::Result<jobpact::EnqueueResult> r = runner.EnqueueJson(raw);
  if (valid) {
    if (!r.ok()) {
      // The same job_id again (a store kept across inputs) is refused, and
      // nothing else is.
      JOBPACT_FUZZ_CHECK(ids_may_repeat && r.status().code() == jobpact::StatusCode::kAlreadyExists,
                         r.status().ToString());
      return;
    }
    JOBPACT_FUZZ_CHECK(admin.Get(r->job_id).ok(), "enqueued job " + r->job_id + " not stored");
    return;
  }
  JOBPACT_FUZZ_CHECK(!r.ok() && r.status().code() == jobpact::StatusCode::kInvalidArgument,
                     r.ok() ? std::string("accepted") : r.status().ToString());
  static constexpr std::string_view kPrefix = "invalid envelope dead-lettered as ";
  const std::string& message = r.status().message();
  JOBPACT_FUZZ_CHECK(message.compare(0, kPrefix.size(), kPrefix) == 0,
                     "not dead-lettered: " + message);
  // Ids are safe names: no space, so the id ends at the ": " that follows.
  const std::size_t end = message.find(": ", kPrefix.size());
  JOBPACT_FUZZ_CHECK(end != std::string::npos, message);
  const std::string id = message.substr(kPrefix.size(), end - kPrefix.size());
  jobpact::Result<jobpact::DlqEntry> entry = admin.GetDeadLetter(id);
  JOBPACT_FUZZ_CHECK(entry.ok(), "DLQ entry " + id + ": " + entry.status().ToString());
  JOBPACT_FUZZ_CHECK(entry->reason == "invalid_envelope", entry->reason);
  JOBPACT_FUZZ_CHECK(entry->raw_envelope == raw, "raw input not kept whole for " + id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  {
    // A fresh in-memory store per input: every input starts from empty.
    jobpact::BackendBundle memory = jobpact::InMemoryBackend();
    std::shared_ptr<jobpact::QueueAdmin> admin = memory.admin;
    std::unique_ptr<jobpact::JobRunner> runner = NewRunner(std::move(memory));
    CheckEnqueue(*runner, *admin, raw, /*ids_may_repeat=*/false);
  }
#ifdef JOBPACT_FUZZ_WITH_SQLITE
  // One SQLite file for the whole run (opening one per input would make
  // the target too slow to explore): later inputs meet earlier ones' ids.
  static const auto* sqlite = [] {
    // Under $TMPDIR: scripts/fuzz points it at a directory it removes.
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/jobpact-fuzz-XXXXXX";
    JOBPACT_FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, "mkdtemp");
    auto backend = jobpact::sqlite::SqliteBackend::Open(dir + "/jobs.db", {}, jobpact::SystemClock::Default());
    JOBPACT_FUZZ_CHECK(backend.ok(), backend.status().ToString());
    struct Held {
      std::shared_ptr<jobpact::sqlite::SqliteBackend> backend;
      std::unique_ptr<jobpact::JobRunner> runner;
    };
    auto* held = new Held{*backend, nullptr};
    held->runner = NewRunner(held->backend->bundle());
    return held;
  }();
  CheckEnqueue(*sqlite->runner, *sqlite->backend->bundle().admin, raw, /*ids_may_repeat=*/true);
#endif
  return 0;
}
