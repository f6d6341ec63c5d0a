// Tenant fairness at the lease step (issue 11), as a check any backend's
// test can run on its QueueBackend: tenant A enqueues 20,000 jobs, tenant
// B then enqueues 20; B's jobs all start before A's backlog is a tenth
// done. Workers lease batches of 16 and complete what they took, as a
// runner does.
#ifndef JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_
#define JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobpact/queue_backend.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace test_support {

inline Envelope TenantJob(const std::string& id, const std::string& tenant,
                          const std::string& type = "report.build", int priority = 0) {
  Envelope env;
  env.job_id = id;
  env.job_type = type;
  env.tenant_id = tenant;
  env.payload = "{}";
  env.queue = "default";
  env.priority = priority;
  env.timeout = std::chrono::seconds(30);
  env.visibility_timeout = std::chrono::seconds(45);
  return env;
}

// Runs the scenario on `queue`; `a_jobs` of tenant A (20,000 in the
// issue's test), then 20 of tenant B. Returns how many of A's jobs had
// started when B's last one started.
inline int AJobsStartedBeforeBsLast(QueueBackend& queue, int a_jobs) {
  std::vector<Envelope> batch;
  for (int i = 0; i < a_jobs; ++i) {
    batch.push_back(TenantJob("job_a" + std::to_string(100000 + i), "tenant-a"));
    if (batch.size() == 1000 || i + 1 == a_jobs) {
      EXPECT_THAT(queue.EnqueueBatch(batch, {}).status(), testing::IsOk());
      batch.clear();
    }
  }
  for (int i = 0; i < 20; ++i) batch.push_back(TenantJob("job_b" + std::to_string(100 + i), "tenant-b"));
  EXPECT_THAT(queue.EnqueueBatch(batch, {}).status(), testing::IsOk());
  int a_started = 0;
  int b_started = 0;
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  while (b_started < 20) {
    DequeueRequest req;
    req.max_jobs = 16;
    req.worker_id = "w1";
    Result<std::vector<Delivery>> got = queue.Dequeue(req);
    EXPECT_THAT(got.status(), testing::IsOk());
    if (!got.ok() || got->empty()) break;
    for (const Delivery& d : *got) {
      if (d.job.envelope.tenant_id == "tenant-b") {
        ++b_started;
      } else {
        ++a_started;
      }
      EXPECT_THAT(queue.Complete(d, done), testing::IsOk());
    }
  }
  EXPECT_EQ(b_started, 20);
  return a_started;
}

}  // namespace test_support
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_
