// Private to the CLI: what its command files share (defined in
// commands.cc).
#ifndef JOBPACT_SRC_CLI_COMMAND_UTIL_H_
#define JOBPACT_SRC_CLI_COMMAND_UTIL_H_

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/job.h"
#include "src/cli/commands.h"
#include "src/cli/output.h"

namespace jobpact {
namespace cli {

TimePoint Now();
// Pretty JSON (invalid UTF-8 printed as U+FFFD).
void PrintJson(const Context& ctx, const Json& j);
// The failure's class name, or "-".
std::string ClassOf(const std::optional<Failure>& f);
// `s`, or `dash` if empty.
std::string Or(const std::string& s, const char* dash = "-");
// Reads a --limit value: within [1, max] or a usage error.
Status CheckLimit(int limit, int max);
// As the facade's replay selects ids: each must match the filters too.
bool Matches(const DlqEntry& e, const DlqFilter& f);
// Prints `j` (--json) or `human`; kExitOk.
int Done(const Context& ctx, const Json& j, const std::string& human);
// Per-id failures of a mass action, as JSON and as lines.
Json FailedToJson(const std::vector<std::pair<std::string, Status>>& failed);
void PrintFailed(const Context& ctx, const std::vector<std::pair<std::string, Status>>& failed);
// The refusal of a mass action of `n` entries above kConfirmThreshold.
std::string Refusal(std::size_t n, const char* verb);

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_COMMAND_UTIL_H_
