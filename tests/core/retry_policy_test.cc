#include "jobpact/retry_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job_status.h"
#include "jobpact/random.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using Kind = RetryDecision::Kind;

BackoffSpec Spec(BackoffKind kind, JitterKind jitter, Duration base = Seconds(1),
                 double multiplier = 2.0, Duration cap = Seconds(300)) {
  BackoffSpec s;
  s.kind = kind;
  s.jitter = jitter;
  s.base_delay = base;
  s.multiplier = multiplier;
  s.max_delay = cap;
  return s;
}

// The exponential ceiling computed independently of the library, by repeated
// multiplication with an early exit, for attempts small enough not to matter.
Duration ExpectedCeiling(const BackoffSpec& s, int attempt) {
  double ceiling = ToSeconds(s.base_delay);
  for (int i = 1; i < attempt && ceiling < ToSeconds(s.max_delay); ++i) ceiling *= s.multiplier;
  return std::min(Seconds(ceiling), s.max_delay);
}

// --- Names ---------------------------------------------------------------------

TEST(RetryPolicyNamesTest, FailureClassNamesRoundTrip) {
  EXPECT_EQ(FailureClassName(FailureClass::kTransient), "transient");
  EXPECT_EQ(FailureClassName(FailureClass::kPermanent), "permanent");
  EXPECT_EQ(FailureClassName(FailureClass::kUnknown), "unknown");
  for (FailureClass c :
       {FailureClass::kTransient, FailureClass::kPermanent, FailureClass::kUnknown}) {
    Result<FailureClass> parsed = ParseFailureClass(FailureClassName(c));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, c);
  }
}

TEST(RetryPolicyNamesTest, BackoffKindNamesRoundTrip) {
  EXPECT_EQ(BackoffKindName(BackoffKind::kFixed), "fixed");
  EXPECT_EQ(BackoffKindName(BackoffKind::kExponential), "exponential");
  EXPECT_EQ(BackoffKindName(BackoffKind::kDecorrelated), "decorrelated");
  for (BackoffKind k :
       {BackoffKind::kFixed, BackoffKind::kExponential, BackoffKind::kDecorrelated}) {
    Result<BackoffKind> parsed = ParseBackoffKind(BackoffKindName(k));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
}

TEST(RetryPolicyNamesTest, JitterKindNamesRoundTrip) {
  EXPECT_EQ(JitterKindName(JitterKind::kNone), "none");
  EXPECT_EQ(JitterKindName(JitterKind::kFull), "full");
  EXPECT_EQ(JitterKindName(JitterKind::kEqual), "equal");
  EXPECT_EQ(JitterKindName(JitterKind::kDecorrelated), "decorrelated");
  for (JitterKind k :
       {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
    Result<JitterKind> parsed = ParseJitterKind(JitterKindName(k));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
}

TEST(RetryPolicyNamesTest, FailureActionNames) {
  EXPECT_EQ(FailureActionName(FailureAction::kRetry), "retry");
  EXPECT_EQ(FailureActionName(FailureAction::kDeadLetter), "dead_letter");
  EXPECT_EQ(FailureActionName(FailureAction::kFail), "fail");
}

TEST(RetryPolicyNamesTest, ParseErrorsNameTheBadValueAndListAcceptedNames) {
  Status s = ParseFailureClass("flaky").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'flaky'"));
  EXPECT_THAT(s.message(), HasSubstr("transient, permanent, unknown"));

  s = ParseBackoffKind("Exponential").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'Exponential'"));
  EXPECT_THAT(s.message(), HasSubstr("fixed, exponential, decorrelated"));

  s = ParseJitterKind("true").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'true'"));
  EXPECT_THAT(s.message(), HasSubstr("none, full, equal, decorrelated"));
}

// --- Validation ------------------------------------------------------------------

TEST(ValidateTest, DefaultsAreSpec11AndValid) {
  RetryPolicy p;
  EXPECT_EQ(p.max_attempts, 5);
  EXPECT_EQ(p.max_unknown_attempts, 3);
  EXPECT_EQ(p.backoff.kind, BackoffKind::kExponential);
  EXPECT_EQ(p.backoff.base_delay, Seconds(1));
  EXPECT_EQ(p.backoff.multiplier, 2.0);
  EXPECT_EQ(p.backoff.max_delay, Seconds(300));
  EXPECT_EQ(p.backoff.jitter, JitterKind::kFull);
  EXPECT_EQ(p.on_transient, FailureAction::kRetry);
  EXPECT_EQ(p.on_permanent, FailureAction::kDeadLetter);
  EXPECT_EQ(p.on_unknown, FailureAction::kRetry);
  EXPECT_TRUE(ValidateRetryPolicy(p).ok());
  EXPECT_TRUE(ValidateBackoff(p.backoff).ok());
}

void ExpectInvalid(const Status& s, const std::string& fragment) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(fragment));
}

TEST(ValidateTest, BackoffNamesTheBadField) {
  BackoffSpec s;
  s.base_delay = Seconds(-1);
  ExpectInvalid(ValidateBackoff(s), "retry_policy.base_delay_seconds must be >= 0");
  s.base_delay = -Duration(1);  // The smallest negative tick.
  ExpectInvalid(ValidateBackoff(s), "retry_policy.base_delay_seconds must be >= 0");

  s = BackoffSpec{};
  s.max_delay = Millis(500);
  ExpectInvalid(ValidateBackoff(s), "retry_policy.max_delay_seconds must be >= base_delay_seconds");

  s = BackoffSpec{};
  s.multiplier = 0.5;
  ExpectInvalid(ValidateBackoff(s), "retry_policy.multiplier");
  s.multiplier = std::numeric_limits<double>::quiet_NaN();
  ExpectInvalid(ValidateBackoff(s), "retry_policy.multiplier");
  s.multiplier = std::numeric_limits<double>::infinity();
  ExpectInvalid(ValidateBackoff(s), "retry_policy.multiplier");

  s = BackoffSpec{};
  s.jitter = static_cast<JitterKind>(42);
  ExpectInvalid(ValidateBackoff(s), "retry_policy.jitter");
  s = BackoffSpec{};
  s.kind = static_cast<BackoffKind>(42);
  ExpectInvalid(ValidateBackoff(s), "retry_policy.backoff");
}

TEST(ValidateTest, BackoffAcceptsEdgeValues) {
  BackoffSpec s;
  s.multiplier = 1.0;
  s.max_delay = s.base_delay;  // cap == base: a fixed schedule in disguise.
  EXPECT_TRUE(ValidateBackoff(s).ok());
}

TEST(ValidateTest, ZeroBaseDelayIsAnImmediateRetryAndValid) {
  for (BackoffKind kind :
       {BackoffKind::kFixed, BackoffKind::kExponential, BackoffKind::kDecorrelated}) {
    for (JitterKind jitter :
         {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
      for (Duration cap : {Duration::zero(), Seconds(300)}) {
        const BackoffSpec s = Spec(kind, jitter, Duration::zero(), 2.0, cap);
        EXPECT_TRUE(ValidateBackoff(s).ok()) << BackoffKindName(kind) << "/"
                                             << JitterKindName(jitter);
      }
    }
  }
  RetryPolicy p;
  p.backoff.base_delay = Duration::zero();
  EXPECT_TRUE(ValidateRetryPolicy(p).ok());
  PolicyRegistry r;
  EXPECT_TRUE(r.Override("cache.warm", p, "a retry costs nothing; do it at once").ok());
  EXPECT_TRUE(r.SetDefault(p).ok());
}

TEST(ValidateTest, PolicyNamesTheBadField) {
  RetryPolicy p;
  p.max_attempts = 0;
  ExpectInvalid(ValidateRetryPolicy(p), "retry_policy.max_attempts must be >= 1");

  p = RetryPolicy{};
  p.max_unknown_attempts = 0;
  ExpectInvalid(ValidateRetryPolicy(p), "retry_policy.max_unknown_attempts must be >= 1");

  p = RetryPolicy{};
  p.max_unknown_attempts = 6;
  ExpectInvalid(ValidateRetryPolicy(p),
                "retry_policy.max_unknown_attempts must be <= max_attempts");

  p = RetryPolicy{};
  p.backoff.base_delay = Seconds(-1);
  ExpectInvalid(ValidateRetryPolicy(p), "retry_policy.base_delay_seconds");

  p = RetryPolicy{};
  p.on_unknown = static_cast<FailureAction>(9);
  ExpectInvalid(ValidateRetryPolicy(p), "retry_policy.on_unknown");
}

TEST(ValidateTest, PolicyAcceptsUnknownBudgetEqualToTotal) {
  RetryPolicy p;
  p.max_attempts = 1;
  p.max_unknown_attempts = 1;
  EXPECT_TRUE(ValidateRetryPolicy(p).ok());
}

// --- ComputeBackoff: exact values ----------------------------------------------------

TEST(ComputeBackoffTest, PinnedSamplesGiveExactDelays) {
  const BackoffSpec full = Spec(BackoffKind::kExponential, JitterKind::kFull);
  EXPECT_EQ(ComputeBackoff(full, 3, 0.5, Duration{}), Seconds(2));  // 0.5 * 1s * 2^2.
  EXPECT_EQ(ComputeBackoff(full, 1, 0.25, Duration{}), Millis(250));
  EXPECT_EQ(ComputeBackoff(full, 3, 0.0, Duration{}), Duration::zero());

  const BackoffSpec equal = Spec(BackoffKind::kExponential, JitterKind::kEqual);
  EXPECT_EQ(ComputeBackoff(equal, 3, 0.0, Duration{}), Seconds(2));  // 4s/2.
  EXPECT_EQ(ComputeBackoff(equal, 3, 0.5, Duration{}), Seconds(3));  // 2s + 0.5 * 2s.

  const BackoffSpec fixed_full = Spec(BackoffKind::kFixed, JitterKind::kFull);
  EXPECT_EQ(ComputeBackoff(fixed_full, 7, 0.25, Duration{}), Millis(250));
}

TEST(ComputeBackoffTest, ExponentialWithoutJitterDoublesUpToTheCap) {
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kNone);
  const std::vector<double> expected = {1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const int attempt = static_cast<int>(i) + 1;
    EXPECT_EQ(ComputeBackoff(s, attempt, 0.7, Duration{}), Seconds(expected[i]))
        << "attempt " << attempt;
  }
}

TEST(ComputeBackoffTest, ExponentialUsesTheMultiplier) {
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kNone, Millis(100), 3.0);
  EXPECT_EQ(ComputeBackoff(s, 1, 0.0, Duration{}), Millis(100));
  EXPECT_EQ(ComputeBackoff(s, 2, 0.0, Duration{}), Millis(300));
  EXPECT_EQ(ComputeBackoff(s, 4, 0.0, Duration{}), Millis(2700));
}

TEST(ComputeBackoffTest, FixedIsTheBaseAtEveryAttempt) {
  const BackoffSpec s = Spec(BackoffKind::kFixed, JitterKind::kNone, Seconds(7));
  for (int attempt : {1, 2, 5, 100, 10000}) {
    EXPECT_EQ(ComputeBackoff(s, attempt, 0.9, Seconds(100)), Seconds(7)) << attempt;
  }
}

TEST(ComputeBackoffTest, HugeAttemptsSaturateAtTheCap) {
  const BackoffSpec none = Spec(BackoffKind::kExponential, JitterKind::kNone);
  const BackoffSpec full = Spec(BackoffKind::kExponential, JitterKind::kFull);
  for (int attempt : {64, 1000, 10000, 1000000, std::numeric_limits<int>::max()}) {
    EXPECT_EQ(ComputeBackoff(none, attempt, 0.5, Duration{}), Seconds(300)) << attempt;
    EXPECT_EQ(ComputeBackoff(full, attempt, 0.5, Duration{}), Seconds(150)) << attempt;
  }
  const BackoffSpec steep = Spec(BackoffKind::kExponential, JitterKind::kNone, Seconds(1), 1e300);
  EXPECT_EQ(ComputeBackoff(steep, 5, 0.0, Duration{}), Seconds(300));
}

TEST(ComputeBackoffTest, AttemptBelowOneIsTreatedAsTheFirst) {
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kNone);
  EXPECT_EQ(ComputeBackoff(s, 0, 0.0, Duration{}), Seconds(1));
  EXPECT_EQ(ComputeBackoff(s, -5, 0.0, Duration{}), Seconds(1));
  EXPECT_EQ(ComputeBackoff(s, std::numeric_limits<int>::min(), 0.0, Duration{}), Seconds(1));
}

TEST(ComputeBackoffTest, DecorrelatedIsUniformBetweenBaseAndThreeTimesPrevious) {
  const BackoffSpec s = Spec(BackoffKind::kDecorrelated, JitterKind::kNone);
  // First retry: previous counts as base, so U(1s, 3s).
  EXPECT_EQ(ComputeBackoff(s, 1, 0.0, Duration{}), Seconds(1));
  EXPECT_EQ(ComputeBackoff(s, 1, 0.5, Duration{}), Seconds(2));
  // U(1s, 30s).
  EXPECT_EQ(ComputeBackoff(s, 2, 0.0, Seconds(10)), Seconds(1));
  EXPECT_EQ(ComputeBackoff(s, 2, 0.5, Seconds(10)), Seconds(15.5));
  // U(1s, 600s) capped at 300s.
  EXPECT_EQ(ComputeBackoff(s, 3, 0.9, Seconds(200)), Seconds(300));
  // The attempt number plays no part.
  EXPECT_EQ(ComputeBackoff(s, 1000, 0.5, Seconds(10)), Seconds(15.5));
}

TEST(ComputeBackoffTest, DecorrelatedJitterOverridesTheBackoffKind) {
  for (BackoffKind kind : {BackoffKind::kFixed, BackoffKind::kExponential}) {
    const BackoffSpec s = Spec(kind, JitterKind::kDecorrelated);
    EXPECT_EQ(ComputeBackoff(s, 4, 0.5, Seconds(10)), Seconds(15.5)) << BackoffKindName(kind);
    EXPECT_EQ(ComputeBackoff(s, 1, 0.5, Duration{}), Seconds(2)) << BackoffKindName(kind);
  }
}

TEST(ComputeBackoffTest, SamplesOutsideTheUnitIntervalStayInBounds) {
  for (double bad : {-1.0, 1.0, 1.5, 1e300, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    for (JitterKind j :
         {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
      const BackoffSpec s = Spec(BackoffKind::kExponential, j);
      Duration d = ComputeBackoff(s, 4, bad, Seconds(5));
      EXPECT_GE(d, Duration::zero()) << bad;
      EXPECT_LE(d, s.max_delay) << bad;
    }
  }
}

TEST(ComputeBackoffTest, InvalidSpecsStillGiveADelayWithinTheCap) {
  // ValidateBackoff refuses these, but ComputeBackoff runs on worker threads
  // and must stay total.
  BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kNone, Seconds(10), 2.0, Seconds(5));
  EXPECT_EQ(ComputeBackoff(s, 1, 0.5, Duration{}), Seconds(5));
  s = Spec(BackoffKind::kExponential, JitterKind::kFull, Seconds(1), 2.0, Seconds(-5));
  EXPECT_EQ(ComputeBackoff(s, 3, 0.5, Duration{}), Duration::zero());
  s = Spec(BackoffKind::kExponential, JitterKind::kNone, Seconds(1),
           std::numeric_limits<double>::quiet_NaN());
  Duration d = ComputeBackoff(s, 3, 0.5, Duration{});
  EXPECT_GE(d, Duration::zero());
  EXPECT_LE(d, Seconds(300));
  s = Spec(BackoffKind::kDecorrelated, JitterKind::kNone, Seconds(1));
  d = ComputeBackoff(s, 3, 0.99, Duration::max());
  EXPECT_EQ(d, Seconds(300));
}

TEST(ComputeBackoffTest, ZeroBaseGivesZeroForEveryKindAndJitter) {
  const int attempts[] = {std::numeric_limits<int>::min(), 0, 1, 2, 10, 1100, 10000,
                          std::numeric_limits<int>::max()};
  const double samples[] = {0.0, 0.5, 0.999999, std::numeric_limits<double>::quiet_NaN()};
  // A previous delay can be non-zero even under a zero base (a lock_busy
  // wait or a snooze leaves one); it must not seed a decorrelated chain.
  const Duration previous[] = {Duration::zero(), Millis(500), Seconds(300), Duration::max()};
  for (BackoffKind kind :
       {BackoffKind::kFixed, BackoffKind::kExponential, BackoffKind::kDecorrelated}) {
    for (JitterKind jitter :
         {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
      // Multipliers from 1 (a flat ramp) to 1e300 (pow overflows to inf at
      // the second attempt: 0 * inf must not become the cap).
      for (double multiplier : {1.0, 2.0, 1e300}) {
        for (Duration cap : {Duration::zero(), Seconds(1), Seconds(300)}) {
          const BackoffSpec s = Spec(kind, jitter, Duration::zero(), multiplier, cap);
          for (int attempt : attempts) {
            for (double sample : samples) {
              for (Duration prev : previous) {
                ASSERT_EQ(ComputeBackoff(s, attempt, sample, prev), Duration::zero())
                    << BackoffKindName(kind) << "/" << JitterKindName(jitter) << " x"
                    << multiplier << " cap " << ToSeconds(cap) << "s attempt " << attempt
                    << " sample " << sample << " previous " << ToSeconds(prev) << "s";
              }
            }
          }
        }
      }
    }
  }
}

TEST(DecideRetryTest, ZeroBaseRetriesAtOnceUntilTheBudgetIsSpent) {
  RetryPolicy p;
  p.backoff.base_delay = Duration::zero();
  p.backoff.kind = BackoffKind::kDecorrelated;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, attempt, 0.9, Seconds(1));
    EXPECT_EQ(d.kind, Kind::kRetry) << attempt;
    EXPECT_EQ(d.delay, Duration::zero()) << attempt;
  }
  RetryDecision d = DecideRetry(p, FailureClass::kTransient, 5, 0.9, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
}

// --- ComputeBackoff: properties over many samples ------------------------------------

TEST(ComputeBackoffPropertyTest, EveryDelayIsWithinZeroAndTheCap) {
  auto rng = MakeSeededRandomSource(1);
  for (BackoffKind kind :
       {BackoffKind::kFixed, BackoffKind::kExponential, BackoffKind::kDecorrelated}) {
    for (JitterKind jitter :
         {JitterKind::kNone, JitterKind::kFull, JitterKind::kEqual, JitterKind::kDecorrelated}) {
      for (Duration cap : {Seconds(1), Seconds(30), Seconds(300)}) {
        const BackoffSpec s = Spec(kind, jitter, Millis(250), 2.5, cap);
        Duration previous{};
        for (int attempt = 1; attempt <= 300; ++attempt) {
          const Duration d = ComputeBackoff(s, attempt, rng->NextUnit(), previous);
          ASSERT_GE(d, Duration::zero()) << BackoffKindName(kind) << "/" << JitterKindName(jitter);
          ASSERT_LE(d, cap) << BackoffKindName(kind) << "/" << JitterKindName(jitter);
          previous = d;
        }
      }
    }
  }
}

TEST(ComputeBackoffPropertyTest, FullJitterStaysBelowTheCeiling) {
  auto rng = MakeSeededRandomSource(2);
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kFull);
  for (int attempt = 1; attempt <= 40; ++attempt) {
    const Duration ceiling = ExpectedCeiling(s, attempt);
    for (int i = 0; i < 500; ++i) {
      const Duration d = ComputeBackoff(s, attempt, rng->NextUnit(), Duration{});
      ASSERT_GE(d, Duration::zero()) << attempt;
      ASSERT_LE(d, ceiling) << attempt;
    }
  }
}

TEST(ComputeBackoffPropertyTest, FullJitterMeanIsHalfTheCeiling) {
  auto rng = MakeSeededRandomSource(3);
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kFull);
  constexpr int kSamples = 100000;
  constexpr int kAttempt = 4;  // Ceiling 8s.
  double sum = 0;
  for (int i = 0; i < kSamples; ++i)
    sum += ToSeconds(ComputeBackoff(s, kAttempt, rng->NextUnit(), {}));
  const double mean = sum / kSamples;
  // The standard error of the mean of U(0, 8) over 1e5 samples is ~0.007, so
  // 2% (0.08) is over 10 sigma: only a real bias fails this.
  EXPECT_NEAR(mean, 4.0, 4.0 * 0.02);
}

TEST(ComputeBackoffPropertyTest, EqualJitterIsBetweenHalfAndAllOfTheCeiling) {
  auto rng = MakeSeededRandomSource(4);
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kEqual);
  for (int attempt = 1; attempt <= 50; ++attempt) {
    const Duration ceiling = ExpectedCeiling(s, attempt);
    for (int i = 0; i < 500; ++i) {
      const Duration d = ComputeBackoff(s, attempt, rng->NextUnit(), Duration{});
      ASSERT_GE(d, ceiling / 2) << attempt;
      ASSERT_LE(d, ceiling) << attempt;
    }
  }
}

TEST(ComputeBackoffPropertyTest, DecorrelatedChainsStayBetweenBaseAndCap) {
  auto rng = MakeSeededRandomSource(5);
  const BackoffSpec s =
      Spec(BackoffKind::kDecorrelated, JitterKind::kNone, Millis(100), 2.0, Seconds(60));
  Duration longest{};
  for (int chain = 0; chain < 500; ++chain) {
    Duration previous{};
    for (int attempt = 1; attempt <= 200; ++attempt) {
      const Duration d = ComputeBackoff(s, attempt, rng->NextUnit(), previous);
      ASSERT_GE(d, s.base_delay) << "chain " << chain << " attempt " << attempt;
      ASSERT_LE(d, s.max_delay) << "chain " << chain << " attempt " << attempt;
      // Never more than three times the previous delay (or 3 * base at first).
      ASSERT_LE(d, std::max(previous, s.base_delay) * 3) << "chain " << chain;
      longest = std::max(longest, d);
      previous = d;
    }
  }
  // The chains do grow: some delay got within 10% of the cap.
  EXPECT_GE(longest, s.max_delay * 9 / 10);
}

TEST(ComputeBackoffPropertyTest, NoJitterIsMonotonicInTheAttempt) {
  const BackoffSpec s = Spec(BackoffKind::kExponential, JitterKind::kNone, Millis(10), 1.7);
  Duration last{};
  for (int attempt = 1; attempt <= 1000; ++attempt) {
    const Duration d = ComputeBackoff(s, attempt, 0.3, Duration{});
    ASSERT_GE(d, last) << attempt;
    last = d;
  }
  EXPECT_EQ(last, s.max_delay);
}

// --- DecideRetry --------------------------------------------------------------------

TEST(DecideRetryTest, TransientRetriesWithBackoffUntilTheBudgetIsSpent) {
  RetryPolicy p;
  p.backoff.jitter = JitterKind::kNone;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kRetry) << attempt;
    EXPECT_EQ(d.reason, reason::kTransientError);
    EXPECT_EQ(d.delay, Seconds(std::pow(2.0, attempt - 1))) << attempt;
  }
  for (int attempt : {5, 6, 100}) {
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kDeadLetter) << attempt;
    EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
  }
}

TEST(DecideRetryTest, RetryDelayIsComputeBackoffOfTheSameInputs) {
  RetryPolicy p;
  p.backoff.kind = BackoffKind::kDecorrelated;
  for (double sample : {0.0, 0.3, 0.99}) {
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, 2, sample, Seconds(4));
    ASSERT_EQ(d.kind, Kind::kRetry);
    EXPECT_EQ(d.delay, ComputeBackoff(p.backoff, 2, sample, Seconds(4)));
  }
  // Pinned: U(1s, 12s) at 0.5.
  EXPECT_EQ(DecideRetry(p, FailureClass::kTransient, 2, 0.5, Seconds(4)).delay, Seconds(6.5));
}

TEST(DecideRetryTest, SingleAttemptPolicyNeverRetries) {
  RetryPolicy p;
  p.max_attempts = 1;
  p.max_unknown_attempts = 1;
  RetryDecision d = DecideRetry(p, FailureClass::kTransient, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
  d = DecideRetry(p, FailureClass::kUnknown, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
}

TEST(DecideRetryTest, TransientWithANonRetryActionTakesItAtOnce) {
  RetryPolicy p;
  p.on_transient = FailureAction::kDeadLetter;
  for (int attempt : {1, 5, 9}) {
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kDeadLetter) << attempt;
    EXPECT_EQ(d.reason, reason::kTransientError) << attempt;
  }
  p.on_transient = FailureAction::kFail;
  RetryDecision d = DecideRetry(p, FailureClass::kTransient, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_EQ(d.reason, reason::kTransientError);
}

TEST(DecideRetryTest, PermanentIsDeadLetteredAtOnceByDefault) {
  RetryPolicy p;
  for (int attempt : {1, 2, 5}) {
    RetryDecision d = DecideRetry(p, FailureClass::kPermanent, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kDeadLetter) << attempt;
    EXPECT_EQ(d.reason, reason::kPermanentError) << attempt;
  }
}

TEST(DecideRetryTest, PermanentCanFailInsteadOfDeadLettering) {
  RetryPolicy p;
  p.on_permanent = FailureAction::kFail;
  RetryDecision d = DecideRetry(p, FailureClass::kPermanent, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_EQ(d.reason, reason::kPermanentError);
}

TEST(DecideRetryTest, PermanentSetToRetryUsesTheFullBudget) {
  RetryPolicy p;
  p.on_permanent = FailureAction::kRetry;
  p.backoff.jitter = JitterKind::kNone;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    RetryDecision d = DecideRetry(p, FailureClass::kPermanent, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kRetry) << attempt;
    EXPECT_EQ(d.reason, reason::kPermanentError);
    EXPECT_EQ(d.delay, ComputeBackoff(p.backoff, attempt, 0.5, Duration{}));
  }
  RetryDecision d = DecideRetry(p, FailureClass::kPermanent, 5, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
}

TEST(DecideRetryTest, UnknownRetriesOnTheSmallerBudgetThenIsNonRetryable) {
  RetryPolicy p;  // 5 attempts, 3 while unknown.
  for (int attempt = 1; attempt <= 2; ++attempt) {
    RetryDecision d = DecideRetry(p, FailureClass::kUnknown, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kRetry) << attempt;
    EXPECT_EQ(d.reason, reason::kUnknownError);
    EXPECT_EQ(d.delay, ComputeBackoff(p.backoff, attempt, 0.5, Duration{}));
  }
  for (int attempt : {3, 4}) {
    RetryDecision d = DecideRetry(p, FailureClass::kUnknown, attempt, 0.5, Duration{});
    EXPECT_EQ(d.kind, Kind::kDeadLetter) << attempt;
    EXPECT_EQ(d.reason, reason::kUnknownNonRetryable) << attempt;
  }
  // The whole budget spent takes precedence over the unknown one.
  RetryDecision d = DecideRetry(p, FailureClass::kUnknown, 5, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
}

TEST(DecideRetryTest, UnknownBudgetEqualToTotalReportsMaxAttempts) {
  RetryPolicy p;
  p.max_attempts = 3;
  p.max_unknown_attempts = 3;
  EXPECT_EQ(DecideRetry(p, FailureClass::kUnknown, 2, 0.5, Duration{}).kind, Kind::kRetry);
  RetryDecision d = DecideRetry(p, FailureClass::kUnknown, 3, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
}

TEST(DecideRetryTest, UnknownBudgetIsTheSmallerOfBothBudgets) {
  // The shape the runner builds from an envelope's max_attempts: not a
  // policy ValidateRetryPolicy accepts, but one DecideRetry must still obey.
  RetryPolicy p;  // max_unknown_attempts = 3.
  p.max_attempts = 2;
  ASSERT_FALSE(ValidateRetryPolicy(p).ok());
  EXPECT_EQ(DecideRetry(p, FailureClass::kUnknown, 1, 0.5, Duration{}).kind, Kind::kRetry);
  RetryDecision d = DecideRetry(p, FailureClass::kUnknown, 2, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);  // Both spent: the whole budget says so.

  p.max_attempts = 10;  // A larger whole budget does not raise the unknown one.
  EXPECT_EQ(DecideRetry(p, FailureClass::kUnknown, 2, 0.5, Duration{}).kind, Kind::kRetry);
  d = DecideRetry(p, FailureClass::kUnknown, 3, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kUnknownNonRetryable);
}

TEST(DecideRetryTest, TransientIsNotLimitedByTheUnknownBudget) {
  RetryPolicy p;  // max_unknown_attempts = 3.
  RetryDecision d = DecideRetry(p, FailureClass::kTransient, 3, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kRetry);
  d = DecideRetry(p, FailureClass::kTransient, 4, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kRetry);
}

TEST(DecideRetryTest, UnknownWithANonRetryActionTakesItAtOnce) {
  RetryPolicy p;
  p.on_unknown = FailureAction::kDeadLetter;
  RetryDecision d = DecideRetry(p, FailureClass::kUnknown, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kDeadLetter);
  EXPECT_EQ(d.reason, reason::kUnknownError);
  p.on_unknown = FailureAction::kFail;
  d = DecideRetry(p, FailureClass::kUnknown, 1, 0.5, Duration{});
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_EQ(d.reason, reason::kUnknownError);
}

TEST(DecideRetryTest, AlwaysTransientJobMakesExactlyMaxAttempts) {
  // Turns the crank the way the runner does: attempt, fail, decide, repeat.
  auto rng = MakeSeededRandomSource(6);
  RetryPolicy p;
  p.max_attempts = 7;
  int attempts = 0;
  Duration previous{};
  Duration total{};
  for (int attempt = 1;; ++attempt) {
    ++attempts;
    RetryDecision d = DecideRetry(p, FailureClass::kTransient, attempt, rng->NextUnit(), previous);
    if (d.kind != Kind::kRetry) {
      EXPECT_EQ(d.reason, reason::kMaxAttemptsExceeded);
      break;
    }
    ASSERT_LT(attempts, 100) << "never stopped";
    total += d.delay;
    previous = d.delay;
  }
  EXPECT_EQ(attempts, 7);
  // Full jitter: at most the sum of the ceilings 1+2+...+32 = 63s.
  EXPECT_LE(total, Seconds(63));
}

// --- PolicyRegistry ----------------------------------------------------------------

RetryPolicy SlowWarehousePolicy() {
  RetryPolicy p;
  p.max_attempts = 8;
  p.max_unknown_attempts = 4;
  p.backoff.base_delay = Seconds(2);
  p.backoff.max_delay = Seconds(600);
  p.backoff.multiplier = 3.0;
  p.backoff.jitter = JitterKind::kEqual;
  return p;
}

TEST(PolicyRegistryTest, DefaultIsTheSpec11Policy) {
  PolicyRegistry r;
  RetryPolicy d = r.Default();
  EXPECT_EQ(d.max_attempts, 5);
  EXPECT_EQ(d.max_unknown_attempts, 3);
  EXPECT_EQ(r.For("anything").max_attempts, 5);
  ASSERT_EQ(r.Entries().size(), 1u);
  EXPECT_EQ(r.Entries()[0].job_type, "");
}

TEST(PolicyRegistryTest, ConstructorTakesTheGlobalDefault) {
  RetryPolicy p;
  p.max_attempts = 9;
  PolicyRegistry r(p);
  EXPECT_EQ(r.Default().max_attempts, 9);
  EXPECT_EQ(r.For("x").max_attempts, 9);
}

TEST(PolicyRegistryTest, OverrideAppliesOnlyToItsJobType) {
  PolicyRegistry r;
  ASSERT_TRUE(r.Override("report.build", SlowWarehousePolicy(), "slow warehouse; see RB-12").ok());
  EXPECT_EQ(r.For("report.build").max_attempts, 8);
  EXPECT_EQ(r.For("report.build").backoff.jitter, JitterKind::kEqual);
  EXPECT_EQ(r.For("invoice.generate").max_attempts, 5);
  EXPECT_EQ(r.For("report").max_attempts, 5);  // No prefix matching.
  EXPECT_EQ(r.Default().max_attempts, 5);
}

TEST(PolicyRegistryTest, OverrideReplacesAnEarlierOverride) {
  PolicyRegistry r;
  ASSERT_TRUE(r.Override("a", SlowWarehousePolicy(), "first").ok());
  RetryPolicy p;
  p.max_attempts = 2;
  p.max_unknown_attempts = 1;
  ASSERT_TRUE(r.Override("a", p, "second").ok());
  EXPECT_EQ(r.For("a").max_attempts, 2);
  std::vector<PolicyRegistry::Entry> entries = r.Entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].reason, "second");
}

TEST(PolicyRegistryTest, OverrideRefusesAMissingReason) {
  PolicyRegistry r;
  for (std::string_view blank : {"", " ", " \t\n "}) {
    Status s = r.Override("report.build", SlowWarehousePolicy(), blank);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("reason"));
    EXPECT_THAT(s.message(), HasSubstr("report.build"));
  }
  EXPECT_EQ(r.For("report.build").max_attempts, 5);
  EXPECT_EQ(r.Entries().size(), 1u);
}

TEST(PolicyRegistryTest, OverrideRefusesAnEmptyJobType) {
  PolicyRegistry r;
  for (std::string_view blank : {"", "  "}) {
    Status s = r.Override(blank, SlowWarehousePolicy(), "because");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("job_type"));
  }
  EXPECT_EQ(r.Entries().size(), 1u);
}

TEST(PolicyRegistryTest, OverrideRefusesAnInvalidPolicyNamingTheField) {
  PolicyRegistry r;
  RetryPolicy p;
  p.backoff.multiplier = 0.1;
  Status s = r.Override("report.build", p, "because");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("report.build"));
  EXPECT_THAT(s.message(), HasSubstr("retry_policy.multiplier"));
  EXPECT_EQ(r.Entries().size(), 1u);
}

TEST(PolicyRegistryTest, OverrideRefusesAnUnknownBudgetAboveMaxAttempts) {
  PolicyRegistry r;
  RetryPolicy p = r.Default();  // max_unknown_attempts 3.
  p.max_attempts = 2;
  Status s = r.Override("cache.warm", p, "best effort");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("override of 'cache.warm'"));
  EXPECT_THAT(s.message(),
              HasSubstr("retry_policy.max_unknown_attempts must be <= max_attempts (got 3 > 2)"));
  // The error says how to fix it, not only what is wrong.
  EXPECT_THAT(s.message(), HasSubstr("set max_unknown_attempts to at most 2"));
  EXPECT_EQ(r.For("cache.warm").max_attempts, 5);  // Not applied.

  s = r.SetDefault(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("set max_unknown_attempts to at most 2"));

  p.max_unknown_attempts = 2;
  EXPECT_TRUE(r.Override("cache.warm", p, "best effort").ok());
}

TEST(PolicyRegistryTest, SetDefaultValidatesAndApplies) {
  PolicyRegistry r;
  ASSERT_TRUE(r.Override("a", SlowWarehousePolicy(), "reason").ok());
  RetryPolicy bad;
  bad.max_attempts = 0;
  Status s = r.SetDefault(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("retry_policy.max_attempts"));
  EXPECT_EQ(r.Default().max_attempts, 5);

  RetryPolicy good;
  good.max_attempts = 10;
  ASSERT_TRUE(r.SetDefault(good).ok());
  EXPECT_EQ(r.Default().max_attempts, 10);
  EXPECT_EQ(r.For("b").max_attempts, 10);
  EXPECT_EQ(r.For("a").max_attempts, 8);  // Overrides are kept.
}

TEST(PolicyRegistryTest, EntriesListTheDefaultFirstThenOverridesSorted) {
  PolicyRegistry r;
  ASSERT_TRUE(r.Override("zeta", SlowWarehousePolicy(), "z").ok());
  ASSERT_TRUE(r.Override("alpha", SlowWarehousePolicy(), "a").ok());
  ASSERT_TRUE(r.Override("mid", SlowWarehousePolicy(), "m").ok());
  std::vector<PolicyRegistry::Entry> entries = r.Entries();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].job_type, "");
  EXPECT_EQ(entries[1].job_type, "alpha");
  EXPECT_EQ(entries[2].job_type, "mid");
  EXPECT_EQ(entries[3].job_type, "zeta");
  EXPECT_EQ(entries[3].reason, "z");
  EXPECT_EQ(entries[3].policy.max_attempts, 8);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(PolicyRegistryTest, ToTablePrintsEveryEntryWithItsReasonAndNumbers) {
  PolicyRegistry r;
  ASSERT_TRUE(
      r.Override("report.build", SlowWarehousePolicy(), "reports hit a slow warehouse; see RB-12")
          .ok());
  RetryPolicy fast;
  fast.max_attempts = 2;
  fast.max_unknown_attempts = 1;
  fast.backoff.kind = BackoffKind::kFixed;
  fast.backoff.base_delay = Millis(250);
  fast.backoff.jitter = JitterKind::kNone;
  fast.on_permanent = FailureAction::kFail;
  ASSERT_TRUE(r.Override("cache.warm", fast, "best effort; a stale cache is fine").ok());

  const std::string table = r.ToTable();
  const std::vector<std::string> lines = Lines(table);
  // Header, rule, default, two overrides (sorted: cache.warm before report.build).
  ASSERT_EQ(lines.size(), 5u) << table;
  EXPECT_THAT(lines[0], HasSubstr("job type"));
  EXPECT_THAT(lines[0], HasSubstr("reason"));
  EXPECT_EQ(lines[2].rfind("(default)", 0), 0u) << table;
  EXPECT_THAT(lines[2], HasSubstr("exponential"));
  EXPECT_THAT(lines[2], HasSubstr("300s"));

  EXPECT_EQ(lines[3].rfind("cache.warm", 0), 0u) << table;
  EXPECT_THAT(lines[3], HasSubstr(" 2 "));
  EXPECT_THAT(lines[3], HasSubstr("fixed"));
  EXPECT_THAT(lines[3], HasSubstr("0.25s"));
  EXPECT_THAT(lines[3], HasSubstr("fail"));
  EXPECT_THAT(lines[3], HasSubstr("best effort; a stale cache is fine"));

  EXPECT_EQ(lines[4].rfind("report.build", 0), 0u) << table;
  EXPECT_THAT(lines[4], HasSubstr(" 8 "));
  EXPECT_THAT(lines[4], HasSubstr(" 4 "));
  EXPECT_THAT(lines[4], HasSubstr("2s"));
  EXPECT_THAT(lines[4], HasSubstr(" 3 "));
  EXPECT_THAT(lines[4], HasSubstr("600s"));
  EXPECT_THAT(lines[4], HasSubstr("equal"));
  EXPECT_THAT(lines[4], HasSubstr("reports hit a slow warehouse; see RB-12"));

  // Fixed width: the reason column starts at the same offset on every row.
  const std::size_t reason_col = lines[0].find("reason");
  ASSERT_NE(reason_col, std::string::npos);
  EXPECT_EQ(lines[3].find("best effort"), reason_col) << table;
  EXPECT_EQ(lines[4].find("reports hit"), reason_col) << table;
  const std::size_t jitter_col = lines[0].find("jitter");
  EXPECT_EQ(lines[3].find("none", jitter_col), jitter_col) << table;
  EXPECT_EQ(lines[4].find("equal", jitter_col), jitter_col) << table;
}

TEST(PolicyRegistryTest, ConcurrentReadsAndOverridesAreSafe) {
  // Run under TSan in CI; here it also checks readers only ever see a whole
  // policy (the default or one that was written), never a torn one.
  PolicyRegistry r;
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<bool> torn{false};
  auto reader = [&] {
    do {
      RetryPolicy p = r.For("hot.type");
      // Writers keep max_unknown_attempts == max_attempts - 1.
      if (p.max_attempts != 5 && p.max_unknown_attempts != p.max_attempts - 1) torn = true;
      (void)r.Entries();
      reads.fetch_add(1);
    } while (!stop.load());
  };
  auto writer = [&](int id) {
    for (int i = 0; i < 300; ++i) {
      RetryPolicy p;
      p.max_attempts = 10 + (i % 20);
      p.max_unknown_attempts = p.max_attempts - 1;
      ASSERT_TRUE(r.Override(i % 2 == 0 ? "hot.type" : "other." + std::to_string(id), p,
                             "load test " + std::to_string(i))
                      .ok());
      if (i % 50 == 0) {
        ASSERT_TRUE(r.SetDefault(RetryPolicy{}).ok());
      }
      (void)r.ToTable();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(reader);
  threads.emplace_back(reader);
  threads.emplace_back(writer, 1);
  threads.emplace_back(writer, 2);
  threads[2].join();
  threads[3].join();
  stop = true;
  threads[0].join();
  threads[1].join();
  EXPECT_FALSE(torn.load());
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(r.Entries().size(), 4u);  // default, hot.type, other.1, other.2.
}

}  // namespace
}  // namespace jobpact
