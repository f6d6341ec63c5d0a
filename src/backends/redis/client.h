// Private: the Redis client every store of the Redis backend talks through.
// A pool of hiredis synchronous connections to one server (RedisOptions),
// with AUTH and SELECT on connect, a command timeout, and lazy reconnection
// with jittered exponential backoff after a failure.
//
// Error model, for every call:
//   - An error REPLY from the server (WRONGTYPE, a Lua error, ...) is a
//     Reply of Type::kError, not a failed Result: the caller decides what
//     it means.
//   - A failed Result is the connection's failure: kUnavailable naming the
//     server ("redis 127.0.0.1:6379: ...") when it cannot be reached, the
//     connection broke, or the pool is backing off before the next connect;
//     kDeadlineExceeded when the reply did not come within command_timeout
//     (the command may or may not have run); kInternal for a protocol
//     error. The connection involved is dropped in each case, and so are
//     the idle ones (after a server restart they are all dead), so the next
//     call reconnects.
// Nothing throws; nothing blocks longer than connect_timeout +
// command_timeout (plus, for BlockingCommand, its own timeout).
#ifndef JOBPACT_SRC_BACKENDS_REDIS_CLIENT_H_
#define JOBPACT_SRC_BACKENDS_REDIS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/redis/redis_backend.h"
#include "jobpact/result.h"
#include "jobpact/status.h"
#include "src/internal/mutex.h"

struct redisContext;

namespace jobpact {
namespace redis_internal {

using redis::RedisOptions;

// One reply, converted from hiredis's redisReply (RESP2).
struct Reply {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  long long integer = 0;
  // kString (binary safe), kStatus ("OK") and kError ("ERR ...") text.
  std::string str;
  std::vector<Reply> elements;  // kArray.

  bool is_error() const { return type == Type::kError; }
  bool is_nil() const { return type == Type::kNil; }
};

// A Lua script and its SHA-1 (computed locally, as Redis does), for EVALSHA.
// Immutable; thread-safe.
class Script {
 public:
  explicit Script(std::string lua);
  const std::string& lua() const { return lua_; }
  // Lower-case hex, 40 characters.
  const std::string& sha1() const { return sha1_; }

 private:
  std::string lua_;
  std::string sha1_;
};

// One EVALSHA of an EvalPipeline. `script` must outlive the call.
struct ScriptCall {
  const Script* script = nullptr;
  std::vector<std::string> keys;
  std::vector<std::string> args;
};

// The SHA-1 of `data` as 40 lower-case hex digits (FIPS 180-4).
std::string Sha1Hex(const std::string& data);

// Thread-safe.
class RedisClient {
 public:
  // Validates the options (kInvalidArgument naming the field) and opens one
  // connection, so that an unreachable server (kUnavailable), bad
  // credentials or a bad database (kFailedPrecondition, naming the server)
  // are reported here rather than by the first command.
  static Result<std::shared_ptr<RedisClient>> Connect(const RedisOptions& options);

  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;
  ~RedisClient();

  // One command, argv form (binary safe).
  Result<Reply> Command(const std::vector<std::string>& argv);

  // Several commands in one round trip on one connection, replies in
  // order. Not a transaction: other clients' commands may run in between.
  Result<std::vector<Reply>> Pipeline(const std::vector<std::vector<std::string>>& commands);

  // EVALSHA; on a NOSCRIPT reply (the server lost its script cache: a
  // restart or SCRIPT FLUSH) runs the script with EVAL, which also caches
  // it again, once.
  Result<Reply> Eval(const Script& script, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args);

  // Several EVALSHAs in one round trip, replies in order. Calls answered
  // NOSCRIPT did not run; they are run again with EVAL, in order, in a
  // second round trip, after the others: calls in one batch must not depend
  // on each other's order (e.g. acks of different jobs).
  Result<std::vector<Reply>> EvalPipeline(const std::vector<ScriptCall>& calls);

  // A blocking command (BLPOP, BRPOP, BLMOVE, ... whose own timeout argument
  // the caller puts in argv) on a connection of its own, outside the pool,
  // so that waiting for a wake-up never holds a pooled connection. The
  // socket waits up to `timeout` + command_timeout; the server's nil reply
  // to a command timing out on its side is returned as a kNil Reply.
  Result<Reply> BlockingCommand(const std::vector<std::string>& argv, Duration timeout);

  // "127.0.0.1:6379", "[::1]:6379" or the socket path: for messages.
  std::string server_name() const { return server_name_; }
  const RedisOptions& options() const { return options_; }

  // Connections open now (idle and in use, blocking ones apart). For tests.
  int OpenConnections() const;

 private:
  struct Conn;
  explicit RedisClient(const RedisOptions& options);

  // A connection from the pool (or a new one), or why none can be had.
  Result<std::unique_ptr<Conn>> Checkout();
  // Gives a connection back: kept if healthy, closed if broken.
  void Return(std::unique_ptr<Conn> conn);

  // Opens and prepares (AUTH, SELECT) a new connection; `blocking` ones do
  // not count against pool_size. Records the outcome for the backoff.
  Result<std::unique_ptr<Conn>> Open(bool blocking);
  Result<std::unique_ptr<Conn>> OpenUnlocked();

  // Sends `request` (`count` commands in the protocol's form: resp.h) and
  // reads one reply per command on `conn`. On a connection failure marks
  // `conn` broken and returns the error.
  Result<std::vector<Reply>> RoundTrip(Conn& conn, std::string_view request, std::size_t count);
  // The same for commands given as argument lists (none may be empty).
  Result<std::vector<Reply>> RoundTrip(Conn& conn,
                                       const std::vector<std::vector<std::string>>& commands);

  // The Status for a connection failure on `ctx`, naming the server.
  Status ConnectionError(redisContext* ctx, const char* during) const;
  Status Unavailable(const std::string& what) const;

  // Immutable after construction.
  const RedisOptions options_;
  const std::string server_name_;
  const std::shared_ptr<Clock> clock_;  // Real time: backoff and waits.

  mutable internal::PlainMutex mu_;
  internal::CondVar cv_;  // A pooled connection came back or closed.
  std::vector<std::unique_ptr<Conn>> idle_ JOBPACT_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Conn>> idle_blocking_ JOBPACT_GUARDED_BY(mu_);
  // Pooled connections open: idle_ plus checked out.
  int open_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Bumped when a connection breaks: idle connections of older generations
  // are closed instead of reused (after a restart they are all dead).
  std::uint64_t generation_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Backoff after failed connects.
  TimePoint next_connect_at_ JOBPACT_GUARDED_BY(mu_){};
  Duration backoff_ JOBPACT_GUARDED_BY(mu_){};
  std::string last_connect_error_ JOBPACT_GUARDED_BY(mu_);
  std::minstd_rand rng_ JOBPACT_GUARDED_BY(mu_);
};

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_CLIENT_H_
