#include "jobpact/random.h"

#include <algorithm>
#include <random>

#include "src/internal/mutex.h"

namespace jobpact {

RandomSource::~RandomSource() = default;

namespace {

class SeededRandomSource final : public RandomSource {
 public:
  explicit SeededRandomSource(std::uint64_t seed) : engine_(seed) {}
  double NextUnit() override {
    internal::MutexLock l(mu_);
    return std::generate_canonical<double, 53>(engine_) * kBelowOne;
  }

 private:
  // generate_canonical may return exactly 1.0 on some implementations.
  static constexpr double kBelowOne = 1.0 - 1e-16;
  internal::PlainMutex mu_;
  std::mt19937_64 engine_ JOBPACT_GUARDED_BY(mu_);
};

class SequenceRandomSource final : public RandomSource {
 public:
  explicit SequenceRandomSource(std::vector<double> samples) : samples_(std::move(samples)) {
    if (samples_.empty()) samples_.push_back(0.0);
    for (double& s : samples_) s = std::clamp(s, 0.0, 0.9999999999999999);
  }
  double NextUnit() override {
    internal::MutexLock l(mu_);
    double s = samples_[next_];
    next_ = (next_ + 1) % samples_.size();
    return s;
  }

 private:
  internal::PlainMutex mu_;
  std::vector<double> samples_;  // Filled by the constructor, then only read.
  std::size_t next_ JOBPACT_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::shared_ptr<RandomSource> MakeSeededRandomSource(std::uint64_t seed) {
  return std::make_shared<SeededRandomSource>(seed);
}

std::shared_ptr<RandomSource> MakeSequenceRandomSource(std::vector<double> samples) {
  return std::make_shared<SequenceRandomSource>(std::move(samples));
}

}  // namespace jobpact
