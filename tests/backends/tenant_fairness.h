// A job of one tenant, for the backends' own tenant fairness tests (the
// conformance suite's fairness cases are in
// src/testing/contract/fairness_contract.cc).
#ifndef JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_
#define JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_

#include <chrono>
#include <string>

#include "jobpact/job.h"

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

}  // namespace test_support
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_TENANT_FAIRNESS_H_
