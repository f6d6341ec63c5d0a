// Private: the stored form of a history entry, shared by the stores that
// keep history as JSON text (SQLite, Redis): one object
// {"from","to","at_ns","reason"[,"worker"]}, statuses by name, the time in
// nanoseconds since the Unix epoch. Defined in src/core/history_json.cc.
#ifndef JOBPACT_SRC_INTERNAL_HISTORY_JSON_H_
#define JOBPACT_SRC_INTERNAL_HISTORY_JSON_H_

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "jobpact/job_status.h"
#include "jobpact/result.h"

namespace jobpact {
namespace internal {

// `text` as a JSON string literal (invalid UTF-8 replaced, never thrown).
std::string JsonString(std::string_view text);

// One entry in its stored form; "worker" only if `worker` is not empty.
// Built by hand: it runs for every delivery and completion, and only the
// reason and the worker can need escaping.
std::string HistoryEntryJson(const Transition& t, std::string_view worker = {});

// One stored entry read back: kInternal naming what is wrong if it is not
// an object, a member has the wrong type ("at_ns" must be an integer within
// int64), or a status is unknown. Never throws, whatever the JSON holds.
Result<Transition> HistoryEntryFromJson(const nlohmann::json& entry);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_HISTORY_JSON_H_
