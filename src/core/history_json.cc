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
  // Each member is type-checked before it is read: json::value() throws
  // type_error for a member of another type, and converts a floating-point
  // at_ns with a static_cast that is undefined behaviour out of int64's
  // range (1.8e27). A damaged entry is an error the store quarantines, never
  // an exception that fails the whole read.
  auto text = [&](const char* name, std::string* out) -> Status {
    auto it = entry.find(name);
    if (it == entry.end()) return Status::Ok();
    if (!it->is_string()) {
      return Status::Internal(std::string("a stored history entry's \"") + name +
                              "\" is not a string");
    }
    *out = it->get_ref<const std::string&>();
    return Status::Ok();
  };
  std::string from_name, to_name, reason_text;
  JOBPACT_RETURN_IF_ERROR(text("from", &from_name));
  JOBPACT_RETURN_IF_ERROR(text("to", &to_name));
  JOBPACT_RETURN_IF_ERROR(text("reason", &reason_text));
  Result<JobStatus> from = ParseJobStatus(from_name);
  Result<JobStatus> to = ParseJobStatus(to_name);
  if (!from.ok()) return Status::Internal("a stored history entry's from: " + from.status().message());
  if (!to.ok()) return Status::Internal("a stored history entry's to: " + to.status().message());
  std::int64_t at_ns = 0;
  auto at = entry.find("at_ns");
  if (at != entry.end()) {
    if (at->is_number_integer() && !at->is_number_unsigned()) {
      at_ns = at->get<std::int64_t>();
    } else if (at->is_number_unsigned() &&
               at->get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) {
      at_ns = static_cast<std::int64_t>(at->get<std::uint64_t>());
    } else {
      return Status::Internal("a stored history entry's \"at_ns\" is not an integer within int64: " +
                              at->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  Transition t;
  t.from = *from;
  t.to = *to;
  t.at = TimeFromNs(at_ns);
  t.reason = std::move(reason_text);
  return t;
}

}  // namespace internal
}  // namespace jobpact
