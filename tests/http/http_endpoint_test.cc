// HttpEndpoint: /metrics, /healthz and /readyz over a real loopback socket,
// read with an HTTP client as Prometheus and a probe would; readiness
// failing on a backend that does not answer and on a hung worker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "jobpact/http/endpoint.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"
#include "tests/support/wait_for.h"

namespace jobpact {
namespace {

using test_support::WaitFor;

using testing::Harness;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

struct Rig {
  std::shared_ptr<PrometheusMetricsSink> metrics = std::make_shared<PrometheusMetricsSink>();
  std::unique_ptr<Harness> h;
  std::unique_ptr<HttpEndpoint> endpoint;

  explicit Rig(std::function<void(JobRunnerOptions&)> configure = nullptr) {
    h = std::make_unique<Harness>([&](JobRunnerOptions& o) {
      o.metrics = metrics;
      if (configure) configure(o);
    });
  }
  void Serve(std::shared_ptr<QueueAdmin> admin) {
    HttpEndpointOptions o;
    o.metrics = metrics;
    o.admin = std::move(admin);
    o.runner = &h->runner();
    Result<std::unique_ptr<HttpEndpoint>> e = HttpEndpoint::Start(o);
    ASSERT_THAT(e.status(), IsOk());
    endpoint = std::move(*e);
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", endpoint->port());
    c.set_read_timeout(30, 0);
    return c;
  }
};

TEST(HttpEndpointTest, ServesTheScrapeWithPrometheusContentType) {
  Rig rig;
  ASSERT_THAT(rig.h->Handle("mail.send", [](JobContext&) { return Status::Ok(); }), IsOk());
  ASSERT_TRUE(rig.h->Enqueue("mail.send").ok());
  ASSERT_TRUE(rig.h->RunUntilIdle().ok());
  rig.Serve(rig.h->queue_ptr());
  EXPECT_EQ(rig.endpoint->url(), "http://127.0.0.1:" + std::to_string(rig.endpoint->port()));

  auto res = rig.Client().Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), PrometheusMetricsSink::kContentType);
  EXPECT_EQ(res->body, rig.metrics->Scrape());
  EXPECT_THAT(res->body, HasSubstr("jobpact_jobs_succeeded_total{job_type=\"mail.send\""));
}

TEST(HttpEndpointTest, HealthAndReadinessWhenAllIsWell) {
  Rig rig;
  rig.Serve(rig.h->queue_ptr());
  httplib::Client c = rig.Client();
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto ready = c.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ready\n");
}

TEST(HttpEndpointTest, NotReadyWhileTheBackendDoesNotAnswer) {
  Rig rig;
  // The harness's fault-injecting wrapper: the next Stats fails, as a store
  // that does not answer would.
  rig.Serve(rig.h->faults_ptr());
  rig.h->faults().FailNext(QueueMethod::kStats,
                           Status::Unavailable("redis://10.0.0.5:6379: connection refused"));
  auto ready = rig.Client().Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_THAT(ready->body, HasSubstr("backend unreachable"));
  EXPECT_THAT(ready->body, HasSubstr("connection refused"));
  // Liveness does not depend on the backend: restarting the process would
  // not help.
  auto health = rig.Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // The store answers again.
  auto again = rig.Client().Get("/readyz");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(HttpEndpointTest, NotReadyWhileAWorkerIsHung) {
  Rig rig([](JobRunnerOptions& o) {
    o.workers = 1;
    o.max_replacement_workers = 1;
    o.hung_grace = Seconds(10);
  });
  std::atomic<bool> release{false};
  std::atomic<bool> entered{false};
  ASSERT_THAT(rig.h->Handle("stuck",
                            [&](JobContext&) {
                              entered = true;
                              WaitFor([&] { return release.load(); });  // A stuck call.
                              return Status::Ok();
                            }),
              IsOk());
  rig.Serve(rig.h->queue_ptr());
  ASSERT_THAT(rig.h->runner().Start(), IsOk());
  Envelope e;
  e.job_type = "stuck";
  e.timeout = Seconds(5);
  e.visibility_timeout = Seconds(15);
  ASSERT_TRUE(rig.h->Enqueue(e).ok());
  ASSERT_TRUE(WaitFor([&] { return entered.load(); }));
  // Past the deadline (5 s) and the grace (10 s): the watchdog declares it hung.
  ASSERT_TRUE(WaitFor([&] { return rig.h->runner().Stats().hung_workers == 1; },
                      [&] { rig.h->clock().Advance(Millis(500)); }));
  auto ready = rig.Client().Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_THAT(ready->body, HasSubstr("1 hung worker(s)"));

  release = true;
  ASSERT_TRUE(WaitFor([&] { return rig.h->runner().Stats().hung_workers == 0; }));
  auto again = rig.Client().Get("/readyz");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_THAT(rig.h->runner().Shutdown(Seconds(1)), IsOk());
  rig.endpoint->Stop();
}

TEST(HttpEndpointTest, ReadsOnlyAndAnswersUnknownPathsWith404) {
  Rig rig;
  rig.Serve(nullptr);
  httplib::Client c = rig.Client();
  auto post = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  auto missing = c.Get("/admin");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("/metrics, /healthz and /readyz"));
}

TEST(HttpEndpointTest, BadOptionsAndABusyPortAreClearErrors) {
  HttpEndpointOptions none;
  EXPECT_THAT(HttpEndpoint::Start(none).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("metrics")));
  HttpEndpointOptions bad_port;
  bad_port.metrics = std::make_shared<PrometheusMetricsSink>();
  bad_port.port = 70000;
  EXPECT_THAT(HttpEndpoint::Start(bad_port).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("70000")));

  HttpEndpointOptions first;
  first.metrics = std::make_shared<PrometheusMetricsSink>();
  auto a = HttpEndpoint::Start(first);
  ASSERT_THAT(a.status(), IsOk());
  HttpEndpointOptions same = first;
  same.port = (*a)->port();
  EXPECT_THAT(HttpEndpoint::Start(same).status(),
              StatusIs(StatusCode::kUnavailable, HasSubstr(std::to_string(same.port))));
}

TEST(HttpEndpointTest, StopsAtOnceAndTwice) {
  HttpEndpointOptions o;
  o.metrics = std::make_shared<PrometheusMetricsSink>();
  auto e = HttpEndpoint::Start(o);
  ASSERT_THAT(e.status(), IsOk());
  const int port = (*e)->port();
  (*e)->Stop();
  (*e)->Stop();
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  EXPECT_FALSE(c.Get("/healthz"));  // Nobody listens any more.
}

}  // namespace
}  // namespace jobpact
