// PrometheusMetricsSink (see jobpact/prometheus/metrics_sink.h).
#include "jobpact/prometheus/metrics_sink.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/retry_budget.h"
#include "src/internal/series_table.h"

namespace jobpact {
namespace {

using internal::SeriesKey;

const std::vector<double>& DefaultBuckets(std::string_view name) {
  static const std::vector<double> kLatency = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                               5,     10,    30,   60,   300, 900, 3600};
  static const std::vector<double> kDuration = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                1,     2.5,   5,    10,    30,   60,  300,  900};
  static const std::vector<double> kAttempts = {1, 2, 3, 4, 5, 7, 10, 15, 20};
  static const std::vector<double> kDefault = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                               0.5,   1,    2.5,   5,    10};
  if (name == metric::kQueueLatency) return kLatency;
  if (name == metric::kDuration || name == metric::kCacheLoaderDuration) return kDuration;
  if (name == metric::kAttempts) return kAttempts;
  return kDefault;
}

bool ValidBounds(const std::vector<double>& b) {
  if (b.empty()) return false;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(b[i])) return false;
    if (i > 0 && !(b[i] > b[i - 1])) return false;
  }
  return true;
}

// One histogram series: counts per bucket (the last one above every bound,
// +Inf), not cumulative; Scrape() sums them up.
struct BucketHistogram {
  const std::vector<double>* bounds = nullptr;  // Set by the first sample.
  std::vector<std::int64_t> counts;
  double sum = 0;
  std::int64_t count = 0;

  // The series' bounds, given once, before its first sample. May throw
  // std::bad_alloc (the counts' room).
  void Init(const std::vector<double>& b) {
    counts.assign(b.size() + 1, 0);
    bounds = &b;
  }

  // REQUIRES: Init was called.
  void Add(double v) {
    // The first bound >= v: Prometheus' `le` is inclusive. NaN is
    // unordered (lower_bound would put it in the first bucket): it counts
    // in +Inf only.
    const std::size_t at =
        std::isnan(v) ? bounds->size()
                      : static_cast<std::size_t>(
                            std::lower_bound(bounds->begin(), bounds->end(), v) - bounds->begin());
    ++counts[at];
    sum += v;
    ++count;
  }

  // Adds `other`'s samples (same bounds) to these.
  void Merge(const BucketHistogram& other) {
    if (other.bounds == nullptr) return;
    if (bounds == nullptr) Init(*other.bounds);
    for (std::size_t i = 0; i < other.counts.size(); ++i) counts[i] += other.counts[i];
    sum += other.sum;
    count += other.count;
  }
};

// What each known metric means, for its # HELP line.
std::string_view HelpOf(std::string_view name) {
  static const std::map<std::string_view, std::string_view> kHelp = {
      {metric::kEnqueued, "Jobs enqueued, by job type and queue."},
      {metric::kStarted, "Attempts started (deliveries that reached the handler)."},
      {metric::kSucceeded, "Jobs that ended succeeded."},
      {metric::kFailed,
       "Jobs that ended failed (final, without the dead-letter queue), by reason."},
      {metric::kDeadLettered, "Jobs moved to the dead-letter queue, by reason."},
      {metric::kDiscarded, "Jobs discarded, by reason."},
      {metric::kRetries, "Retries scheduled, by failure class."},
      {metric::kTimeouts, "Attempts that ran past their execution timeout."},
      {metric::kLockContention, "Deliveries that found their lock held by another owner."},
      {metric::kDedupHits, "Enqueues and deliveries folded into a job with the same dedup key."},
      {metric::kIdempotentSkips, "Deliveries skipped because their idempotency key was done."},
      {metric::kLeaseRecoveries, "Expired leases reclaimed (a worker lost or too slow)."},
      {metric::kStaleCompletions, "Completions refused because the lease had moved on."},
      {metric::kAnomalies, "Failures of the unknown class (a bug or an unclassified error)."},
      {metric::kHungWorkers, "Workers ever declared hung (handler past its deadline)."},
      {metric::kReplayed, "Dead-lettered jobs replayed, by the entry's reason."},
      {metric::kRetryBudgetExhausted,
       "Retries the retry budget refused (deferred or dead-lettered)."},
      {metric::kRetryBudgetDeferred, "Retries the retry budget deferred to a later time."},
      {metric::kCircuitRejected,
       "Deliveries rescheduled because their dependency's circuit was open."},
      {metric::kRateLimited,
       "Deliveries a rate limiter rescheduled, and attempts an upstream rate limited."},
      {metric::kConcurrencyLimited,
       "Deliveries rescheduled because a local or dependency concurrency limit was full."},
      {metric::kEnqueueRefused,
       "Jobs refused at enqueue because their queue was at its maximum depth."},
      {metric::kQueueLatency, "Time from a job being ready to its attempt starting, in seconds."},
      {metric::kDuration, "Handler run time per attempt, in seconds."},
      {metric::kAttempts, "The attempt number a job ended on."},
      {metric::kQueueDepth, "Jobs ready or scheduled in the queue."},
      {metric::kOldestJobAge, "Age of the oldest ready job in the queue, in seconds."},
      {metric::kBusyWorkers, "Workers running a job now."},
      {metric::kHungWorkersNow, "Workers hung now (replaced; their handler has not returned)."},
      {metric::kCircuitState, "Circuit state per dependency: 0 closed, 1 open, 2 half_open."},
      {metric::kRetryBudgetBalance, "Retries the job type's retry budget allows now."},
      {metric::kCacheHits, "Cache gets answered from a fresh entry, by key prefix."},
      {metric::kCacheMisses, "Cache gets that found no fresh entry, by key prefix."},
      {metric::kCacheCoalesced,
       "Cache gets that shared another caller's load of the same key (coalesced)."},
      {metric::kCacheStaleServed,
       "Stale cache values served, by reason (revalidate, error, lock_wait)."},
      {metric::kCacheLockWaits, "Cache refills that waited for another owner's refill lock."},
      {metric::kCacheLockFailures,
       "Cache refill locks not obtained, by reason (timeout, lock_store_error)."},
      {metric::kCacheFallbackLoads, "Cache loads made without the refill lock (fallback)."},
      {metric::kCacheEarlyRefreshes, "Cache refreshes started early by XFetch."},
      {metric::kCacheLoaderErrors, "Cache loader calls that failed, by key prefix."},
      {metric::kCacheStoreErrors, "Cache store calls that failed, by key prefix."},
      {metric::kCacheLoaderDuration, "Cache loader run time per call, in seconds."},
  };
  const auto it = kHelp.find(name);
  return it == kHelp.end() ? std::string_view("A jobpact metric.") : it->second;
}

// The format's escaping: backslash and newline, and in label values (not
// in HELP text) the double quote.
void AppendEscaped(std::string& out, std::string_view text, bool label_value) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && label_value) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

// A sample value: Go's float syntax as Prometheus reads it.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// `{job_type="...",queue="..."}`, or "" with no label; `extra` (e.g.
// `le="0.5"`) is added last.
std::string LabelSet(const SeriesKey& k, std::string_view extra = {}) {
  std::string out;
  auto add = [&](std::string_view label, std::string_view value) {
    if (value.empty()) return;
    out += out.empty() ? "{" : ",";
    out += label;
    out += "=\"";
    AppendEscaped(out, value, /*label_value=*/true);
    out += '"';
  };
  add("job_type", k.job_type);
  add("queue", k.queue);
  // The circuit gauge carries its dependency in `reason` (MetricLabels has
  // no dependency field).
  add(k.name == metric::kCircuitState ? "dependency" : "reason", k.reason);
  add("failure_class", k.failure_class);
  add("cache", k.cache);
  if (!extra.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra;
  }
  if (!out.empty()) out += '}';
  return out;
}

void AppendHeader(std::string& out, std::string_view name, std::string_view type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  AppendEscaped(out, HelpOf(name), /*label_value=*/false);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// Writes each metric's header once, before its first series.
template <typename V, typename F>
void Render(std::string& out, const std::map<SeriesKey, V>& series, std::string_view type, F&& f) {
  std::string_view current;
  bool first = true;
  for (const auto& [key, value] : series) {
    if (first || key.name != current) {
      AppendHeader(out, key.name, type);
      current = key.name;
      first = false;
    }
    f(key, value);
  }
}

}  // namespace

Status ValidatePrometheusSinkOptions(const PrometheusSinkOptions& options) {
  for (const auto& [name, bounds] : options.buckets) {
    if (!ValidBounds(bounds)) {
      return Status::InvalidArgument(
          "PrometheusSinkOptions.buckets[\"" + name +
          "\"]: bucket bounds must be finite and strictly increasing, and at least one");
    }
  }
  return Status::Ok();
}

class PrometheusMetricsSink::Impl {
 public:
  explicit Impl(PrometheusSinkOptions o) : options(std::move(o)) {}

  const std::vector<double>& Bounds(std::string_view name) const {
    const auto it = options.buckets.find(name);
    if (it != options.buckets.end() && ValidBounds(it->second)) return it->second;
    return DefaultBuckets(name);
  }

  const PrometheusSinkOptions options;
  internal::SinkSeries<BucketHistogram> series;
};

PrometheusMetricsSink::PrometheusMetricsSink(PrometheusSinkOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
PrometheusMetricsSink::~PrometheusMetricsSink() = default;

const std::vector<double>& PrometheusMetricsSink::BucketsFor(std::string_view name) const {
  return impl_->Bounds(name);
}

void PrometheusMetricsSink::Increment(std::string_view name, const MetricLabels& labels,
                                      std::int64_t delta) noexcept {
  impl_->series.Increment(name, labels, delta);
}

void PrometheusMetricsSink::Observe(std::string_view name, const MetricLabels& labels,
                                    double value) noexcept {
  // The bounds are looked up once per series, at its first sample.
  impl_->series.Observe(name, labels, [&](BucketHistogram& h) {
    if (h.bounds == nullptr) h.Init(impl_->Bounds(name));
    h.Add(value);
  });
}

void PrometheusMetricsSink::SetGauge(std::string_view name, const MetricLabels& labels,
                                     double value) noexcept {
  impl_->series.SetGauge(name, labels, value);
}

std::string PrometheusMetricsSink::Scrape() const {
  internal::MergedSeries<std::int64_t> counters;
  internal::MergedSeries<BucketHistogram> histograms;
  internal::MergedSeries<double> gauges;
  impl_->series.VisitStripes([&](const auto& stripe_counters, const auto& stripe_histograms) {
    stripe_counters.ForEach([&](const SeriesKey& k, std::int64_t v) { counters.At(k) += v; });
    stripe_histograms.ForEach([&](const SeriesKey& k, const BucketHistogram& h) {
      if (h.bounds != nullptr) histograms.At(k).Merge(h);
    });
  });
  impl_->series.VisitGauges([&](const auto& stripe_gauges) {
    stripe_gauges.ForEach([&](const SeriesKey& k, double v) { gauges.At(k) = v; });
  });

  std::string out;
  Render(out, counters.series, "counter", [&](const SeriesKey& k, std::int64_t v) {
    out += k.name;
    out += LabelSet(k);
    out += ' ';
    out += std::to_string(v);
    out += '\n';
  });
  Render(out, gauges.series, "gauge", [&](const SeriesKey& k, double v) {
    out += k.name;
    out += LabelSet(k);
    out += ' ';
    out += FormatValue(v);
    out += '\n';
  });
  Render(out, histograms.series, "histogram", [&](const SeriesKey& k, const BucketHistogram& h) {
    std::int64_t cumulative = 0;
    for (std::size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      const std::string le =
          i < h.bounds->size() ? "le=\"" + FormatValue((*h.bounds)[i]) + "\"" : "le=\"+Inf\"";
      out += k.name;
      out += "_bucket";
      out += LabelSet(k, le);
      out += ' ';
      out += std::to_string(cumulative);
      out += '\n';
    }
    out += k.name;
    out += "_sum";
    out += LabelSet(k);
    out += ' ';
    out += FormatValue(h.sum);
    out += '\n';
    out += k.name;
    out += "_count";
    out += LabelSet(k);
    out += ' ';
    out += std::to_string(h.count);
    out += '\n';
  });
  return out;
}

}  // namespace jobpact
