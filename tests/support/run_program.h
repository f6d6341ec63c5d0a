// Runs a program as a child process, as a user runs it from a shell, and
// keeps what it printed: for the end-to-end tests of the jobpact command
// (tests/cli) and of the runbook's actions (tests/runbook).
#ifndef JOBPACT_TESTS_SUPPORT_RUN_PROGRAM_H_
#define JOBPACT_TESTS_SUPPORT_RUN_PROGRAM_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace jobpact {
namespace testing {

// What a finished child left: its exit code (-1 if it did not exit
// normally), its stdout and its stderr.
struct Ran {
  int rc = -1;
  std::string out;
  std::string err;
  // stdout as one JSON document; a non-fatal test failure if it is not one.
  nlohmann::json json() const;
  // stderr is exactly one line.
  bool one_line_error() const;
};

std::ostream& operator<<(std::ostream& os, const Ran& r);

// Runs `program args...` to completion with stdout and stderr to files;
// each `env` entry is set in the child only (a null value unsets it).
// Safe to call from a threaded test: everything the child needs is made
// before fork.
Ran RunProgram(const std::string& program, const std::vector<std::string>& args,
               const std::vector<std::pair<std::string, const char*>>& env = {});

}  // namespace testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_RUN_PROGRAM_H_
