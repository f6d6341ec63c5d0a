// Backpressure at enqueue (ControlKind::kMaxQueueDepth): the check and the
// refusal every store makes inside its enqueue step, worded the same way.
#ifndef JOBPACT_SRC_INTERNAL_BACKPRESSURE_H_
#define JOBPACT_SRC_INTERNAL_BACKPRESSURE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/status.h"
#include "jobpact/store_backend.h"

namespace jobpact::internal {

// How many jobs of `jobs` go to each queue, in order of first appearance
// (an invalid envelope's empty queue is left out: it belongs to none).
inline std::vector<std::pair<std::string_view, std::int64_t>> JobsPerQueue(
    const std::vector<JobChange>& jobs) {
  std::vector<std::pair<std::string_view, std::int64_t>> out;
  for (const JobChange& c : jobs) {
    std::string_view q = c.record.envelope.queue;
    if (q.empty()) continue;
    auto it = out.begin();
    while (it != out.end() && it->first != q) ++it;
    if (it == out.end()) {
      out.emplace_back(q, 1);
    } else {
      ++it->second;
    }
  }
  return out;
}

// OK if `adding` more jobs fit in `queue` at `depth` under `limit`; else
// kResourceExhausted naming the queue, its depth and the limit.
inline Status CheckQueueDepth(std::string_view queue, std::int64_t depth, std::int64_t adding,
                              std::int64_t limit) {
  if (depth + adding <= limit) return Status::Ok();
  std::string what = adding == 1 ? "the job is" : std::to_string(adding) + " jobs are";
  return Status::ResourceExhausted(
      "queue " + std::string(queue) + " is at depth " + std::to_string(depth) +
      " of its maximum " + std::to_string(limit) + " (control rule max_queue_depth): " + what +
      " not enqueued; retry later, or raise the limit (jobpact depth-limit " + std::string(queue) +
      " N)");
}

}  // namespace jobpact::internal

#endif  // JOBPACT_SRC_INTERNAL_BACKPRESSURE_H_
