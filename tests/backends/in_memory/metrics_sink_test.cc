#include "jobpact/in_memory/metrics_sink.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace jobpact {
namespace {

const MetricLabels kInvoice{"invoice.generate", "default", "", ""};
const MetricLabels kEmail{"email.send", "default", "", ""};

TEST(InMemoryMetricsSinkTest, CounterMatchesLabelsExactly) {
  InMemoryMetricsSink sink;
  sink.Increment(metric::kSucceeded, kInvoice, 1);
  sink.Increment(metric::kSucceeded, kInvoice, 2);
  sink.Increment(metric::kSucceeded, kEmail, 5);
  sink.Increment(metric::kFailed, kInvoice, 7);
  EXPECT_EQ(sink.Counter(metric::kSucceeded, kInvoice), 3);
  EXPECT_EQ(sink.Counter(metric::kSucceeded, kEmail), 5);
  EXPECT_EQ(sink.Counter(metric::kSucceeded, {"invoice.generate", "other", "", ""}), 0);
  EXPECT_EQ(sink.Counter(metric::kSucceeded, {}), 0);
  EXPECT_EQ(sink.Counter("never_seen", kInvoice), 0);
}

TEST(InMemoryMetricsSinkTest, CounterTotalSumsOverLabelSets) {
  InMemoryMetricsSink sink;
  sink.Increment(metric::kDeadLettered, {"a", "q", "max_attempts_exceeded", ""}, 2);
  sink.Increment(metric::kDeadLettered, {"a", "q", "permanent_error", ""}, 3);
  sink.Increment(metric::kDeadLettered, {"b", "q", "permanent_error", ""}, 4);
  EXPECT_EQ(sink.CounterTotal(metric::kDeadLettered), 9);
  EXPECT_EQ(sink.CounterTotal(metric::kDeadLettered, "a"), 5);
  EXPECT_EQ(sink.CounterTotal(metric::kDeadLettered, "b"), 4);
  EXPECT_EQ(sink.CounterTotal(metric::kDeadLettered, "c"), 0);
}

TEST(InMemoryMetricsSinkTest, HistogramKeepsExactSummaryAndExactSmallIntegers) {
  InMemoryMetricsSink sink;
  for (int attempts : {1, 1, 1, 2, 2, 3, 5}) sink.Observe(metric::kAttempts, kInvoice, attempts);
  sink.Observe(metric::kAttempts, kEmail, 9);
  HistogramSnapshot h = sink.Histogram(metric::kAttempts, "invoice.generate");
  EXPECT_EQ(h.count, 7);
  EXPECT_DOUBLE_EQ(h.sum, 15);
  EXPECT_DOUBLE_EQ(h.min, 1);
  EXPECT_DOUBLE_EQ(h.max, 5);
  EXPECT_DOUBLE_EQ(h.Percentile(0.5), 2);
  EXPECT_DOUBLE_EQ(h.Percentile(0.4), 1);
  EXPECT_DOUBLE_EQ(h.Percentile(0.8), 3);
  EXPECT_DOUBLE_EQ(h.Percentile(0), 1);
  EXPECT_DOUBLE_EQ(h.Percentile(1), 5);
  HistogramSnapshot all = sink.Histogram(metric::kAttempts);
  EXPECT_EQ(all.count, 8);
  EXPECT_DOUBLE_EQ(all.max, 9);
  EXPECT_EQ(sink.HistogramExact(metric::kAttempts, kEmail).count, 1);
  EXPECT_EQ(sink.Histogram("nothing").count, 0);
  EXPECT_EQ(sink.Histogram("nothing").Percentile(0.5), 0);
}

TEST(InMemoryMetricsSinkTest, PercentilesAreWithinTheBucketWidth) {
  InMemoryMetricsSink sink;
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> latency(std::log(0.05), 1.5);  // Seconds.
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) {
    values.push_back(latency(rng));
    sink.Observe(metric::kDuration, kInvoice, values.back());
  }
  std::sort(values.begin(), values.end());
  HistogramSnapshot h = sink.Histogram(metric::kDuration);
  for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 0.999}) {
    double exact = values[static_cast<std::size_t>(std::ceil(q * values.size())) - 1];
    EXPECT_NEAR(h.Percentile(q), exact, exact * 0.0625) << "q=" << q;
  }
}

TEST(InMemoryMetricsSinkTest, ZeroAndNegativeObservationsAreCounted) {
  InMemoryMetricsSink sink;
  sink.Observe(metric::kQueueLatency, kInvoice, 0);
  sink.Observe(metric::kQueueLatency, kInvoice, 0);
  sink.Observe(metric::kQueueLatency, kInvoice, -0.5);  // Clock skew.
  HistogramSnapshot h = sink.Histogram(metric::kQueueLatency);
  EXPECT_EQ(h.count, 3);
  EXPECT_DOUBLE_EQ(h.min, -0.5);
  EXPECT_DOUBLE_EQ(h.max, 0);
  EXPECT_LE(h.Percentile(0.5), 0);
}

TEST(InMemoryMetricsSinkTest, BucketsCoverTheRange) {
  EXPECT_EQ(HistogramSnapshot::BucketOf(0), 0);
  EXPECT_EQ(HistogramSnapshot::BucketOf(-1), 0);
  EXPECT_EQ(HistogramSnapshot::BucketOf(std::nan("")), 0);
  EXPECT_EQ(HistogramSnapshot::BucketOf(1e30), HistogramSnapshot::kBuckets - 1);
  EXPECT_EQ(HistogramSnapshot::BucketOf(INFINITY), HistogramSnapshot::kBuckets - 1);
  int last = 0;
  for (double v = 1e-9; v < 1e9; v *= 1.01) {
    int b = HistogramSnapshot::BucketOf(v);
    EXPECT_GE(b, last);
    EXPECT_GT(b, 0);
    EXPECT_LT(b, HistogramSnapshot::kBuckets - 1);
    last = b;
  }
}

TEST(InMemoryMetricsSinkTest, GaugeKeepsTheLastValue) {
  InMemoryMetricsSink sink;
  EXPECT_FALSE(sink.Gauge(metric::kQueueDepth, {"", "default", "", ""}).has_value());
  sink.SetGauge(metric::kQueueDepth, {"", "default", "", ""}, 10);
  sink.SetGauge(metric::kQueueDepth, {"", "default", "", ""}, 3);
  sink.SetGauge(metric::kQueueDepth, {"", "other", "", ""}, 8);
  EXPECT_EQ(sink.Gauge(metric::kQueueDepth, {"", "default", "", ""}), 3);
  EXPECT_EQ(sink.Gauge(metric::kQueueDepth, {"", "other", "", ""}), 8);
  std::vector<GaugeSeries> gs = sink.Gauges();
  ASSERT_EQ(gs.size(), 2u);
  EXPECT_EQ(gs[0].queue, "default");
}

TEST(InMemoryMetricsSinkTest, CountersListsEverySeriesSortedAndMerged) {
  InMemoryMetricsSink sink;
  sink.Increment(metric::kSucceeded, kInvoice, 1);
  std::thread([&] { sink.Increment(metric::kSucceeded, kInvoice, 2); }).join();
  sink.Increment(metric::kEnqueued, kEmail, 4);
  std::vector<CounterSeries> cs = sink.Counters();
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].name, metric::kEnqueued);
  EXPECT_EQ(cs[0].job_type, "email.send");
  EXPECT_EQ(cs[0].value, 4);
  EXPECT_EQ(cs[1].name, metric::kSucceeded);
  EXPECT_EQ(cs[1].value, 3);
}

TEST(InMemoryMetricsSinkTest, LabelsAreCopiedNotReferenced) {
  InMemoryMetricsSink sink;
  {
    std::string type = "temporary.type";
    sink.Increment(metric::kStarted, {type, "q", "", ""}, 1);
    type.assign("overwritten!!!");
  }
  EXPECT_EQ(sink.Counter(metric::kStarted, {"temporary.type", "q", "", ""}), 1);
}

// Many series that differ only in the middle of a label, or by where a
// byte sits between two labels, share hash samples: each must still be its
// own series, through the table's growth.
TEST(InMemoryMetricsSinkTest, SeriesThatLookAlikeStayApart) {
  InMemoryMetricsSink sink;
  constexpr int kSeries = 600;
  auto type_of = [](int i) {
    std::string t = "job.type.0000.suffix";  // Same length, ends and first bytes.
    const std::string n = std::to_string(1000 + i % 100);  // Four digits.
    t.replace(9, n.size(), n);
    return t;
  };
  for (int round = 1; round <= 3; ++round) {
    for (int i = 0; i < kSeries; ++i) {
      const std::string type = type_of(i);
      const std::string queue = i < 100 ? "q" : "queue" + std::to_string(i / 100);
      sink.Increment(metric::kSucceeded, {type, queue, "", ""}, i + 1);
      sink.Observe(metric::kDuration, {type, queue, "", ""}, i);
      sink.SetGauge(metric::kQueueDepth, {type, queue, "", ""}, i * round);
    }
  }
  // ("ab", "c") and ("a", "bc") are two series.
  sink.Increment(metric::kStarted, {"ab", "c", "", ""}, 1);
  sink.Increment(metric::kStarted, {"a", "bc", "", ""}, 2);
  sink.Increment(metric::kStarted, {"a", "b", "c", ""}, 4);
  sink.Increment(metric::kStarted, {"a", "b", "", "c"}, 8);
  for (int i = 0; i < kSeries; ++i) {
    const std::string type = type_of(i);
    const std::string queue = i < 100 ? "q" : "queue" + std::to_string(i / 100);
    EXPECT_EQ(sink.Counter(metric::kSucceeded, {type, queue, "", ""}), 3 * (i + 1)) << i;
    EXPECT_EQ(sink.HistogramExact(metric::kDuration, {type, queue, "", ""}).count, 3) << i;
    EXPECT_EQ(sink.Gauge(metric::kQueueDepth, {type, queue, "", ""}), i * 3.0) << i;
  }
  EXPECT_EQ(sink.Counters().size(), kSeries + 4u);
  EXPECT_EQ(sink.Gauges().size(), static_cast<std::size_t>(kSeries));
  EXPECT_EQ(sink.Counter(metric::kStarted, {"ab", "c", "", ""}), 1);
  EXPECT_EQ(sink.Counter(metric::kStarted, {"a", "bc", "", ""}), 2);
  EXPECT_EQ(sink.Counter(metric::kStarted, {"a", "b", "c", ""}), 4);
  EXPECT_EQ(sink.Counter(metric::kStarted, {"a", "b", "", "c"}), 8);
  EXPECT_EQ(sink.Counter(metric::kStarted, {"a", "b", "", ""}), 0);
}

TEST(InMemoryMetricsSinkTest, ResetForgetsEverything) {
  InMemoryMetricsSink sink;
  sink.Increment(metric::kSucceeded, kInvoice, 1);
  sink.Observe(metric::kDuration, kInvoice, 1);
  sink.SetGauge(metric::kBusyWorkers, {}, 2);
  sink.Reset();
  EXPECT_EQ(sink.CounterTotal(metric::kSucceeded), 0);
  EXPECT_EQ(sink.Histogram(metric::kDuration).count, 0);
  EXPECT_FALSE(sink.Gauge(metric::kBusyWorkers).has_value());
  EXPECT_TRUE(sink.Counters().empty());
}

TEST(InMemoryMetricsSinkTest, ConcurrentWritersLoseNothing) {
  InMemoryMetricsSink sink;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&sink, t] {
      MetricLabels labels{t % 2 ? "a" : "b", "q", "", ""};
      for (int i = 0; i < kPerThread; ++i) {
        sink.Increment(metric::kStarted, labels, 1);
        sink.Observe(metric::kDuration, labels, 0.01 * (i % 100 + 1));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(sink.CounterTotal(metric::kStarted), kThreads * kPerThread);
  EXPECT_EQ(sink.CounterTotal(metric::kStarted, "a"), kThreads / 2 * kPerThread);
  EXPECT_EQ(sink.Histogram(metric::kDuration).count, kThreads * kPerThread);
}

}  // namespace
}  // namespace jobpact
