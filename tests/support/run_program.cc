#include "tests/support/run_program.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace jobpact {
namespace testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One directory per test process for the children's output files.
const std::string& OutputDir() {
  static const std::string dir = [] {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "jobpact_run_XXXXXX").string();
    return mkdtemp(tmpl.data()) == nullptr ? std::string() : tmpl;
  }();
  return dir;
}

}  // namespace

nlohmann::json Ran::json() const {
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << out;
  return j;
}

bool Ran::one_line_error() const {
  return !err.empty() && err.back() == '\n' && err.find('\n') == err.size() - 1;
}

std::ostream& operator<<(std::ostream& os, const Ran& r) {
  return os << "rc=" << r.rc << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
}

Ran RunProgram(const std::string& program, const std::vector<std::string>& args,
               const std::vector<std::pair<std::string, const char*>>& env) {
  static int n = 0;
  const std::string out_path = OutputDir() + "/out" + std::to_string(++n);
  const std::string err_path = OutputDir() + "/err" + std::to_string(n);
  // Everything the child needs is made before fork: between fork and exec
  // a child of a threaded process may only make async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& kv : env) replaced = replaced || kv.first == name;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) {
    if (v != nullptr) env_strings.push_back(k + "=" + v);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  Ran r;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    r.rc = WEXITSTATUS(status);
  }
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace testing
}  // namespace jobpact
