#include "jobpact/retry_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
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
