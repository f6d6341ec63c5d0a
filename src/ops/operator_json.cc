// The operator side's JSON (src/internal/operator_json.h): records, DLQ
// entries, stats, locks, policies and control state, as the jobpact
// command's --json prints them and the dashboard's API serves them.
#include "src/internal/operator_json.h"

#include <chrono>
#include <string>

#include "jobpact/job.h"

namespace jobpact {
namespace internal {

Json TimeJson(TimePoint t) {
  if (t == TimePoint{}) return nullptr;
  return FormatRfc3339(t);
}

double SecondsOf(Duration d) { return std::chrono::duration<double>(d).count(); }

Json FailureToJson(const std::optional<Failure>& f) {
  if (!f) return nullptr;
  Json j;
  j["class"] = std::string(FailureClassName(f->failure_class));
  j["code"] = f->code;
  j["message"] = f->message;
  return j;
}

Json StatsToJson(const QueueStats& s) {
  Json j;
  Json queues = Json::object();
  for (const auto& [name, q] : s.queues) {
    queues[name] = {{"depth", q.depth},
                    {"running", q.running},
                    {"oldest_ready_age_seconds", SecondsOf(q.oldest_ready_age)}};
  }
  j["queues"] = std::move(queues);
  Json by_status = Json::object();
  for (JobStatus st : kAllJobStatuses) {
    auto it = s.by_status.find(st);
    by_status[std::string(JobStatusName(st))] = it == s.by_status.end() ? 0 : it->second;
  }
  j["by_status"] = std::move(by_status);
  j["dead_letters"] = s.dead_letters;
  return j;
}

namespace {

Json HistoryToJson(const std::vector<Transition>& history) {
  Json h = Json::array();
  for (const Transition& t : history) {
    h.push_back({{"from", std::string(JobStatusName(t.from))},
                 {"to", std::string(JobStatusName(t.to))},
                 {"at", TimeJson(t.at)},
                 {"reason", t.reason}});
  }
  return h;
}

Json EnvelopeJson(const Envelope& env) {
  Json j = Json::parse(SerializeEnvelope(env), nullptr, false);
  if (j.is_discarded()) return SerializeEnvelope(env);
  return j;
}

}  // namespace

Json JobSummaryToJson(const JobRecord& r) {
  Json j;
  j["job_id"] = r.envelope.job_id;
  j["job_type"] = r.envelope.job_type;
  j["queue"] = r.envelope.queue;
  j["status"] = std::string(JobStatusName(r.status));
  j["attempt"] = r.envelope.attempt;
  j["max_attempts"] = r.envelope.max_attempts;
  j["enqueued_at"] = TimeJson(r.enqueued_at);
  j["ready_at"] = TimeJson(r.ready_at);
  j["updated_at"] = TimeJson(r.updated_at);
  j["finished_at"] = r.finished_at ? TimeJson(*r.finished_at) : Json(nullptr);
  j["reason"] = r.reason;
  j["last_failure"] = FailureToJson(r.last_failure);
  j["lock_key"] = r.envelope.lock_key;
  return j;
}

Json JobToJson(const JobRecord& r) {
  Json j = JobSummaryToJson(r);
  j["epoch"] = r.epoch;
  j["lease_recoveries"] = r.lease_recoveries;
  j["lock_waits"] = r.lock_waits;
  j["lease_token"] = r.lease_token;
  j["lease_expires_at"] = r.lease_token.empty() ? Json(nullptr) : TimeJson(r.lease_expires_at);
  j["cancel_requested"] = r.cancel_requested;
  j["result"] = r.result;
  j["checkpoint"] = r.checkpoint;
  j["raw_input"] = r.raw_input ? Json(*r.raw_input) : Json(nullptr);
  j["envelope"] = EnvelopeJson(r.envelope);
  j["history"] = HistoryToJson(r.history);
  j["audit"] = r.audit;
  return j;
}

Json DlqToJson(const DlqEntry& e, bool with_history) {
  Json j;
  j["job_id"] = e.job_id;
  j["job_type"] = e.job_type;
  j["queue"] = e.queue;
  j["reason"] = e.reason;
  j["failure_class"] =
      e.last_failure ? Json(std::string(FailureClassName(e.last_failure->failure_class)))
                     : Json(nullptr);
  j["last_failure"] = FailureToJson(e.last_failure);
  j["attempts"] = e.attempts;
  j["created_at"] = TimeJson(e.created_at);
  j["dead_lettered_at"] = TimeJson(e.dead_lettered_at);
  j["trace_id"] = e.trace_id;
  if (with_history) {
    j["payload"] = e.payload;
    j["raw_envelope"] = e.raw_envelope;
    j["history"] = HistoryToJson(e.history);
    j["audit"] = e.audit;
  }
  return j;
}

Json LockToJson(const LockLease& l, TimePoint now) {
  return Json{{"key", l.key},
              {"owner", l.owner},
              {"fencing_token", l.fencing_token},
              {"expires_at", TimeJson(l.expires_at)},
              {"expires_in_seconds", SecondsOf(l.expires_at - now)}};
}

Json PolicyToJson(const PublishedPolicy& p) {
  Json policy = Json::parse(RetryPolicyToJson(p.policy), nullptr, false);
  return Json{{"job_type", p.job_type},
              {"policy", policy.is_discarded() ? Json(nullptr) : policy},
              {"reason", p.reason},
              {"publisher", p.publisher},
              {"published_at", TimeJson(p.published_at)}};
}

Json RateLimiterToJson(const RateLimiterState& r) {
  Json j{{"key", r.key},
         {"backoff_until", r.backoff_until ? TimeJson(*r.backoff_until) : Json()},
         {"backoff_reason", r.backoff_reason},
         {"updated_at", TimeJson(r.updated_at)}};
  if (r.override_limit) {
    j["override"] = Json{{"per_second", r.override_limit->per_second},
                         {"burst", r.override_limit->burst},
                         {"actor", r.override_actor},
                         {"reason", r.override_reason}};
  } else {
    j["override"] = nullptr;
  }
  return j;
}

Json ControlToJson(const ControlState& s) {
  Json rules = Json::array();
  for (const ControlRule& r : s.rules) {
    Json j{{"kind", std::string(ControlKindName(r.kind))}, {"subject", r.subject}};
    if (ControlKindHasLimit(r.kind)) {
      j["limit"] = r.limit;
    }
    if (r.kind == ControlKind::kRouteToDlq) {
      j["failure_class"] = std::string(FailureClassName(r.failure_class));
    }
    j["actor"] = r.actor;
    j["reason"] = r.reason;
    j["set_at"] = TimeJson(r.set_at);
    rules.push_back(std::move(j));
  }
  return Json{{"rules", std::move(rules)}};
}

}  // namespace internal
}  // namespace jobpact
