// File: src/internal/ulid.h
//
// ULID generation (https://github.com/ulid/spec) in its monotonic mode, for
// job ids. A ULID is 128 bits: a 48-bit Unix time in milliseconds followed by
// 80 random bits, written as 26 Crockford base32 characters, so that the text
// order is the time order.
//
// Monotonic mode: when the clock has not moved past the last id's
// millisecond (same millisecond, or the clock stepped backwards), the next id
// keeps that millisecond and increments the random part by one. Ids from one
// generator are therefore strictly increasing whatever the clock does.
//
// NewJobId (src/core/job.cc) uses one process-wide generator; tests build
// their own so that their time stamps do not depend on other tests.
#ifndef JOBPACT_SRC_INTERNAL_ULID_H_
#define JOBPACT_SRC_INTERNAL_ULID_H_

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "jobpact/clock.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace internal {

inline constexpr char kCrockfordAlphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
inline constexpr std::size_t kUlidLength = 26;
inline constexpr std::uint64_t kUlidMaxMillis = (std::uint64_t{1} << 48) - 1;

// Thread-safe.
class UlidGenerator {
 public:
  // Seeded from std::random_device, and reseeded after fork() so that a
  // forked worker does not repeat its parent's sequence.
  UlidGenerator() : deterministic_(false) {
    WatchForks();
    MutexLock lock(mu_);  // Not shared yet: only for the analysis, once.
    Reseed();
  }
  // A fixed seed, for tests that want a reproducible random part. Not
  // reseeded after fork().
  explicit UlidGenerator(std::uint64_t seed) : engine_(seed), deterministic_(true) {}

  UlidGenerator(const UlidGenerator&) = delete;
  UlidGenerator& operator=(const UlidGenerator&) = delete;

  // The next ULID for time `now`; greater than every id this generator
  // returned before. Times before 1970 count as 0; times past the 48-bit
  // range (year 10889) as its maximum.
  std::string Next(TimePoint now) {
    std::string out(kUlidLength, '0');
    Write(now, out.data());
    return out;
  }

  // The same, appended to `*out` (no string of its own: NewJobId builds
  // "job_" + ULID in one allocation).
  void AppendTo(TimePoint now, std::string* out) {
    const std::size_t at = out->size();
    out->resize(at + kUlidLength);
    Write(now, out->data() + at);
  }

 private:
  // Writes the next ULID's 26 characters at `out`.
  void Write(TimePoint now, char* out) {
    std::uint64_t ms = ClampMillis(now);
    std::uint64_t hi;  // 48-bit time << 16 | top 16 random bits.
    std::uint64_t lo;  // Low 64 random bits.
    {
      MutexLock lock(mu_);
      // A fork since the last seed (a relaxed load, not a getpid() system
      // call per id): the child would otherwise repeat the parent's ids.
      if (!deterministic_ && ForkCount().load(std::memory_order_relaxed) != forks_seen_) Reseed();
      if (has_last_ && ms <= last_ms_) {
        ms = last_ms_;
        // Increment the 80-bit random part. Overflow (2^80 ids in one
        // millisecond) cannot happen in practice; should it, moving to the
        // next millisecond keeps the order, where the spec would fail.
        ++rand_lo_;
        if (rand_lo_ == 0) rand_hi_ = (rand_hi_ + 1) & 0xFFFF;
        if (rand_lo_ == 0 && rand_hi_ == 0) {
          if (ms < kUlidMaxMillis) ++ms;
          FreshRandom();
        }
      } else {
        FreshRandom();
      }
      has_last_ = true;
      last_ms_ = ms;
      hi = (ms << 16) | rand_hi_;
      lo = rand_lo_;
    }
    // 26 characters of 5 bits hold 130 bits: the first carries the top 3.
    for (std::size_t i = kUlidLength; i-- > 0;) {
      out[i] = kCrockfordAlphabet[lo & 0x1F];
      lo = (lo >> 5) | (hi << 59);
      hi >>= 5;
    }
  }

  // Forks of this process so far, counted in the child by a pthread_atfork
  // handler installed once, by the first seeded generator.
  static std::atomic<unsigned>& ForkCount() {
    static std::atomic<unsigned> forks{0};
    return forks;
  }
  static void WatchForks() {
    static const bool installed = [] {
      ::pthread_atfork(nullptr, nullptr,
                       [] { ForkCount().fetch_add(1, std::memory_order_relaxed); });
      return true;
    }();
    (void)installed;
  }
  static std::uint64_t ClampMillis(TimePoint now) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    if (ms < 0) return 0;
    return static_cast<std::uint64_t>(ms) > kUlidMaxMillis ? kUlidMaxMillis
                                                            : static_cast<std::uint64_t>(ms);
  }

  void Reseed() JOBPACT_REQUIRES(mu_) {
    std::random_device device;
    std::seed_seq seq{device(), device(), device(), device(), device(), device()};
    engine_.seed(seq);
    forks_seen_ = ForkCount().load(std::memory_order_relaxed);
  }
  void FreshRandom() JOBPACT_REQUIRES(mu_) {
    rand_lo_ = engine_();
    rand_hi_ = engine_() & 0xFFFF;
  }

  PlainMutex mu_;
  std::mt19937_64 engine_ JOBPACT_GUARDED_BY(mu_);
  const bool deterministic_;  // Immutable after construction.
  unsigned forks_seen_ JOBPACT_GUARDED_BY(mu_) = 0;  // ForkCount() at the last seed.
  bool has_last_ JOBPACT_GUARDED_BY(mu_) = false;
  std::uint64_t last_ms_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::uint64_t rand_hi_ JOBPACT_GUARDED_BY(mu_) = 0;  // 16 bits used.
  std::uint64_t rand_lo_ JOBPACT_GUARDED_BY(mu_) = 0;
};

// The millisecond time stamp encoded in the first 10 characters of `ulid`,
// or nullopt if it is not a 26-character upper-case Crockford base32 string.
inline std::optional<std::uint64_t> UlidMillis(std::string_view ulid) {
  if (ulid.size() != kUlidLength || ulid[0] > '7') return std::nullopt;
  std::uint64_t ms = 0;
  for (std::size_t i = 0; i < kUlidLength; ++i) {
    const std::string_view alphabet(kCrockfordAlphabet, 32);
    const std::size_t digit = alphabet.find(ulid[i]);
    if (digit == std::string_view::npos) return std::nullopt;
    if (i < 10) ms = (ms << 5) | digit;
  }
  return ms;
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_ULID_H_
