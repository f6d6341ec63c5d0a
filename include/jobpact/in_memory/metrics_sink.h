// File: jobpact/in_memory/metrics_sink.h
//
// InMemoryMetricsSink keeps every counter, histogram and gauge the JobRunner
// emits in process memory, so tests can assert on them and demos can print
// them. It is built for the runner's hot path (about six calls per job, from
// every worker thread): a call takes one uncontended lock and does no heap
// allocation once its series (name + labels) has been seen.
//
// How: series live in stripes, each with its own small lock (a spin lock
// whose waiters yield) and an open-addressing table of the series' hashes
// and addresses, each series holding its own copy of its name and labels;
// each thread sticks to one stripe, so worker threads rarely share a lock or
// a cache line. Readers sum over the stripes. Gauges are rare writes and
// live in one table, under a mutex.
//
// Histograms use fixed log-linear buckets: 16 linear sub-buckets per power
// of two from 2^-31 (about 0.5 ns) to 2^34 (about 540 years in seconds), plus
// a bucket for smaller values (zero, negatives) and one above the range.
// Each bucket keeps its count and the sum of its values. Percentile(q)
// returns the mean of the values in the bucket holding the nearest-rank
// observation, clamped to [min, max]: the error is below the bucket width
// (6.25% of the value), and the result is exact when the bucket holds one
// distinct value (e.g. attempt counts, or equal latencies under a
// ManualClock). count, sum, min and max are exact.
//
// Example:
//   auto metrics = std::make_shared<jobpact::InMemoryMetricsSink>();
//   opts.metrics = metrics;
//   ... run jobs ...
//   EXPECT_EQ(metrics->CounterTotal(jobpact::metric::kSucceeded, "invoice.generate"), 1);
//   double p99 = metrics->Histogram(jobpact::metric::kDuration).Percentile(0.99);
//
// Thread-safe.
#ifndef JOBPACT_IN_MEMORY_METRICS_SINK_H_
#define JOBPACT_IN_MEMORY_METRICS_SINK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/metrics_sink.h"

namespace jobpact {

// A histogram's observations merged over the series asked for.
// Thread-compatible (a plain value).
class JOBPACT_EXPORT HistogramSnapshot {
 public:
  // Bucket layout (see the file comment).
  static constexpr int kSubBuckets = 16;
  static constexpr int kMinExponent = -30;  // frexp exponent of the lowest octave.
  static constexpr int kMaxExponent = 34;
  static constexpr int kBuckets = (kMaxExponent - kMinExponent) * kSubBuckets + 2;
  // The bucket index of `value`; values below 2^(kMinExponent-1) (zero,
  // negatives, NaN) go to bucket 0, values beyond the range to the last one.
  static int BucketOf(double value);

  std::int64_t count = 0;
  double sum = 0;
  double min = 0;  // 0 when count == 0.
  double max = 0;
  double Mean() const { return count == 0 ? 0 : sum / static_cast<double>(count); }

  // The q-quantile, q in [0, 1], by nearest rank (see the file comment for
  // its accuracy). 0 when count == 0.
  double Percentile(double q) const;

  // Per-bucket counts and value sums, kBuckets each (empty when count == 0).
  std::vector<std::int64_t> bucket_counts;
  std::vector<double> bucket_sums;

  // Adds `other`'s observations to this one.
  void Merge(const HistogramSnapshot& other);
};

// One series, for printing.
struct CounterSeries {
  std::string name;
  std::string job_type;
  std::string queue;
  std::string reason;
  std::string failure_class;
  std::int64_t value = 0;
  std::string cache;
};

struct GaugeSeries {
  std::string name;
  std::string job_type;
  std::string queue;
  std::string reason;
  std::string failure_class;
  double value = 0;
  std::string cache;
};

class JOBPACT_EXPORT InMemoryMetricsSink final : public MetricsSink {
 public:
  InMemoryMetricsSink();
  ~InMemoryMetricsSink() override;

  void Increment(std::string_view name, const MetricLabels& labels,
                 std::int64_t delta) noexcept override;
  void Observe(std::string_view name, const MetricLabels& labels, double value) noexcept override;
  void SetGauge(std::string_view name, const MetricLabels& labels, double value) noexcept override;

  // The counter with exactly these labels (0 if never incremented).
  std::int64_t Counter(std::string_view name, const MetricLabels& labels = {}) const;
  // The sum of the counter over every label set; only those with this
  // job_type when `job_type` is not empty.
  std::int64_t CounterTotal(std::string_view name, std::string_view job_type = {}) const;
  // The histogram merged over every label set (or those of one job type).
  HistogramSnapshot Histogram(std::string_view name, std::string_view job_type = {}) const;
  // The histogram with exactly these labels.
  HistogramSnapshot HistogramExact(std::string_view name, const MetricLabels& labels) const;
  // The last value set for the gauge with exactly these labels.
  std::optional<double> Gauge(std::string_view name, const MetricLabels& labels = {}) const;

  // Every counter / gauge series, sorted by name then labels.
  std::vector<CounterSeries> Counters() const;
  std::vector<GaugeSeries> Gauges() const;

  // Forgets everything.
  void Reset();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_IN_MEMORY_METRICS_SINK_H_
