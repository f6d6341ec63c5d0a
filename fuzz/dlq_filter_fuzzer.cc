// Fuzzes the jobpact tool's DLQ filter parsing (src/cli: ToDlqFilter over
// the --type, --reason, --class, --since, --until and --limit of
// `dlq list`, `dlq replay` and `dlq discard`), and the argument parsers
// under it (durations, times, rates, statuses, failure classes).
// Invariants: never a crash or a throw; every refusal is kInvalidArgument
// (the tool's usage error, exit 2) naming the flag; an accepted duration is
// not negative.
//
// Input: the fields (fuzz_util.h's format) type, reason, class, since,
// until, limit (decimal), then a duration, a rate and a status to parse on
// their own.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "src/cli/args.h"
#include "src/cli/commands.h"

namespace {

std::string Field(const std::vector<std::optional<std::string>>& fields, std::size_t i) {
  return i < fields.size() && fields[i] ? *fields[i] : std::string();
}

void CheckRefusal(const jobpact::Status& s, const char* flag) {
  if (s.ok()) return;
  JOBPACT_FUZZ_CHECK(s.code() == jobpact::StatusCode::kInvalidArgument, s.ToString());
  JOBPACT_FUZZ_CHECK(s.message().find(flag) != std::string::npos,
                     std::string("does not name ") + flag + ": " + s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto fields = jobpact::fuzz::SplitFields(data, size);
  // A fixed "now", so that a crash reproduces.
  const jobpact::TimePoint now{std::chrono::seconds(1796198400)};  // 2026-12-02T08:00:00Z
  jobpact::cli::DlqSelection sel;
  sel.type = Field(fields, 0);
  sel.reason = Field(fields, 1);
  sel.failure_class = Field(fields, 2);
  sel.since = Field(fields, 3);
  sel.until = Field(fields, 4);
  const std::string limit = Field(fields, 5);
  if (!limit.empty()) sel.limit = static_cast<int>(std::strtol(limit.c_str(), nullptr, 10));
  jobpact::Result<jobpact::DlqFilter> f = jobpact::cli::ToDlqFilter(sel, now);
  if (!f.ok()) {
    JOBPACT_FUZZ_CHECK(f.status().code() == jobpact::StatusCode::kInvalidArgument,
                       f.status().ToString());
  } else {
    JOBPACT_FUZZ_CHECK(f->limit >= 1 && f->limit <= 100000, std::to_string(f->limit));
  }
  const std::string duration = Field(fields, 6);
  jobpact::Result<jobpact::Duration> d = jobpact::cli::ParseDuration("--older-than", duration);
  CheckRefusal(d.status(), "--older-than");
  if (d.ok()) JOBPACT_FUZZ_CHECK(d->count() >= 0, duration);
  CheckRefusal(jobpact::cli::ParseTime("--since", duration, now).status(), "--since");
  jobpact::Result<double> rate = jobpact::cli::ParseRate("--rate", Field(fields, 7));
  CheckRefusal(rate.status(), "--rate");
  if (rate.ok()) JOBPACT_FUZZ_CHECK(*rate >= 0, Field(fields, 7));
  CheckRefusal(jobpact::cli::ParseStatusArg("--status", Field(fields, 8)).status(), "--status");
  CheckRefusal(jobpact::cli::ParseClassArg("--class", Field(fields, 8)).status(), "--class");
  return 0;
}
