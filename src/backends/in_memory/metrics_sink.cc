// InMemoryMetricsSink (see jobpact/in_memory/metrics_sink.h for the design).
#include "jobpact/in_memory/metrics_sink.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "src/internal/series_table.h"

namespace jobpact {
namespace {

using internal::SeriesKey;
using internal::SeriesKeyHash;

struct HistogramData {
  std::int64_t count = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  std::array<std::int64_t, HistogramSnapshot::kBuckets> counts{};
  std::array<double, HistogramSnapshot::kBuckets> sums{};

  void Add(double v) {
    ++count;
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
    int b = HistogramSnapshot::BucketOf(v);
    ++counts[b];
    sums[b] += v;
  }

  void AddTo(HistogramSnapshot& s) const {
    if (count == 0) return;
    if (s.bucket_counts.empty()) {
      s.bucket_counts.assign(HistogramSnapshot::kBuckets, 0);
      s.bucket_sums.assign(HistogramSnapshot::kBuckets, 0.0);
      s.min = min;
      s.max = max;
    } else {
      s.min = std::min(s.min, min);
      s.max = std::max(s.max, max);
    }
    s.count += count;
    s.sum += sum;
    for (int i = 0; i < HistogramSnapshot::kBuckets; ++i) {
      s.bucket_counts[i] += counts[i];
      s.bucket_sums[i] += sums[i];
    }
  }
};

}  // namespace

// --- HistogramSnapshot ---

namespace {
// 2^e, exactly, at compile time (std::ldexp is not constexpr).
constexpr double Pow2(int e) {
  double r = 1;
  for (; e > 0; --e) r *= 2;
  for (; e < 0; ++e) r /= 2;
  return r;
}
}  // namespace

int HistogramSnapshot::BucketOf(double value) {
  static_assert(kSubBuckets == 16, "the sub-bucket is the fraction's top 4 bits");
  static_assert(std::numeric_limits<double>::is_iec559, "IEEE 754 doubles");
  // NaN, zero, negatives and tiny values: bucket 0.
  constexpr double kLowest = Pow2(kMinExponent - 1);
  if (!(value >= kLowest)) return 0;
  if (std::isinf(value)) return kBuckets - 1;
  // What frexp gives (value = mantissa * 2^exponent, mantissa in [0.5, 1)),
  // read from the bits: `value` is normal here (2^-31 is far above the
  // subnormals), so value = (1 + f) * 2^(E - 1023) with E the biased
  // exponent, i.e. exponent = E - 1022 and mantissa = (1 + f) / 2; the
  // sub-bucket (mantissa - 0.5) * 2 * kSubBuckets = 16 f, truncated, is the
  // top 4 bits of the fraction f.
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1022;
  if (exponent >= kMaxExponent) return kBuckets - 1;
  const int sub = static_cast<int>((bits >> 48) & 0xf);
  return 1 + (exponent - kMinExponent) * kSubBuckets + sub;
}

double HistogramSnapshot::Percentile(double q) const {
  if (count == 0 || bucket_counts.empty()) return 0;
  if (!(q > 0)) return min;
  if (q >= 1) return max;
  // Nearest rank: the smallest observation with at least q * count at or below it.
  auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(count)));
  rank = std::max<std::int64_t>(rank, 1);
  std::int64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += bucket_counts[i];
    if (seen >= rank) {
      double mean = bucket_sums[i] / static_cast<double>(bucket_counts[i]);
      return std::clamp(mean, min, max);
    }
  }
  return max;
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  if (other.count == 0) return;
  if (count == 0 || bucket_counts.empty()) {
    *this = other;
    return;
  }
  count += other.count;
  sum += other.sum;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  for (int i = 0; i < kBuckets; ++i) {
    bucket_counts[i] += other.bucket_counts[i];
    bucket_sums[i] += other.bucket_sums[i];
  }
}

// --- InMemoryMetricsSink ---

class InMemoryMetricsSink::Impl {
 public:
  internal::SinkSeries<HistogramData> series;

  // Calls `f(key, value)` for every counter / histogram series of every
  // stripe, each stripe under its lock.
  template <typename F>
  void ForEachCounter(F&& f) const {
    series.VisitStripes([&](const auto& counters, const auto&) { counters.ForEach(f); });
  }
  template <typename F>
  void ForEachHistogram(F&& f) const {
    series.VisitStripes([&](const auto&, const auto& histograms) { histograms.ForEach(f); });
  }
};

InMemoryMetricsSink::InMemoryMetricsSink() : impl_(std::make_unique<Impl>()) {}
InMemoryMetricsSink::~InMemoryMetricsSink() = default;

void InMemoryMetricsSink::Increment(std::string_view name, const MetricLabels& labels,
                                    std::int64_t delta) noexcept {
  impl_->series.Increment(name, labels, delta);
}

void InMemoryMetricsSink::Observe(std::string_view name, const MetricLabels& labels,
                                  double value) noexcept {
  impl_->series.Observe(name, labels, [value](HistogramData& h) { h.Add(value); });
}

void InMemoryMetricsSink::SetGauge(std::string_view name, const MetricLabels& labels,
                                   double value) noexcept {
  impl_->series.SetGauge(name, labels, value);
}

std::int64_t InMemoryMetricsSink::Counter(std::string_view name, const MetricLabels& labels) const {
  const SeriesKey key = SeriesKey::Of(name, labels);
  const std::uint64_t hash = SeriesKeyHash::Of(key);
  std::int64_t total = 0;
  impl_->series.VisitStripes([&](const auto& counters, const auto&) {
    if (const std::int64_t* v = counters.Find(key, hash)) total += *v;
  });
  return total;
}

std::int64_t InMemoryMetricsSink::CounterTotal(std::string_view name,
                                               std::string_view job_type) const {
  std::int64_t total = 0;
  impl_->ForEachCounter([&](const SeriesKey& key, std::int64_t v) {
    if (key.name == name && (job_type.empty() || key.job_type == job_type)) total += v;
  });
  return total;
}

HistogramSnapshot InMemoryMetricsSink::Histogram(std::string_view name,
                                                 std::string_view job_type) const {
  HistogramSnapshot snap;
  impl_->ForEachHistogram([&](const SeriesKey& key, const HistogramData& h) {
    if (key.name == name && (job_type.empty() || key.job_type == job_type)) h.AddTo(snap);
  });
  return snap;
}

HistogramSnapshot InMemoryMetricsSink::HistogramExact(std::string_view name,
                                                      const MetricLabels& labels) const {
  const SeriesKey key = SeriesKey::Of(name, labels);
  const std::uint64_t hash = SeriesKeyHash::Of(key);
  HistogramSnapshot snap;
  impl_->series.VisitStripes([&](const auto&, const auto& histograms) {
    if (const HistogramData* h = histograms.Find(key, hash)) h->AddTo(snap);
  });
  return snap;
}

std::optional<double> InMemoryMetricsSink::Gauge(std::string_view name,
                                                 const MetricLabels& labels) const {
  const SeriesKey key = SeriesKey::Of(name, labels);
  const std::uint64_t hash = SeriesKeyHash::Of(key);
  std::optional<double> out;
  impl_->series.VisitGauges([&](const auto& gauges) {
    if (const double* v = gauges.Find(key, hash)) out = *v;
  });
  return out;
}

std::vector<CounterSeries> InMemoryMetricsSink::Counters() const {
  // Merge the stripes, then sort by name and labels.
  internal::MergedSeries<std::int64_t> merged;
  impl_->ForEachCounter([&](const SeriesKey& key, std::int64_t v) { merged.At(key) += v; });
  std::vector<CounterSeries> out;
  out.reserve(merged.series.size());
  for (const auto& [k, v] : merged.series) {
    out.push_back(CounterSeries{std::string(k.name), std::string(k.job_type), std::string(k.queue),
                                std::string(k.reason), std::string(k.failure_class), v,
                                std::string(k.cache)});
  }
  return out;
}

std::vector<GaugeSeries> InMemoryMetricsSink::Gauges() const {
  std::vector<GaugeSeries> out;
  impl_->series.VisitGauges([&](const auto& gauges) {
    out.reserve(gauges.size());
    gauges.ForEach([&](const SeriesKey& k, double v) {
      out.push_back(GaugeSeries{std::string(k.name), std::string(k.job_type), std::string(k.queue),
                                std::string(k.reason), std::string(k.failure_class), v,
                                std::string(k.cache)});
    });
  });
  std::sort(out.begin(), out.end(), [](const GaugeSeries& a, const GaugeSeries& b) {
    return std::tie(a.name, a.job_type, a.queue, a.reason, a.failure_class, a.cache) <
           std::tie(b.name, b.job_type, b.queue, b.reason, b.failure_class, b.cache);
  });
  return out;
}

void InMemoryMetricsSink::Reset() { impl_->series.Clear(); }

}  // namespace jobpact
