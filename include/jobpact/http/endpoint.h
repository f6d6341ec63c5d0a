// File: jobpact/http/endpoint.h
//
// HttpEndpoint: the small HTTP server a service starts beside its runner so
// that Prometheus and the orchestrator can look at it (SPEC 10, the on-call
// view). Optional target jobpact::http (CMake option JOBPACT_WITH_HTTP,
// cpp-httplib from Debian's libcpp-httplib-dev).
//
//   GET /metrics  the PrometheusMetricsSink's scrape (text format 0.0.4)
//   GET /healthz  200 "ok": the process serves (a liveness probe)
//   GET /readyz   200 "ready", or 503 naming every failed check: the
//                 backend does not answer (QueueAdmin::Stats fails), or the
//                 runner has hung workers (RunnerStats::hung_workers > 0)
//
// Every other path is 404 and every other method on these paths 405: the
// endpoint changes nothing. Safe by default: it binds 127.0.0.1 unless
// `host` says otherwise, and it never reveals a backend's password (it
// shows no URL). The dashboard and the operator actions over HTTP are not
// here yet (docs/operations.md).
//
// Example:
//   auto metrics = std::make_shared<jobpact::PrometheusMetricsSink>();
//   opts.metrics = metrics;  // JobRunnerOptions
//   auto runner = jobpact::JobRunner::Create(opts).value();
//   jobpact::HttpEndpointOptions h;
//   h.port = 9464;
//   h.metrics = metrics;
//   h.admin = opts.backend.admin;
//   h.runner = runner.get();
//   auto endpoint = jobpact::HttpEndpoint::Start(h);  // or endpoint.status() says why not
//
// Thread-safe. Stop() (or the destructor) waits for requests in flight.
#ifndef JOBPACT_HTTP_ENDPOINT_H_
#define JOBPACT_HTTP_ENDPOINT_H_

#include <memory>
#include <string>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/job_runner.h"
#include "jobpact/prometheus/metrics_sink.h"
#include "jobpact/queue_admin.h"
#include "jobpact/result.h"

namespace jobpact {

struct HttpEndpointOptions {
  // The address to bind: loopback by default. "0.0.0.0" exposes the
  // endpoint to the network; put it behind your own access control.
  std::string host = "127.0.0.1";
  // 0: any free port (HttpEndpoint::port() tells which).
  int port = 0;
  // What /metrics serves. Required.
  std::shared_ptr<PrometheusMetricsSink> metrics;
  // What /readyz checks; a null one is not checked. The runner must
  // outlive the endpoint.
  std::shared_ptr<QueueAdmin> admin;
  const JobRunner* runner = nullptr;
};

class JOBPACT_EXPORT HttpEndpoint {
 public:
  // Binds, starts serving on a thread of its own, and returns once the
  // endpoint answers a request. kInvalidArgument for missing metrics or a
  // bad port; kUnavailable naming host:port when it cannot bind (in use, no
  // such address) or does not answer.
  static Result<std::unique_ptr<HttpEndpoint>> Start(HttpEndpointOptions options);

  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // The bound port.
  int port() const;
  // "http://host:port".
  std::string url() const;
  // Stops serving; idempotent.
  void Stop();

 private:
  class Impl;
  explicit HttpEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_HTTP_ENDPOINT_H_
