// Fuzzes backend URL parsing: the RFC 3986 split behind OpenBackend(url),
// the sqlite: options, and (where built) the redis: and postgres: URL
// parsers, plus OpenBackend itself for the schemes that open nothing
// outside the process (memory:, and any URL that fails to parse).
// Invariants: never a crash or a throw; errors are kInvalidArgument,
// kUnimplemented or (unknown/unbuilt scheme) what OpenBackend documents;
// a message never repeats a password given in the URL.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "fuzz/fuzz_util.h"
#include "jobpact/backend.h"
#include "src/backends/url/backend_url.h"
#ifdef JOBPACT_FUZZ_WITH_REDIS
#include "jobpact/redis/redis_backend.h"
#endif
#ifdef JOBPACT_FUZZ_WITH_POSTGRES
#include "jobpact/postgres/postgres_backend.h"
#endif

namespace {

// Where the password of a redis: or postgres: URL's user:password@
// authority is (offset and length), if it has one.
std::pair<std::size_t, std::size_t> PasswordOf(std::string_view url) {
  const std::size_t slashes = url.find("://");
  if (slashes == std::string_view::npos) return {0, 0};
  std::string scheme(url.substr(0, slashes));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "redis" && scheme != "rediss" && scheme != "redis+unix" && scheme != "postgres" &&
      scheme != "postgresql") {
    return {0, 0};
  }
  std::string_view rest = url.substr(slashes + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  const std::size_t at = rest.rfind('@');
  if (at == std::string_view::npos) return {0, 0};
  const std::string_view userinfo = rest.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return {0, 0};
  const std::size_t begin = slashes + 3 + colon + 1;
  return {begin, at - colon - 1};
}

void CheckNoPassword(const jobpact::Status& s, const std::string& password) {
  if (password.empty() || s.ok()) return;
  JOBPACT_FUZZ_CHECK(s.message().find(password.substr(0, 4)) == std::string::npos, s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  // A password is replaced by a canary (letters and digits, valid in a
  // password) that nothing else in the URL holds; a message that holds it
  // leaked the password.
  std::string password;
  const auto [at, length] = PasswordOf(input);
  if (length >= 4 && input.find("Zx9q") == std::string::npos) {
    while (password.size() < length) password += "Zx9q";
    password.resize(length);
    input.replace(at, length, password);
  }
  const std::string_view url(input);
  jobpact::Result<jobpact::internal::BackendUrl> parsed = jobpact::internal::ParseBackendUrl(url);
  if (!parsed.ok()) {
    JOBPACT_FUZZ_CHECK(parsed.status().code() == jobpact::StatusCode::kInvalidArgument,
                       parsed.status().ToString());
    CheckNoPassword(parsed.status(), password);
    // A URL that does not parse opens nothing: OpenBackend must refuse it
    // the same way, without touching a file or the network.
    jobpact::Result<jobpact::BackendBundle> opened = jobpact::OpenBackend(url);
    JOBPACT_FUZZ_CHECK(!opened.ok(), "OpenBackend accepted what ParseBackendUrl refused");
    CheckNoPassword(opened.status(), password);
  } else {
    JOBPACT_FUZZ_CHECK(!parsed->scheme.empty(), "a URL parsed without a scheme");
    if (parsed->scheme == "sqlite") {
      jobpact::Result<jobpact::internal::SqliteUrl> sqlite = jobpact::internal::ParseSqliteUrl(*parsed);
      if (!sqlite.ok()) {
        JOBPACT_FUZZ_CHECK(sqlite.status().code() == jobpact::StatusCode::kInvalidArgument,
                           sqlite.status().ToString());
      }
    } else if (parsed->scheme == "memory") {
      jobpact::Result<jobpact::BackendBundle> opened = jobpact::OpenBackend(url);
      if (opened.ok()) {
        JOBPACT_FUZZ_CHECK(opened->queue != nullptr && opened->admin != nullptr,
                           "memory: opened without a queue");
      }
    }
  }
#ifdef JOBPACT_FUZZ_WITH_REDIS
  jobpact::Result<jobpact::redis::RedisOptions> redis = jobpact::redis::ParseRedisUrl(url);
  if (!redis.ok()) CheckNoPassword(redis.status(), password);
#endif
#ifdef JOBPACT_FUZZ_WITH_POSTGRES
  jobpact::Result<jobpact::postgres::PostgresOptions> pg = jobpact::postgres::ParsePostgresUrl(url);
  if (!pg.ok()) CheckNoPassword(pg.status(), password);
#endif
  return 0;
}
