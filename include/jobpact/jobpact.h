// File: jobpact/jobpact.h
//
// Umbrella header: the whole public core API, including the in-memory
// backends and BackendBundle (jobpact/backend.h; its OpenBackend() is in
// the jobpact::backends target). The testing kit (jobpact/testing/...) and
// optional backends (jobpact/sqlite/...) are included separately.
#ifndef JOBPACT_JOBPACT_H_
#define JOBPACT_JOBPACT_H_

#include "jobpact/backend.h"
#include "jobpact/cache.h"
#include "jobpact/cache_store.h"
#include "jobpact/circuit_breaker.h"
#include "jobpact/clock.h"
#include "jobpact/failure.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/in_memory.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"
#include "jobpact/job_status.h"
#include "jobpact/lock_store.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/operations.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/random.h"
#include "jobpact/result.h"
#include "jobpact/retry_budget.h"
#include "jobpact/retry_policy.h"
#include "jobpact/status.h"
#include "jobpact/transition_event.h"
#include "jobpact/version.h"

#endif  // JOBPACT_JOBPACT_H_
