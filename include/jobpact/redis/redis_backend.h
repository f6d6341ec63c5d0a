// File: jobpact/redis/redis_backend.h
//
// The shared backend for many processes on many hosts (SPEC 9): the queue
// (and its operator side), the lock store, the idempotency store and the
// rate limiters and the cache guard's store (jobpact/cache_store.h) kept
// in ONE Redis server (or one Redis Cluster slot), under one key
// namespace. Every state change is one Lua script run by the server, so
// it is atomic with respect to every other client of that namespace.
//
// Key layout (docs/backends.md has the full table): every key of a
// namespace starts with "jobpact:{<namespace>}:", so all of them carry ONE
// Redis Cluster hash tag and every script touches one slot. A deployment
// spreads load across a cluster by giving its applications different
// namespaces. Tenants are a field of a job, never part of the tag. Names
// that go into keys (job ids, queues, lock and idempotency keys) are
// checked first, so no input can address another namespace.
//
// Connections: a pool of RedisOptions::pool_size connections, shared by the
// three stores. After a dropped connection or a server restart the pool
// reconnects lazily, with jittered exponential backoff between
// reconnect_backoff_min and reconnect_backoff_max; calls made meanwhile
// return kUnavailable (retryable) with a message naming the server.
//
// Durability is the server's (docs/backends.md): with appendonly yes and
// appendfsync always an acknowledged write survives a crash of the server
// and of the machine; with everysec up to about one second of acknowledged
// writes can be lost on a power or kernel crash (none on a crash of the
// server process alone).
//
// TLS: Debian's hiredis 0.14 has none, so rediss:// URLs are refused. Reach
// a TLS server through a TLS-terminating proxy on loopback (stunnel, or a
// sidecar) and point jobpact at the proxy's plain port.
//
// Contract: methods never throw; errors are Status values. Time comes only
// from the injected Clock: lease, lock and claim expiry and the rate
// limiters' times are computed from it and compared inside the scripts with
// a `now` the client passes (in microseconds), never with the server's
// clock (so a ManualClock drives them in tests; Redis key TTLs are set only
// as generous garbage collection). The connect and
// command timeouts and the reconnect backoff are real time.
//
// The same stores, without this object, come from a URL too:
// jobpact::OpenBackend("redis://127.0.0.1:6379/0?namespace=orders").
//
// Example:
//   JOBPACT_ASSIGN_OR_RETURN(jobpact::redis::RedisOptions options,
//                            jobpact::redis::ParseRedisUrl(std::getenv("REDIS_URL")));
//   options.key_namespace = "orders";
//   auto backend = jobpact::redis::RedisBackend::Open(options, jobpact::SystemClock::Default());
//   if (!backend.ok()) return backend.status();
//   jobpact::JobRunnerOptions opts;
//   opts.backend = (*backend)->bundle();
//
// Thread-safe.
#ifndef JOBPACT_REDIS_REDIS_BACKEND_H_
#define JOBPACT_REDIS_REDIS_BACKEND_H_

#include <memory>
#include <string>
#include <string_view>

#include "jobpact/backend.h"
#include "jobpact/cache_store.h"
#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/idempotency_store.h"
#include "jobpact/lock_store.h"
#include "jobpact/queue_admin.h"
#include "jobpact/queue_backend.h"
#include "jobpact/rate_limit_store.h"
#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {
namespace redis {

struct RedisOptions {
  // Where the server is: a TCP host and port, or (if unix_socket is not
  // empty) a Unix domain socket path, which then wins over host and port.
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_socket;

  // Credentials: with `user` set, AUTH <user> <password> (Redis 6 ACL);
  // with only `password`, AUTH <password> (the "default" user). Both
  // empty: no AUTH. Never printed (url() and error messages leave it out).
  std::string user;
  std::string password;

  // The logical database (SELECT). REQUIRES: >= 0 (the server bounds it,
  // 0..15 by default; Redis Cluster has only 0).
  int database = 0;

  // Real-time bounds: connecting (TCP and AUTH/SELECT), and each command's
  // round trip. A command that times out gives kDeadlineExceeded and its
  // connection is dropped (its reply may still arrive; the command may or
  // may not have run). REQUIRES: > 0.
  Duration connect_timeout = Seconds(2);
  Duration command_timeout = Seconds(5);

  // Connections kept open; a thread that finds none free waits for one (up
  // to command_timeout, then kDeadlineExceeded). Blocking wake-up waits use
  // connections of their own, outside this count. REQUIRES: >= 1.
  int pool_size = 8;

  // The key namespace: every key is "jobpact:{<key_namespace>}:...". 1 to
  // 64 characters of [A-Za-z0-9_.:-]. Applications sharing a server use
  // different namespaces; processes of one application use the same.
  std::string key_namespace = "jobpact";

  // After a failed connect, no new connect is tried for a delay drawn in
  // [d/2, d], d doubling from reconnect_backoff_min up to
  // reconnect_backoff_max; calls in between fail at once with kUnavailable.
  // A successful connect resets d. REQUIRES: 0 < min <= max.
  Duration reconnect_backoff_min = Millis(100);
  Duration reconnect_backoff_max = Seconds(5);
};

// Parses a Redis URL into options (fields the URL does not set keep the
// defaults above):
//   redis://[user[:password]@]host[:port][/db][?params]
//   redis+unix://[user[:password]@]/path/to/redis.sock[?params]
// host may be a name, an IPv4 address or a bracketed IPv6 address
// ([::1]); port defaults to 6379 and db to 0. Userinfo, path and parameter
// values are percent-decoded (%40 for '@' in a password, %2F for '/').
// Parameters (each at most once):
//   db=N                        the database (redis+unix:; for redis:
//                               only if the path does not give it)
//   namespace=NAME              RedisOptions::key_namespace
//   connect_timeout_ms=N        RedisOptions::connect_timeout
//   command_timeout_ms=N        RedisOptions::command_timeout
//   pool_size=N                 RedisOptions::pool_size
//   reconnect_backoff_min_ms=N  RedisOptions::reconnect_backoff_min
//   reconnect_backoff_max_ms=N  RedisOptions::reconnect_backoff_max
// Errors: kUnimplemented for rediss:// (no TLS in hiredis 0.14; the
// message says what to do instead); kInvalidArgument naming what is wrong
// (another scheme, no host, a bad port or db, a path after the db, a bad
// percent-encoding, an unknown or repeated parameter, a bad value, a bad
// namespace). Messages never repeat the password.
JOBPACT_EXPORT Result<RedisOptions> ParseRedisUrl(std::string_view url);

// One connection pool to one server and namespace, and the stores kept
// there. Create with Open(); hand bundle() to a JobRunner, or to several
// runners in one process. Thread-safe.
class JOBPACT_EXPORT RedisBackend {
 public:
  // Connects (one connection, to check the server, the credentials and the
  // database; the rest of the pool connects on demand) and builds the
  // stores. Errors: kInvalidArgument for bad options (each named) or a null
  // clock; kUnavailable naming the server if it cannot be reached
  // (refused, unknown host, or no answer within connect_timeout);
  // kFailedPrecondition if the server refuses the credentials or the
  // database.
  static Result<std::shared_ptr<RedisBackend>> Open(const RedisOptions& options,
                                                    std::shared_ptr<Clock> clock);

  RedisBackend(const RedisBackend&) = delete;
  RedisBackend& operator=(const RedisBackend&) = delete;
  ~RedisBackend();

  // The stores, sharing this object's connections; each keeps the pool
  // open for as long as it is held, even after this object is gone. A
  // store this build does not have yet is null (then bundle().complete()
  // is false).
  std::shared_ptr<QueueBackend> queue() const;
  std::shared_ptr<QueueAdmin> admin() const;
  std::shared_ptr<LockStore> locks() const;
  std::shared_ptr<IdempotencyStore> idempotency() const;
  // The rate limiters every process on this namespace shares.
  std::shared_ptr<RateLimitStore> rate_limits() const;
  // The RedisCacheStore: the cache guard's entries shared by every process
  // on this namespace, one hash per entry under
  // "jobpact:{<namespace>}:cache:<key>" (a cache key may hold any byte but
  // NUL and still never leaves the namespace), with a sorted-set index of
  // the keys so that EraseByPrefix and CountByPrefix walk exact prefix
  // ranges (ZRANGEBYLEX) instead of SCANning the database. Expiry follows
  // the clock given to Open(); Redis TTLs only collect garbage. Passes
  // jobpact/testing/cache_store_contract.h. docs/backends.md has the keys.
  std::shared_ptr<CacheStore> cache() const;

  // All of them, as JobRunnerOptions::backend takes them (the cache store
  // in BackendBundle::cache), with name "redis" and url() as the url.
  BackendBundle bundle() const;

  // Where this backend is, for logs: redis://[user@]host:port/db?namespace=NS
  // or redis+unix://[user@]/path?db=N&namespace=NS. Never holds the password.
  std::string url() const;

  const RedisOptions& options() const;

  // Internal: the state shared by the stores (src/backends/redis).
  class Impl;

 private:
  explicit RedisBackend(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace redis
}  // namespace jobpact

#endif  // JOBPACT_REDIS_REDIS_BACKEND_H_
