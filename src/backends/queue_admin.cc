// The value types of the operator side (jobpact/queue_admin.h).
#include "jobpact/queue_admin.h"

#include <algorithm>
#include <string>

namespace jobpact {

QueueAdmin::~QueueAdmin() = default;

Result<int> QueueAdmin::TrimFinished(const FinishedRetention&) {
  return Status::Unimplemented(
      "TrimFinished: this admin does not trim finished jobs by count (only by age: "
      "PurgeFinished)");
}

std::string_view CancelOutcomeName(CancelOutcome o) {
  return o == CancelOutcome::kDiscarded ? "discarded" : "cancel_requested";
}

namespace {

constexpr std::pair<ControlKind, std::string_view> kControlKindNames[] = {
    {ControlKind::kPauseType, "pause_type"},
    {ControlKind::kPauseQueue, "pause_queue"},
    {ControlKind::kConcurrencyLimit, "concurrency_limit"},
    {ControlKind::kRouteToDlq, "route_to_dlq"},
    {ControlKind::kMaxQueueDepth, "max_queue_depth"},
    {ControlKind::kTenantConcurrencyLimit, "tenant_concurrency_limit"},
    {ControlKind::kDependencyConcurrencyLimit, "dependency_concurrency_limit"},
};

const ControlRule* Find(const ControlState& s, ControlKind kind, std::string_view subject) {
  auto it = std::find_if(s.rules.begin(), s.rules.end(), [&](const ControlRule& r) {
    return r.kind == kind && r.subject == subject;
  });
  return it == s.rules.end() ? nullptr : &*it;
}

}  // namespace

std::string_view ControlKindName(ControlKind k) {
  for (const auto& [kind, name] : kControlKindNames) {
    if (kind == k) return name;
  }
  return "unknown";
}

Result<ControlKind> ParseControlKind(std::string_view name) {
  std::string known;
  for (const auto& [kind, n] : kControlKindNames) {
    if (n == name) return kind;
    known += known.empty() ? "" : ", ";
    known += n;
  }
  return Status::InvalidArgument("unknown control kind '" + std::string(name) + "' (known: " +
                                 known + ")");
}

bool ControlKindHasLimit(ControlKind k) {
  return k == ControlKind::kConcurrencyLimit || k == ControlKind::kMaxQueueDepth ||
         k == ControlKind::kTenantConcurrencyLimit || k == ControlKind::kDependencyConcurrencyLimit;
}

bool ControlState::TypePaused(std::string_view job_type) const {
  return Find(*this, ControlKind::kPauseType, job_type) != nullptr;
}

bool ControlState::QueuePaused(std::string_view queue) const {
  return Find(*this, ControlKind::kPauseQueue, queue) != nullptr;
}

std::optional<int> ControlState::ConcurrencyLimit(std::string_view job_type) const {
  const ControlRule* r = Find(*this, ControlKind::kConcurrencyLimit, job_type);
  if (r == nullptr) return std::nullopt;
  return r->limit;
}

std::optional<int> ControlState::MaxQueueDepth(std::string_view queue) const {
  const ControlRule* r = Find(*this, ControlKind::kMaxQueueDepth, queue);
  if (r == nullptr) return std::nullopt;
  return r->limit;
}

std::optional<int> ControlState::TenantConcurrencyLimit(std::string_view queue) const {
  const ControlRule* r = Find(*this, ControlKind::kTenantConcurrencyLimit, queue);
  if (r == nullptr) return std::nullopt;
  return r->limit;
}

std::optional<int> ControlState::DependencyConcurrencyLimit(std::string_view dependency) const {
  const ControlRule* r = Find(*this, ControlKind::kDependencyConcurrencyLimit, dependency);
  if (r == nullptr) return std::nullopt;
  return r->limit;
}

bool ControlState::RoutesToDlq(std::string_view job_type, FailureClass c) const {
  return std::any_of(rules.begin(), rules.end(), [&](const ControlRule& r) {
    return r.kind == ControlKind::kRouteToDlq && r.subject == job_type && r.failure_class == c;
  });
}

}  // namespace jobpact
