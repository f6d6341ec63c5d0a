// File: src/runner/completion_queue.h
//
// The hand-over between a started runner's workers and its completion
// writer (JobRunnerOptions::CompletionWrites::kGrouped): a worker pushes its
// finished job's outcome and goes on to its next job; the writer pops
// whatever accumulated and stores it in one QueueBackend::CompleteBatch,
// then does the rest of step 9 (RunnerCore::AfterWrite). Nothing waits for
// a group to fill: Pop returns as soon as one outcome is there, so a group
// is what arrived while the previous write ran.
//
// Bounded: Push blocks while `capacity` outcomes wait, so a slow store slows
// the workers down instead of growing the queue.
//
// An outcome may carry guards the writer releases or records with it
// (Completion::guards); until it is written, the next job with the same
// lock or idempotency key waits for it (AwaitGuards) instead of finding
// the key taken.
//
// Thread-safe.
#ifndef JOBPACT_SRC_RUNNER_COMPLETION_QUEUE_H_
#define JOBPACT_SRC_RUNNER_COMPLETION_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/queue_backend.h"
#include "src/internal/mutex.h"

namespace jobpact {
namespace internal {

// What step 9 still does for a delivery once its outcome is written.
struct AfterAck {
  // A transactional effect commits with the ack: record the idempotent
  // result after it (RunnerCore::RecordAfterAck).
  bool record_result = false;
  // The lock is still held (kept across the write for a transactional effect).
  bool release_lock = false;
  // For the transition's event.
  bool handler_ran = false;
  Duration queue_latency{};
  Duration handler_duration{};
};

class CompletionQueue {
 public:
  explicit CompletionQueue(std::size_t capacity) : capacity_(capacity) {}

  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Push accepts outcomes from now on. Initially closed.
  void Open();
  // Hands one outcome over, waiting while the queue is full. False if the
  // queue is closed (not yet opened, or shut down): nothing was taken and
  // the caller writes the outcome itself.
  bool Push(CompletionRequest&& request, const AfterAck& after);
  // Waits until an outcome is there, then moves up to `max` of them (the
  // oldest first) into the empty vectors `requests` and `after`. False once
  // the queue is closed and empty: the writer is done.
  bool Pop(std::size_t max, std::vector<CompletionRequest>* requests,
           std::vector<AfterAck>* after);
  // Push refuses from now on; Pop still hands out what is queued.
  void Close();
  // The writer stored `requests` (as Pop gave them): their guards are no
  // longer pending.
  void Written(const std::vector<CompletionRequest>& requests);
  // Waits while an outcome handed over and not yet written releases the
  // lock `lock_key` or releases or records the claim `idempotency_key`
  // (empty: none). Returns at once when no outcome carries guards.
  void AwaitGuards(std::string_view lock_key, std::string_view idempotency_key);

 private:
  void AddGuards(const CompletionRequest& request) JOBPACT_REQUIRES(mu_);
  bool Pending(std::string_view lock_key, std::string_view idempotency_key) const
      JOBPACT_REQUIRES(mu_);

  const std::size_t capacity_;
  PlainMutex mu_;
  CondVar ready_;  // An outcome arrived, or closed.
  CondVar room_;   // An outcome left, or closed.
  bool open_ JOBPACT_GUARDED_BY(mu_) = false;
  std::vector<CompletionRequest> requests_ JOBPACT_GUARDED_BY(mu_);
  // after_[i] goes with requests_[i].
  std::vector<AfterAck> after_ JOBPACT_GUARDED_BY(mu_);
  // The keys of the guards pushed and not yet written, and how many.
  std::multiset<std::string, std::less<>> pending_locks_ JOBPACT_GUARDED_BY(mu_);
  std::multiset<std::string, std::less<>> pending_claims_ JOBPACT_GUARDED_BY(mu_);
  std::atomic<std::size_t> pending_guards_{0};
  CondVar written_;  // Pending guards were written.
};

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_RUNNER_COMPLETION_QUEUE_H_
