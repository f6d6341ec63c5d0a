// What the jobpact command line reads: durations, times, rates, statuses
// and failure classes, each refused with a message that names the flag and
// the bad value (the tool prints it as its one line on stderr and exits 2).
// The parsers live in src/internal/operator_input.h, shared with the
// dashboard's API; the command line names them here.
#ifndef JOBPACT_SRC_CLI_ARGS_H_
#define JOBPACT_SRC_CLI_ARGS_H_

#include "src/internal/operator_input.h"

namespace jobpact {
namespace cli {

using internal::ParseClassArg;
using internal::ParseDuration;
using internal::ParseRate;
using internal::ParseStatusArg;
using internal::ParseTime;

}  // namespace cli
}  // namespace jobpact

#endif  // JOBPACT_SRC_CLI_ARGS_H_
