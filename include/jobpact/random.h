// File: jobpact/random.h
//
// RandomSource supplies the uniform samples that jitter (backoff, lock-busy
// requeue delays) is computed from. It is injected, so tests can pin every
// sample and assert exact delays.
//
// Implementations must be safe for concurrent use. Thread-safe.
#ifndef JOBPACT_RANDOM_H_
#define JOBPACT_RANDOM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "jobpact/export.h"

namespace jobpact {

class JOBPACT_EXPORT RandomSource {
 public:
  RandomSource() = default;
  RandomSource(const RandomSource&) = delete;
  RandomSource& operator=(const RandomSource&) = delete;
  virtual ~RandomSource();

  // A uniform sample in [0, 1).
  virtual double NextUnit() = 0;
};

// A 64-bit Mersenne Twister seeded with `seed`, guarded by a mutex. The same
// seed gives the same sequence.
JOBPACT_EXPORT std::shared_ptr<RandomSource> MakeSeededRandomSource(std::uint64_t seed);

// Returns `samples` in order, cycling when exhausted; for tests that need an
// exact jitter value. Each sample is clamped into [0, 1).
// REQUIRES: !samples.empty().
JOBPACT_EXPORT std::shared_ptr<RandomSource> MakeSequenceRandomSource(std::vector<double> samples);

}  // namespace jobpact

#endif  // JOBPACT_RANDOM_H_
