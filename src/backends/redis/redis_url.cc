// ParseRedisUrl (jobpact/redis/redis_backend.h): redis:// and redis+unix://
// URLs into RedisOptions. Standalone (not on src/backends/url's parser, which
// lives in jobpact::backends, a target that links this one), with the same
// rules: percent-decoding of every part, no spaces or control characters,
// messages that name the part at fault and never repeat the password.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "jobpact/redis/redis_backend.h"
#include "src/backends/redis/keys.h"
#include "src/internal/guarded.h"
#include "src/internal/percent_encoding.h"
#include "src/internal/server_url.h"

namespace jobpact {
namespace redis {
namespace {

constexpr char kForms[] =
    "redis://[user[:password]@]host[:port][/db][?params] or "
    "redis+unix://[user[:password]@]/path/to/redis.sock[?params]";
constexpr char kParams[] =
    "db, namespace, connect_timeout_ms, command_timeout_ms, pool_size, "
    "reconnect_backoff_min_ms, reconnect_backoff_max_ms";

const internal::ServerUrlParser& Parser() {
  static const internal::ServerUrlParser parser("redis URL");
  return parser;
}

Status Invalid(std::string msg) { return Parser().Invalid(msg); }

std::string Quoted(std::string_view s) { return internal::ServerUrlParser::Quoted(s); }

Result<std::string> Decode(std::string_view part, std::string_view what) {
  return Parser().Decode(part, what);
}

Result<std::int64_t> ParseInt(std::string_view what, std::string_view value, std::int64_t min,
                              std::int64_t max) {
  return Parser().ParseInt(what, value, min, max);
}

constexpr std::int64_t kMaxMillis = std::numeric_limits<std::int64_t>::max() / 1000000;

Status ApplyParam(const std::string& name, const std::string& value, bool db_in_path,
                  RedisOptions& o) {
  const std::string what = "query parameter " + name + "=";
  if (name == "db") {
    if (db_in_path) {
      return Invalid("the database is given twice, in the path and as db=; write one of them");
    }
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t db,
                             ParseInt(what, value, 0, std::numeric_limits<int>::max()));
    o.database = static_cast<int>(db);
  } else if (name == "namespace") {
    JOBPACT_RETURN_IF_ERROR(redis_internal::RedisKeys::CheckNamespace(value));
    o.key_namespace = value;
  } else if (name == "connect_timeout_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(what, value, 1, kMaxMillis));
    o.connect_timeout = Millis(ms);
  } else if (name == "command_timeout_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(what, value, 1, kMaxMillis));
    o.command_timeout = Millis(ms);
  } else if (name == "pool_size") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t n, ParseInt(what, value, 1, 1024));
    o.pool_size = static_cast<int>(n);
  } else if (name == "reconnect_backoff_min_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(what, value, 1, kMaxMillis));
    o.reconnect_backoff_min = Millis(ms);
  } else if (name == "reconnect_backoff_max_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(what, value, 1, kMaxMillis));
    o.reconnect_backoff_max = Millis(ms);
  } else {
    return Invalid("unknown query parameter " + Quoted(name) + " (known: " + kParams + ")");
  }
  return Status::Ok();
}

Status ApplyHostPort(std::string_view hostport, RedisOptions& o) {
  return Parser().SplitHostPort(
      hostport, &o.host, &o.port,
      "no host (e.g. redis://127.0.0.1:6379/0; for a Unix socket "
      "redis+unix:///run/redis/redis.sock)",
      6379);
}

Result<RedisOptions> Parse(std::string_view url) {
  if (url.empty()) return Invalid(std::string("the URL is empty (") + kForms + ")");
  if (std::string problem = internal::UnencodedByteProblem(url); !problem.empty()) {
    return Invalid(problem);
  }
  const std::size_t colon = url.find(':');
  std::string scheme;
  if (colon != std::string_view::npos) {
    for (char ch : url.substr(0, colon)) {
      scheme.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
    }
  }
  if (scheme == "rediss") {
    return Status::Unimplemented(
        "redis URL: rediss:// (TLS) is not supported: Debian's hiredis 0.14, which this "
        "jobpact is built on, has no TLS. Run a TLS-terminating proxy on loopback (e.g. "
        "stunnel in client mode: accept = 127.0.0.1:6380, connect = <redis-host>:6379) and "
        "use redis://127.0.0.1:6380 instead");
  }
  const bool unix_socket = scheme == "redis+unix";
  if (scheme != "redis" && !unix_socket) {
    return Invalid("the scheme must be redis: or redis+unix: (got " +
                   (colon == std::string_view::npos ? std::string("none") : Quoted(scheme + ":")) +
                   "; " + kForms + ")");
  }
  std::string_view rest = url.substr(colon + 1);
  if (rest.substr(0, 2) != "//") {
    return Invalid(scheme + ": must be followed by // (" + kForms + ")");
  }
  rest.remove_prefix(2);
  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    return Invalid(
        "the URL has a fragment ('#...'), which means nothing here; write %23 for a "
        "'#' in a password");
  }
  std::string_view query;
  if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);

  RedisOptions o;
  // The userinfo ends at the LAST '@' of the authority (a literal '@' in a
  // password should be %40, but one written raw still parses).
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    JOBPACT_RETURN_IF_ERROR(Parser().SplitUserinfo(authority.substr(0, at), &o.user, &o.password));
    authority = authority.substr(at + 1);
  }
  bool db_in_path = false;
  if (unix_socket) {
    if (!authority.empty()) {
      return Invalid("redis+unix: takes no host (" + Quoted(authority) +
                     " is in the host position); write redis+unix:///path/to/redis.sock");
    }
    JOBPACT_ASSIGN_OR_RETURN(o.unix_socket, Decode(path, "socket path"));
    if (o.unix_socket.empty() || o.unix_socket == "/") {
      return Invalid("redis+unix: has no socket path (e.g. redis+unix:///run/redis/redis.sock)");
    }
    if (o.unix_socket.back() == '/') {
      return Invalid("the socket path " + Quoted(o.unix_socket) +
                     " ends with '/': it names a directory");
    }
  } else {
    JOBPACT_RETURN_IF_ERROR(ApplyHostPort(authority, o));
    if (!path.empty() && path != "/") {
      std::string_view db = path.substr(1);
      if (db.find('/') != std::string_view::npos) {
        return Invalid("the path " + Quoted(path) +
                       " has more than the database number (e.g. redis://host:6379/2)");
      }
      JOBPACT_ASSIGN_OR_RETURN(std::int64_t n, ParseInt("the database in the path", db, 0,
                                                        std::numeric_limits<int>::max()));
      o.database = static_cast<int>(n);
      db_in_path = true;
    }
  }
  JOBPACT_RETURN_IF_ERROR(Parser().ForEachParam(
      query, [&](const std::string& name, const std::string& value) {
        return ApplyParam(name, value, db_in_path, o);
      }));
  if (o.reconnect_backoff_max < o.reconnect_backoff_min) {
    return Invalid("reconnect_backoff_max_ms must be >= reconnect_backoff_min_ms");
  }
  return o;
}

}  // namespace

Result<RedisOptions> ParseRedisUrl(std::string_view url) {
  return internal::Guarded("ParseRedisUrl", [&] { return Parse(url); });
}

}  // namespace redis
}  // namespace jobpact
