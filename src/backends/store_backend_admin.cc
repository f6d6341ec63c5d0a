// StoreBackend: the QueueAdmin methods that are new with the operator side
// (job listing, cancel, control state, published policies), once for every
// store. The DLQ methods are in store_backend.cc beside the other changes
// the engine computes.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/store_backend.h"
#include "src/internal/guarded.h"
#include "src/internal/names.h"

namespace jobpact {

using internal::Guarded;

namespace {

constexpr std::size_t kMaxListLimit = 10000;
// A concurrency limit above this is a typo, not a limit.
constexpr int kMaxConcurrencyLimit = 1000000;
constexpr int kMaxQueueDepthLimit = 1000000000;

// Who and why, as engine::AuditLine takes them.
DlqAction Who(std::string_view actor, std::string_view reason) {
  DlqAction who;
  who.actor = std::string(actor);
  who.reason = std::string(reason);
  return who;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

Status CheckWho(std::string_view what, std::string_view actor, std::string_view reason) {
  if (IsBlank(actor)) return Status::InvalidArgument(std::string(what) + ": needs an actor (who)");
  if (IsBlank(reason)) return Status::InvalidArgument(std::string(what) + ": needs a reason (why)");
  // Both go into the audit trail, JSON in the durable stores, where bytes
  // that are not UTF-8 would be replaced: refused, so every store keeps
  // exactly what the operator wrote.
  if (!internal::IsOperatorText(actor) || !internal::IsOperatorText(reason)) {
    return Status::InvalidArgument(std::string(what) +
                                   ": the actor and the reason must be valid UTF-8 without NUL");
  }
  return Status::Ok();
}

Status CheckSubject(std::string_view what, std::string_view subject) {
  if (!internal::IsSafeName(subject)) {
    return Status::InvalidArgument(std::string(what) + ": '" + std::string(subject) +
                                   "' is not a safe job type or queue name ([A-Za-z0-9._:-], "
                                   "1 to 255 characters)");
  }
  return Status::Ok();
}

// "pause_type payments.charge", "route_to_dlq payments.charge unknown",
// "concurrency_limit payments.charge 4".
std::string Describe(ControlKind kind, std::string_view subject, FailureClass c,
                     std::optional<int> limit) {
  std::string out(ControlKindName(kind));
  out += ' ';
  out += subject;
  if (kind == ControlKind::kRouteToDlq) {
    out += ' ';
    out += FailureClassName(c);
  }
  if (limit) out += " " + std::to_string(*limit);
  return out;
}

}  // namespace

Result<std::vector<JobRecord>> StoreBackend::ListJobs(const JobFilter& f) {
  return Guarded("ListJobs", [&]() -> Result<std::vector<JobRecord>> {
    if (f.limit < 1 || f.limit > kMaxListLimit) {
      return Status::InvalidArgument("ListJobs: limit must be 1.." + std::to_string(kMaxListLimit) +
                                     ", not " + std::to_string(f.limit));
    }
    if (f.job_type) JOBPACT_RETURN_IF_ERROR(CheckSubject("ListJobs", *f.job_type));
    if (f.queue) JOBPACT_RETURN_IF_ERROR(CheckSubject("ListJobs", *f.queue));
    JobQuery q;
    q.status = f.status;
    q.job_type = f.job_type;
    q.queue = f.queue;
    q.after_job_id = f.after_job_id;
    q.limit = f.limit;
    return QueryJobs(q);
  });
}

Result<CancelOutcome> StoreBackend::Cancel(std::string_view job_id, const DlqAction& action) {
  return Guarded("Cancel", [&]() -> Result<CancelOutcome> {
    JOBPACT_RETURN_IF_ERROR(CheckWho("Cancel", action.actor, action.reason));
    JOBPACT_ASSIGN_OR_RETURN(JobRecord r, MustLoad(job_id, "Cancel"));
    JOBPACT_ASSIGN_OR_RETURN(JobChange c, engine::Cancel(r, action, clock_->Now()));
    if (c.record.status == JobStatus::kRunning) {
      JOBPACT_RETURN_IF_ERROR(RequestCancel(c));
      return CancelOutcome::kCancelRequested;
    }
    JOBPACT_RETURN_IF_ERROR(WriteOne(std::move(c)));
    return CancelOutcome::kDiscarded;
  });
}

Result<ControlState> StoreBackend::ReadControl() {
  return Guarded("ReadControl", [&] { return LoadControl(); });
}

Status StoreBackend::SetControl(const ControlRule& rule) {
  return Guarded("SetControl", [&]() -> Status {
    JOBPACT_RETURN_IF_ERROR(CheckWho("SetControl", rule.actor, rule.reason));
    JOBPACT_RETURN_IF_ERROR(CheckSubject("SetControl", rule.subject));
    if (ControlKindName(rule.kind) == "unknown") {
      return Status::InvalidArgument("SetControl: unknown control kind");
    }
    if (ControlKindHasLimit(rule.kind) && rule.kind != ControlKind::kMaxQueueDepth &&
        (rule.limit < 0 || rule.limit > kMaxConcurrencyLimit)) {
      return Status::InvalidArgument("SetControl: a concurrency limit must be 0.." +
                                     std::to_string(kMaxConcurrencyLimit) + ", not " +
                                     std::to_string(rule.limit));
    }
    if (rule.kind == ControlKind::kMaxQueueDepth &&
        (rule.limit < 0 || rule.limit > kMaxQueueDepthLimit)) {
      return Status::InvalidArgument("SetControl: a maximum queue depth must be 0.." +
                                     std::to_string(kMaxQueueDepthLimit) + ", not " +
                                     std::to_string(rule.limit));
    }
    ControlWrite w;
    w.set = rule;
    w.set->set_at = clock_->Now();
    if (rule.kind != ControlKind::kRouteToDlq) w.set->failure_class = FailureClass::kUnknown;
    if (!ControlKindHasLimit(rule.kind)) w.set->limit = 0;
    std::optional<int> limit;
    if (ControlKindHasLimit(rule.kind)) limit = rule.limit;
    w.audit_line = engine::AuditLine(
        "set " + Describe(rule.kind, rule.subject, rule.failure_class, limit), w.set->set_at,
        Who(rule.actor, rule.reason));
    return WriteControl(w);
  });
}

Status StoreBackend::ClearControl(const ControlRuleKey& key, std::string_view actor,
                                  std::string_view reason) {
  return Guarded("ClearControl", [&]() -> Status {
    JOBPACT_RETURN_IF_ERROR(CheckWho("ClearControl", actor, reason));
    JOBPACT_RETURN_IF_ERROR(CheckSubject("ClearControl", key.subject));
    ControlWrite w;
    w.clear = key;
    if (key.kind != ControlKind::kRouteToDlq) w.clear->failure_class = FailureClass::kUnknown;
    w.audit_line = engine::AuditLine(
        "clear " + Describe(key.kind, key.subject, key.failure_class, std::nullopt),
        clock_->Now(), Who(actor, reason));
    Status s = WriteControl(w);
    if (s.code() == StatusCode::kNotFound) {
      return Status::NotFound("ClearControl: no rule " +
                              Describe(key.kind, key.subject, key.failure_class, std::nullopt) +
                              " is set");
    }
    return s;
  });
}

Result<std::vector<std::string>> StoreBackend::ControlAudit(std::size_t limit) {
  return Guarded("ControlAudit", [&]() -> Result<std::vector<std::string>> {
    if (limit < 1 || limit > kMaxListLimit) {
      return Status::InvalidArgument("ControlAudit: limit must be 1.." +
                                     std::to_string(kMaxListLimit));
    }
    return LoadControlAudit(limit);
  });
}

Status StoreBackend::PublishPolicies(const std::vector<PublishedPolicy>& policies) {
  return Guarded("PublishPolicies", [&]() -> Status {
    std::vector<PublishedPolicy> stored;
    stored.reserve(policies.size());
    for (const PublishedPolicy& p : policies) {
      const bool is_default = p.job_type == kDefaultPolicyType;
      if (!is_default) JOBPACT_RETURN_IF_ERROR(CheckSubject("PublishPolicies", p.job_type));
      if (Status v = ValidateRetryPolicy(p.policy); !v.ok()) {
        return Status::InvalidArgument("PublishPolicies: policy of " + p.job_type + ": " +
                                       v.message());
      }
      if (!is_default && IsBlank(p.reason)) {
        return Status::InvalidArgument("PublishPolicies: the override of " + p.job_type +
                                       " has no written reason");
      }
      stored.push_back(p);
      stored.back().published_at = clock_->Now();
    }
    if (stored.empty()) return Status::Ok();
    return StorePolicies(stored);
  });
}

Result<std::vector<PublishedPolicy>> StoreBackend::ReadPolicies() {
  return Guarded("ReadPolicies", [&] { return LoadPolicies(); });
}

}  // namespace jobpact
