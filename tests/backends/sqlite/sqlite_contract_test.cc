// The backend conformance suite (jobpact/testing/backend_contract.h) on the
// SQLite backend: every factory call opens a fresh database file in a new
// temporary directory, removed when the test drops the last of the three
// stores.
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "jobpact/sqlite/sqlite_backend.h"
#include "jobpact/testing/backend_contract.h"

namespace {

jobpact::testing::BackendSet MakeSqliteSet(std::shared_ptr<jobpact::testing::ManualClock> clock) {
  // Owns the temp directory and the stores; the three pointers handed out
  // alias it, so the files go when the test lets go of the last store.
  struct Holder {
    std::string dir;
    std::shared_ptr<jobpact::QueueBackend> queue;
    std::shared_ptr<jobpact::LockStore> locks;
    std::shared_ptr<jobpact::IdempotencyStore> idempotency;
    std::shared_ptr<jobpact::RateLimitStore> rate_limits;
    ~Holder() {
      queue.reset();
      locks.reset();
      idempotency.reset();
      rate_limits.reset();
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_sqlite_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return {};
  }
  auto holder = std::make_shared<Holder>();
  holder->dir = tmpl;
  auto backend = jobpact::sqlite::SqliteBackend::Open(tmpl + "/jobs.db", {}, clock);
  if (!backend.ok()) {
    ADD_FAILURE() << "SqliteBackend::Open: " << backend.status();
    return {};
  }
  holder->queue = (*backend)->queue();
  holder->locks = (*backend)->locks();
  holder->idempotency = (*backend)->idempotency();
  holder->rate_limits = (*backend)->rate_limits();
  jobpact::testing::BackendSet set{
      std::shared_ptr<jobpact::QueueBackend>(holder, holder->queue.get()),
      std::shared_ptr<jobpact::LockStore>(holder, holder->locks.get()),
      std::shared_ptr<jobpact::IdempotencyStore>(holder, holder->idempotency.get())};
  set.rate_limits = std::shared_ptr<jobpact::RateLimitStore>(holder, holder->rate_limits.get());
  return set;
}

}  // namespace

JOBPACT_INSTANTIATE_BACKEND_CONTRACT(Sqlite,
                                     jobpact::testing::BackendFactory{"sqlite", MakeSqliteSet});
