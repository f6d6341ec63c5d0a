#include "jobpact/circuit_breaker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::UnorderedElementsAre;
using State = CircuitState;

// A recorded state change, compared as "from->to".
std::string Arrow(const CircuitStateChange& c) {
  return std::string(CircuitStateName(c.from)) + "->" + std::string(CircuitStateName(c.to));
}

class CircuitBreakerTest : public ::testing::Test {
 protected:
  std::unique_ptr<CircuitBreaker> Make(CircuitBreakerOptions options = {}) {
    if (!options.on_state_change) {
      options.on_state_change = [this](const CircuitStateChange& c) {
        std::lock_guard<std::mutex> lock(changes_mu_);
        changes_.push_back(c);
      };
    }
    Result<std::unique_ptr<CircuitBreaker>> b =
        CircuitBreaker::Create("payments", std::move(options), clock_);
    EXPECT_TRUE(b.ok()) << b.status();
    return std::move(b).value();
  }
  static void Succeed(CircuitBreaker& b, int n) {
    for (int i = 0; i < n; ++i) b.RecordSuccess();
  }
  static void Fail(CircuitBreaker& b, int n) {
    for (int i = 0; i < n; ++i) b.RecordFailure();
  }
  // Opens `b` (default options) with 20 failures at the current time.
  void Open(CircuitBreaker& b) {
    Fail(b, 20);
    ASSERT_EQ(b.state(), State::kOpen);
  }
  std::vector<std::string> Arrows() {
    std::lock_guard<std::mutex> lock(changes_mu_);
    std::vector<std::string> out;
    for (const CircuitStateChange& c : changes_) out.push_back(Arrow(c));
    return out;
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  const TimePoint t0_ = clock_->Now();
  std::mutex changes_mu_;
  std::vector<CircuitStateChange> changes_;
};

// --- Names and options -----------------------------------------------------------

TEST_F(CircuitBreakerTest, StateNames) {
  EXPECT_EQ(CircuitStateName(State::kClosed), "closed");
  EXPECT_EQ(CircuitStateName(State::kOpen), "open");
  EXPECT_EQ(CircuitStateName(State::kHalfOpen), "half_open");
}

TEST_F(CircuitBreakerTest, DefaultsAreSpec11) {
  CircuitBreakerOptions o;
  EXPECT_EQ(o.window_size, 100);
  EXPECT_EQ(o.minimum_calls, 20);
  EXPECT_DOUBLE_EQ(o.failure_rate_threshold, 0.5);
  EXPECT_EQ(o.open_duration, Seconds(60));
  EXPECT_EQ(o.half_open_calls, 10);
  EXPECT_EQ(o.half_open_trial_timeout, Seconds(60));
  EXPECT_TRUE(ValidateCircuitBreakerOptions(o).ok());
}

TEST_F(CircuitBreakerTest, RejectsBadOptionsNamingTheField) {
  struct Case {
    const char* field;
    void (*mutate)(CircuitBreakerOptions&);
  };
  const Case cases[] = {
      {"window_size", [](CircuitBreakerOptions& o) { o.window_size = 0; }},
      {"minimum_calls", [](CircuitBreakerOptions& o) { o.minimum_calls = 0; }},
      {"failure_rate_threshold", [](CircuitBreakerOptions& o) { o.failure_rate_threshold = 0; }},
      {"failure_rate_threshold", [](CircuitBreakerOptions& o) { o.failure_rate_threshold = 1.5; }},
      {"open_duration", [](CircuitBreakerOptions& o) { o.open_duration = Duration::zero(); }},
      {"half_open_calls", [](CircuitBreakerOptions& o) { o.half_open_calls = 0; }},
      {"half_open_busy_delay",
       [](CircuitBreakerOptions& o) { o.half_open_busy_delay = -Seconds(1); }},
      {"half_open_trial_timeout",
       [](CircuitBreakerOptions& o) { o.half_open_trial_timeout = Duration::zero(); }},
  };
  for (const Case& c : cases) {
    CircuitBreakerOptions o;
    c.mutate(o);
    Status s = ValidateCircuitBreakerOptions(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
    EXPECT_EQ(CircuitBreaker::Create("d", o, clock_).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(CircuitBreakers::Create(o, clock_).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(CircuitBreakerTest, NullClockMeansSystemClock) {
  Result<std::unique_ptr<CircuitBreaker>> b = CircuitBreaker::Create("db");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->dependency(), "db");
  EXPECT_EQ((*b)->state(), State::kClosed);
  EXPECT_TRUE((*b)->TryAcquire());
}

// --- Closed ----------------------------------------------------------------------

TEST_F(CircuitBreakerTest, StaysClosedBelowMinimumCalls) {
  auto b = Make();
  Fail(*b, 19);  // 100% failures, but only 19 calls.
  EXPECT_EQ(b->state(), State::kClosed);
  EXPECT_TRUE(b->TryAcquire());
  CircuitBreakerSnapshot s = b->Snapshot();
  EXPECT_EQ(s.calls, 19);
  EXPECT_EQ(s.failures, 19);
  EXPECT_DOUBLE_EQ(s.failure_rate, 1.0);
  b->RecordFailure();  // The 20th.
  EXPECT_EQ(b->state(), State::kOpen);
  EXPECT_THAT(Arrows(), ElementsAre("closed->open"));
}

TEST_F(CircuitBreakerTest, OpensAtExactlyFiftyPercentOverTwentyCalls) {
  auto b = Make();
  Succeed(*b, 10);
  Fail(*b, 9);
  EXPECT_EQ(b->state(), State::kClosed);  // 19 calls.
  b->RecordFailure();                     // 10 of 20 = 50%.
  EXPECT_EQ(b->state(), State::kOpen);
  ASSERT_EQ(changes_.size(), 1u);
  EXPECT_EQ(changes_[0].calls, 20);
  EXPECT_EQ(changes_[0].failures, 10);
  EXPECT_DOUBLE_EQ(changes_[0].failure_rate, 0.5);
  EXPECT_EQ(changes_[0].at, t0_);
  EXPECT_EQ(changes_[0].dependency, "payments");
}

TEST_F(CircuitBreakerTest, StaysClosedJustBelowFiftyPercent) {
  auto b = Make();
  Succeed(*b, 11);
  Fail(*b, 9);  // 9 of 20 = 45%.
  EXPECT_EQ(b->state(), State::kClosed);
  b->RecordFailure();  // 10 of 21 = 47.6%.
  EXPECT_EQ(b->state(), State::kClosed);
  b->RecordFailure();  // 11 of 22 = 50%.
  EXPECT_EQ(b->state(), State::kOpen);
}

TEST_F(CircuitBreakerTest, WindowKeepsOnlyTheLastHundredCalls) {
  auto b = Make();
  Succeed(*b, 100);
  Fail(*b, 49);  // Window: 51 successes, 49 failures.
  EXPECT_EQ(b->state(), State::kClosed);
  EXPECT_EQ(b->Snapshot().calls, 100);
  EXPECT_EQ(b->Snapshot().failures, 49);
  b->RecordFailure();  // 50 of the last 100.
  EXPECT_EQ(b->state(), State::kOpen);
}

TEST_F(CircuitBreakerTest, OldFailuresLeaveTheWindow) {
  CircuitBreakerOptions o;
  o.window_size = 4;
  o.minimum_calls = 4;
  auto b = Make(o);
  b->RecordFailure();
  Succeed(*b, 3);  // F S S S: 25%.
  EXPECT_EQ(b->state(), State::kClosed);
  b->RecordSuccess();  // S S S S: the failure left.
  EXPECT_EQ(b->Snapshot().failures, 0);
  b->RecordFailure();  // S S S F.
  EXPECT_EQ(b->state(), State::kClosed);
  b->RecordFailure();  // S S F F: 50%.
  EXPECT_EQ(b->state(), State::kOpen);
}

TEST_F(CircuitBreakerTest, MinimumCallsAboveWindowSizeActsAsWindowSize) {
  CircuitBreakerOptions o;
  o.window_size = 5;
  o.minimum_calls = 20;
  auto b = Make(o);
  Fail(*b, 5);
  EXPECT_EQ(b->state(), State::kOpen);
}

// --- Open ------------------------------------------------------------------------

TEST_F(CircuitBreakerTest, RejectsWhileOpenWithRetryAfter) {
  auto b = Make();
  Open(*b);
  EXPECT_FALSE(b->TryAcquire());
  Result<CircuitBreaker::Permit> p = b->Acquire();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(p.status().message(), "circuit open for payments, retry after 2026-01-01T00:01:00Z");
  EXPECT_EQ(b->retry_after(), t0_ + Seconds(60));
  clock_->Advance(Seconds(30));
  EXPECT_FALSE(b->TryAcquire());
  EXPECT_EQ(b->retry_after(), t0_ + Seconds(60));
  CircuitBreakerSnapshot s = b->Snapshot();
  EXPECT_EQ(s.state, State::kOpen);
  EXPECT_EQ(s.rejected_total, 3);
  EXPECT_EQ(s.opened_total, 1);
  EXPECT_EQ(s.open_until, t0_ + Seconds(60));
  EXPECT_EQ(s.calls, 20);  // The outcomes that opened it.
}

TEST_F(CircuitBreakerTest, OutcomesWhileOpenAreIgnored) {
  auto b = Make();
  Open(*b);
  Succeed(*b, 50);
  Fail(*b, 50);
  EXPECT_EQ(b->state(), State::kOpen);
  EXPECT_EQ(b->Snapshot().calls, 20);
  EXPECT_THAT(Arrows(), ElementsAre("closed->open"));
}

TEST_F(CircuitBreakerTest, HalfOpensAfterSixtySeconds) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60) - Duration(1));
  EXPECT_EQ(b->state(), State::kOpen);
  EXPECT_FALSE(b->TryAcquire());
  clock_->Advance(Duration(1));
  // Readers see half_open at once; the change is made (and reported) by the
  // next call into the breaker.
  EXPECT_EQ(b->state(), State::kHalfOpen);
  EXPECT_EQ(b->Snapshot().state, State::kHalfOpen);
  EXPECT_EQ(b->retry_after(), clock_->Now());
  EXPECT_THAT(Arrows(), ElementsAre("closed->open"));
  EXPECT_TRUE(b->TryAcquire());
  EXPECT_THAT(Arrows(), ElementsAre("closed->open", "open->half_open"));
  EXPECT_EQ(changes_[1].at, t0_ + Seconds(60));
}

// --- Half-open -------------------------------------------------------------------

TEST_F(CircuitBreakerTest, HalfOpenLetsTenTrialsThrough) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  for (int i = 0; i < 10; ++i) {
    Result<CircuitBreaker::Permit> p = b->Acquire();
    ASSERT_TRUE(p.ok()) << i << ": " << p.status();
    EXPECT_TRUE(p->trial);
  }
  Result<CircuitBreaker::Permit> p = b->Acquire();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(p.status().message(),
            "circuit half_open for payments: all 10 trial calls taken, retry after "
            "2026-01-01T00:01:01Z");
  EXPECT_EQ(b->retry_after(), clock_->Now() + Seconds(1));
  EXPECT_EQ(b->Snapshot().trial_permits_taken, 10);
}

TEST_F(CircuitBreakerTest, ClosesOnGoodTrials) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  std::vector<CircuitBreaker::Permit> permits;
  for (int i = 0; i < 10; ++i) permits.push_back(b->Acquire().value());
  for (int i = 0; i < 4; ++i) b->RecordFailure(permits[i]);
  for (int i = 4; i < 9; ++i) b->RecordSuccess(permits[i]);
  EXPECT_EQ(b->state(), State::kHalfOpen);  // 9 of 10 trials recorded.
  b->RecordSuccess(permits[9]);             // 4 of 10 failed: 40%.
  EXPECT_EQ(b->state(), State::kClosed);
  EXPECT_THAT(Arrows(), ElementsAre("closed->open", "open->half_open", "half_open->closed"));
  EXPECT_EQ(changes_[2].calls, 10);
  EXPECT_EQ(changes_[2].failures, 4);
  // Closed again with an empty window: 20 new calls are needed to open.
  EXPECT_EQ(b->Snapshot().calls, 0);
  Fail(*b, 19);
  EXPECT_EQ(b->state(), State::kClosed);
  b->RecordFailure();
  EXPECT_EQ(b->state(), State::kOpen);
  EXPECT_EQ(b->Snapshot().opened_total, 2);
}

TEST_F(CircuitBreakerTest, ReopensOnBadTrials) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  std::vector<CircuitBreaker::Permit> permits;
  for (int i = 0; i < 10; ++i) permits.push_back(b->Acquire().value());
  for (int i = 0; i < 5; ++i) b->RecordSuccess(permits[i]);
  for (int i = 5; i < 10; ++i) b->RecordFailure(permits[i]);  // 50%.
  EXPECT_EQ(b->state(), State::kOpen);
  EXPECT_EQ(b->retry_after(), t0_ + Seconds(120));
  EXPECT_FALSE(b->TryAcquire());
  EXPECT_THAT(Arrows(), ElementsAre("closed->open", "open->half_open", "half_open->open"));
  EXPECT_DOUBLE_EQ(changes_[2].failure_rate, 0.5);
  // And half-opens again after another 60 s.
  clock_->Advance(Seconds(60));
  EXPECT_TRUE(b->TryAcquire());
  EXPECT_EQ(b->state(), State::kHalfOpen);
}

TEST_F(CircuitBreakerTest, HalfOpenWaitsForEveryTrial) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  ASSERT_TRUE(b->TryAcquire());
  Fail(*b, 9);  // 9 failures: already >= 50%, but only 9 of 10 trials.
  EXPECT_EQ(b->state(), State::kHalfOpen);
  b->RecordSuccess();
  EXPECT_EQ(b->state(), State::kOpen);
}

TEST_F(CircuitBreakerTest, ReleaseGivesBackATrialSlot) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  std::vector<CircuitBreaker::Permit> permits;
  for (int i = 0; i < 10; ++i) permits.push_back(b->Acquire().value());
  EXPECT_FALSE(b->TryAcquire());
  b->Release(permits[3]);
  EXPECT_EQ(b->Snapshot().trial_permits_taken, 9);
  Result<CircuitBreaker::Permit> again = b->Acquire();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(b->TryAcquire());
}

TEST_F(CircuitBreakerTest, LostTrialPermitsAreReclaimedAfterTheTrialTimeout) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  std::vector<CircuitBreaker::Permit> permits;
  for (int i = 0; i < 10; ++i) permits.push_back(b->Acquire().value());
  for (int i = 0; i < 5; ++i) b->RecordSuccess(permits[i]);  // 5 never report.
  const TimePoint last = clock_->Now();
  clock_->Advance(Seconds(30));
  EXPECT_FALSE(b->TryAcquire());
  EXPECT_EQ(b->retry_after(), clock_->Now() + Seconds(1));
  clock_->Advance(Seconds(29) + Millis(500));
  EXPECT_EQ(b->retry_after(), last + Seconds(60));  // Sooner than the busy delay.
  EXPECT_FALSE(b->TryAcquire());
  clock_->Advance(Millis(500));  // 60 s without trial progress.
  std::vector<CircuitBreaker::Permit> fresh;
  for (int i = 0; i < 5; ++i) {
    Result<CircuitBreaker::Permit> p = b->Acquire();
    ASSERT_TRUE(p.ok()) << i << ": " << p.status();
    fresh.push_back(*p);
  }
  EXPECT_FALSE(b->TryAcquire());  // 5 recorded + 5 new = 10.
  for (const CircuitBreaker::Permit& p : fresh) b->RecordSuccess(p);
  EXPECT_EQ(b->state(), State::kClosed);
  // A lost permit that reports late, after the decision, changes nothing.
  b->RecordFailure(permits[7]);
  EXPECT_EQ(b->Snapshot().calls, 0);
}

TEST_F(CircuitBreakerTest, ReleaseOutsideHalfOpenDoesNothing) {
  auto b = Make();
  CircuitBreaker::Permit p = b->Acquire().value();
  EXPECT_FALSE(p.trial);
  b->Release(p);
  EXPECT_EQ(b->Snapshot().calls, 0);
  EXPECT_EQ(b->state(), State::kClosed);
}

TEST_F(CircuitBreakerTest, OutcomeOfAPermitFromBeforeAStateChangeIsIgnored) {
  auto b = Make();
  CircuitBreaker::Permit slow = b->Acquire().value();  // A slow call starts while closed.
  Open(*b);
  clock_->Advance(Seconds(60));
  ASSERT_TRUE(b->TryAcquire());
  EXPECT_EQ(b->state(), State::kHalfOpen);
  b->RecordSuccess(slow);  // Must not count as a trial.
  EXPECT_EQ(b->Snapshot().calls, 0);
  b->RecordFailure(slow);
  EXPECT_EQ(b->Snapshot().calls, 0);
}

// --- Callbacks -------------------------------------------------------------------

TEST_F(CircuitBreakerTest, CallbackSeesEveryChangeInOrder) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  ASSERT_TRUE(b->TryAcquire());
  Fail(*b, 10);  // Back to open.
  clock_->Advance(Seconds(60));
  ASSERT_TRUE(b->TryAcquire());
  Succeed(*b, 10);  // Closed.
  EXPECT_THAT(Arrows(), ElementsAre("closed->open", "open->half_open", "half_open->open",
                                    "open->half_open", "half_open->closed"));
  EXPECT_EQ(changes_[0].at, t0_);
  EXPECT_EQ(changes_[1].at, t0_ + Seconds(60));
  EXPECT_EQ(changes_[3].at, t0_ + Seconds(120));
  EXPECT_EQ(changes_[1].calls, 0);
  EXPECT_EQ(changes_[4].calls, 10);
  EXPECT_EQ(changes_[4].failures, 0);
}

TEST_F(CircuitBreakerTest, CallbackMayCallIntoTheBreaker) {
  CircuitBreaker* self = nullptr;
  std::vector<State> seen;
  CircuitBreakerOptions o;
  o.on_state_change = [&](const CircuitStateChange& c) {
    seen.push_back(self->state());  // No lock held: no deadlock.
    if (c.to == State::kOpen) {
      // A change caused from inside a callback is delivered after this one.
      clock_->Advance(Seconds(60));
      EXPECT_TRUE(self->TryAcquire());
      seen.push_back(State::kClosed);  // Marker: this callback finished first.
    }
  };
  auto b = Make(o);
  self = b.get();
  Fail(*b, 20);
  EXPECT_THAT(seen, ElementsAre(State::kOpen, State::kClosed, State::kHalfOpen));
  EXPECT_EQ(b->state(), State::kHalfOpen);
}

TEST_F(CircuitBreakerTest, ThrowingCallbackIsContained) {
  CircuitBreakerOptions o;
  o.on_state_change = [](const CircuitStateChange&) { throw std::runtime_error("sink down"); };
  auto b = Make(o);
  Fail(*b, 20);
  EXPECT_EQ(b->state(), State::kOpen);
  clock_->Advance(Seconds(60));
  EXPECT_TRUE(b->TryAcquire());
}

// --- The registry ----------------------------------------------------------------

class CircuitBreakersTest : public CircuitBreakerTest {
 protected:
  std::unique_ptr<CircuitBreakers> MakeRegistry(CircuitBreakerOptions defaults = {}) {
    Result<std::unique_ptr<CircuitBreakers>> r = CircuitBreakers::Create(defaults, clock_);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(r).value();
  }
};

TEST_F(CircuitBreakersTest, DependenciesAreIsolated) {
  auto breakers = MakeRegistry();
  CircuitBreaker& psp = breakers->Get("payments");
  EXPECT_EQ(&psp, &breakers->Get("payments"));
  EXPECT_EQ(psp.dependency(), "payments");
  Fail(psp, 20);
  EXPECT_EQ(psp.state(), State::kOpen);
  EXPECT_EQ(breakers->Get("mail").state(), State::kClosed);
  EXPECT_TRUE(breakers->Get("mail").TryAcquire());
  auto snapshots = breakers->Snapshots();
  EXPECT_THAT(snapshots, UnorderedElementsAre(Key("mail"), Key("payments")));
  EXPECT_EQ(snapshots["payments"].state, State::kOpen);
  EXPECT_EQ(snapshots["mail"].state, State::kClosed);
}

TEST_F(CircuitBreakersTest, OverrideNeedsAReasonAndKeepsTheDefaultCallback) {
  std::vector<std::string> log;
  CircuitBreakerOptions defaults;
  defaults.on_state_change = [&](const CircuitStateChange& c) {
    log.push_back(c.dependency + ":" + Arrow(c));
  };
  auto breakers = MakeRegistry(defaults);
  CircuitBreakerOptions o;
  o.minimum_calls = 5;
  o.open_duration = Seconds(10);
  EXPECT_EQ(breakers->Override("search", o, "").code(), StatusCode::kInvalidArgument);
  CircuitBreakerOptions bad;
  bad.window_size = 0;
  EXPECT_EQ(breakers->Override("search", bad, "why").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(breakers->Override("search", o, "search is cheap to probe; see RB-7").ok());

  CircuitBreaker& search = breakers->Get("search");
  Fail(search, 5);
  EXPECT_EQ(search.state(), State::kOpen);
  EXPECT_EQ(search.retry_after(), t0_ + Seconds(10));
  Fail(breakers->Get("mail"), 20);
  EXPECT_THAT(log, ElementsAre("search:closed->open", "mail:closed->open"));
  EXPECT_THAT(breakers->DescribeOverrides(),
              HasSubstr("search: window_size=100 minimum_calls=5 failure_rate_threshold=0.5 "
                        "open_duration=10s half_open_calls=10 (search is cheap to probe; see "
                        "RB-7)"));
}

TEST_F(CircuitBreakersTest, OverrideAfterFirstUseIsRefused) {
  auto breakers = MakeRegistry();
  (void)breakers->Get("db");
  EXPECT_EQ(breakers->Override("db", CircuitBreakerOptions{}, "late").code(),
            StatusCode::kFailedPrecondition);
}

// --- Concurrency (run under TSan) -------------------------------------------------

TEST_F(CircuitBreakerTest, ConcurrentHalfOpenGrantsExactlyTenTrials) {
  auto b = Make();
  Open(*b);
  clock_->Advance(Seconds(60));
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (b->TryAcquire()) granted.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), 10);
  EXPECT_THAT(Arrows(), ElementsAre("closed->open", "open->half_open"));
}

TEST_F(CircuitBreakerTest, ConcurrentCallsKeepChangesConsistent) {
  // The callback appends without a lock: deliveries must be one at a time
  // (TSan checks) and in order (each change starts where the last ended).
  std::vector<CircuitStateChange> unlocked_log;
  CircuitBreakerOptions o;
  o.open_duration = Millis(50);
  o.on_state_change = [&](const CircuitStateChange& c) { unlocked_log.push_back(c); };
  auto b = Make(o);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4000; ++i) {
        Result<CircuitBreaker::Permit> p = b->Acquire();
        if (!p.ok()) continue;
        // Failure-heavy on some threads, healthy on others.
        if ((i + t) % 3 == 0 || t < 2) {
          b->RecordFailure(*p);
        } else if (i % 17 == 0) {
          b->Release(*p);
        } else {
          b->RecordSuccess(*p);
        }
        if (i % 500 == 0) (void)b->Snapshot();
      }
    });
  }
  std::thread ticker([&] {
    while (!stop.load()) {
      clock_->Advance(Millis(10));
      (void)b->state();
      (void)b->retry_after();
      std::this_thread::yield();
    }
  });
  for (std::thread& t : threads) t.join();
  stop = true;
  ticker.join();
  ASSERT_FALSE(unlocked_log.empty());
  EXPECT_EQ(unlocked_log.front().from, State::kClosed);
  for (std::size_t i = 1; i < unlocked_log.size(); ++i) {
    EXPECT_EQ(unlocked_log[i].from, unlocked_log[i - 1].to) << "change " << i;
    EXPECT_GE(unlocked_log[i].at, unlocked_log[i - 1].at) << "change " << i;
  }
  CircuitBreakerSnapshot s = b->Snapshot();
  EXPECT_GE(s.opened_total, 1);
}

TEST_F(CircuitBreakersTest, ConcurrentGetCreatesOneBreakerPerDependency) {
  auto breakers = MakeRegistry();
  std::vector<std::thread> threads;
  std::vector<CircuitBreaker*> seen(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        CircuitBreaker& b = breakers->Get("dep." + std::to_string(i % 4));
        if (i == 0) seen[static_cast<std::size_t>(t)] = &b;
        b.RecordSuccess();
        if (i % 50 == 0) (void)breakers->Snapshots();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (CircuitBreaker* b : seen) EXPECT_EQ(b, seen[0]);
  auto snapshots = breakers->Snapshots();
  EXPECT_EQ(snapshots.size(), 4u);
  for (const auto& [name, s] : snapshots) EXPECT_EQ(s.calls, 100) << name;  // 8 * 50, capped.
}

}  // namespace
}  // namespace jobpact
