#include "src/runner/completion_queue.h"

#include <iterator>
#include <utility>

namespace jobpact {
namespace internal {

void CompletionQueue::Open() {
  MutexLock l(mu_);
  open_ = true;
}

bool CompletionQueue::Push(CompletionRequest&& request, const AfterAck& after) {
  MutexLock l(mu_);
  while (open_ && requests_.size() >= capacity_) room_.Wait(mu_);
  if (!open_) return false;
  AddGuards(request);
  requests_.push_back(std::move(request));
  after_.push_back(after);
  if (requests_.size() == 1) ready_.NotifyOne();
  return true;
}

bool CompletionQueue::Pop(std::size_t max, std::vector<CompletionRequest>* requests,
                          std::vector<AfterAck>* after) {
  MutexLock l(mu_);
  while (open_ && requests_.empty()) ready_.Wait(mu_);
  if (requests_.empty()) return false;  // Closed and drained.
  if (requests_.size() <= max) {
    // Swapped, so that both sides keep reusing their buffers.
    requests->swap(requests_);
    after->swap(after_);
  } else {
    const auto n = static_cast<std::ptrdiff_t>(max);
    requests->assign(std::make_move_iterator(requests_.begin()),
                     std::make_move_iterator(requests_.begin() + n));
    requests_.erase(requests_.begin(), requests_.begin() + n);
    after->assign(after_.begin(), after_.begin() + n);
    after_.erase(after_.begin(), after_.begin() + n);
  }
  room_.NotifyAll();
  return true;
}

void CompletionQueue::AddGuards(const CompletionRequest& request) {
  const CompletionGuards& g = request.completion.guards;
  if (!g.any()) return;
  const Envelope& env = request.delivery.job.envelope;
  if (g.release_lock) pending_locks_.insert(env.lock_key);
  if (g.claim != CompletionGuards::Claim::kKeep) pending_claims_.insert(env.idempotency_key);
  pending_guards_.fetch_add(1, std::memory_order_relaxed);
}

void CompletionQueue::Written(const std::vector<CompletionRequest>& requests) {
  if (pending_guards_.load(std::memory_order_relaxed) == 0) return;
  MutexLock l(mu_);
  bool any = false;
  for (const CompletionRequest& r : requests) {
    const CompletionGuards& g = r.completion.guards;
    if (!g.any()) continue;
    const Envelope& env = r.delivery.job.envelope;
    if (g.release_lock) pending_locks_.erase(pending_locks_.find(env.lock_key));
    if (g.claim != CompletionGuards::Claim::kKeep) {
      pending_claims_.erase(pending_claims_.find(env.idempotency_key));
    }
    pending_guards_.fetch_sub(1, std::memory_order_relaxed);
    any = true;
  }
  if (any) written_.NotifyAll();
}

bool CompletionQueue::Pending(std::string_view lock_key, std::string_view idempotency_key) const {
  return (!lock_key.empty() && pending_locks_.find(lock_key) != pending_locks_.end()) ||
         (!idempotency_key.empty() && pending_claims_.find(idempotency_key) != pending_claims_.end());
}

void CompletionQueue::AwaitGuards(std::string_view lock_key, std::string_view idempotency_key) {
  // A worker's own outcomes were pushed on its thread, so it sees their
  // count; another worker's may be missed by a hair, which is the ordinary
  // race for a key between two workers.
  if (pending_guards_.load(std::memory_order_relaxed) == 0) return;
  MutexLock l(mu_);
  while (Pending(lock_key, idempotency_key)) written_.Wait(mu_);
}

void CompletionQueue::Close() {
  MutexLock l(mu_);
  open_ = false;
  ready_.NotifyAll();
  room_.NotifyAll();
}

}  // namespace internal
}  // namespace jobpact
