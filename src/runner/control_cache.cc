#include "src/runner/control_cache.h"

#include <utility>

namespace jobpact {
namespace internal {

ControlCache::ControlCache(QueueAdmin& admin, const Clock& clock, Duration refresh)
    : admin_(admin), clock_(clock), refresh_(refresh),
      state_(std::make_shared<const ControlState>()) {}

Status ControlCache::Refresh() {
  Result<ControlState> read = admin_.ReadControl();
  due_at_.store((clock_.Now() + refresh_).time_since_epoch().count(), std::memory_order_release);
  stale_.store(false, std::memory_order_release);
  if (!read.ok()) return read.status();
  auto state = std::make_shared<const ControlState>(std::move(*read));
  MutexLock lock(mu_);
  empty_.store(state->rules.empty(), std::memory_order_release);
  state_ = std::move(state);
  return Status::Ok();
}

Status ControlCache::RefreshIfDue(TimePoint now) {
  if (stale_.load(std::memory_order_acquire) ||
      now.time_since_epoch().count() >= due_at_.load(std::memory_order_acquire)) {
    return Refresh();
  }
  return Status::Ok();
}

std::shared_ptr<const ControlState> ControlCache::Get(Status* error) {
  Status s = RefreshIfDue(clock_.Now());
  if (error != nullptr) *error = std::move(s);
  MutexLock lock(mu_);
  return state_;
}

bool ControlCache::TypePaused(std::string_view job_type, TimePoint now) {
  RefreshIfDue(now).IgnoreError();  // Fail static: the last state read stands.
  if (empty_.load(std::memory_order_acquire)) return false;
  MutexLock lock(mu_);
  return state_->TypePaused(job_type);
}

bool ControlCache::RoutesToDlq(std::string_view job_type, FailureClass c, TimePoint now) {
  RefreshIfDue(now).IgnoreError();
  if (empty_.load(std::memory_order_acquire)) return false;
  MutexLock lock(mu_);
  return state_->RoutesToDlq(job_type, c);
}

std::optional<int> ControlCache::DependencyConcurrencyLimit(std::string_view dependency,
                                                           TimePoint now) {
  RefreshIfDue(now).IgnoreError();
  if (empty_.load(std::memory_order_acquire)) return std::nullopt;
  MutexLock lock(mu_);
  return state_->DependencyConcurrencyLimit(dependency);
}

}  // namespace internal
}  // namespace jobpact
