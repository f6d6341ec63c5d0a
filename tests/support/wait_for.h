// WaitFor: a bounded real-time wait for another thread, shared by the tests
// that run a runner's threads. Never a timing assertion: `done` is what the
// test asserts, the timeout only keeps a broken build from hanging.
#ifndef JOBPACT_TESTS_SUPPORT_WAIT_FOR_H_
#define JOBPACT_TESTS_SUPPORT_WAIT_FOR_H_

#include <chrono>
#include <functional>
#include <thread>

namespace jobpact {
namespace test_support {

inline constexpr auto kSafetyTimeout = std::chrono::seconds(60);

// Polls `done` every millisecond until it holds (true) or the safety
// timeout passes (false). `step`, if given, runs between polls (e.g. to
// advance a ManualClock).
inline bool WaitFor(const std::function<bool()>& done,
                    const std::function<void()>& step = nullptr) {
  const auto give_up = std::chrono::steady_clock::now() + kSafetyTimeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    if (step) step();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace test_support
}  // namespace jobpact

#endif  // JOBPACT_TESTS_SUPPORT_WAIT_FOR_H_
