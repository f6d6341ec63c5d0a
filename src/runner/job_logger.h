// File: src/runner/job_logger.h
//
// JobLogger writes the runner's structured log lines: one line per status
// transition (and a few runner events), each carrying the job's identity
// fields (job_id, job_type, attempt, max_attempts, trace_id and, where
// present, idempotency_key), as logfmt-style text or, with json_logs, as one
// JSON object per line.
//
// Private: spdlog, fmt and nlohmann_json stay out of the public headers.
//
// Example:
//   logger.Log(LogLevel::kInfo, "transition", &env,
//              {{"from", "running"}, {"to", "succeeded"}, {"reason", "succeeded"}});
//
// Thread-safe (spdlog loggers are; the object is immutable after construction).
#ifndef JOBPACT_SRC_RUNNER_JOB_LOGGER_H_
#define JOBPACT_SRC_RUNNER_JOB_LOGGER_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/job.h"
#include "jobpact/job_runner.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace jobpact {
namespace internal {

// One extra key/value of a log line. Strings are not copied: the field must
// not outlive the call it is passed to.
struct LogField {
  enum class Kind { kString, kInt, kDouble };
  LogField(std::string_view k, std::string_view v) : key(k), kind(Kind::kString), str(v) {}
  LogField(std::string_view k, const std::string& v) : key(k), kind(Kind::kString), str(v) {}
  LogField(std::string_view k, const char* v) : key(k), kind(Kind::kString), str(v) {}
  LogField(std::string_view k, int v) : key(k), kind(Kind::kInt), i(v) {}
  LogField(std::string_view k, std::int64_t v) : key(k), kind(Kind::kInt), i(v) {}
  LogField(std::string_view k, double v) : key(k), kind(Kind::kDouble), d(v) {}

  std::string_view key;
  Kind kind;
  std::string_view str;
  std::int64_t i = 0;
  double d = 0;
};

class JobLogger {
 public:
  // Uses the spdlog logger registered under `name`, or creates and registers
  // one writing to stderr. With `json`, the logger's pattern is set to "%v"
  // so that each line is exactly the JSON object (which carries its own time
  // stamp, taken from `clock`, and level).
  JobLogger(const std::string& name, LogLevel level, bool json, std::shared_ptr<Clock> clock);

  // True if a line at `level` would be written; callers skip building
  // expensive fields otherwise.
  bool Enabled(LogLevel level) const;

  // Writes one line: `event`, then the job's identity fields if `env` is
  // given, then `fields` in order. Never throws.
  void Log(LogLevel level, std::string_view event, const Envelope* env,
           std::initializer_list<LogField> fields) const;

  // The same with a field list built at run time.
  void Log(LogLevel level, std::string_view event, const Envelope* env,
           const std::vector<LogField>& fields) const;

 private:
  void Write(LogLevel level, std::string_view event, const Envelope* env, const LogField* begin,
             const LogField* end) const;

  // Immutable after construction.
  std::shared_ptr<spdlog::logger> logger_;
  LogLevel level_;
  bool json_;
  std::string name_;
  std::shared_ptr<Clock> clock_;
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_JOB_LOGGER_H_
