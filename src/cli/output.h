// How the jobpact command prints: human tables by default, JSON (one
// document on stdout) with --json. Times are RFC 3339 / ISO 8601 in UTC
// (whole seconds in tables, exact in JSON); durations are seconds (JSON
// fields end in _seconds) or, in tables, "42s", "3m12s", "2h05m", "3d04h".
#ifndef JOBPACT_SRC_CLI_OUTPUT_H_
#define JOBPACT_SRC_CLI_OUTPUT_H_

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/lock_store.h"
#include "jobpact/operations.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"

namespace jobpact {
namespace cli {

using Json = nlohmann::ordered_json;

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
// Exact RFC 3339, or null for the epoch (unset).
Json TimeJson(TimePoint t);
double SecondsOf(Duration d);

Json StatsToJson(const QueueStats& s);
Json JobToJson(const JobRecord& r);
// Without the history (jobs list); JobToJson has it.
Json JobSummaryToJson(const JobRecord& r);
Json DlqToJson(const DlqEntry& e, bool with_history);
Json LockToJson(const LockLease& l, TimePoint now);
Json PolicyToJson(const PublishedPolicy& p);
Json ControlToJson(const ControlState& s);
Json FailureToJson(const std::optional<Failure>& f);

// One line: the message with newlines folded, for stderr.
std::string OneLine(std::string text);

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_OUTPUT_H_
