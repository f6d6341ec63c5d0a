#include "src/internal/job_row_codec.h"

#include <string>
#include <utility>
#include <vector>

namespace jobpact {
namespace internal {

Result<std::vector<Transition>> ParseHistory(const std::string& text) {
  std::vector<Transition> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return Status::Internal("stored job history is not a JSON array");
  out.reserve(j.size());
  for (const auto& e : j) {
    JOBPACT_ASSIGN_OR_RETURN(Transition t, HistoryEntryFromJson(e));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> ParseStringArray(const std::string& text) {
  std::vector<std::string> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

std::string HistoryJson(const std::vector<Transition>& entries) {
  std::string out = "[";
  for (const Transition& t : entries) {
    if (out.size() > 1) out += ',';
    out += HistoryEntryJson(t, "");
  }
  out += ']';
  return out;
}

std::string AuditJson(const std::vector<std::string>& audit) {
  if (audit.empty()) return "[]";
  return nlohmann::json(audit).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace internal
}  // namespace jobpact
