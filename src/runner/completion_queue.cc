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

void CompletionQueue::Close() {
  MutexLock l(mu_);
  open_ = false;
  ready_.NotifyAll();
  room_.NotifyAll();
}

}  // namespace internal
}  // namespace jobpact
