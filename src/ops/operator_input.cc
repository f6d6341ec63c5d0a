// The operator side's input parsing (src/internal/operator_input.h), shared
// by the jobpact command (src/cli) and the dashboard's API (src/http).
#include "src/internal/operator_input.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "jobpact/job.h"

namespace jobpact {
namespace internal {
namespace {

std::string Quoted(std::string_view flag, std::string_view text) {
  return std::string(flag) + ": '" + std::string(text) + "'";
}

}  // namespace

Result<Duration> ParseDuration(std::string_view flag, std::string_view text) {
  const std::string bad =
      Quoted(flag, text) + " is not a duration (write e.g. 90s, 15m, 2h, 7d, 1h30m, 250ms)";
  if (text.empty()) return Status::InvalidArgument(bad);
  double total_seconds = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t num_start = i;
    while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
    if (i == num_start) return Status::InvalidArgument(bad);
    const std::string number(text.substr(num_start, i - num_start));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return Status::InvalidArgument(bad);
    const std::size_t unit_start = i;
    while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    double scale = 0;
    if (unit == "ms") {
      scale = 0.001;
    } else if (unit == "s") {
      scale = 1;
    } else if (unit == "m") {
      scale = 60;
    } else if (unit == "h") {
      scale = 3600;
    } else if (unit == "d") {
      scale = 86400;
    } else {
      return Status::InvalidArgument(bad);
    }
    total_seconds += value * scale;
  }
  // About 292 years fit a nanosecond Duration; refuse before overflowing.
  if (!std::isfinite(total_seconds) || total_seconds > 9e9) {
    return Status::InvalidArgument(Quoted(flag, text) + " is too long a duration");
  }
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(total_seconds));
}

Result<TimePoint> ParseTime(std::string_view flag, std::string_view text, TimePoint now) {
  if (text.find('T') != std::string_view::npos || text.find('t') != std::string_view::npos ||
      text.find('-') != std::string_view::npos) {
    Result<TimePoint> t = ParseRfc3339(text);
    if (!t.ok()) {
      return Status::InvalidArgument(Quoted(flag, text) +
                                     " is not a time (write RFC 3339, e.g. 2026-12-03T10:00:00Z, "
                                     "or an age such as 2h): " +
                                     t.status().message());
    }
    return *t;
  }
  Result<Duration> ago = ParseDuration(flag, text);
  if (!ago.ok()) {
    return Status::InvalidArgument(Quoted(flag, text) +
                                   " is not a time (write RFC 3339, e.g. 2026-12-03T10:00:00Z, or "
                                   "an age such as 2h for two hours ago)");
  }
  return now - *ago;
}

Result<double> ParseRate(std::string_view flag, std::string_view text) {
  const std::string bad =
      Quoted(flag, text) + " is not a rate (write N/s or N/m, e.g. 5/s, 300/m; 0 for no limit)";
  std::string_view number = text;
  double per = 1;
  const std::size_t slash = text.find('/');
  if (slash != std::string_view::npos) {
    number = text.substr(0, slash);
    const std::string_view unit = text.substr(slash + 1);
    if (unit == "s") {
      per = 1;
    } else if (unit == "m") {
      per = 60;
    } else {
      return Status::InvalidArgument(bad);
    }
  }
  const std::string n(number);
  if (n.empty()) return Status::InvalidArgument(bad);
  char* end = nullptr;
  const double v = std::strtod(n.c_str(), &end);
  if (end != n.c_str() + n.size() || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument(bad);
  }
  return v / per;
}

Result<JobStatus> ParseStatusArg(std::string_view flag, std::string_view text) {
  Result<JobStatus> s = ParseJobStatus(text);
  if (s.ok()) return s;
  std::string names;
  for (JobStatus st : kAllJobStatuses) {
    if (!names.empty()) names += ", ";
    names += JobStatusName(st);
  }
  return Status::InvalidArgument(Quoted(flag, text) + " is not a job status (one of " + names +
                                 ")");
}

Result<FailureClass> ParseClassArg(std::string_view flag, std::string_view text) {
  Result<FailureClass> c = ParseFailureClass(text);
  if (c.ok()) return c;
  return Status::InvalidArgument(Quoted(flag, text) +
                                 " is not a failure class (one of transient, permanent, unknown)");
}

Result<DlqFilter> ParseDlqFilter(const DlqFilterText& text, TimePoint now,
                                 std::string_view prefix) {
  const std::string p(prefix);
  DlqFilter f;
  if (text.limit < 1 || text.limit > kMaxDlqFilterLimit) {
    return Status::InvalidArgument(p + "limit: " + std::to_string(text.limit) +
                                   " is not within 1.." + std::to_string(kMaxDlqFilterLimit));
  }
  f.limit = static_cast<std::size_t>(text.limit);
  if (!text.type.empty()) f.job_type = text.type;
  if (!text.reason.empty()) f.reason = text.reason;
  if (!text.failure_class.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(FailureClass c, ParseClassArg(p + "class", text.failure_class));
    f.failure_class = c;
  }
  if (!text.since.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(TimePoint t, ParseTime(p + "since", text.since, now));
    f.dead_lettered_after = t;
  }
  if (!text.until.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(TimePoint t, ParseTime(p + "until", text.until, now));
    f.dead_lettered_before = t;
  }
  return f;
}

}  // namespace internal
}  // namespace jobpact
