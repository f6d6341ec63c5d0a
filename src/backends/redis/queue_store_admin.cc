// The Redis queue store's reads and operator side (the class:
// queue_store.h): records loaded in pages, listings filtered here over
// pages of the id and time indexes, purges in chunks, stats from the
// counters the scripts keep (never a scan of the jobs), cancel, the control
// state with its audit, and the published policies. Each step is one script
// call or one plain command; none changes a job's state but cancel, which
// only sets the request (StoreBackend::RequestCancel).
#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/retry_policy.h"
#include "jobpact/transitions.h"
#include "src/backends/redis/queue_codec.h"
#include "src/backends/redis/queue_scripts.h"
#include "src/backends/redis/queue_store.h"
#include "src/backends/redis/stores.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace redis_internal {
namespace {

using ::jobpact::internal::TimeFromNs;
using ::jobpact::internal::ToNs;


// Whether a loaded record passes the filters of `q` (all but the order).
bool Matches(const JobQuery& q, const JobRecord& r) {
  if (q.status && r.status != *q.status) return false;
  if (q.job_type && r.envelope.job_type != *q.job_type) return false;
  if (q.queue && r.envelope.queue != *q.queue) return false;
  if (q.after_job_id && r.envelope.job_id <= *q.after_job_id) return false;
  if (q.reason && r.reason != *q.reason) return false;
  if (q.failure_class && (!r.last_failure || r.last_failure->failure_class != *q.failure_class)) {
    return false;
  }
  if (q.finished_after || q.finished_before) {
    if (!r.finished_at) return false;
    if (q.finished_after && *r.finished_at < *q.finished_after) return false;
    if (q.finished_before && *r.finished_at >= *q.finished_before) return false;
  }
  return true;
}

// "<kind>|<subject>|<class>": a control rule's field in the control hash.
std::string RuleField(ControlKind kind, std::string_view subject, FailureClass c) {
  std::string f(ControlKindName(kind));
  f += '|';
  f += subject;
  f += '|';
  if (kind == ControlKind::kRouteToDlq) f += FailureClassName(c);
  return f;
}

}  // namespace

Result<std::vector<JobRecord>> RedisQueueBackend::LoadMany(const std::vector<std::string>& ids) {
  std::vector<JobRecord> out;
  out.reserve(ids.size());
  const TimePoint now = clock()->Now();
  for (std::size_t start = 0; start < ids.size(); start += kChunk) {
    std::vector<std::string> a;
    a.emplace_back("1");
    const std::size_t end = std::min(ids.size(), start + kChunk);
    a.insert(a.end(), ids.begin() + static_cast<std::ptrdiff_t>(start),
             ids.begin() + static_cast<std::ptrdiff_t>(end));
    JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Get", Scripts().load, std::move(a)));
    for (std::size_t i = 0; i < r.elements.size(); ++i) {
      const Reply& e = r.elements[i];
      if (e.is_nil() || e.elements.size() != 2) continue;
      const std::string& id = ids[start + i];
      bool quarantined = false;
      // Shown as it will be quarantined by the next lease or recovery that
      // meets it (a read never writes).
      JOBPACT_ASSIGN_OR_RETURN(JobRecord rec,
                               DecodeOrQuarantine(id, e.elements[0], now, false, &quarantined));
      if (!quarantined) {
        Result<std::vector<Transition>> h = DecodeHistory(e.elements[1].str);
        if (h.ok()) {
          rec.history = std::move(*h);
        } else {
          JobChange q = engine::Quarantine(id, RawFields(e.elements[0]),
                                           "history: " + h.status().message(), now);
          q.record.history = q.append;
          rec = std::move(q.record);
        }
      }
      out.push_back(std::move(rec));
    }
  }
  return out;
}

Result<std::optional<JobRecord>> RedisQueueBackend::LoadJob(std::string_view job_id) {
  JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> r, LoadMany({std::string(job_id)}));
  if (r.empty()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(std::move(r.front()));
}

Result<std::vector<JobRecord>> RedisQueueBackend::QueryJobs(const JobQuery& q) {
  std::vector<JobRecord> out;
  if (q.limit == 0) return out;
  const bool dlq = q.status == JobStatus::kDeadLettered;
  const bool final_status = q.status && IsFinal(*q.status);
  if (q.by_finished_at && (dlq || final_status)) {
    // The DLQ / final index in finished_at order, a page at a time; the
    // filters the index does not hold (type, reason, class) are applied to
    // the records of each page.
    std::size_t offset = 0;
    while (out.size() < q.limit) {
      std::vector<std::string> a;
      a.emplace_back(dlq ? "dlq" : "finished");
      a.push_back(q.finished_after ? TimeArgClamped(*q.finished_after) : std::string());
      a.push_back(q.finished_before ? TimeArgClamped(*q.finished_before) : std::string());
      a.push_back(std::to_string(offset));
      a.push_back(std::to_string(kChunk));
      a.emplace_back(dlq ? std::string() : std::string(JobStatusName(*q.status)));
      JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("QueryJobs", Scripts().scan_time, std::move(a)));
      if (r.elements.empty()) break;
      const std::size_t scanned = static_cast<std::size_t>(r.elements[0].integer);
      std::vector<std::string> ids;
      for (std::size_t i = 1; i < r.elements.size(); ++i) ids.push_back(r.elements[i].str);
      JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> recs, LoadMany(ids));
      for (JobRecord& rec : recs) {
        if (out.size() >= q.limit) break;
        if (Matches(q, rec)) out.push_back(std::move(rec));
      }
      if (scanned < kChunk) break;
      offset += scanned;
    }
    return out;
  }
  // By job id: the id index a page at a time, filtered by status, type and
  // queue in the script, the rest here.
  std::string after = q.after_job_id.value_or(std::string());
  const bool want_all = q.by_finished_at;  // Sorted here after the scan.
  while (want_all || out.size() < q.limit) {
    std::vector<std::string> a;
    a.push_back(after);
    a.push_back(std::to_string(kChunk));
    a.emplace_back(q.status ? std::string(JobStatusName(*q.status)) : std::string());
    a.push_back(q.job_type.value_or(std::string()));
    a.push_back(q.queue.value_or(std::string()));
    JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("QueryJobs", Scripts().scan_ids, std::move(a)));
    if (r.elements.size() < 2) break;
    const std::size_t scanned = static_cast<std::size_t>(r.elements[0].integer);
    after = r.elements[1].str;
    std::vector<std::string> ids;
    for (std::size_t i = 2; i < r.elements.size(); ++i) ids.push_back(r.elements[i].str);
    JOBPACT_ASSIGN_OR_RETURN(std::vector<JobRecord> recs, LoadMany(ids));
    for (JobRecord& rec : recs) {
      if (!want_all && out.size() >= q.limit) break;
      if (Matches(q, rec)) out.push_back(std::move(rec));
    }
    if (scanned < kChunk) break;
  }
  if (want_all) {
    std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
      if (a.finished_at != b.finished_at) return a.finished_at < b.finished_at;
      return a.envelope.job_id < b.envelope.job_id;
    });
    if (out.size() > q.limit) out.resize(q.limit);
  }
  return out;
}

Result<std::optional<std::string>> RedisQueueBackend::FindDuplicateJob(
    std::string_view dedup_key, std::string_view self_job_id, TimePoint since) {
  JOBPACT_ASSIGN_OR_RETURN(
      Reply r, Run("FindDuplicate", Scripts().find_dup,
                   {std::string(dedup_key), std::string(self_job_id), TimeArgClamped(since)}));
  if (r.is_nil()) return std::optional<std::string>();
  return std::optional<std::string>(r.str);
}

Result<int> RedisQueueBackend::DeleteJobs(JobPlacement placement, TimePoint older_than) {
  if (placement != JobPlacement::kDeadLettered && placement != JobPlacement::kFinal) {
    return Status::InvalidArgument("DeleteJobs: only DLQ entries and final jobs are purged");
  }
  const char* what = placement == JobPlacement::kDeadLettered ? "PurgeDeadLetters" : "PurgeFinished";
  const std::string index = placement == JobPlacement::kDeadLettered ? "dlq" : "finished";
  if (ToNs(older_than) <= 0) return 0;
  const std::string cutoff = TimeArgClamped(older_than);
  int total = 0;
  // Chunks of kChunk, each its own script, so a large purge never holds the
  // server long enough to stall the workers.
  while (true) {
    JOBPACT_ASSIGN_OR_RETURN(Reply r,
                             Run(what, Scripts().purge, {index, cutoff, std::to_string(kChunk)}));
    if (r.elements.size() != 2) {
      return Status::Internal(std::string(what) + ": unexpected reply from redis " +
                              client_->server_name());
    }
    total += static_cast<int>(r.elements[0].integer);
    if (r.elements[0].integer < static_cast<long long>(kChunk)) return total;
  }
}

Result<int> RedisQueueBackend::DeleteSurplusJobs(JobStatus status, std::int64_t keep,
                                                 TimePoint dedup_floor, int limit) {
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("TrimFinished", Scripts().trim,
                                        {std::string(JobStatusName(status)), std::to_string(keep),
                                         std::to_string(limit), TimeArgClamped(dedup_floor)}));
  return static_cast<int>(r.integer);
}

Result<QueueStats> RedisQueueBackend::ReadStats(TimePoint now) {
  QueueStats stats;
  for (JobStatus s : kAllJobStatuses) stats.by_status[s] = 0;
  JOBPACT_ASSIGN_OR_RETURN(std::string now_arg, TimeArg(now, "now"));
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Stats", Scripts().stats, {now_arg}));
  if (r.elements.size() != 3 || r.elements[1].elements.size() != r.elements[2].elements.size()) {
    return Status::Internal("Stats: unexpected reply from redis " + client_->server_name());
  }
  // "<status>|<queue>" and "rt|<type>" (the lease step's running count).
  std::map<std::string, QueueStats::PerQueue, std::less<>> per_queue;
  const std::vector<Reply>& flat = r.elements[0].elements;
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) {
    const std::string& field = flat[i].str;
    const std::string& text = flat[i + 1].str;
    std::int64_t v = 0;
    if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc()) continue;
    const std::size_t bar = field.find('|');
    if (bar == std::string::npos) continue;
    Result<JobStatus> st = ParseJobStatus(std::string_view(field).substr(0, bar));
    if (!st.ok()) continue;  // "rt|<type>".
    stats.by_status[*st] += v;
    const std::string queue = field.substr(bar + 1);
    if (queue.empty()) continue;  // Invalid envelopes belong to no queue.
    QueueStats::PerQueue& pq = per_queue[queue];
    if (*st == JobStatus::kQueued || *st == JobStatus::kRetryScheduled) pq.depth += v;
    if (*st == JobStatus::kRunning) pq.running += v;
  }
  stats.dead_letters = stats.by_status[JobStatus::kDeadLettered];
  for (std::size_t i = 0; i < r.elements[1].elements.size(); ++i) {
    const std::string& pair = r.elements[1].elements[i].str;
    const std::string queue = pair.substr(0, pair.find('|'));
    auto [it, fresh] = stats.queues.try_emplace(queue);
    QueueStats::PerQueue& pq = it->second;
    if (fresh) {
      auto c = per_queue.find(queue);
      if (c != per_queue.end()) pq = c->second;
    }
    const std::string& oldest = r.elements[2].elements[i].str;
    if (oldest.empty()) continue;
    JOBPACT_ASSIGN_OR_RETURN(TimePoint at, ParseTime(oldest, "ready_at"));
    if (now > at) pq.oldest_ready_age = std::max(pq.oldest_ready_age, now - at);
  }
  return stats;
}

Status RedisQueueBackend::RequestCancel(const JobChange& c) {
  std::vector<std::string> a;
  a.push_back(c.record.envelope.job_id);
  a.emplace_back(JobStatusName(c.expect.status));
  a.push_back(std::to_string(c.expect.epoch));
  a.push_back(c.expect.lease_token);
  JOBPACT_ASSIGN_OR_RETURN(std::string upd, TimeArg(c.record.updated_at, "updated_at"));
  a.push_back(std::move(upd));
  a.push_back(c.record.audit.empty() ? std::string() : JsonString(c.record.audit.back()));
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Cancel", Scripts().cancel, std::move(a)));
  return ConditionStatus("Cancel", c.record.envelope.job_id, r);
}

Result<ControlState> RedisQueueBackend::LoadControl() {
  JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Command({"HGETALL", prefix_ + "control"}));
  if (r.is_error()) return ReplyError("ReadControl", r);
  ControlState state;
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    nlohmann::json j =
        nlohmann::json::parse(r.elements[i + 1].str, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    Result<ControlKind> kind = ParseControlKind(j.value("kind", std::string()));
    // A kind from a newer library version: not ours to obey or show.
    if (!kind.ok()) continue;
    ControlRule rule;
    rule.kind = *kind;
    rule.subject = j.value("subject", std::string());
    if (rule.kind == ControlKind::kRouteToDlq) {
      Result<FailureClass> c = ParseFailureClass(j.value("failure_class", std::string()));
      if (!c.ok()) continue;
      rule.failure_class = *c;
    }
    rule.limit = j.value("limit", 0);
    rule.actor = j.value("actor", std::string());
    rule.reason = j.value("reason", std::string());
    rule.set_at = TimeFromNs(j.value("set_at_ns", std::int64_t{0}));
    state.rules.push_back(std::move(rule));
  }
  std::sort(state.rules.begin(), state.rules.end(), [](const ControlRule& a, const ControlRule& b) {
    return std::tie(a.kind, a.subject, a.failure_class) <
           std::tie(b.kind, b.subject, b.failure_class);
  });
  return state;
}

Status RedisQueueBackend::WriteControl(const ControlWrite& w) {
  std::vector<std::string> a;
  if (w.set) {
    const ControlRule& rule = *w.set;
    nlohmann::json j = {{"kind", std::string(ControlKindName(rule.kind))},
                        {"subject", rule.subject},
                        {"failure_class", rule.kind == ControlKind::kRouteToDlq
                                              ? std::string(FailureClassName(rule.failure_class))
                                              : std::string()},
                        {"limit", rule.limit},
                        {"actor", rule.actor},
                        {"reason", rule.reason},
                        {"set_at_ns", ToNs(rule.set_at)}};
    a.emplace_back("set");
    a.push_back(RuleField(rule.kind, rule.subject, rule.failure_class));
    a.push_back(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    a.emplace_back(ControlKindName(rule.kind));
    a.push_back(rule.subject);
    a.push_back(std::to_string(rule.limit));
  } else if (w.clear) {
    a.emplace_back("clear");
    a.push_back(RuleField(w.clear->kind, w.clear->subject, w.clear->failure_class));
    a.emplace_back();
    a.emplace_back(ControlKindName(w.clear->kind));
    a.push_back(w.clear->subject);
    a.emplace_back("0");
  } else {
    return Status::InvalidArgument("WriteControl: neither a rule to set nor one to clear");
  }
  a.push_back(w.audit_line);
  a.push_back(std::to_string(kMaxControlAudit));
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("WriteControl", Scripts().control, std::move(a)));
  if (!r.elements.empty() && r.elements[0].integer == static_cast<long long>(StatusCode::kNotFound)) {
    return Status::NotFound("no such control rule");
  }
  return Status::Ok();
}

Result<std::vector<std::string>> RedisQueueBackend::LoadControlAudit(std::size_t limit) {
  JOBPACT_ASSIGN_OR_RETURN(
      Reply r, client_->Command({"LRANGE", prefix_ + "control-audit",
                                 "-" + std::to_string(std::max<std::size_t>(limit, 1)), "-1"}));
  if (r.is_error()) return ReplyError("ControlAudit", r);
  std::vector<std::string> lines;
  lines.reserve(r.elements.size());
  for (Reply& e : r.elements) lines.push_back(std::move(e.str));
  return lines;
}

Status RedisQueueBackend::StorePolicies(const std::vector<PublishedPolicy>& policies) {
  // One HSET of every policy: one atomic command.
  std::vector<std::string> argv{"HSET", prefix_ + "policies"};
  for (const PublishedPolicy& p : policies) {
    nlohmann::json j = {{"policy", RetryPolicyToJson(p.policy)},
                        {"reason", p.reason},
                        {"publisher", p.publisher},
                        {"published_at_ns", ToNs(p.published_at)}};
    argv.push_back(p.job_type);
    argv.push_back(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Command(argv));
  if (r.is_error()) return ReplyError("PublishPolicies", r);
  return Status::Ok();
}

Result<std::vector<PublishedPolicy>> RedisQueueBackend::LoadPolicies() {
  JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Command({"HGETALL", prefix_ + "policies"}));
  if (r.is_error()) return ReplyError("ReadPolicies", r);
  std::vector<PublishedPolicy> out;
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    PublishedPolicy p;
    p.job_type = r.elements[i].str;
    nlohmann::json j =
        nlohmann::json::parse(r.elements[i + 1].str, nullptr, /*allow_exceptions=*/false);
    Result<RetryPolicy> policy =
        j.is_object() ? ParseRetryPolicyJson(j.value("policy", std::string()))
                      : Result<RetryPolicy>(Status::Internal("not a JSON object"));
    if (!policy.ok()) {
      return Status::Internal("ReadPolicies: the stored policy of " + p.job_type + " in redis " +
                              client_->server_name() + " does not parse: " +
                              policy.status().message());
    }
    p.policy = *policy;
    p.reason = j.value("reason", std::string());
    p.publisher = j.value("publisher", std::string());
    p.published_at = TimeFromNs(j.value("published_at_ns", std::int64_t{0}));
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const PublishedPolicy& a, const PublishedPolicy& b) {
    return a.job_type < b.job_type;
  });
  return out;
}

}  // namespace redis_internal
}  // namespace jobpact
