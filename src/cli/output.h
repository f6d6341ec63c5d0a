// How the jobpact command prints: human tables by default, JSON (one
// document on stdout) with --json. Times are RFC 3339 / ISO 8601 in UTC
// (whole seconds in tables, exact in JSON); durations are seconds (JSON
// fields end in _seconds) or, in tables, "42s", "3m12s", "2h05m", "3d04h".
#ifndef JOBPACT_SRC_CLI_OUTPUT_H_
#define JOBPACT_SRC_CLI_OUTPUT_H_

#include <cstdio>
#include <string>
#include <vector>

#include "jobpact/clock.h"
#include "src/internal/operator_json.h"

namespace jobpact {
namespace cli {

// The JSON documents are the operator side's (src/internal/operator_json.h),
// shared with the dashboard's API.
using internal::Json;

// Columns padded to their widest cell, two spaces apart; a header line.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void Print(std::FILE* out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "2026-12-03T10:00:00Z" (whole seconds, UTC); "-" for the epoch (unset).
std::string HumanTime(TimePoint t);
// "42s", "3m12s", "2h05m", "3d04h"; sub-second as "0.25s".
std::string HumanDuration(Duration d);
using internal::ControlToJson;
using internal::DlqToJson;
using internal::FailureToJson;
using internal::JobSummaryToJson;
using internal::JobToJson;
using internal::LockToJson;
using internal::PolicyToJson;
using internal::RateLimiterToJson;
using internal::SecondsOf;
using internal::StatsToJson;
using internal::TimeJson;

// One line: the message with newlines folded, for stderr.
std::string OneLine(std::string text);

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_OUTPUT_H_
