// The PostgreSQL server the PostgreSQL backend's tests run against.
//
// PostgresTestUrl() gives its URL:
//   - JOBPACT_POSTGRES_URL if set (scripts/test starts one server for the
//     whole run and exports it);
//   - otherwise a private server started by this test program: initdb of a
//     temporary directory and `postgres` on a free 127.0.0.1 port, its Unix
//     socket in that directory, trust authentication, fsync off (a test
//     cluster), kept for the program's lifetime, stopped by its PID at exit
//     (and killed by the kernel if the program dies: PR_SET_PDEATHSIG).
//     PostgreSQL refuses to run as root, so as root both run as the
//     `postgres` user, on a directory it owns;
//   - otherwise "" (no PostgreSQL binaries, or they would not start), and the
//     tests skip with the reason, unless JOBPACT_REQUIRE_POSTGRES=1, when
//     they fail instead (CI sets it).
// Each test uses a schema of its own (FreshSchema()), so tests can run in
// parallel against one server.
#ifndef JOBPACT_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_SERVER_H_
#define JOBPACT_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_SERVER_H_

#include <libpq-fe.h>
#include <sys/types.h>

#include <memory>
#include <string>

#include "jobpact/postgres/postgres_backend.h"
#include "jobpact/result.h"

namespace jobpact {
namespace postgres_testing {

// The URL of the server to test against, or "" (see the file comment).
std::string PostgresTestUrl();
// Why PostgresTestUrl() is "" (for the skip or failure message).
std::string PostgresUnavailableReason();
// JOBPACT_REQUIRE_POSTGRES=1: an absent server fails the tests.
bool PostgresRequired();

// "t_" + 16 random hex digits: a schema no other test uses.
std::string FreshSchema();
// The options of PostgresTestUrl() with a fresh schema. REQUIRES: a URL.
postgres::PostgresOptions TestOptions();

// A plain libpq connection with `options`' server and credentials (for
// the test's own statements), or null with the reason in *error.
struct PgConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnCloser>;
PgConnPtr Connect(const postgres::PostgresOptions& options, std::string* error = nullptr);
// Runs `sql` (no parameters) and returns the first value of the first row
// ("" if none), or "ERROR: ..." if it failed.
std::string Query(PGconn* conn, const std::string& sql);
// DROP SCHEMA ... CASCADE of options.schema.
void DropSchema(const postgres::PostgresOptions& options);

// One PostgreSQL server of a test's own, on 127.0.0.1 and a free port, in
// a temporary directory (removed by the destructor, which also stops the
// server). Not thread-safe.
class PrivatePostgresServer {
 public:
  PrivatePostgresServer() = default;
  ~PrivatePostgresServer();
  PrivatePostgresServer(const PrivatePostgresServer&) = delete;
  PrivatePostgresServer& operator=(const PrivatePostgresServer&) = delete;

  // Creates the cluster the first time (initdb), then starts the server (on
  // a new free port the first time, on the same port again after Stop())
  // and waits until it accepts connections, up to 20 s. Returns "" or what
  // went wrong.
  std::string Start();
  // Stops the server by its PID: SIGQUIT, PostgreSQL's immediate shutdown
  // (what `pg_ctl stop -m immediate` sends: no checkpoint, crash recovery
  // at the next start), then waits for it to exit.
  void StopImmediately();

  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url() const {
    return "postgres://postgres@127.0.0.1:" + std::to_string(port_) + "/postgres";
  }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool initialized_ = false;
};

}  // namespace postgres_testing
}  // namespace jobpact

// In a test body: `url` becomes PostgresTestUrl(); with none, the test skips
// (or, with JOBPACT_REQUIRE_POSTGRES=1, fails) with the reason.
#define JOBPACT_POSTGRES_URL_OR_SKIP(url)                                                    \
  const std::string url = ::jobpact::postgres_testing::PostgresTestUrl();                    \
  if (url.empty()) {                                                                         \
    if (::jobpact::postgres_testing::PostgresRequired()) {                                   \
      FAIL() << "JOBPACT_REQUIRE_POSTGRES=1 but no PostgreSQL server: "                      \
             << ::jobpact::postgres_testing::PostgresUnavailableReason();                    \
    }                                                                                        \
    GTEST_SKIP() << "no PostgreSQL server (set JOBPACT_POSTGRES_URL or install postgresql): " \
                 << ::jobpact::postgres_testing::PostgresUnavailableReason();                \
  }                                                                                          \
  static_assert(true, "require a semicolon")

#endif  // JOBPACT_TESTS_BACKENDS_POSTGRES_POSTGRES_TEST_SERVER_H_
