// File: jobpact/prometheus/metrics_sink.h
//
// PrometheusMetricsSink keeps the counters, gauges and histograms the
// JobRunner emits (SPEC 8, the circuit-breaker and retry-budget states) and
// renders them in the Prometheus text exposition format (version 0.0.4), for
// a `/metrics` endpoint or a textfile collector.
//
// Rendering follows the Prometheus naming conventions: counters end in
// `_total`, durations are in seconds, every metric has `# HELP` and `# TYPE`
// lines, label values are escaped. Empty labels are left out. The
// circuit-breaker gauge `jobpact_circuit_state` carries its dependency in the
// `dependency` label. Histograms have cumulative `_bucket{le="..."}` series,
// the last one `le="+Inf"`, then `_sum` and `_count`.
//
// Default buckets (upper bounds, seconds unless said otherwise; each can be
// replaced per metric name through PrometheusSinkOptions::buckets):
//   jobpact_job_queue_latency_seconds  0.001 0.005 0.01 0.05 0.1 0.5 1 5 10
//                                      30 60 300 900 3600
//   jobpact_job_duration_seconds       0.001 0.005 0.01 0.025 0.05 0.1 0.25
//                                      0.5 1 2.5 5 10 30 60 300 900
//   jobpact_job_attempts (attempts)    1 2 3 4 5 7 10 15 20
//   any other histogram                Prometheus' defaults, 0.005 to 10
//
// The hot path is the same as InMemoryMetricsSink's: a sample takes its
// thread's stripe lock (uncontended in practice) and allocates only for a
// series it has never seen. Scrape() merges the stripes.
//
// Example:
//   auto metrics = std::make_shared<jobpact::PrometheusMetricsSink>();
//   opts.metrics = metrics;
//   ... serve metrics->Scrape() with content type
//   ... jobpact::PrometheusMetricsSink::kContentType.
//
// Thread-safe.
#ifndef JOBPACT_PROMETHEUS_METRICS_SINK_H_
#define JOBPACT_PROMETHEUS_METRICS_SINK_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/metrics_sink.h"
#include "jobpact/status.h"

namespace jobpact {

struct PrometheusSinkOptions {
  // Bucket upper bounds per histogram name, replacing the defaults above.
  // Each list strictly increasing and finite ("+Inf" is always added).
  std::map<std::string, std::vector<double>, std::less<>> buckets;
};

// OK, or kInvalidArgument naming the histogram whose bounds are empty, not
// finite or not strictly increasing.
JOBPACT_EXPORT Status ValidatePrometheusSinkOptions(const PrometheusSinkOptions& options);

class JOBPACT_EXPORT PrometheusMetricsSink final : public MetricsSink {
 public:
  // The HTTP Content-Type of Scrape()'s text.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // REQUIRES: ValidatePrometheusSinkOptions(options).ok() (a histogram with
  // invalid bounds falls back to the defaults).
  explicit PrometheusMetricsSink(PrometheusSinkOptions options = {});
  ~PrometheusMetricsSink() override;

  void Increment(std::string_view name, const MetricLabels& labels,
                 std::int64_t delta) noexcept override;
  void Observe(std::string_view name, const MetricLabels& labels, double value) noexcept override;
  void SetGauge(std::string_view name, const MetricLabels& labels, double value) noexcept override;

  // Every series, in the text exposition format: metrics sorted by name,
  // series by labels. May throw std::bad_alloc.
  std::string Scrape() const;

  // The bucket upper bounds used for histogram `name` (without +Inf).
  const std::vector<double>& BucketsFor(std::string_view name) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobpact

#endif  // JOBPACT_PROMETHEUS_METRICS_SINK_H_
