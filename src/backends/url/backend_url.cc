// OpenBackend(): one bundle of stores from one URL (jobpact/backend.h).
//
// No registry filled by static initialisers (a linker drops those from a
// static library when nothing references their object file): this one
// function knows every scheme, and the optional backends are compiled in
// when their target exists (JOBPACT_BACKENDS_WITH_SQLITE and
// JOBPACT_BACKENDS_WITH_REDIS, set by src/backends/url/CMakeLists.txt).
#include "src/backends/url/backend_url.h"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "jobpact/backend.h"
#include "jobpact/clock.h"
#include "jobpact/status.h"
#include "jobpact/version.h"
#include "src/internal/percent_encoding.h"
#ifdef JOBPACT_BACKENDS_WITH_POSTGRES
#include "jobpact/postgres/postgres_backend.h"
#endif
#ifdef JOBPACT_BACKENDS_WITH_REDIS
#include "jobpact/redis/redis_backend.h"
#endif

namespace jobpact {
namespace internal {
namespace {

constexpr char kPrefix[] = "OpenBackend: ";
constexpr char kExamples[] = "e.g. memory:, sqlite:///var/lib/app/jobs.db or sqlite:jobs.db";

Status Invalid(std::string msg) { return Status::InvalidArgument(kPrefix + std::move(msg)); }

bool IsSchemeChar(char c, bool first) {
  const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  if (first) return alpha;
  return alpha || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

Result<bool> ParseBool(std::string_view name, std::string_view value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  return Invalid("sqlite: query parameter " + std::string(name) + "=" + std::string(value) +
                 ": not a boolean (use 1, 0, true or false)");
}

Result<std::int64_t> ParseInt(std::string_view name, std::string_view value, std::int64_t min,
                              std::int64_t max) {
  std::int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return Invalid("sqlite: query parameter " + std::string(name) + "=" + std::string(value) +
                   ": not an integer");
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    return Invalid("sqlite: query parameter " + std::string(name) + "=" + std::string(value) +
                   ": out of range (" + std::to_string(min) + " to " + std::to_string(max) + ")");
  }
  return v;
}

constexpr std::int64_t kMaxMillis = std::numeric_limits<std::int64_t>::max() / 1000000;

// The sqlite: parameters, in the order the header lists them.
constexpr const char* kSqliteParams =
    "busy_timeout_ms, synchronous, read_only, adopt_existing_database, quick_check_on_open, "
    "max_database_bytes, drain_reserve_bytes, max_connections, idempotency_retention_ms";

Status ApplySqliteParam(std::string_view name, std::string_view value, sqlite::SqliteOptions& o) {
  if (name == "busy_timeout_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(name, value, 0, kMaxMillis));
    o.busy_timeout = Millis(ms);
  } else if (name == "synchronous") {
    if (value == "normal") {
      o.synchronous = sqlite::SqliteOptions::Synchronous::kNormal;
    } else if (value == "full") {
      o.synchronous = sqlite::SqliteOptions::Synchronous::kFull;
    } else {
      return Invalid("sqlite: query parameter synchronous=" + std::string(value) +
                     ": use normal or full");
    }
  } else if (name == "read_only") {
    JOBPACT_ASSIGN_OR_RETURN(o.read_only, ParseBool(name, value));
  } else if (name == "adopt_existing_database") {
    JOBPACT_ASSIGN_OR_RETURN(o.adopt_existing_database, ParseBool(name, value));
  } else if (name == "quick_check_on_open") {
    JOBPACT_ASSIGN_OR_RETURN(o.quick_check_on_open, ParseBool(name, value));
  } else if (name == "max_database_bytes") {
    JOBPACT_ASSIGN_OR_RETURN(o.max_database_bytes,
                             ParseInt(name, value, 0, std::numeric_limits<std::int64_t>::max()));
  } else if (name == "drain_reserve_bytes") {
    JOBPACT_ASSIGN_OR_RETURN(o.drain_reserve_bytes,
                             ParseInt(name, value, -1, std::numeric_limits<std::int64_t>::max()));
  } else if (name == "max_connections") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t n,
                             ParseInt(name, value, 1, std::numeric_limits<int>::max()));
    o.max_connections = static_cast<int>(n);
  } else if (name == "idempotency_retention_ms") {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ms, ParseInt(name, value, 1, kMaxMillis));
    o.idempotency_retention = Millis(ms);
  } else {
    return Invalid("sqlite: unknown query parameter " + Quoted(name) + " (known: " + kSqliteParams +
                   ")");
  }
  return Status::Ok();
}

}  // namespace

Result<BackendUrl> ParseBackendUrl(std::string_view url) {
  if (url.empty()) return Invalid(std::string("the URL is empty (") + kExamples + ")");
  if (std::string problem = internal::UnencodedByteProblem(url); !problem.empty()) {
    return Invalid(problem);
  }
  const std::size_t colon = url.find(':');
  bool scheme_ok = colon != std::string_view::npos && colon > 0;
  for (std::size_t i = 0; scheme_ok && i < colon; ++i) scheme_ok = IsSchemeChar(url[i], i == 0);
  if (!scheme_ok) {
    return Invalid(std::string("the URL has no scheme (") + kExamples + ")");
  }
  BackendUrl out;
  out.scheme.reserve(colon);
  for (std::size_t i = 0; i < colon; ++i) {
    out.scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(url[i]))));
  }
  std::string_view rest = url.substr(colon + 1);
  if (const std::size_t hash = rest.find('#'); hash != std::string_view::npos) {
    return Invalid(out.scheme + ": the URL has a fragment (#" + std::string(rest.substr(hash + 1)) +
                   "), which means nothing here; write %23 for a '#' in a path");
  }
  std::string_view query;
  if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.substr(0, 2) == "//") {
    out.has_authority = true;
    rest.remove_prefix(2);
    const std::size_t slash = rest.find('/');
    out.authority = std::string(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  }
  std::size_t bad = 0;
  std::optional<std::string> path = PercentDecode(rest, &bad);
  if (!path) {
    return Invalid(out.scheme + ": bad percent-encoding in the path at " +
                   Quoted(rest.substr(bad, 3)) +
                   " (a '%' must be followed by two hex digits; "
                   "write %25 for a '%')");
  }
  if (path->find('\0') != std::string::npos) {
    return Invalid(out.scheme + ": the path holds a NUL byte (%00)");
  }
  out.path = std::move(*path);
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Invalid(out.scheme + ": query parameter " + Quoted(item) +
                     " has no value (write name=value)");
    }
    if (eq == 0) return Invalid(out.scheme + ": query item " + Quoted(item) + " has no name");
    std::optional<std::string> name = PercentDecode(item.substr(0, eq), &bad);
    std::optional<std::string> value =
        name ? PercentDecode(item.substr(eq + 1), &bad) : std::nullopt;
    if (!name || !value) {
      return Invalid(out.scheme + ": bad percent-encoding in query item " + Quoted(item) +
                     " (a '%' must be followed by two hex digits)");
    }
    if (name->find('\0') != std::string::npos || value->find('\0') != std::string::npos) {
      return Invalid(out.scheme + ": query item " + Quoted(item) + " holds a NUL byte (%00)");
    }
    out.query.emplace_back(std::move(*name), std::move(*value));
  }
  return out;
}

Result<SqliteUrl> ParseSqliteUrl(const BackendUrl& url) {
  if (url.has_authority && !url.authority.empty()) {
    return Invalid("sqlite://" + url.authority + url.path + ": " + Quoted(url.authority) +
                   " is in the host position, and sqlite: has no host. For a relative path "
                   "write sqlite:" +
                   url.authority + url.path +
                   "; for an absolute one "
                   "sqlite:///path/to/jobs.db (three slashes)");
  }
  if (url.path.empty() || url.path == "/") {
    return Invalid(
        "sqlite: the URL has no path (e.g. sqlite:///var/lib/app/jobs.db, or "
        "sqlite:jobs.db relative to the working directory)");
  }
  if (url.path.substr(0, 2) == "//") {
    return Invalid("sqlite: " + Quoted(url.path) +
                   ": a path starting with \"//\" (four slashes after sqlite:, SQLAlchemy's "
                   "spelling of an absolute path); here an absolute path takes three: "
                   "sqlite://" +
                   url.path.substr(1));
  }
  if (url.path.back() == '/') {
    return Invalid("sqlite: the path " + Quoted(url.path) +
                   " ends with '/': it names a directory, not a database file");
  }
  if (url.path == ":memory:") {
    return Invalid(
        "sqlite::memory: is not supported: an SQLite in-memory database is private "
        "to one connection, and the backend uses several; use memory: instead");
  }
  SqliteUrl out;
  out.path = url.path;
  // The path is a file name, never one of SQLite's "file:" URIs (which
  // SqliteBackend::Open would otherwise read as one).
  if (out.path.compare(0, 5, "file:") == 0) out.path = "./" + out.path;
  std::set<std::string> seen;
  for (const auto& [name, value] : url.query) {
    if (!seen.insert(name).second) {
      return Invalid("sqlite: query parameter " + Quoted(name) + " is given more than once");
    }
    JOBPACT_RETURN_IF_ERROR(ApplySqliteParam(name, value, out.options));
  }
  if (out.options.max_database_bytes == 0 && seen.count("drain_reserve_bytes") > 0 &&
      out.options.drain_reserve_bytes > 0) {
    return Invalid(
        "sqlite: drain_reserve_bytes needs max_database_bytes (the reserve is part of "
        "that bound)");
  }
  if (out.options.max_database_bytes > 0 &&
      out.options.drain_reserve_bytes >= out.options.max_database_bytes) {
    return Invalid(
        "sqlite: drain_reserve_bytes=" + std::to_string(out.options.drain_reserve_bytes) +
        " must be less than max_database_bytes=" + std::to_string(out.options.max_database_bytes));
  }
  return out;
}

}  // namespace internal

namespace {

constexpr char kKnownSchemes[] = "memory:, sqlite:, redis:, redis+unix:, postgres:, postgresql:";

Result<BackendBundle> OpenMemory(const internal::BackendUrl& url, std::shared_ptr<Clock> clock) {
  if (!url.authority.empty() || !url.path.empty() || !url.query.empty()) {
    return Status::InvalidArgument(
        "OpenBackend: memory: takes no host, path or query parameters (write just memory:)");
  }
  return InMemoryBackend(std::move(clock));
}

Result<BackendBundle> OpenSqlite(std::string_view raw, const internal::BackendUrl& url,
                                 std::shared_ptr<Clock> clock) {
#ifdef JOBPACT_BACKENDS_WITH_SQLITE
  JOBPACT_ASSIGN_OR_RETURN(internal::SqliteUrl parsed, internal::ParseSqliteUrl(url));
  JOBPACT_ASSIGN_OR_RETURN(
      std::shared_ptr<sqlite::SqliteBackend> backend,
      sqlite::SqliteBackend::Open(parsed.path, std::move(parsed.options), std::move(clock)));
  BackendBundle bundle = backend->bundle();
  bundle.url = std::string(raw);
  return bundle;
#else
  (void)raw;
  (void)url;
  (void)clock;
  return Status::Unimplemented(
      "OpenBackend: the sqlite backend is not built into this jobpact; configure jobpact with "
      "-DJOBPACT_WITH_SQLITE=ON (it builds jobpact::sqlite, which jobpact::backends then "
      "links)");
#endif
}

// True if `url` starts with redis:, rediss: or redis+unix: (any case).
bool IsRedisScheme(std::string_view url) {
  const std::size_t colon = url.find(':');
  if (colon == std::string_view::npos) return false;
  std::string scheme;
  for (char c : url.substr(0, colon)) {
    scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return scheme == "redis" || scheme == "rediss" || scheme == "redis+unix";
}

// redis:, redis+unix: and rediss: (refused: no TLS), parsed by
// redis::ParseRedisUrl from the raw URL (it has its own authority rules:
// userinfo, IPv6 hosts, the database as the path).
Result<BackendBundle> OpenRedis(std::string_view raw, std::shared_ptr<Clock> clock) {
#ifdef JOBPACT_BACKENDS_WITH_REDIS
  JOBPACT_ASSIGN_OR_RETURN(redis::RedisOptions options, redis::ParseRedisUrl(raw));
  JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<redis::RedisBackend> backend,
                           redis::RedisBackend::Open(options, std::move(clock)));
  BackendBundle bundle = backend->bundle();  // Its url never holds the password.
  if (!bundle.complete()) {
    return Status::Unimplemented(
        "OpenBackend: this build's Redis backend has no queue store yet (only its lock and "
        "idempotency stores, through jobpact::redis::RedisBackend::Open); a redis: URL opens "
        "a bundle once it has");
  }
  return bundle;
#else
  (void)raw;
  (void)clock;
  return Status::Unimplemented(
      "OpenBackend: the redis backend is not built into this jobpact; configure jobpact with "
      "-DJOBPACT_WITH_REDIS=ON (it needs hiredis, Debian: libhiredis-dev; it builds "
      "jobpact::redis, which jobpact::backends then links)");
#endif
}

// True if `url` starts with postgres: or postgresql: (any case).
bool IsPostgresScheme(std::string_view url) {
  const std::size_t colon = url.find(':');
  if (colon == std::string_view::npos) return false;
  std::string scheme;
  for (char c : url.substr(0, colon)) {
    scheme.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return scheme == "postgres" || scheme == "postgresql";
}

// postgres: and postgresql:, parsed by postgres::ParsePostgresUrl from the
// raw URL (userinfo with a password, IPv6 hosts, the database as the path).
Result<BackendBundle> OpenPostgres(std::string_view raw, std::shared_ptr<Clock> clock) {
#ifdef JOBPACT_BACKENDS_WITH_POSTGRES
  JOBPACT_ASSIGN_OR_RETURN(postgres::PostgresOptions options, postgres::ParsePostgresUrl(raw));
  JOBPACT_ASSIGN_OR_RETURN(std::shared_ptr<postgres::PostgresBackend> backend,
                           postgres::PostgresBackend::Open(options, std::move(clock)));
  return backend->bundle();  // Its url never holds the password.
#else
  (void)raw;
  (void)clock;
  return Status::Unimplemented(
      "OpenBackend: the postgres backend is not built into this jobpact; configure jobpact with "
      "-DJOBPACT_WITH_POSTGRES=ON (it needs libpq, Debian: libpq-dev; it builds "
      "jobpact::postgres, which jobpact::backends then links)");
#endif
}

}  // namespace

Result<BackendBundle> OpenBackend(std::string_view url, const BackendOpenOptions& options) {
  // Nothing may escape: a std::bad_alloc (or anything else) becomes a Status.
  try {
    std::shared_ptr<Clock> clock = options.clock ? options.clock : SystemClock::Default();
    // Redis URLs go to their own parser before the generic one, whose
    // messages may quote parts of the authority (a fragment, say), where a
    // Redis URL keeps its password.
    if (IsRedisScheme(url)) return OpenRedis(url, std::move(clock));
    if (IsPostgresScheme(url)) return OpenPostgres(url, std::move(clock));
    JOBPACT_ASSIGN_OR_RETURN(internal::BackendUrl parsed, internal::ParseBackendUrl(url));
    const std::string& scheme = parsed.scheme;
    if (scheme == "memory") return OpenMemory(parsed, std::move(clock));
    if (scheme == "sqlite") return OpenSqlite(url, parsed, std::move(clock));
    return Status::InvalidArgument("OpenBackend: unknown backend scheme \"" + scheme +
                                   ":\" (known: " + kKnownSchemes + ")");
  } catch (const std::exception& e) {
    return Status::Internal(std::string("OpenBackend: ") + e.what());
  } catch (...) {
    return Status::Internal("OpenBackend: unknown exception");
  }
}

}  // namespace jobpact
