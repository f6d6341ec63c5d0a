// Private: the parser behind OpenBackend() (jobpact/backend.h, which states
// the URL grammar). Split from the opening so that tests can check what a
// URL means without opening anything, in every build (the SQLite options
// are parsed even where the SQLite backend is not built).
#ifndef JOBPACT_SRC_BACKENDS_URL_BACKEND_URL_H_
#define JOBPACT_SRC_BACKENDS_URL_BACKEND_URL_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/result.h"
#include "jobpact/sqlite/sqlite_backend.h"

namespace jobpact {
namespace internal {

// A URL split per RFC 3986: scheme ":" [ "//" authority ] path [ "?" query ].
struct BackendUrl {
  std::string scheme;  // Lower-cased.
  bool has_authority = false;
  std::string authority;  // As written (not decoded).
  std::string path;       // Percent-decoded.
  // Percent-decoded, in the order written; empty items ("a=1&&b=2") skipped.
  std::vector<std::pair<std::string, std::string>> query;
};

// kInvalidArgument naming what is wrong: an empty URL, no scheme, a space
// or control character, a fragment, bad percent-encoding (path or query),
// a NUL byte, a query item without '=' or with an empty name. Messages
// never repeat the whole URL (a later redis: or postgres: URL may hold a
// password); they name the part at fault.
Result<BackendUrl> ParseBackendUrl(std::string_view url);

// What a sqlite: URL asks for: the file name to pass to SqliteBackend::Open
// and the options its query parameters set (on SqliteOptions' defaults).
struct SqliteUrl {
  std::string path;
  sqlite::SqliteOptions options;
};

// kInvalidArgument: a host (sqlite://jobs.db), no path, four slashes, a
// path naming a directory, ":memory:", an unknown or repeated parameter, a
// bad value (each named). REQUIRES: url.scheme == "sqlite".
Result<SqliteUrl> ParseSqliteUrl(const BackendUrl& url);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_URL_BACKEND_URL_H_
