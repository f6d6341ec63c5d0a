// HttpEndpoint (see jobpact/http/endpoint.h) over cpp-httplib.
#include "jobpact/http/endpoint.h"

#include <httplib.h>

#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/http/dashboard_api.h"
#include "src/internal/guarded.h"
#include "src/internal/names.h"

namespace jobpact {
namespace {

constexpr const char* kText = "text/plain; charset=utf-8";

// What /readyz found wrong, one line each; empty when ready.
std::vector<std::string> ReadinessProblems(const HttpEndpointOptions& o) {
  std::vector<std::string> problems;
  if (o.admin != nullptr) {
    Result<QueueStats> stats =
        internal::Guarded("readyz: backend stats", [&] { return o.admin->Stats(); });
    if (!stats.ok()) problems.push_back("backend unreachable: " + stats.status().ToString());
  }
  if (o.runner != nullptr) {
    const int hung = o.runner->Stats().hung_workers;
    if (hung > 0) {
      problems.push_back(std::to_string(hung) +
                         " hung worker(s): a handler ran past its deadline and has not returned");
    }
  }
  return problems;
}

void MethodNotAllowed(const httplib::Request&, httplib::Response& res) {
  res.status = 405;
  res.set_header("Allow", "GET, HEAD");
  res.set_content("method not allowed: this endpoint only reads\n", kText);
}

}  // namespace

class HttpEndpoint::Impl {
 public:
  explicit Impl(HttpEndpointOptions o) : options(std::move(o)) {}

  const HttpEndpointOptions options;
  // The dashboard's CSRF token (src/http/dashboard_api.h), new each start.
  const std::string csrf_token = internal::NewCsrfToken();
  httplib::Server server;
  int port = 0;
  std::thread thread;
  std::once_flag stopped;
};

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(HttpEndpointOptions options) {
  if (options.metrics == nullptr) {
    return Status::InvalidArgument(
        "HttpEndpointOptions.metrics: a PrometheusMetricsSink is required");
  }
  if (options.port < 0 || options.port > 65535) {
    return Status::InvalidArgument("HttpEndpointOptions.port: " + std::to_string(options.port) +
                                   " is not a port (0 to 65535; 0 picks a free one)");
  }
  if (options.dashboard && options.operations == nullptr) {
    return Status::InvalidArgument(
        "HttpEndpointOptions.operations: the dashboard needs an Operations to read and act "
        "through (Operations::Open over the service's backend)");
  }
  if (!internal::IsSafeName(options.operator_name)) {
    return Status::InvalidArgument("HttpEndpointOptions.operator_name: '" +
                                   internal::StorableText(options.operator_name) +
                                   "' is not a name (letters, digits and . _ : -)");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Impl* self = impl.get();
  httplib::Server& s = self->server;
  s.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    res.set_content(self->options.metrics->Scrape(),
                    std::string(PrometheusMetricsSink::kContentType).c_str());
  });
  s.Get("/healthz",
        [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", kText); });
  s.Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    const std::vector<std::string> problems = ReadinessProblems(self->options);
    if (problems.empty()) {
      res.set_content("ready\n", kText);
      return;
    }
    std::string body = "not ready\n";
    for (const std::string& p : problems) body += p + "\n";
    res.status = 503;
    res.set_content(body, kText);
  });
  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    s.Post(path, MethodNotAllowed);
    s.Put(path, MethodNotAllowed);
    s.Delete(path, MethodNotAllowed);
    s.Patch(path, MethodNotAllowed);
  }
  if (self->options.dashboard) {
    internal::AddDashboardRoutes(s, self->options, self->csrf_token);
  }
  s.set_error_handler([self](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      res.set_content(self->options.dashboard
                          ? "not found: the paths are /metrics, /healthz, /readyz, the "
                            "dashboard at / and its API under /api\n"
                          : "not found: the paths are /metrics, /healthz and /readyz\n",
                      kText);
    }
  });

  // SO_REUSEADDR (a restarted service rebinds at once), but not httplib's
  // default SO_REUSEPORT: a second endpoint on a port in use must fail,
  // not share the port with the first one.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });

  const std::string& host = self->options.host;
  if (self->options.port == 0) {
    self->port = s.bind_to_any_port(host.c_str());
  } else {
    self->port = s.bind_to_port(host.c_str(), self->options.port) ? self->options.port : -1;
  }
  if (self->port <= 0) {
    return Status::Unavailable("HttpEndpoint: cannot listen on " + host + ":" +
                               std::to_string(self->options.port) +
                               " (address in use, or not an address of this host)");
  }
  self->thread = std::thread([self] { self->server.listen_after_bind(); });
  // Returns once the endpoint answers: a request served proves the server
  // loop runs, so Stop() (httplib's stop() reaches only a running server)
  // can never miss it, and no caller sees a port that does not answer yet.
  std::string probe_host = host;
  if (probe_host == "0.0.0.0") probe_host = "127.0.0.1";
  if (probe_host == "::") probe_host = "::1";
  httplib::Client probe(probe_host, self->port);
  probe.set_connection_timeout(5, 0);
  probe.set_read_timeout(5, 0);
  const httplib::Result answer = probe.Get("/healthz");
  if (!answer || answer->status != 200) {
    self->server.stop();
    self->thread.join();
    return Status::Unavailable(
        "HttpEndpoint: bound " + host + ":" + std::to_string(self->port) +
        " but it does not answer: " +
        (answer ? "status " + std::to_string(answer->status) : httplib::to_string(answer.error())));
  }
  return std::unique_ptr<HttpEndpoint>(new HttpEndpoint(std::move(impl)));
}

HttpEndpoint::HttpEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

int HttpEndpoint::port() const { return impl_->port; }

std::string HttpEndpoint::url() const {
  return "http://" + impl_->options.host + ":" + std::to_string(impl_->port);
}

void HttpEndpoint::Stop() {
  std::call_once(impl_->stopped, [this] {
    impl_->server.stop();  // Running: Start() saw it answer.
    if (impl_->thread.joinable()) impl_->thread.join();
  });
}

}  // namespace jobpact
