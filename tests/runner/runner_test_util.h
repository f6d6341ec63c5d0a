// Helpers shared by the runner test programs.
#ifndef JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
#define JOBPACT_TESTS_RUNNER_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace test_util {

inline Envelope MakeJob(std::string type, std::string payload = "{}") {
  Envelope e;
  e.job_type = std::move(type);
  e.payload = std::move(payload);
  return e;
}

// Enqueues through the harness, expects success, returns the job id.
inline std::string EnqueueOk(testing::Harness& h, Envelope env) {
  Result<EnqueueResult> r = h.Enqueue(std::move(env));
  EXPECT_THAT(r, testing::IsOk());
  return r.ok() ? r->job_id : "";
}

}  // namespace test_util
}  // namespace jobpact

#endif  // JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
