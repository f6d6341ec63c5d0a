// The Redis server the Redis backend's tests run against.
//
// RedisTestUrl() gives its URL:
//   - JOBPACT_REDIS_URL if set (scripts/test starts one server for the whole
//     run and exports it);
//   - otherwise a private redis-server started by this test program on a
//     free loopback port, in its own temporary directory, without
//     persistence (--save '' --appendonly no), kept for the program's
//     lifetime and killed by its PID at exit (and by the kernel if the
//     program dies: PR_SET_PDEATHSIG);
//   - otherwise "" (no redis-server on PATH, or it would not start), and
//     the tests skip, with the reason, unless JOBPACT_REQUIRE_REDIS=1, when
//     they fail instead (CI sets it, so a skipped Redis suite cannot pass
//     for a green one).
// Each test uses a namespace of its own (FreshNamespace()), so tests can
// run in parallel against one server.
#ifndef JOBPACT_TESTS_BACKENDS_REDIS_REDIS_TEST_SERVER_H_
#define JOBPACT_TESTS_BACKENDS_REDIS_REDIS_TEST_SERVER_H_

#include <sys/types.h>

#include <string>

#include "jobpact/redis/redis_backend.h"
#include "jobpact/result.h"

namespace jobpact {
namespace redis_testing {

// The URL of the server to test against, or "" (see the file comment).
std::string RedisTestUrl();
// Why RedisTestUrl() is "" (for the skip or failure message).
std::string RedisUnavailableReason();
// JOBPACT_REQUIRE_REDIS=1: an absent server fails the tests.
bool RedisRequired();

// "t_" + 16 random hex digits: a namespace no other test uses.
std::string FreshNamespace();
// The options of RedisTestUrl() with a fresh namespace. REQUIRES: a URL.
redis::RedisOptions TestOptions();

// One redis-server process of a test's own, on 127.0.0.1 and a free port,
// in a temporary directory (removed by the destructor, which also kills
// the server). Not thread-safe.
class PrivateRedisServer {
 public:
  PrivateRedisServer() = default;
  ~PrivateRedisServer();
  PrivateRedisServer(const PrivateRedisServer&) = delete;
  PrivateRedisServer& operator=(const PrivateRedisServer&) = delete;

  // Starts the server (on a new free port the first time, on the same port
  // again after Kill()) and waits until it answers PING, up to 5 s. Returns
  // "" or what went wrong.
  std::string Start();
  // SIGKILL by PID, then waits for it to exit.
  void Kill();

  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace redis_testing
}  // namespace jobpact

// In a test body: `url` becomes RedisTestUrl(); with none, the test skips
// (or, with JOBPACT_REQUIRE_REDIS=1, fails) with the reason.
#define JOBPACT_REDIS_URL_OR_SKIP(url)                                                  \
  const std::string url = ::jobpact::redis_testing::RedisTestUrl();                     \
  if (url.empty()) {                                                                    \
    if (::jobpact::redis_testing::RedisRequired()) {                                    \
      FAIL() << "JOBPACT_REQUIRE_REDIS=1 but no Redis server: "                         \
             << ::jobpact::redis_testing::RedisUnavailableReason();                     \
    }                                                                                   \
    GTEST_SKIP() << "no Redis server (set JOBPACT_REDIS_URL or install redis-server): " \
                 << ::jobpact::redis_testing::RedisUnavailableReason();                 \
  }                                                                                     \
  static_assert(true, "require a semicolon")

#endif  // JOBPACT_TESTS_BACKENDS_REDIS_REDIS_TEST_SERVER_H_
