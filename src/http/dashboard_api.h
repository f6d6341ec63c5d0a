// Private: the dashboard's routes on the endpoint's server -- its page and
// files (src/http/embedded_files.h) and its JSON API under /api, over the
// Operations facade (docs/operations.md, "The dashboard").
#ifndef JOBPACT_SRC_HTTP_DASHBOARD_API_H_
#define JOBPACT_SRC_HTTP_DASHBOARD_API_H_

#include <httplib.h>

#include <string>

#include "jobpact/http/endpoint.h"

namespace jobpact {
namespace internal {

// The Content-Security-Policy of every dashboard response: its own script,
// style and API only; no inline script, no frames, no form posts.
inline constexpr const char* kDashboardCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// A fresh random CSRF token (32 hex digits) for one endpoint.
std::string NewCsrfToken();

// Adds GET /, the files, GET /api/... and POST /api/... to `server`.
// `options` and `csrf_token` must outlive the server.
void AddDashboardRoutes(httplib::Server& server, const HttpEndpointOptions& options,
                        const std::string& csrf_token);

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_HTTP_DASHBOARD_API_H_
