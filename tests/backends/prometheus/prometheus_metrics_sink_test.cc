// PrometheusMetricsSink: the text exposition format (names, HELP/TYPE,
// labels and their escaping, cumulative inclusive buckets), its options, a
// runner's SPEC 8 metrics end to end, and concurrent samples.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/failure.h"
#include "jobpact/prometheus/metrics_sink.h"
#include "jobpact/testing/harness.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

namespace m = metric;

TEST(PrometheusMetricsSinkTest, CountersHaveHelpTypeAndLabelsSortedByNameThenLabels) {
  PrometheusMetricsSink sink;
  sink.Increment(m::kSucceeded, {"b.type", "default", {}, {}}, 2);
  sink.Increment(m::kSucceeded, {"a.type", "default", {}, {}}, 1);
  sink.Increment(m::kSucceeded, {"a.type", "default", {}, {}}, 4);
  sink.Increment(m::kEnqueued, {"a.type", "default", {}, {}}, 7);
  EXPECT_EQ(sink.Scrape(),
            "# HELP jobpact_jobs_enqueued_total Jobs enqueued, by job type and queue.\n"
            "# TYPE jobpact_jobs_enqueued_total counter\n"
            "jobpact_jobs_enqueued_total{job_type=\"a.type\",queue=\"default\"} 7\n"
            "# HELP jobpact_jobs_succeeded_total Jobs that ended succeeded.\n"
            "# TYPE jobpact_jobs_succeeded_total counter\n"
            "jobpact_jobs_succeeded_total{job_type=\"a.type\",queue=\"default\"} 5\n"
            "jobpact_jobs_succeeded_total{job_type=\"b.type\",queue=\"default\"} 2\n");
}

TEST(PrometheusMetricsSinkTest, EmptyLabelsAreLeftOutAndValuesEscaped) {
  PrometheusMetricsSink sink;
  sink.SetGauge(m::kBusyWorkers, {}, 3);
  sink.Increment(m::kDeadLettered, {"t", "q", "say \"hi\"\\\nbye", {}}, 1);
  const std::string text = sink.Scrape();
  EXPECT_THAT(text, HasSubstr("\njobpact_workers_busy 3\n"));
  EXPECT_THAT(text, HasSubstr("jobpact_jobs_dead_lettered_total{job_type=\"t\",queue=\"q\","
                              "reason=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n"));
}

TEST(PrometheusMetricsSinkTest, TheCircuitGaugeNamesItsDependency) {
  PrometheusMetricsSink sink;
  sink.SetGauge(m::kCircuitState, {{}, {}, "payments-api", {}}, 1);
  EXPECT_THAT(sink.Scrape(), HasSubstr("jobpact_circuit_state{dependency=\"payments-api\"} 1\n"));
}

TEST(PrometheusMetricsSinkTest, CacheMetricsCarryTheirKeyPrefixAsTheCacheLabel) {
  PrometheusMetricsSink sink;
  MetricLabels user;
  user.cache = "user";
  MetricLabels stale_user = user;
  stale_user.reason = "revalidate";
  sink.Increment(m::kCacheHits, user, 3);
  sink.Increment(m::kCacheStaleServed, stale_user, 1);
  MetricLabels other;
  other.cache = "order";
  sink.Increment(m::kCacheHits, other, 2);
  sink.Observe(m::kCacheLoaderDuration, user, 0.02);
  const std::string text = sink.Scrape();
  EXPECT_THAT(text, HasSubstr("# TYPE jobpact_cache_hits_total counter\n"
                              "jobpact_cache_hits_total{cache=\"order\"} 2\n"
                              "jobpact_cache_hits_total{cache=\"user\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("jobpact_cache_stale_served_total{reason=\"revalidate\","
                              "cache=\"user\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("jobpact_cache_loader_duration_seconds_bucket{cache=\"user\","
                              "le=\"0.025\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("A jobpact metric.")));
}

TEST(PrometheusMetricsSinkTest, GaugeValuesUseTheFormatsFloatSyntax) {
  PrometheusMetricsSink sink;
  sink.SetGauge(m::kOldestJobAge, {{}, "a", {}, {}}, 0.25);
  sink.SetGauge(m::kOldestJobAge, {{}, "b", {}, {}}, std::numeric_limits<double>::infinity());
  sink.SetGauge(m::kOldestJobAge, {{}, "c", {}, {}}, std::nan(""));
  sink.SetGauge(m::kOldestJobAge, {{}, "d", {}, {}}, 1e21);
  const std::string text = sink.Scrape();
  EXPECT_THAT(text, HasSubstr("{queue=\"a\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("{queue=\"b\"} +Inf\n"));
  EXPECT_THAT(text, HasSubstr("{queue=\"c\"} NaN\n"));
  EXPECT_THAT(text, HasSubstr("{queue=\"d\"} 1e+21\n"));
}

TEST(PrometheusMetricsSinkTest, HistogramBucketsAreCumulativeAndTheirBoundInclusive) {
  PrometheusSinkOptions o;
  o.buckets["jobpact_job_duration_seconds"] = {0.1, 1, 10};
  PrometheusMetricsSink sink(o);
  const MetricLabels l{"t", "default", {}, {}};
  for (double v : {0.05, 0.1, 0.5, 1.0, 20.0}) sink.Observe(m::kDuration, l, v);
  sink.Observe(m::kDuration, l, std::nan(""));  // Counts in +Inf and the count only.
  const std::string text = sink.Scrape();
  EXPECT_THAT(
      text, HasSubstr("# TYPE jobpact_job_duration_seconds histogram\n"
                      "jobpact_job_duration_seconds_bucket{job_type=\"t\",queue=\"default\","
                      "le=\"0.1\"} 2\n"
                      "jobpact_job_duration_seconds_bucket{job_type=\"t\",queue=\"default\","
                      "le=\"1\"} 4\n"
                      "jobpact_job_duration_seconds_bucket{job_type=\"t\",queue=\"default\","
                      "le=\"10\"} 4\n"
                      "jobpact_job_duration_seconds_bucket{job_type=\"t\",queue=\"default\","
                      "le=\"+Inf\"} 6\n"
                      "jobpact_job_duration_seconds_sum{job_type=\"t\",queue=\"default\"} NaN\n"
                      "jobpact_job_duration_seconds_count{job_type=\"t\",queue=\"default\"} 6\n"));
}

TEST(PrometheusMetricsSinkTest, DefaultBucketsFitWhatEachHistogramMeasures) {
  PrometheusMetricsSink sink;
  EXPECT_EQ(sink.BucketsFor(m::kAttempts).front(), 1);
  EXPECT_EQ(sink.BucketsFor(m::kQueueLatency).back(), 3600);  // A backlog of an hour.
  EXPECT_EQ(sink.BucketsFor(m::kDuration).front(), 0.001);
  EXPECT_EQ(sink.BucketsFor("my_app_render_seconds").back(), 10);  // Prometheus' defaults.
}

TEST(PrometheusMetricsSinkTest, OptionsWithBadBoundsAreRefusedByName) {
  for (const std::vector<double>& bad :
       {std::vector<double>{}, std::vector<double>{1, 1}, std::vector<double>{2, 1},
        std::vector<double>{1, std::numeric_limits<double>::infinity()}}) {
    PrometheusSinkOptions o;
    o.buckets["jobpact_job_attempts"] = bad;
    EXPECT_THAT(ValidatePrometheusSinkOptions(o),
                testing::StatusIs(StatusCode::kInvalidArgument, HasSubstr("jobpact_job_attempts")));
    // Given anyway, the sink falls back to the defaults.
    EXPECT_EQ(PrometheusMetricsSink(o).BucketsFor(m::kAttempts).size(), 9u);
  }
  PrometheusSinkOptions good;
  good.buckets["jobpact_job_attempts"] = {1, 2};
  EXPECT_THAT(ValidatePrometheusSinkOptions(good), testing::IsOk());
}

TEST(PrometheusMetricsSinkTest, SamplesFromManyThreadsAllCount) {
  PrometheusMetricsSink sink;
  constexpr int kThreads = 8;
  constexpr int kEach = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        sink.Increment(m::kStarted, {"t", "default", {}, {}}, 1);
        sink.Observe(m::kAttempts, {"t", "default", {}, {}}, 1);
        if (i % 100 == 0) sink.Scrape();  // Readers pass through the stripes.
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = sink.Scrape();
  EXPECT_THAT(text,
              HasSubstr("jobpact_jobs_started_total{job_type=\"t\",queue=\"default\"} 40000\n"));
  EXPECT_THAT(text,
              HasSubstr("jobpact_job_attempts_bucket{job_type=\"t\",queue=\"default\",le=\"1\"}"
                        " 40000\n"));
}

// A runner's workload, scraped: every SPEC 8 metric that the workload
// touches is there, under its documented name and type.
TEST(PrometheusMetricsSinkTest, ARunnersWorkloadShowsEverySpec8Metric) {
  auto sink = std::make_shared<PrometheusMetricsSink>();
  testing::Harness h([&](JobRunnerOptions& o) { o.metrics = sink; });
  ASSERT_THAT(h.init_status(), testing::IsOk());
  int calls = 0;
  ASSERT_THAT(h.Handle("mail.send",
                       [&](JobContext&) -> Status {
                         // Fails once (transient), then succeeds.
                         if (++calls == 1) throw TransientError("smtp 421");
                         return Status::Ok();
                       }),
              testing::IsOk());
  ASSERT_THAT(
      h.Handle("card.charge", [](JobContext&) -> Status { throw PermanentError("card declined"); }),
      testing::IsOk());
  ASSERT_TRUE(h.Enqueue("mail.send").ok());
  ASSERT_TRUE(h.Enqueue("card.charge").ok());
  ASSERT_TRUE(h.RunUntilSettled().ok());
  ASSERT_TRUE(h.RunUntilIdle().ok());  // A maintenance pass: the gauges.
  const std::string text = sink->Scrape();
  for (const char* line : {
           "# TYPE jobpact_jobs_enqueued_total counter",
           "# TYPE jobpact_jobs_started_total counter",
           "# TYPE jobpact_jobs_succeeded_total counter",
           "# TYPE jobpact_jobs_dead_lettered_total counter",
           "# TYPE jobpact_job_retries_total counter",
           "# TYPE jobpact_job_queue_latency_seconds histogram",
           "# TYPE jobpact_job_duration_seconds histogram",
           "# TYPE jobpact_job_attempts histogram",
           "# TYPE jobpact_queue_depth gauge",
           "# TYPE jobpact_queue_oldest_job_age_seconds gauge",
           "# TYPE jobpact_workers_busy gauge",
           "# TYPE jobpact_workers_hung gauge",
           "# TYPE jobpact_retry_budget_balance gauge",
           "jobpact_jobs_started_total{job_type=\"mail.send\",queue=\"default\"} 2",
           "jobpact_jobs_succeeded_total{job_type=\"mail.send\",queue=\"default\","
           "reason=\"succeeded\"} 1",
           "jobpact_job_retries_total{job_type=\"mail.send\",queue=\"default\","
           "failure_class=\"transient\"} 1",
           "jobpact_jobs_dead_lettered_total{job_type=\"card.charge\",queue=\"default\","
           "reason=\"permanent_error\"} 1",
           "jobpact_job_attempts_bucket{job_type=\"mail.send\",queue=\"default\",le=\"1\"} 0",
           "jobpact_job_attempts_bucket{job_type=\"mail.send\",queue=\"default\",le=\"2\"} 1",
       }) {
    EXPECT_THAT(text, HasSubstr(std::string(line) + "\n")) << text;
  }
  EXPECT_THAT(text, Not(HasSubstr("# HELP jobpact_jobs_succeeded_total A jobpact metric.")));
}

}  // namespace
}  // namespace jobpact
