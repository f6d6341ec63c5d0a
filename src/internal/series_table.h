// Private: the series table both metrics sinks keep their samples in
// (InMemoryMetricsSink, PrometheusMetricsSink). A series is a metric name
// and its labels; a sample looks its series up by a hash of the six parts
// and a compare, under the lock of the caller's stripe, and allocates only
// for a series never seen before. See jobpact/in_memory/metrics_sink.h for
// the design.
#ifndef JOBPACT_SRC_INTERNAL_SERIES_TABLE_H_
#define JOBPACT_SRC_INTERNAL_SERIES_TABLE_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "jobpact/metrics_sink.h"
#include "src/internal/mutex.h"

// The hot path's helpers are small and called several times per sample:
// inlined, they cost a third of what their calls did.
#if defined(__GNUC__)
#define JOBPACT_SINK_INLINE inline __attribute__((always_inline))
#else
#define JOBPACT_SINK_INLINE inline
#endif

namespace jobpact {
namespace internal {

// A series' identity as views; in a table the views point into the
// series' own strings, in a lookup into the caller's.
struct SeriesKey {
  std::string_view name;
  std::string_view job_type;
  std::string_view queue;
  std::string_view reason;
  std::string_view failure_class;
  std::string_view cache;

  static SeriesKey Of(std::string_view name, const MetricLabels& l) {
    return SeriesKey{name, l.job_type, l.queue, l.reason, l.failure_class, l.cache};
  }
  auto Tie() const { return std::tie(name, job_type, queue, reason, failure_class, cache); }
  // Equal bytes, without an early exit (a compare follows a hash match,
  // so the bytes are almost always equal): 16 bytes per step, then the last
  // 16 (overlapping); two overlapping words from 8 bytes on, from 4 two
  // half-words, below that the first, middle and last byte.
  JOBPACT_SINK_INLINE static bool SameBytes(const char* a, const char* b, std::size_t n) {
    if (n >= 16) {
      std::uint64_t diff = 0;
      for (std::size_t i = 0; i + 16 < n; i += 16) {
        diff |= (Load8(a + i) ^ Load8(b + i)) | (Load8(a + i + 8) ^ Load8(b + i + 8));
      }
      diff |= (Load8(a + n - 16) ^ Load8(b + n - 16)) | (Load8(a + n - 8) ^ Load8(b + n - 8));
      return diff == 0;
    }
    if (n >= 8) return ((Load8(a) ^ Load8(b)) | (Load8(a + n - 8) ^ Load8(b + n - 8))) == 0;
    if (n >= 4) return ((Load4(a) ^ Load4(b)) | (Load4(a + n - 4) ^ Load4(b + n - 4))) == 0;
    if (n == 0) return true;
    return a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1];
  }
  // Sizes first, then the bytes, compared inline: a lookup compares one
  // key per sample, and six calls of memcmp cost more than the bytes.
  JOBPACT_SINK_INLINE bool operator==(const SeriesKey& o) const {
    return name.size() == o.name.size() && job_type.size() == o.job_type.size() &&
           queue.size() == o.queue.size() && reason.size() == o.reason.size() &&
           failure_class.size() == o.failure_class.size() && cache.size() == o.cache.size() &&
           SameBytes(name.data(), o.name.data(), name.size()) &&
           SameBytes(job_type.data(), o.job_type.data(), job_type.size()) &&
           SameBytes(queue.data(), o.queue.data(), queue.size()) &&
           SameBytes(reason.data(), o.reason.data(), reason.size()) &&
           SameBytes(failure_class.data(), o.failure_class.data(), failure_class.size()) &&
           SameBytes(cache.data(), o.cache.data(), cache.size());
  }
  bool operator<(const SeriesKey& o) const { return Tie() < o.Tie(); }

  JOBPACT_SINK_INLINE static std::uint64_t Load8(const char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  JOBPACT_SINK_INLINE static std::uint32_t Load4(const char* p) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
  }
};

// Hashes a key from the six parts' lengths (one word) and, for each part
// that is not empty, a sample of it: its first and last eight bytes. Equal
// keys hash alike (the sample is a function of the text), and keys that
// differ only in the middle of a part merely share a probe sequence, where
// the full comparison tells them apart. Metric names and labels differ in
// their length or their ends ("..._started_total", "..._enqueued_total"),
// so the table stays spread while a sample costs a fixed few steps however
// long the names are: hashing every byte was the largest cost of a sample
// on the hot path. Computed before the stripe's lock is taken.
struct SeriesKeyHash {
  static constexpr std::uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  JOBPACT_SINK_INLINE static std::uint64_t Step(std::uint64_t h, std::uint64_t w) {
    return (h ^ w) * kMul;
  }
  JOBPACT_SINK_INLINE static std::uint64_t Rotl(std::uint64_t w, int r) {
    return (w << r) | (w >> (64 - r));
  }
  // A part of 1 to 7 bytes, without a loop: two overlapping 4-byte words
  // from 4 bytes on, else its first, middle and last byte.
  JOBPACT_SINK_INLINE static std::uint64_t Short(const char* p, std::size_t n) {
    if (n >= 4) {
      return (std::uint64_t{SeriesKey::Load4(p)} << 32) | SeriesKey::Load4(p + n - 4);
    }
    const auto byte = [&](std::size_t i) {
      return std::uint64_t{static_cast<unsigned char>(p[i])};
    };
    return (byte(0) << 16) | (byte(n / 2) << 8) | byte(n - 1);
  }
  JOBPACT_SINK_INLINE static std::uint64_t Sample(std::string_view s) {
    const char* p = s.data();
    const std::size_t n = s.size();
    if (n == 0) return 0;
    if (n < 8) return Short(p, n);
    return SeriesKey::Load8(p) ^ Rotl(SeriesKey::Load8(p + n - 8), 29);
  }
  JOBPACT_SINK_INLINE static std::uint64_t Of(const SeriesKey& k) {
    // The lengths separate the parts: ("ab", "") != ("a", "b").
    std::uint64_t h =
        Step(0x243f6a8885a308d3ULL, k.name.size() ^ (std::uint64_t{k.job_type.size()} << 16) ^
                                        (std::uint64_t{k.queue.size()} << 32) ^
                                        (std::uint64_t{k.reason.size()} << 48) ^
                                        (std::uint64_t{k.failure_class.size()} << 56) ^
                                        (std::uint64_t{k.cache.size()} << 40));
    h = Step(h, Sample(k.name));  // Never empty in practice; Sample copes if so.
    if (!k.job_type.empty()) h = Step(h, Sample(k.job_type));
    if (!k.queue.empty()) h = Step(h, Sample(k.queue));
    if (!k.reason.empty()) h = Step(h, Sample(k.reason));
    if (!k.failure_class.empty()) h = Step(h, Sample(k.failure_class));
    if (!k.cache.empty()) h = Step(h, Sample(k.cache));
    return h ^ (h >> 31);
  }
};

// The owned copy of a series' name and labels.
struct SeriesId {
  std::string name, job_type, queue, reason, failure_class, cache;

  explicit SeriesId(const SeriesKey& k)
      : name(k.name),
        job_type(k.job_type),
        queue(k.queue),
        reason(k.reason),
        failure_class(k.failure_class),
        cache(k.cache) {}
  SeriesKey Key() const { return SeriesKey{name, job_type, queue, reason, failure_class, cache}; }
};

template <typename V>
struct Series {
  explicit Series(const SeriesKey& k) : id(k), key(id.Key()) {}
  SeriesId id;
  SeriesKey key;  // Views of `id` (a Series never moves: it is held by pointer).
  V value{};
};

// The series of one kind in one stripe: an open-addressing table (linear
// probing, a power-of-two size, at most half full) of the series' hashes
// and addresses, so that a lookup is one hashed probe and a compare, with
// no node to chase and no division. Series are owned apart, in creation
// order, and never move. Thread-compatible (each is under a stripe's lock).
template <typename V>
class SeriesTable {
 public:
  // The series for `key` (whose hash is `hash`), or null.
  JOBPACT_SINK_INLINE V* Find(const SeriesKey& key, std::uint64_t hash) const {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.series == nullptr) return nullptr;
      if (s.hash == hash && s.series->key == key) return &s.series->value;
    }
  }

  // Finds the series for `key`, creating it on first sight (the only
  // allocations on this path). May throw std::bad_alloc, leaving the table
  // as it was.
  JOBPACT_SINK_INLINE V& FindOrAdd(const SeriesKey& key, std::uint64_t hash) {
    if (V* v = Find(key, hash)) return *v;
    return Add(key, hash);
  }

  // Calls f(key, value) for every series.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& s : series_) f(s->key, s->value);
  }

  std::size_t size() const { return series_.size(); }

  void Clear() {
    slots_.clear();
    series_.clear();
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    Series<V>* series = nullptr;  // Null: empty.
  };

  // A new series (the first sample of its key).
  V& Add(const SeriesKey& key, std::uint64_t hash) {
    if ((series_.size() + 1) * 2 > slots_.size()) Grow();
    series_.reserve(series_.size() + 1);
    auto s = std::make_unique<Series<V>>(key);
    Series<V>* raw = s.get();
    series_.push_back(std::move(s));  // No throw: room reserved.
    Place(hash, raw);
    return raw->value;
  }

  void Place(std::uint64_t hash, Series<V>* series) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (slots_[i].series != nullptr) i = (i + 1) & mask;
    slots_[i] = Slot{hash, series};
  }

  // Doubles the slots (16 at first) and places every series again.
  void Grow() {
    std::vector<Slot> old(std::max<std::size_t>(16, slots_.size() * 2));
    old.swap(slots_);  // `old` now holds the previous slots.
    for (const Slot& s : old) {
      if (s.series != nullptr) Place(s.hash, s.series);
    }
  }

  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Series<V>>> series_;
};

constexpr int kStripes = 8;

// A stripe's lock. A sample holds it for a few dozen instructions, and in
// practice one thread at a time takes it (each thread sticks to its stripe;
// readers pass through briefly), where std::mutex's lock and unlock cost
// more than the sample itself. A waiter yields its time slice, so a holder
// that was preempted is not spun against. Satisfies Lockable; annotated
// like Mutex, so the analysis checks the stripes too.
class JOBPACT_CAPABILITY("mutex") StripeLock {
 public:
  void lock() noexcept JOBPACT_ACQUIRE() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept JOBPACT_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Each thread sticks to one stripe, handed out round-robin, so that a few
// worker threads almost never share a lock.
inline int MyStripe() {
  static std::atomic<unsigned> next{0};
  thread_local int stripe =
      static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kStripes);
  return stripe;
}

// Series merged over the stripes of a SinkSeries, sorted by name then
// labels; the keys view strings owned by `keep`.
template <typename V>
struct MergedSeries {
  std::map<SeriesKey, V> series;
  std::vector<std::unique_ptr<SeriesId>> keep;

  // The value for `key` (a view of the caller's strings), added on first sight.
  V& At(const SeriesKey& key) {
    auto it = series.find(key);
    if (it == series.end()) {
      keep.push_back(std::make_unique<SeriesId>(key));
      it = series.emplace(keep.back()->Key(), V{}).first;
    }
    return it->second;
  }
};

// A sink's series: counters and histograms in stripes (each thread sticks to
// one, so workers rarely share a lock or a cache line), gauges (rare writes)
// in one table under a mutex. `Histogram` is the sink's own histogram
// value. Thread-safe.
template <typename Histogram>
class SinkSeries {
 public:
  // The sink's Increment / SetGauge. Out of memory for a new series drops
  // the sample (the sinks' methods are noexcept).
  void Increment(std::string_view name, const MetricLabels& labels, std::int64_t delta) noexcept {
    const SeriesKey key = SeriesKey::Of(name, labels);
    const std::uint64_t hash = SeriesKeyHash::Of(key);
    Stripe& s = stripes_[MyStripe()];
    try {
      MutexLock lock(s.mu);
      s.counters.FindOrAdd(key, hash) += delta;
    } catch (...) {
    }
  }
  void SetGauge(std::string_view name, const MetricLabels& labels, double value) noexcept {
    const SeriesKey key = SeriesKey::Of(name, labels);
    const std::uint64_t hash = SeriesKeyHash::Of(key);
    try {
      MutexLock lock(gauges_mu_);
      gauges_.FindOrAdd(key, hash) = value;
    } catch (...) {
    }
  }
  // The sink's Observe: `add(histogram)` records the sample in the series'
  // histogram, under its stripe's lock. `add` may throw std::bad_alloc.
  template <typename Add>
  void Observe(std::string_view name, const MetricLabels& labels, Add&& add) noexcept {
    const SeriesKey key = SeriesKey::Of(name, labels);
    const std::uint64_t hash = SeriesKeyHash::Of(key);
    Stripe& s = stripes_[MyStripe()];
    try {
      MutexLock lock(s.mu);
      add(s.histograms.FindOrAdd(key, hash));
    } catch (...) {
    }
  }

  // Calls f(counters, histograms) for each stripe, under its lock.
  template <typename F>
  void VisitStripes(F&& f) const {
    for (Stripe& s : stripes_) {
      MutexLock lock(s.mu);
      f(s.counters, s.histograms);
    }
  }
  // Calls f(gauges) under the gauges' lock.
  template <typename F>
  void VisitGauges(F&& f) const {
    MutexLock lock(gauges_mu_);
    f(gauges_);
  }

  // Forgets every series.
  void Clear() {
    for (Stripe& s : stripes_) {
      MutexLock lock(s.mu);
      s.counters.Clear();
      s.histograms.Clear();
    }
    MutexLock lock(gauges_mu_);
    gauges_.Clear();
  }

 private:
  struct alignas(64) Stripe {
    StripeLock mu;
    SeriesTable<std::int64_t> counters JOBPACT_GUARDED_BY(mu);
    SeriesTable<Histogram> histograms JOBPACT_GUARDED_BY(mu);
  };
  // Mutable: readers take the locks.
  mutable std::array<Stripe, kStripes> stripes_;
  mutable PlainMutex gauges_mu_;
  SeriesTable<double> gauges_ JOBPACT_GUARDED_BY(gauges_mu_);
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_SERIES_TABLE_H_
