#include "jobpact/retry_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::UnorderedElementsAre;

class RetryBudgetTest : public ::testing::Test {
 protected:
  std::unique_ptr<RetryBudget> Make(RetryBudgetOptions options = {}) {
    Result<std::unique_ptr<RetryBudget>> b = RetryBudget::Create(options, clock_);
    EXPECT_TRUE(b.ok()) << b.status();
    return std::move(b).value();
  }
  static RetryBudgetOptions NoFloor() {
    RetryBudgetOptions o;
    o.min_retries_per_second = 0;
    return o;
  }
  // Calls TryRetry until it refuses (at most `limit` times); returns the
  // number of retries it allowed.
  static int DrainRetries(RetryBudget& b, int limit = 100000) {
    int allowed = 0;
    while (allowed < limit && b.TryRetry()) ++allowed;
    return allowed;
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
  const TimePoint t0_ = clock_->Now();  // 2026-01-01T00:00:00Z, on a slice boundary.
};

// --- Options ---------------------------------------------------------------------

TEST_F(RetryBudgetTest, DefaultsAreSpec11) {
  RetryBudgetOptions o;
  EXPECT_DOUBLE_EQ(o.percent, 0.2);
  EXPECT_EQ(o.window, Seconds(10));
  EXPECT_DOUBLE_EQ(o.min_retries_per_second, 10);
  EXPECT_EQ(o.buckets, 10);
  EXPECT_TRUE(ValidateRetryBudgetOptions(o).ok());
}

TEST_F(RetryBudgetTest, RejectsBadOptionsNamingTheField) {
  struct Case {
    const char* field;
    void (*mutate)(RetryBudgetOptions&);
  };
  const Case cases[] = {
      {"percent", [](RetryBudgetOptions& o) { o.percent = -0.1; }},
      {"percent", [](RetryBudgetOptions& o) { o.percent = 1000.5; }},
      {"percent", [](RetryBudgetOptions& o) { o.percent = std::nan(""); }},
      {"window", [](RetryBudgetOptions& o) { o.window = Duration::zero(); }},
      {"window", [](RetryBudgetOptions& o) { o.window = -Seconds(1); }},
      {"min_retries_per_second", [](RetryBudgetOptions& o) { o.min_retries_per_second = -1; }},
      {"min_retries_per_second",
       [](RetryBudgetOptions& o) {
         o.min_retries_per_second = std::numeric_limits<double>::infinity();
       }},
      {"min_retries_per_second", [](RetryBudgetOptions& o) { o.min_retries_per_second = 1e12; }},
      {"buckets", [](RetryBudgetOptions& o) { o.buckets = 0; }},
      {"buckets", [](RetryBudgetOptions& o) { o.buckets = 3601; }},
      {"window / buckets",
       [](RetryBudgetOptions& o) {
         o.window = Duration(5);
         o.buckets = 10;
       }},
  };
  for (const Case& c : cases) {
    RetryBudgetOptions o;
    c.mutate(o);
    Status s = ValidateRetryBudgetOptions(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
    EXPECT_EQ(RetryBudget::Create(o, clock_).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(RetryBudgets::Create(o, clock_).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(RetryBudgetTest, NullClockMeansSystemClock) {
  Result<std::unique_ptr<RetryBudget>> b = RetryBudget::Create();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ((*b)->Balance(), 100);
  EXPECT_TRUE((*b)->TryRetry());
}

// --- The floor -------------------------------------------------------------------

TEST_F(RetryBudgetTest, FloorAllowsMinRetriesTimesWindowWithNoTraffic) {
  auto b = Make();
  EXPECT_DOUBLE_EQ(b->Balance(), 100);  // 10 retries/s * 10 s.
  EXPECT_EQ(DrainRetries(*b), 100);
  EXPECT_FALSE(b->TryRetry());
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_EQ(s.retries, 100);
  EXPECT_EQ(s.first_attempts, 0);
  EXPECT_EQ(s.rejected_total, 2);
}

TEST_F(RetryBudgetTest, FloorComesBackOnlyWhenTheRetriesLeaveTheWindow) {
  auto b = Make();
  EXPECT_EQ(DrainRetries(*b), 100);
  clock_->Advance(Seconds(9));
  EXPECT_FALSE(b->TryRetry());
  clock_->Advance(Seconds(1) - Duration(1));  // t0 + 9.999999999 s.
  EXPECT_FALSE(b->TryRetry());
  clock_->Advance(Duration(1));  // t0 + 10 s: the first slice leaves the window.
  EXPECT_EQ(DrainRetries(*b), 100);
}

TEST_F(RetryBudgetTest, SustainsTenRetriesPerSecondWithNoTraffic) {
  auto b = Make();
  for (int second = 0; second < 30; ++second) {
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(b->TryRetry()) << "second " << second << " #" << i;
    // Once the window is full of retries, the 11th in a second is refused.
    if (second >= 9) {
      EXPECT_FALSE(b->TryRetry()) << "second " << second;
    }
    clock_->Advance(Seconds(1));
  }
}

TEST_F(RetryBudgetTest, NoFloorAndNoTrafficAllowsNoRetry) {
  auto b = Make(NoFloor());
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
  EXPECT_FALSE(b->TryRetry());
}

// --- 20% of first attempts -------------------------------------------------------

TEST_F(RetryBudgetTest, AllowsTwentyPercentOfFirstAttempts) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 10);
  EXPECT_EQ(DrainRetries(*b), 10);
  EXPECT_FALSE(b->TryRetry());
}

TEST_F(RetryBudgetTest, DepositsAddToTheFloor) {
  auto b = Make();
  for (int i = 0; i < 500; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 200);  // 100 floor + 20% of 500.
  EXPECT_EQ(DrainRetries(*b), 200);
}

TEST_F(RetryBudgetTest, FractionsOfARetryAddUpExactly) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 4; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 0.8);
  EXPECT_FALSE(b->TryRetry());
  b->RecordFirstAttempt();  // 5 * 0.2 = exactly one retry.
  EXPECT_TRUE(b->TryRetry());
  EXPECT_FALSE(b->TryRetry());
  for (int i = 0; i < 5000; ++i) b->RecordFirstAttempt();
  EXPECT_EQ(DrainRetries(*b), 1000);
}

TEST_F(RetryBudgetTest, SteadyTrafficAllowsItsShareEverySecond) {
  RetryBudgetOptions o = NoFloor();
  auto b = Make(o);
  // 100 first attempts a second, each second allowed to spend what it earns.
  for (int second = 0; second < 30; ++second) {
    for (int i = 0; i < 100; ++i) b->RecordFirstAttempt();
    EXPECT_EQ(DrainRetries(*b), 20) << "second " << second;
    clock_->Advance(Seconds(1));
  }
}

TEST_F(RetryBudgetTest, ZeroPercentAllowsOnlyTheFloor) {
  RetryBudgetOptions o;
  o.percent = 0;
  o.min_retries_per_second = 1;
  auto b = Make(o);
  for (int i = 0; i < 1000; ++i) b->RecordFirstAttempt();
  EXPECT_EQ(DrainRetries(*b), 10);
}

// --- The sliding window ----------------------------------------------------------

TEST_F(RetryBudgetTest, OldDepositsExpire) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  clock_->Advance(Millis(9999));
  EXPECT_DOUBLE_EQ(b->Balance(), 10);
  clock_->Advance(Millis(1));
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
  EXPECT_FALSE(b->TryRetry());
  EXPECT_EQ(b->Snapshot().first_attempts, 0);
}

TEST_F(RetryBudgetTest, WindowSlidesOneSliceAtATime) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();  // Slice 0: 10 retries.
  clock_->Advance(Seconds(5));
  for (int i = 0; i < 25; ++i) b->RecordFirstAttempt();  // Slice 5: 5 retries.
  EXPECT_DOUBLE_EQ(b->Balance(), 15);
  clock_->Advance(Seconds(5));  // t0 + 10 s: slice 0 gone.
  EXPECT_DOUBLE_EQ(b->Balance(), 5);
  EXPECT_EQ(b->Snapshot().first_attempts, 25);
  clock_->Advance(Seconds(5));  // t0 + 15 s: slice 5 gone.
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
}

TEST_F(RetryBudgetTest, EventsInsideASliceLiveBetweenNineAndTenSeconds) {
  auto b = Make(NoFloor());
  clock_->Advance(Millis(999));  // Late in slice 0.
  for (int i = 0; i < 5; ++i) b->RecordFirstAttempt();
  clock_->Advance(Millis(9000));  // t0 + 9.999 s: slice 9.
  EXPECT_DOUBLE_EQ(b->Balance(), 1);
  clock_->Advance(Millis(1));  // t0 + 10 s: 9.001 s after the deposits.
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
}

TEST_F(RetryBudgetTest, WithdrawalsOutliveTheirDepositsAsANegativeBalance) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  clock_->Advance(Seconds(5));
  EXPECT_EQ(DrainRetries(*b, 5), 5);
  clock_->Advance(Seconds(5));  // The deposits leave; the 5 retries stay.
  EXPECT_DOUBLE_EQ(b->Balance(), -5);
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 5);
  clock_->Advance(Seconds(5));  // The retries leave too.
  EXPECT_DOUBLE_EQ(b->Balance(), 10);
}

TEST_F(RetryBudgetTest, ALongPauseForgetsEverything) {
  auto b = Make();
  for (int i = 0; i < 500; ++i) b->RecordFirstAttempt();
  EXPECT_EQ(DrainRetries(*b), 200);
  clock_->Advance(std::chrono::hours(24 * 365));
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_DOUBLE_EQ(s.balance, 100);
  EXPECT_EQ(s.first_attempts, 0);
  EXPECT_EQ(s.retries, 0);
}

TEST_F(RetryBudgetTest, ClockGoingBackwardsKeepsTheWindow) {
  auto b = Make(NoFloor());
  clock_->Advance(Seconds(5));
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  clock_->SetTime(t0_);  // Skew: back 5 s. Events count in the newest slice.
  for (int i = 0; i < 50; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 20);
  clock_->SetTime(t0_ + Seconds(15));  // 10 s after the newest slice began.
  EXPECT_DOUBLE_EQ(b->Balance(), 0);
}

TEST_F(RetryBudgetTest, CustomWindowAndSlices) {
  RetryBudgetOptions o;
  o.percent = 0.5;
  o.window = Seconds(60);
  o.buckets = 6;  // 10 s slices.
  o.min_retries_per_second = 0.5;
  auto b = Make(o);
  EXPECT_DOUBLE_EQ(b->Balance(), 30);
  for (int i = 0; i < 10; ++i) b->RecordFirstAttempt();
  EXPECT_DOUBLE_EQ(b->Balance(), 35);
  clock_->Advance(Seconds(59));
  EXPECT_DOUBLE_EQ(b->Balance(), 35);
  clock_->Advance(Seconds(1));
  EXPECT_DOUBLE_EQ(b->Balance(), 30);
}

// --- Deferral (ReserveRetry) ---------------------------------------------------

// Only the floor: 1 retry/s over 10 s, 10 retries per window, 1 s slices.
RetryBudgetOptions TenPerWindow() {
  RetryBudgetOptions o;
  o.percent = 0;
  o.min_retries_per_second = 1;
  return o;
}

TEST_F(RetryBudgetTest, DefaultsDeferAfterAtLeastOneSecond) {
  RetryBudgetOptions o;
  EXPECT_EQ(o.on_exhausted, RetryBudgetExhaustedAction::kDefer);
  EXPECT_EQ(o.min_deferral, Seconds(1));
  EXPECT_EQ(RetryBudgetExhaustedActionName(RetryBudgetExhaustedAction::kDefer), "defer");
  EXPECT_EQ(RetryBudgetExhaustedActionName(RetryBudgetExhaustedAction::kDeadLetter), "dead_letter");
  RetryBudgetOptions bad;
  bad.min_deferral = Duration::zero();
  EXPECT_THAT(ValidateRetryBudgetOptions(bad).message(), HasSubstr("min_deferral"));
  EXPECT_EQ(RetryBudget::Create(bad, clock_).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RetryBudgetTest, ReserveRetryWithdrawsNowWhileTheBudgetAllows) {
  auto b = Make(TenPerWindow());
  for (int i = 0; i < 10; ++i) {
    RetryReservation r = b->ReserveRetry();
    EXPECT_EQ(r.kind, RetryReservation::Kind::kNow);
    EXPECT_EQ(r.at, t0_);
  }
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_EQ(s.retries, 10);
  EXPECT_EQ(s.reserved, 0);
  EXPECT_EQ(s.rejected_total, 0);
  EXPECT_EQ(s.deferred_total, 0);
  EXPECT_FALSE(b->TryRetry());
}

TEST_F(RetryBudgetTest, RefusedRetriesAreBookedWindowByWindowAtTheBudgetsPace) {
  auto b = Make(TenPerWindow());
  EXPECT_EQ(DrainRetries(*b), 10);
  std::map<TimePoint, int> at;
  for (int i = 0; i < 25; ++i) {
    RetryReservation r = b->ReserveRetry();
    EXPECT_EQ(r.kind, RetryReservation::Kind::kDeferred);
    ++at[r.at];
  }
  // The 10 retries of slice 0 leave the window at t0 + 10 s, making room
  // for 10 more; those leave at t0 + 20 s; and so on.
  EXPECT_EQ(at, (std::map<TimePoint, int>{
                    {t0_ + Seconds(10), 10}, {t0_ + Seconds(20), 10}, {t0_ + Seconds(30), 5}}));
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_EQ(s.reserved, 25);
  EXPECT_EQ(s.rejected_total, 26);  // DrainRetries' last call, and the 25.
  EXPECT_EQ(s.deferred_total, 25);

  // Booked retries join the window when their slice begins: no room is left
  // for more there, and none is handed out twice.
  clock_->SetTime(t0_ + Seconds(10));
  s = b->Snapshot();
  EXPECT_EQ(s.retries, 10);
  EXPECT_EQ(s.reserved, 15);
  EXPECT_FALSE(b->TryRetry());
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Seconds(30));  // After the 5 booked there.
  clock_->SetTime(t0_ + Seconds(30));
  s = b->Snapshot();
  EXPECT_EQ(s.retries, 6);  // Booked for t0 + 30 s; those of t0 + 20 s have left.
  EXPECT_EQ(s.reserved, 0);
}

TEST_F(RetryBudgetTest, EveryWindowHoldsAtMostTheBudgetWithDeferrals) {
  auto b = Make(TenPerWindow());
  // Retries asked for at an uneven pace for a minute, deferred as needed.
  std::map<std::int64_t, int> per_second;  // Counted retries by second.
  for (int ms = 0; ms < 60000; ms += 250) {
    clock_->SetTime(t0_ + Millis(ms));
    for (int i = 0; i < (ms % 3000 == 0 ? 7 : 1); ++i) {
      RetryReservation r = b->ReserveRetry();
      ASSERT_NE(r.kind, RetryReservation::Kind::kPastDeadline);
      EXPECT_GE(r.at, clock_->Now());
      if (r.kind == RetryReservation::Kind::kDeferred) {
        EXPECT_GE(r.at, clock_->Now() + Seconds(1));  // min_deferral.
      }
      ++per_second[std::chrono::duration_cast<std::chrono::seconds>(r.at - t0_).count()];
    }
  }
  int max_in_window = 0;
  for (const auto& [second, n] : per_second) {
    int in_window = 0;
    for (std::int64_t s = second - 9; s <= second; ++s) {
      auto it = per_second.find(s);
      if (it != per_second.end()) in_window += it->second;
    }
    max_in_window = std::max(max_in_window, in_window);
  }
  EXPECT_EQ(max_in_window, 10);
}

TEST_F(RetryBudgetTest, ADeferralIsAtLeastMinDeferralAway) {
  RetryBudgetOptions o = TenPerWindow();
  auto b = Make(o);
  o.min_deferral = Seconds(3);
  auto slow = Make(o);
  EXPECT_EQ(DrainRetries(*b), 10);
  EXPECT_EQ(DrainRetries(*slow), 10);
  clock_->SetTime(t0_ + Millis(9500));
  // Room comes at t0 + 10 s, half a second away: the floor says 1 s (or 3).
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Millis(10500));
  EXPECT_EQ(slow->ReserveRetry().at, t0_ + Millis(12500));
}

TEST_F(RetryBudgetTest, ADeferralPastTheDeadlineBooksNothing) {
  auto b = Make(TenPerWindow());
  EXPECT_EQ(DrainRetries(*b), 10);
  RetryReservation r = b->ReserveRetry(t0_ + Seconds(5));
  EXPECT_EQ(r.kind, RetryReservation::Kind::kPastDeadline);
  EXPECT_EQ(r.at, t0_ + Seconds(10));
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_EQ(s.reserved, 0);
  EXPECT_EQ(s.deferred_total, 0);
  EXPECT_EQ(s.rejected_total, 2);
  r = b->ReserveRetry(t0_ + Seconds(10));  // A deadline the time meets.
  EXPECT_EQ(r.kind, RetryReservation::Kind::kDeferred);
  EXPECT_EQ(r.at, t0_ + Seconds(10));
}

TEST_F(RetryBudgetTest, ImmediateRetriesKeepBookedOnesPaidFor) {
  RetryBudgetOptions o;
  o.percent = 1;                   // One retry per first attempt...
  o.min_retries_per_second = 0.1;  // ...plus one per window.
  auto b = Make(o);
  EXPECT_TRUE(b->TryRetry());                          // Spends the floor.
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Seconds(10));  // The floor's next window.
  b->RecordFirstAttempt();                             // Pays one retry until t0 + 10 s.
  clock_->SetTime(t0_ + Seconds(5));
  EXPECT_DOUBLE_EQ(b->Balance(), 1);
  // A retry now would still be in the window at t0 + 10 s, when the deposit
  // paying for it has left: the booked retry would be overdrawn.
  EXPECT_FALSE(b->TryRetry());
  RetryReservation r = b->ReserveRetry();
  EXPECT_EQ(r.kind, RetryReservation::Kind::kDeferred);
  EXPECT_EQ(r.at, t0_ + Seconds(20));
}

TEST_F(RetryBudgetTest, WithoutAFloorDeferralsAreSpacedOneWindowApart) {
  auto b = Make(NoFloor());
  for (int i = 0; i < 10; ++i) b->RecordFirstAttempt();
  EXPECT_EQ(DrainRetries(*b), 2);
  // Nothing will ever pay for more without new first attempts.
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Seconds(10));
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Seconds(20));
  EXPECT_EQ(b->ReserveRetry().at, t0_ + Seconds(30));
}

// --- The registry ----------------------------------------------------------------

class RetryBudgetsTest : public RetryBudgetTest {
 protected:
  std::unique_ptr<RetryBudgets> MakeRegistry(RetryBudgetOptions defaults = {}) {
    Result<std::unique_ptr<RetryBudgets>> r = RetryBudgets::Create(defaults, clock_);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(r).value();
  }
};

TEST_F(RetryBudgetsTest, JobTypesAreIsolated) {
  auto budgets = MakeRegistry();
  int allowed = 0;
  while (allowed < 1000 && budgets->TryRetry("email.send")) ++allowed;
  EXPECT_EQ(allowed, 100);
  EXPECT_FALSE(budgets->TryRetry("email.send"));
  EXPECT_DOUBLE_EQ(budgets->Balance("invoice.generate"), 100);
  EXPECT_TRUE(budgets->TryRetry("invoice.generate"));

  for (int i = 0; i < 50; ++i) budgets->RecordFirstAttempt("email.send");
  EXPECT_DOUBLE_EQ(budgets->Balance("email.send"), 10);
  EXPECT_DOUBLE_EQ(budgets->Balance("invoice.generate"), 99);

  auto snapshots = budgets->Snapshots();
  EXPECT_THAT(snapshots, UnorderedElementsAre(Key("email.send"), Key("invoice.generate")));
  EXPECT_EQ(snapshots["email.send"].first_attempts, 50);
  EXPECT_EQ(snapshots["email.send"].retries, 100);
  EXPECT_EQ(snapshots["email.send"].rejected_total, 2);
  EXPECT_EQ(snapshots["invoice.generate"].retries, 1);
}

TEST_F(RetryBudgetsTest, ForJobTypeReturnsTheSameBudget) {
  auto budgets = MakeRegistry();
  RetryBudget& a = budgets->ForJobType("a");
  EXPECT_EQ(&a, &budgets->ForJobType("a"));
  EXPECT_NE(&a, &budgets->ForJobType("b"));
  EXPECT_DOUBLE_EQ(a.options().percent, 0.2);
}

TEST_F(RetryBudgetsTest, DefaultsApplyToEveryType) {
  RetryBudgetOptions o = NoFloor();
  auto budgets = MakeRegistry(o);
  EXPECT_FALSE(budgets->TryRetry("x"));
  EXPECT_DOUBLE_EQ(budgets->Balance("y"), 0);
}

TEST_F(RetryBudgetsTest, OverrideNeedsAReasonAndValidOptions) {
  auto budgets = MakeRegistry();
  RetryBudgetOptions o;
  o.min_retries_per_second = 1;
  EXPECT_EQ(budgets->Override("report.build", o, "").code(), StatusCode::kInvalidArgument);
  RetryBudgetOptions bad;
  bad.percent = -1;
  Status s = budgets->Override("report.build", bad, "why");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("report.build"));

  ASSERT_TRUE(budgets->Override("report.build", o, "reports are rare; see RB-12").ok());
  EXPECT_DOUBLE_EQ(budgets->Balance("report.build"), 10);
  EXPECT_DOUBLE_EQ(budgets->Balance("email.send"), 100);
  EXPECT_THAT(budgets->DescribeOverrides(),
              HasSubstr("report.build: percent=0.2 window=10s min_retries_per_second=1 "
                        "buckets=10 (reports are rare; see RB-12)"));
}

TEST_F(RetryBudgetsTest, OverrideAfterFirstUseIsRefused) {
  auto budgets = MakeRegistry();
  budgets->RecordFirstAttempt("email.send");
  EXPECT_EQ(budgets->Override("email.send", RetryBudgetOptions{}, "late").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(budgets->DescribeOverrides(), "");
}

TEST_F(RetryBudgetsTest, ReserveRetryAndOverridesOfTheExhaustedAction) {
  auto budgets = MakeRegistry(TenPerWindow());
  RetryBudgetOptions quarantine = TenPerWindow();
  quarantine.on_exhausted = RetryBudgetExhaustedAction::kDeadLetter;
  quarantine.min_deferral = Seconds(2);
  ASSERT_TRUE(budgets->Override("otp.send", quarantine, "a late code is useless; see SEC-9").ok());
  EXPECT_EQ(budgets->ForJobType("otp.send").options().on_exhausted,
            RetryBudgetExhaustedAction::kDeadLetter);
  EXPECT_EQ(budgets->ForJobType("email.send").options().on_exhausted,
            RetryBudgetExhaustedAction::kDefer);
  EXPECT_THAT(budgets->DescribeOverrides(),
              HasSubstr("otp.send: percent=0 window=10s min_retries_per_second=1 buckets=10 "
                        "on_exhausted=dead_letter min_deferral=2s (a late code is useless; "
                        "see SEC-9)"));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(budgets->ReserveRetry("email.send").kind, RetryReservation::Kind::kNow);
  }
  EXPECT_EQ(budgets->ReserveRetry("email.send").at, t0_ + Seconds(10));
  EXPECT_EQ(budgets->Snapshots()["email.send"].deferred_total, 1);
  EXPECT_EQ(budgets->Snapshots()["email.send"].reserved, 1);
}

// --- Concurrency (run under TSan) -------------------------------------------------

TEST_F(RetryBudgetTest, ConcurrentRetriesNeverOverspend) {
  auto b = Make();
  for (int i = 0; i < 400; ++i) b->RecordFirstAttempt();  // Balance 180.
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (b->TryRetry()) allowed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 180);
  RetryBudgetSnapshot s = b->Snapshot();
  EXPECT_EQ(s.retries, 180);
  EXPECT_EQ(s.rejected_total, 8 * 200 - 180);
}

TEST_F(RetryBudgetTest, ConcurrentDepositsAreAllCounted) {
  auto b = Make(NoFloor());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) b->RecordFirstAttempt();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(b->Snapshot().first_attempts, 8000);
  EXPECT_DOUBLE_EQ(b->Balance(), 1600);
}

TEST_F(RetryBudgetsTest, ConcurrentTypesAndAMovingClock) {
  auto budgets = MakeRegistry();
  std::atomic<bool> stop{false};
  std::atomic<long> allowed{0};
  std::atomic<long> first_attempts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      const std::string type = "type." + std::to_string(t % 3);
      for (int i = 0; i < 3000; ++i) {
        budgets->RecordFirstAttempt(type);
        first_attempts.fetch_add(1, std::memory_order_relaxed);
        if (budgets->TryRetry(type)) allowed.fetch_add(1, std::memory_order_relaxed);
        if (i % 100 == 0) (void)budgets->Snapshots();
      }
    });
  }
  std::thread ticker([&] {
    while (!stop.load()) {
      clock_->Advance(Millis(100));
      std::this_thread::yield();
    }
  });
  for (std::thread& t : threads) t.join();
  stop = true;
  ticker.join();
  // Sanity bound: every 9 s block (events live at least 9 s) of a type
  // retries at most its floor plus 20% of the first attempts of the last
  // 10 s, and a first attempt falls in the last 10 s of at most 3 blocks.
  const double blocks = ToSeconds(clock_->Now() - t0_) / 9 + 2;
  EXPECT_LE(allowed.load(), 3 * 100 * blocks + 3 * 0.2 * first_attempts.load());
  EXPECT_GT(allowed.load(), 0);
  EXPECT_EQ(budgets->Snapshots().size(), 3u);
}

}  // namespace
}  // namespace jobpact
