// File: jobpact/in_memory.h
//
// Umbrella header: the in-memory reference backends (tests, demos and
// single-process services).
//
// Example:
//   auto clock = std::make_shared<jobpact::testing::ManualClock>();
//   jobpact::JobRunnerOptions opts;
//   opts.clock = clock;
//   opts.queue = std::make_shared<jobpact::InMemoryQueueBackend>(clock);
//   opts.locks = std::make_shared<jobpact::InMemoryLockStore>(clock);
//   opts.idempotency = std::make_shared<jobpact::InMemoryIdempotencyStore>(clock);
//   opts.metrics = std::make_shared<jobpact::InMemoryMetricsSink>();
//
// The first three in one call: opts.backend = jobpact::InMemoryBackend(clock)
// (jobpact/backend.h).
#ifndef JOBPACT_IN_MEMORY_H_
#define JOBPACT_IN_MEMORY_H_

#include "jobpact/in_memory/idempotency_store.h"
#include "jobpact/in_memory/lock_store.h"
#include "jobpact/in_memory/metrics_sink.h"
#include "jobpact/in_memory/queue_backend.h"
#include "jobpact/rate_limit_store.h"

#endif  // JOBPACT_IN_MEMORY_H_
