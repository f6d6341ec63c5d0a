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
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace jobpact {
namespace {

// A series' identity as views; in a table the views point into the
// series' own strings, in a lookup into the caller's.
struct SeriesKey {
  std::string_view name;
  std::string_view job_type;
  std::string_view queue;
  std::string_view reason;
  std::string_view failure_class;

  static SeriesKey Of(std::string_view name, const MetricLabels& l) {
    return SeriesKey{name, l.job_type, l.queue, l.reason, l.failure_class};
  }
  auto Tie() const { return std::tie(name, job_type, queue, reason, failure_class); }
  // Sizes first, then the bytes, without string_view::compare's three-way
  // result: a lookup compares one key per sample.
  static bool Same(std::string_view a, std::string_view b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
  }
  bool operator==(const SeriesKey& o) const {
    return name.size() == o.name.size() && job_type.size() == o.job_type.size() &&
           queue.size() == o.queue.size() && reason.size() == o.reason.size() &&
           failure_class.size() == o.failure_class.size() && Same(name, o.name) &&
           Same(job_type, o.job_type) && Same(queue, o.queue) && Same(reason, o.reason) &&
           Same(failure_class, o.failure_class);
  }
  bool operator<(const SeriesKey& o) const { return Tie() < o.Tie(); }
};

// Hashes the five parts from a sample of each: its length, its first and
// its last eight bytes. Equal keys hash alike (the sample is a function of
// the text), and keys that differ only in the middle of a part merely share
// a bucket, where the full comparison tells them apart. Metric names and
// labels differ in their length or their ends ("..._started_total",
// "..._enqueued_total"), so the table stays spread while a sample costs a
// fixed dozen steps however long the names are: hashing every word was the
// largest cost of a sample on the hot path.
struct SeriesKeyHash {
  static std::uint64_t Step(std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
  }
  // A part shorter than 8 bytes, without a loop: two overlapping 4-byte
  // words from 4 bytes on, else its first, middle and last byte.
  static std::uint64_t Short(const char* p, std::size_t n) {
    if (n >= 4) {
      std::uint32_t a;
      std::uint32_t b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      return (std::uint64_t{a} << 32) | b;
    }
    const auto byte = [&](std::size_t i) { return std::uint64_t{static_cast<unsigned char>(p[i])}; };
    return (byte(0) << 16) | (byte(n / 2) << 8) | byte(n - 1);
  }
  static std::uint64_t Mix(std::uint64_t h, std::string_view s) {
    const char* p = s.data();
    const std::size_t n = s.size();
    h = Step(h, n);  // The length separates the parts: ("ab","") != ("a","b").
    if (n == 0) return h;
    if (n < 8) return Step(h, Short(p, n));
    std::uint64_t first;
    std::uint64_t last;
    std::memcpy(&first, p, 8);
    std::memcpy(&last, p + n - 8, 8);
    return Step(Step(h, first), last);
  }
  std::size_t operator()(const SeriesKey& k) const noexcept {
    std::uint64_t h = 0x243f6a8885a308d3ULL;
    h = Mix(h, k.name);
    h = Mix(h, k.job_type);
    h = Mix(h, k.queue);
    h = Mix(h, k.reason);
    h = Mix(h, k.failure_class);
    return static_cast<std::size_t>(h ^ (h >> 32));
  }
};

// The owned copy of a series' name and labels.
struct SeriesId {
  std::string name, job_type, queue, reason, failure_class;

  explicit SeriesId(const SeriesKey& k)
      : name(k.name),
        job_type(k.job_type),
        queue(k.queue),
        reason(k.reason),
        failure_class(k.failure_class) {}
  SeriesKey Key() const { return SeriesKey{name, job_type, queue, reason, failure_class}; }
};

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

template <typename V>
struct Series {
  explicit Series(const SeriesKey& k) : id(k) {}
  SeriesId id;
  V value{};
};

template <typename V>
using SeriesTable =
    std::unordered_map<SeriesKey, std::unique_ptr<Series<V>>, SeriesKeyHash>;

// Finds the series for `key`, creating it on first sight (the only
// allocation on this path).
template <typename V>
V& FindOrAdd(SeriesTable<V>& table, const SeriesKey& key) {
  auto it = table.find(key);
  if (it == table.end()) {
    auto s = std::make_unique<Series<V>>(key);
    SeriesKey owned = s->id.Key();
    it = table.emplace(owned, std::move(s)).first;
  }
  return it->second->value;
}

constexpr int kStripes = 8;

// Each thread sticks to one stripe, handed out round-robin, so that a few
// worker threads almost never share a lock.
int MyStripe() {
  static std::atomic<unsigned> next{0};
  thread_local int stripe = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kStripes);
  return stripe;
}

}  // namespace

// --- HistogramSnapshot ---

int HistogramSnapshot::BucketOf(double value) {
  // NaN, zero, negatives and tiny values: bucket 0.
  if (!(value >= std::ldexp(1.0, kMinExponent - 1))) return 0;
  if (std::isinf(value)) return kBuckets - 1;
  int exponent = 0;
  double mantissa = std::frexp(value, &exponent);  // value = mantissa * 2^exponent, mantissa in [0.5, 1).
  if (exponent >= kMaxExponent) return kBuckets - 1;
  int sub = static_cast<int>((mantissa - 0.5) * 2 * kSubBuckets);
  sub = std::min(sub, kSubBuckets - 1);
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
  struct alignas(64) Stripe {
    std::mutex mu;
    // Guarded by mu.
    SeriesTable<std::int64_t> counters;
    SeriesTable<HistogramData> histograms;
  };

  std::array<Stripe, kStripes> stripes;

  std::mutex gauges_mu;
  // Guarded by gauges_mu.
  SeriesTable<double> gauges;

  // Calls `f(series)` for every counter / histogram series of every stripe,
  // each stripe under its lock.
  template <typename F>
  void ForEachCounter(F&& f) {
    for (Stripe& s : stripes) {
      std::lock_guard<std::mutex> lock(s.mu);
      for (const auto& [key, series] : s.counters) f(key, series->value);
    }
  }
  template <typename F>
  void ForEachHistogram(F&& f) {
    for (Stripe& s : stripes) {
      std::lock_guard<std::mutex> lock(s.mu);
      for (const auto& [key, series] : s.histograms) f(key, series->value);
    }
  }
};

InMemoryMetricsSink::InMemoryMetricsSink() : impl_(std::make_unique<Impl>()) {}
InMemoryMetricsSink::~InMemoryMetricsSink() = default;

void InMemoryMetricsSink::Increment(std::string_view name, const MetricLabels& labels,
                                    std::int64_t delta) noexcept {
  Impl::Stripe& s = impl_->stripes[MyStripe()];
  try {
    std::lock_guard<std::mutex> lock(s.mu);
    FindOrAdd(s.counters, SeriesKey::Of(name, labels)) += delta;
  } catch (...) {
    // Out of memory for a new series: the sample is dropped (noexcept).
  }
}

void InMemoryMetricsSink::Observe(std::string_view name, const MetricLabels& labels,
                                  double value) noexcept {
  Impl::Stripe& s = impl_->stripes[MyStripe()];
  try {
    std::lock_guard<std::mutex> lock(s.mu);
    FindOrAdd(s.histograms, SeriesKey::Of(name, labels)).Add(value);
  } catch (...) {
  }
}

void InMemoryMetricsSink::SetGauge(std::string_view name, const MetricLabels& labels,
                                   double value) noexcept {
  try {
    std::lock_guard<std::mutex> lock(impl_->gauges_mu);
    FindOrAdd(impl_->gauges, SeriesKey::Of(name, labels)) = value;
  } catch (...) {
  }
}

std::int64_t InMemoryMetricsSink::Counter(std::string_view name, const MetricLabels& labels) const {
  const SeriesKey key = SeriesKey::Of(name, labels);
  std::int64_t total = 0;
  for (Impl::Stripe& s : impl_->stripes) {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.counters.find(key);
    if (it != s.counters.end()) total += it->second->value;
  }
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
  HistogramSnapshot snap;
  for (Impl::Stripe& s : impl_->stripes) {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.histograms.find(key);
    if (it != s.histograms.end()) it->second->value.AddTo(snap);
  }
  return snap;
}

std::optional<double> InMemoryMetricsSink::Gauge(std::string_view name,
                                                 const MetricLabels& labels) const {
  std::lock_guard<std::mutex> lock(impl_->gauges_mu);
  auto it = impl_->gauges.find(SeriesKey::Of(name, labels));
  if (it == impl_->gauges.end()) return std::nullopt;
  return it->second->value;
}

std::vector<CounterSeries> InMemoryMetricsSink::Counters() const {
  // Merge the stripes, then sort by name and labels.
  std::map<SeriesKey, std::int64_t> merged;
  std::vector<std::unique_ptr<SeriesId>> keep;  // Owns the strings `merged` views.
  impl_->ForEachCounter([&](const SeriesKey& key, std::int64_t v) {
    auto it = merged.find(key);
    if (it == merged.end()) {
      keep.push_back(std::make_unique<SeriesId>(key));
      it = merged.emplace(keep.back()->Key(), 0).first;
    }
    it->second += v;
  });
  std::vector<CounterSeries> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) {
    out.push_back(CounterSeries{std::string(k.name), std::string(k.job_type), std::string(k.queue),
                                std::string(k.reason), std::string(k.failure_class), v});
  }
  return out;
}

std::vector<GaugeSeries> InMemoryMetricsSink::Gauges() const {
  std::vector<GaugeSeries> out;
  {
    std::lock_guard<std::mutex> lock(impl_->gauges_mu);
    out.reserve(impl_->gauges.size());
    for (const auto& [k, s] : impl_->gauges) {
      out.push_back(GaugeSeries{std::string(k.name), std::string(k.job_type), std::string(k.queue),
                                std::string(k.reason), std::string(k.failure_class), s->value});
    }
  }
  std::sort(out.begin(), out.end(), [](const GaugeSeries& a, const GaugeSeries& b) {
    return std::tie(a.name, a.job_type, a.queue, a.reason, a.failure_class) <
           std::tie(b.name, b.job_type, b.queue, b.reason, b.failure_class);
  });
  return out;
}

void InMemoryMetricsSink::Reset() {
  for (Impl::Stripe& s : impl_->stripes) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.counters.clear();
    s.histograms.clear();
  }
  std::lock_guard<std::mutex> lock(impl_->gauges_mu);
  impl_->gauges.clear();
}

}  // namespace jobpact
