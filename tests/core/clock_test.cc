#include "jobpact/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "jobpact/random.h"
#include "jobpact/testing/manual_clock.h"

namespace jobpact {
namespace {

using testing::ManualClock;

TEST(ManualClockTest, NeverTicksByItself) {
  ManualClock clock;
  TimePoint t0 = clock.Now();
  std::this_thread::yield();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(Seconds(5));
  EXPECT_EQ(clock.Now() - t0, Seconds(5));
  clock.Advance(-Seconds(5));  // Ignored.
  EXPECT_EQ(clock.Now() - t0, Seconds(5));
}

TEST(ManualClockTest, AdvanceWakesSleeper) {
  ManualClock clock;
  TimePoint deadline = clock.Now() + Seconds(10);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepUntil(deadline);
    woke = true;
  });
  clock.Advance(Seconds(3));
  EXPECT_FALSE(woke.load());
  clock.Advance(Seconds(7));
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_GE(clock.Now(), deadline);
}

TEST(ManualClockTest, WaitUntilReturnsOnceDeadlinePassed) {
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  TimePoint deadline = clock.Now() + Seconds(1);
  std::unique_lock<std::mutex> lock(mu);
  clock.SetTime(deadline);
  clock.WaitUntil(lock, cv, deadline);  // Must not block: the deadline has come.
  EXPECT_TRUE(lock.owns_lock());
}

TEST(SystemClockTest, MovesForward) {
  auto clock = SystemClock::Default();
  TimePoint a = clock->Now();
  clock->SleepUntil(a + Millis(1));
  EXPECT_GT(clock->Now(), a);
}

TEST(RandomSourceTest, SeededIsReproducibleAndInRange) {
  auto a = MakeSeededRandomSource(42);
  auto b = MakeSeededRandomSource(42);
  for (int i = 0; i < 1000; ++i) {
    double x = a->NextUnit();
    EXPECT_EQ(x, b->NextUnit());
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
}

TEST(RandomSourceTest, SequenceCyclesAndClamps) {
  auto r = MakeSequenceRandomSource({0.25, 1.5, -1.0});
  EXPECT_EQ(r->NextUnit(), 0.25);
  EXPECT_LT(r->NextUnit(), 1.0);
  EXPECT_EQ(r->NextUnit(), 0.0);
  EXPECT_EQ(r->NextUnit(), 0.25);
}

}  // namespace
}  // namespace jobpact
