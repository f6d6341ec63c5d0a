// Private: the dashboard's static files (dashboard/), compiled into the
// binary by cmake/embed_files.cmake, so that nothing is read from disk or
// fetched from a CDN at run time.
#ifndef JOBPACT_SRC_HTTP_EMBEDDED_FILES_H_
#define JOBPACT_SRC_HTTP_EMBEDDED_FILES_H_

#include <string_view>
#include <vector>

namespace jobpact {
namespace internal {

struct EmbeddedFile {
  std::string_view name;          // Relative to dashboard/: "index.html".
  std::string_view content_type;  // By extension: "text/html; charset=utf-8".
  std::string_view bytes;
};

// Every embedded file, in the order CMake listed them. Thread-safe.
const std::vector<EmbeddedFile>& EmbeddedFiles();

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_HTTP_EMBEDDED_FILES_H_
