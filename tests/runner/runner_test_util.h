// Helpers shared by the runner test programs.
#ifndef JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
#define JOBPACT_TESTS_RUNNER_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// Registers a spdlog logger named `name` that writes into memory, for a
// runner configured with logger_name = name; Lines() returns what it wrote.
// Dropped again at destruction.
class CapturedLogger {
 public:
  explicit CapturedLogger(std::string name) : name_(std::move(name)) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>(name_, sink);
    logger->set_level(spdlog::level::trace);
    spdlog::register_logger(logger);
  }
  ~CapturedLogger() { spdlog::drop(name_); }
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::string name_;
  std::ostringstream out_;
};

}  // namespace test_util
}  // namespace jobpact

#endif  // JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
