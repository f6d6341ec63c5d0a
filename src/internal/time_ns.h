// Private: times and durations as integer nanoseconds since the Unix epoch,
// the stored form of the SQLite and Redis stores and of history entries
// (int64 reaches the year 2262), so a TimePoint survives a round trip
// exactly.
#ifndef JOBPACT_SRC_INTERNAL_TIME_NS_H_
#define JOBPACT_SRC_INTERNAL_TIME_NS_H_

#include <chrono>
#include <cstdint>

#include "jobpact/clock.h"

namespace jobpact {
namespace internal {

inline std::int64_t ToNs(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline std::int64_t ToNs(Duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}
inline TimePoint TimeFromNs(std::int64_t ns) {
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(ns)));
}
inline Duration DurationFromNs(std::int64_t ns) {
  return std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(ns));
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_TIME_NS_H_
