// ParsePostgresUrl (jobpact/postgres/postgres_backend.h): postgres:// and
// postgresql:// URLs into PostgresOptions, with the rules every server URL
// of jobpact shares (src/internal/server_url.h).
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "jobpact/postgres/postgres_backend.h"
#include "src/backends/postgres/core.h"
#include "src/internal/guarded.h"
#include "src/internal/percent_encoding.h"
#include "src/internal/server_url.h"

namespace jobpact {
namespace postgres {
namespace {

constexpr char kForm[] = "postgres://[user[:password]@][host][:port][/database][?params]";
constexpr char kParams[] =
    "schema, pool_size, connect_timeout, statement_timeout_ms, reconnect_backoff_min_ms, "
    "reconnect_backoff_max_ms, idempotency_retention_ms, application_name, host";
constexpr std::int64_t kMaxMillis = std::numeric_limits<std::int64_t>::max() / 1000000;

const ::jobpact::internal::ServerUrlParser& Parser() {
  static const ::jobpact::internal::ServerUrlParser parser("postgres URL");
  return parser;
}

Status ApplyParam(const std::string& name, const std::string& value, PostgresOptions& o) {
  const ::jobpact::internal::ServerUrlParser& p = Parser();
  const std::string what = "query parameter " + name + "=";
  if (name == "schema") {
    if (Status s = internal::CheckSchemaName(value); !s.ok()) {
      return p.Invalid("query parameter schema=: " + s.message());
    }
    o.schema = value;
  } else if (name == "pool_size") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t n, p.ParseInt(what, value, 1, 1024));
    o.pool_size = static_cast<int>(n);
  } else if (name == "connect_timeout") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t s, p.ParseInt(what, value, 1, 86400));
    o.connect_timeout = Seconds(static_cast<double>(s));
  } else if (name == "statement_timeout_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, p.ParseInt(what, value, 0, kMaxMillis));
    o.statement_timeout = Millis(ms);
  } else if (name == "reconnect_backoff_min_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, p.ParseInt(what, value, 1, kMaxMillis));
    o.reconnect_backoff_min = Millis(ms);
  } else if (name == "reconnect_backoff_max_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, p.ParseInt(what, value, 1, kMaxMillis));
    o.reconnect_backoff_max = Millis(ms);
  } else if (name == "idempotency_retention_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, p.ParseInt(what, value, 1, kMaxMillis));
    o.idempotency_retention = Millis(ms);
  } else if (name == "application_name") {
    o.application_name = value;
  } else if (name == "host") {
    if (value.empty()) return p.Invalid("query parameter host= is empty");
    o.host = value;
  } else {
    return p.Invalid("unknown query parameter " + ::jobpact::internal::ServerUrlParser::Quoted(name) +
                     " (known: " + kParams + ")");
  }
  return Status::Ok();
}

Result<PostgresOptions> Parse(std::string_view url) {
  const ::jobpact::internal::ServerUrlParser& p = Parser();
  if (url.empty()) return p.Invalid(std::string("the URL is empty (") + kForm + ")");
  if (std::string problem = ::jobpact::internal::UnencodedByteProblem(url); !problem.empty()) {
    return p.Invalid(problem);
  }
  const std::size_t colon = url.find(':');
  std::string scheme;
  if (colon != std::string_view::npos) {
    for (char ch : url.substr(0, colon)) {
      scheme.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
    }
  }
  if (scheme != "postgres" && scheme != "postgresql") {
    return p.Invalid("the scheme must be postgres: or postgresql: (got " +
                     (colon == std::string_view::npos
                          ? std::string("none")
                          : ::jobpact::internal::ServerUrlParser::Quoted(scheme + ":")) +
                     "; " + kForm + ")");
  }
  std::string_view rest = url.substr(colon + 1);
  if (rest.substr(0, 2) != "//") return p.Invalid(scheme + ": must be followed by // (" + kForm + ")");
  rest.remove_prefix(2);
  if (rest.find('#') != std::string_view::npos) {
    return p.Invalid(
        "the URL has a fragment ('#...'), which means nothing here; write %23 for a '#' in a "
        "password");
  }
  std::string_view query;
  if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  PostgresOptions o;
  // The userinfo ends at the LAST '@' of the authority.
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    JOBPACT_RETURN_IF_ERROR(p.SplitUserinfo(authority.substr(0, at), &o.user, &o.password));
    authority = authority.substr(at + 1);
  }
  JOBPACT_RETURN_IF_ERROR(p.SplitHostPort(authority, &o.host, &o.port, "", 5432));
  if (path.size() > 1) {
    if (path.substr(1).find('/') != std::string_view::npos) {
      return p.Invalid("the path " + ::jobpact::internal::ServerUrlParser::Quoted(path) +
                       " has more than the database name (e.g. postgres://host:5432/app)");
    }
    JOBPACT_ASSIGN_OR_RETURN(o.database, p.Decode(path.substr(1), "database name"));
  }
  JOBPACT_RETURN_IF_ERROR(p.ForEachParam(
      query, [&](const std::string& name, const std::string& value) {
        return ApplyParam(name, value, o);
      }));
  if (o.reconnect_backoff_max < o.reconnect_backoff_min) {
    return p.Invalid("reconnect_backoff_max_ms must be >= reconnect_backoff_min_ms");
  }
  return o;
}

}  // namespace

Result<PostgresOptions> ParsePostgresUrl(std::string_view url) {
  return ::jobpact::internal::Guarded("ParsePostgresUrl", [&] { return Parse(url); });
}

}  // namespace postgres
}  // namespace jobpact
