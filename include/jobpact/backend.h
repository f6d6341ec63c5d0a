// File: jobpact/backend.h
//
// A backend is opened as ONE bundle of its stores (SPEC 9): the queue, the
// lock store and the idempotency store of one place. A runner must take all
// three from the same place: a SQLite queue with in-memory locks would let
// two processes hold "the" lock on an order at once, and an in-memory
// idempotency store would forget every claim when the process restarts.
// JobRunner::Create therefore refuses a durable queue without its locks and
// idempotency store (see JobRunnerOptions::backend).
//
// Two ways to get a bundle:
//   - InMemoryBackend(clock): the in-memory stores (jobpact::jobpact).
//   - SqliteBackend::bundle(): the stores of an open SQLite file
//     (jobpact/sqlite/sqlite_backend.h).
//
// Nothing here throws; every failure is a Status.
#ifndef JOBPACT_BACKEND_H_
#define JOBPACT_BACKEND_H_

#include <memory>
#include <string>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_backend.h"

namespace jobpact {

// The stores of one backend, which a runner (or a producer, or an operator
// tool) uses together. A plain struct: copies share the stores.
struct BackendBundle {
  std::shared_ptr<QueueBackend> queue;
  std::shared_ptr<LockStore> locks;
  std::shared_ptr<IdempotencyStore> idempotency;
  // For logs and status pages: the backend's name ("in_memory", "sqlite")
  // and where it is ("memory:", "sqlite:///var/lib/orders/jobs.db"). A URL
  // here never holds a password.
  std::string name;
  std::string url;

  // True when all three stores are set.
  bool complete() const { return queue && locks && idempotency; }
};

// The three in-memory stores (InMemoryQueueBackend, InMemoryLockStore,
// InMemoryIdempotencyStore) on `clock` (null: SystemClock::Default()), with
// name "in_memory" and url "memory:". Single process; nothing survives it.
JOBPACT_EXPORT BackendBundle InMemoryBackend(std::shared_ptr<Clock> clock = nullptr);

}  // namespace jobpact

#endif  // JOBPACT_BACKEND_H_
