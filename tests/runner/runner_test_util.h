// Helpers shared by the runner test programs.
#ifndef JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
#define JOBPACT_TESTS_RUNNER_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/testing/harness.h"
#include "jobpact/transition_event.h"
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

// A TransitionEvent with its views copied, so it outlives the call.
struct Seen {
  explicit Seen(const TransitionEvent& e)
      : job_id(e.job_id),
        job_type(e.job_type),
        queue(e.queue),
        tenant_id(e.tenant_id),
        trace_id(e.trace_id),
        attempt(e.attempt),
        epoch(e.epoch),
        has_envelope(e.envelope != nullptr),
        origin(e.origin),
        from(e.from),
        to(e.to),
        reason(e.reason),
        ready_at(e.ready_at),
        delay(e.delay),
        attempt_spent(e.attempt_spent),
        lease_recoveries(e.lease_recoveries),
        queue_latency(e.queue_latency),
        run_duration(e.run_duration),
        total(e.total),
        at(e.at),
        actor(e.actor),
        operator_reason(e.operator_reason),
        dlq_reason(e.dlq_reason),
        reset_attempts(e.reset_attempts) {
    if (e.failure != nullptr) failure = *e.failure;
  }

  std::string job_id, job_type, queue, tenant_id, trace_id;
  int attempt;
  std::int64_t epoch;
  bool has_envelope;
  TransitionOrigin origin;
  std::optional<JobStatus> from;
  JobStatus to;
  std::string reason;
  std::optional<Failure> failure;
  std::optional<TimePoint> ready_at;
  Duration delay;
  bool attempt_spent;
  int lease_recoveries;
  std::optional<Duration> queue_latency, run_duration, total;
  TimePoint at;
  std::string actor, operator_reason, dlq_reason;
  bool reset_attempts;
};

// "from->to:reason", for a compact assertion on a job's whole sequence.
inline std::string Step(const Seen& s) {
  return std::string(s.from ? JobStatusName(*s.from) : "none") + "->" +
         std::string(JobStatusName(s.to)) + ":" + s.reason;
}

// Keeps a copy of every TransitionEvent it is given. Thread-safe.
class RecordingObserver final : public TransitionObserver {
 public:
  void OnTransition(const TransitionEvent& e) override {
    std::lock_guard<std::mutex> l(mu_);
    seen_.emplace_back(e);
  }
  std::vector<Seen> For(const std::string& job_id) const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<Seen> out;
    for (const Seen& s : seen_) {
      if (s.job_id == job_id) out.push_back(s);
    }
    return out;
  }
  std::vector<std::string> StepsOf(const std::string& job_id) const {
    std::vector<std::string> out;
    for (const Seen& s : For(job_id)) out.push_back(Step(s));
    return out;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return seen_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
};

}  // namespace test_util
}  // namespace jobpact

#endif  // JOBPACT_TESTS_RUNNER_TEST_UTIL_H_
