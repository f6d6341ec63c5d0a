// File: jobpact/http/endpoint.h
//
// HttpEndpoint: the small HTTP server a service starts beside its runner so
// that Prometheus, the orchestrator and the on-call engineer can look at it
// (SPEC 10, the on-call view). Optional target jobpact::http (CMake option
// JOBPACT_WITH_HTTP, cpp-httplib from Debian's libcpp-httplib-dev).
//
//   GET /metrics  the PrometheusMetricsSink's scrape (text format 0.0.4)
//   GET /healthz  200 "ok": the process serves (a liveness probe)
//   GET /readyz   200 "ready", or 503 naming every failed check: the
//                 backend does not answer (QueueAdmin::Stats fails), or the
//                 runner has hung workers (RunnerStats::hung_workers > 0)
//
// With `dashboard` on (and `operations` set), also the dashboard: a page
// (GET /, compiled into the binary: no CDN, nothing read at run time) and
// its JSON API under /api (docs/operations.md, "The dashboard"): queues,
// job types with their rates and latency percentiles, workers, the DLQ
// (list with filters, one entry with its history), paused types, and the
// operator actions replay (dry run first), discard and resume.
//
// Safe by default:
//   - it binds 127.0.0.1 unless `host` says otherwise, and it never reveals
//     a backend's password (it shows no URL);
//   - without the dashboard it changes nothing (every method but GET/HEAD
//     is 405);
//   - the dashboard's actions are POSTs that need the bearer token the
//     service configured (`operator_token`; none configured: the actions
//     are off), pass a CSRF check (the X-Jobpact-CSRF header holding this
//     endpoint's CSRF token, a JSON body, and a same-origin Origin when the
//     browser sends one), and go through Operations with an actor
//     ("dashboard:<operator_name>@<remote address>") and the reason typed,
//     like the jobpact command's --actor and --reason; `read_only` refuses
//     every action.
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
//   h.dashboard = true;                                   // optional
//   h.operations = jobpact::Operations::Open(opts.backend).value();
//   h.operator_token = secret_from_your_vault;            // enables actions
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
#include "jobpact/operations.h"
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

  // --- The dashboard (off by default) ---

  // Serves the dashboard's page at / and its API under /api. REQUIRES:
  // `operations` (kInvalidArgument otherwise).
  bool dashboard = false;
  // What the dashboard reads and acts through: its stats, DLQ and control
  // state, and its replays, discards and resumes (audited by the store, and
  // counted in the Operations' own metrics sink: give it the same
  // PrometheusMetricsSink as the runner so that /metrics shows them).
  std::shared_ptr<Operations> operations;
  // Refuses every action (403), whatever the token: a page to look at.
  bool read_only = false;
  // The bearer token an action must carry (Authorization: Bearer <token>).
  // Empty: actions are disabled (403), the dashboard only reads. Choose a
  // long random one; it is compared in constant time and never logged or
  // shown.
  std::string operator_token;
  // Who the token stands for in the audit trail: the actor of an action is
  // "dashboard:<operator_name>@<remote address>". A safe name.
  std::string operator_name = "operator";
  // The time for the DLQ filter's relative since/until ("2h"). Null:
  // SystemClock::Default().
  std::shared_ptr<Clock> clock;
};

class JOBPACT_EXPORT HttpEndpoint {
 public:
  // Binds, starts serving on a thread of its own, and returns once the
  // endpoint answers a request. kInvalidArgument for missing metrics, a
  // bad port, the dashboard without operations, or an unsafe operator_name; kUnavailable naming host:port when it cannot bind (in use, no
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
