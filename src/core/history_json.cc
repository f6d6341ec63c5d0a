// The stored form of a history entry (src/internal/history_json.h).
#include "src/internal/history_json.h"

#include "src/internal/time_ns.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace jobpact {
namespace internal {

std::string JsonString(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string HistoryEntryJson(const Transition& t, std::string_view worker) {
  const std::int64_t at_ns = ToNs(t.at);
  std::string out = "{\"from\":\"";
  out += JobStatusName(t.from);
  out += "\",\"to\":\"";
  out += JobStatusName(t.to);
  out += "\",\"at_ns\":";
  out += std::to_string(at_ns);
  out += ",\"reason\":";
  out += JsonString(t.reason);
  if (!worker.empty()) {
    out += ",\"worker\":";
    out += JsonString(worker);
  }
  out += '}';
  return out;
}

Result<Transition> HistoryEntryFromJson(const nlohmann::json& entry) {
  if (!entry.is_object()) return Status::Internal("a stored history entry is not a JSON object");
  Result<JobStatus> from = ParseJobStatus(entry.value("from", std::string()));
  Result<JobStatus> to = ParseJobStatus(entry.value("to", std::string()));
  if (!from.ok()) return from.status();
  if (!to.ok()) return to.status();
  Transition t;
  t.from = *from;
  t.to = *to;
  t.at = TimeFromNs(entry.value("at_ns", std::int64_t{0}));
  t.reason = entry.value("reason", std::string());
  return t;
}

}  // namespace internal
}  // namespace jobpact
