// The Redis queue store: the storage primitives of StoreBackend, each one
// Lua script (queue_scripts.cc, with the key layout) run by the server, so
// every state change is one atomic step for every client of the namespace.
// What a change does to a job is the engine's (jobpact/transitions.h): a
// write stores the record the engine computed, conditional on (job id,
// status, epoch, lease token). The two steps that run in the store follow
// the SQLite store:
//   - the lease script picks the jobs and marks them leased (the few fields
//     engine::Deliver changes) and returns each record as it was; here
//     engine::Deliver is applied to that record to build the Delivery, and
//     must agree with what the script stored (kInternal otherwise: a bug);
//   - recovery reads the expired leases, applies engine::RecoverLease here,
//     and writes each change conditionally (also on the lease still being
//     expired, so a renewal in between wins), several in one round trip.
// All time is the `now` passed in (the store's Clock), never Redis TIME.
//
// Sizes: EnqueueBatch is one script (all or nothing), which the server runs
// at roughly 30 us per job here, so batches of a few thousand keep it from
// holding the server long (Redis answers BUSY to others past its
// lua-time-limit, 5 s). Writes go 64 to a script, recovery and purges
// 1000 jobs to a script, listings a page of 1000 ids at a time.
#include "src/backends/redis/queue_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <charconv>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/redis/redis_effect.h"
#include "jobpact/retry_policy.h"
#include "jobpact/transitions.h"
#include "src/backends/redis/queue_codec.h"
#include "src/backends/redis/queue_scripts.h"
#include "src/backends/redis/stores.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

// Jobs read or written per script call where a step is chunked (recovery,
// purge, listing pages), so no call holds the server for long.
constexpr std::size_t kChunk = 1000;
// Writes per write_many script call (WriteJobs).
constexpr std::size_t kWritesPerCall = 64;
// Control audit lines kept.
constexpr int kMaxControlAudit = 10000;
// How long the completion script keeps an idempotency record it completes
// (JobRunnerOptions::idempotency_retention's default; the runner's own
// Complete after the ack then finds it done and leaves it).
constexpr Duration kIdempotencyRetention = std::chrono::hours(24);

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

std::int64_t NsOf(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
TimePoint FromNsInt(std::int64_t ns) {
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(ns)));
}

// The queue store of one namespace. Holds no state of its own beyond its
// immutable handles: every state change is one script on the server, so
// several of these (threads, processes, hosts) share one queue.
// Thread-safe.
class RedisQueueBackend final : public StoreBackend {
 public:
  RedisQueueBackend(std::shared_ptr<RedisClient> client, const RedisKeys& keys,
                    std::shared_ptr<Clock> clock)
      : StoreBackend(std::move(clock)),
        client_(std::move(client)),
        keys_(keys),
        prefix_(keys.prefix()),
        script_keys_{prefix_} {}

  std::string_view Name() const override { return "redis"; }

  // BLPOP on the namespace's wake list, which every enqueue and requeue
  // that makes a job ready pushes to: an idle worker in any process starts
  // the job at once. On its own connection, so waiting holds no pool slot.
  Result<bool> WaitForWork(Duration timeout) override;

 protected:
  Result<std::vector<EnqueueResult>> InsertJobs(std::vector<JobChange>& jobs,
                                                const EnqueueOptions& options,
                                                TimePoint now) override;
  std::vector<Status> WriteJobs(std::vector<JobWrite>& writes) override;
  Status LeaseJobs(const DequeueRequest& request, TimePoint now,
                   std::vector<Delivery>* deliveries) override;
  Result<Lease> RenewLease(const Lease& lease, TimePoint expires_at, std::string_view checkpoint,
                           TimePoint now) override;
  Result<std::vector<JobChange>> RecoverJobs(int max_recoveries, TimePoint now) override;
  Result<std::optional<JobRecord>> LoadJob(std::string_view job_id) override;
  Result<std::vector<JobRecord>> QueryJobs(const JobQuery& query) override;
  Result<std::optional<std::string>> FindDuplicateJob(std::string_view dedup_key,
                                                      std::string_view self_job_id,
                                                      TimePoint since) override;
  Result<int> DeleteJobs(JobPlacement placement, TimePoint older_than) override;
  Result<QueueStats> ReadStats(TimePoint now) override;
  Status RequestCancel(const JobChange& change) override;
  Result<ControlState> LoadControl() override;
  Status WriteControl(const ControlWrite& write) override;
  Result<std::vector<std::string>> LoadControlAudit(std::size_t limit) override;
  Status StorePolicies(const std::vector<PublishedPolicy>& policies) override;
  Result<std::vector<PublishedPolicy>> LoadPolicies() override;

 private:
  // A script's reply: a failed call, or an error reply from the server
  // (a bug or a server problem), as a Status naming the server and `what`.
  Result<Reply> Run(std::string_view what, const Script& script, std::vector<std::string> args);
  Status ReplyError(std::string_view what, const Reply& r) const;
  // The Status of a {code, ...} reply of a conditional script.
  Status ConditionStatus(std::string_view what, std::string_view job_id, const Reply& r) const;
  // The arguments of the write script for `c`; `expired_by` non-empty:
  // only if the stored lease has expired by then. Effect ops appended.
  Status WriteArgs(const JobChange& c, const std::string& expired_by,
                   const redis::RedisEffect* effect, std::vector<std::string>* args) const;
  // The record of fields `f` of job `id`, or -- for a record that no longer
  // decodes -- the record quarantined in its place (written, if `write`),
  // with `*quarantined` set.
  Result<JobRecord> DecodeOrQuarantine(const std::string& id, const Reply& f, TimePoint now,
                                       bool write, bool* quarantined);
  // Records of `ids` (with history), in order; absent ones skipped.
  Result<std::vector<JobRecord>> LoadMany(const std::vector<std::string>& ids);

  const std::shared_ptr<RedisClient> client_;
  const RedisKeys keys_;
  const std::string prefix_;
  const std::vector<std::string> script_keys_;  // KEYS of every script: the prefix.
};

Result<Reply> RedisQueueBackend::Run(std::string_view what, const Script& script,
                                     std::vector<std::string> args) {
  JOBPACT_ASSIGN_OR_RETURN(Reply r, client_->Eval(script, script_keys_, args));
  if (r.is_error()) return ReplyError(what, r);
  return r;
}

Status RedisQueueBackend::ReplyError(std::string_view what, const Reply& r) const {
  return Status::Internal(std::string(what) + ": redis " + client_->server_name() +
                          " refused the script: " + r.str);
}

Status RedisQueueBackend::ConditionStatus(std::string_view what, std::string_view job_id,
                                          const Reply& r) const {
  if (r.is_error()) return ReplyError(what, r);
  if (r.type != Reply::Type::kArray || r.elements.empty()) {
    return Status::Internal(std::string(what) + ": unexpected reply from redis " +
                            client_->server_name());
  }
  const long long code = r.elements[0].integer;
  const std::string id(job_id);
  switch (code) {
    case 0:
      return Status::Ok();
    case static_cast<long long>(StatusCode::kNotFound):
      return Status::NotFound(std::string(what) + ": no job " + id);
    case static_cast<long long>(StatusCode::kAborted): {
      std::string st = r.elements.size() > 1 ? r.elements[1].str : "";
      std::string ep = r.elements.size() > 2 ? r.elements[2].str : "";
      if (r.elements.size() > 3) {
        return Status::Aborted(std::string(what) + ": the lease of job " + id +
                               " was renewed meanwhile: it has not expired");
      }
      return Status::Aborted(std::string(what) + ": stale lease on job " + id + " (job epoch " +
                             ep + ", status " + st + "): the job was taken over or finished");
    }
    case 11:
      return Status::Aborted(
          std::string(what) + ": the idempotency claim of job " + id + " is no longer held by " +
          "this delivery (" + (r.elements.size() > 1 ? r.elements[1].str : std::string()) +
          " by " + (r.elements.size() > 2 ? r.elements[2].str : std::string()) +
          "): the completion and its transactional effect were not written");
    case static_cast<long long>(StatusCode::kFailedPrecondition):
      return Status::FailedPrecondition(
          std::string(what) + ": the transactional effect of job " + id +
          " cannot apply, nothing was written: " +
          (r.elements.size() > 1 ? r.elements[1].str : std::string()));
    default:
      return Status::Internal(std::string(what) + ": unexpected code " + std::to_string(code) +
                              " from redis " + client_->server_name());
  }
}

Status RedisQueueBackend::WriteArgs(const JobChange& c, const std::string& expired_by,
                                    const redis::RedisEffect* effect,
                                    std::vector<std::string>* a) const {
  // Every change of a stored job adds one history entry at most.
  if (c.append.size() > 1) {
    return Status::Internal("write job: more than one history entry in one change");
  }
  const JobRecord& r = c.record;
  a->reserve(36 + (effect ? effect->writes().size() * 4 : 0));
  a->push_back(r.envelope.job_id);
  a->emplace_back(JobStatusName(c.expect.status));
  a->push_back(std::to_string(c.expect.epoch));
  a->push_back(c.expect.lease_token);
  a->push_back(expired_by);
  a->emplace_back("0");  // Not a quarantine.
  a->emplace_back();
  a->emplace_back();
  JOBPACT_RETURN_IF_ERROR(AppendRecordArgs(r, a));
  JOBPACT_ASSIGN_OR_RETURN(IndexEntry ix, IndexOf(r, c.placement));
  a->push_back(std::move(ix.key));
  a->push_back(std::move(ix.member));
  a->push_back(std::move(ix.score));
  if ((r.status == JobStatus::kQueued || r.status == JobStatus::kRetryScheduled) &&
      !r.envelope.queue.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(std::string score, ReadyScoreOf(r));
    a->push_back(std::move(score));
  } else {
    a->emplace_back();
  }
  a->push_back(c.append.empty() ? std::string() : HistoryEntryJson(c.append.back()));
  const std::size_t n = effect ? effect->writes().size() : 0;
  a->push_back(std::to_string(n));
  for (std::size_t i = 0; i < n; ++i) {
    const redis::RedisEffect::Write& w = effect->writes()[i];
    a->push_back(w.op);
    a->push_back(w.key);
    a->push_back(w.arg1);
    a->push_back(w.arg2);
  }
  // A transactional success completes this delivery's idempotency claim in
  // the same step (as the SQLite store does in its transaction).
  const std::string& key = r.envelope.idempotency_key;
  if (effect != nullptr && r.status == JobStatus::kSucceeded && !key.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
    const std::int64_t now_us = ToMicros(r.updated_at);
    a->push_back(std::move(record_key));
    a->push_back(std::to_string(now_us));
    a->push_back(std::to_string(now_us + ToMicros(kIdempotencyRetention)));
    a->push_back(GcMillis(kIdempotencyRetention));
    a->push_back(keys_.IdempotencyIndex());
    a->push_back(key);
    a->push_back(r.result);
  } else {
    a->emplace_back();
  }
  return Status::Ok();
}

Result<JobRecord> RedisQueueBackend::DecodeOrQuarantine(const std::string& id, const Reply& f,
                                                        TimePoint now, bool write,
                                                        bool* quarantined) {
  *quarantined = false;
  Result<JobRecord> rec = DecodeRecord(id, f);
  if (rec.ok()) return rec;
  // A record nobody can read must not block the others: it leaves the state
  // machine as a DLQ entry with all its fields kept (SPEC 1: never dropped).
  JobChange q = engine::Quarantine(id, RawFields(f), rec.status().message(), now);
  *quarantined = true;
  if (write) {
    std::vector<std::string> a;
    a.push_back(id);
    a.emplace_back();
    a.emplace_back("0");
    a.emplace_back();
    a.emplace_back();
    a.emplace_back("1");  // Unconditional: there is no state machine to consult.
    a.emplace_back();     // No queue, no type: it can never run.
    a.emplace_back();
    JOBPACT_RETURN_IF_ERROR(AppendRecordArgs(q.record, &a));
    JOBPACT_ASSIGN_OR_RETURN(IndexEntry ix, IndexOf(q.record, q.placement));
    a.push_back(std::move(ix.key));
    a.push_back(std::move(ix.member));
    a.push_back(std::move(ix.score));
    a.emplace_back();
    a.push_back(HistoryEntryJson(q.append.back()));
    a.emplace_back("0");  // No effect ops,
    a.emplace_back();     // no idempotency claim.
    JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("quarantine", Scripts().write, std::move(a)));
    JOBPACT_RETURN_IF_ERROR(ConditionStatus("quarantine", id, r));
  }
  q.record.history = q.append;
  return std::move(q.record);
}

Result<std::vector<EnqueueResult>> RedisQueueBackend::InsertJobs(std::vector<JobChange>& jobs,
                                                                 const EnqueueOptions& options,
                                                                 TimePoint now) {
  std::vector<std::string> a;
  a.reserve(2 + jobs.size() * 36);
  // A dedup match is now - enqueued_at < window, so a zero window disables
  // dedup (the in-memory reference's rule).
  if (options.dedup_window > Duration::zero()) {
    a.push_back(TimeArgClamped(now - options.dedup_window));
  } else {
    a.emplace_back();
  }
  a.push_back(std::to_string(jobs.size()));
  for (const JobChange& c : jobs) {
    const JobRecord& r = c.record;
    const Envelope& env = r.envelope;
    if (c.append.size() != 1) {
      return Status::Internal("Enqueue: a new job has " + std::to_string(c.append.size()) +
                              " history entries, not 1");
    }
    a.push_back(env.job_id);
    a.push_back(env.dedup_key);
    a.push_back(SerializeEnvelope(env));
    a.push_back(env.queue);
    a.push_back(env.job_type);
    a.push_back(std::to_string(env.priority));
    a.push_back(std::to_string(NsOf(TimePoint{} + env.visibility_timeout)));
    JOBPACT_ASSIGN_OR_RETURN(std::string enq, TimeArg(r.enqueued_at, "enqueued_at"));
    a.push_back(std::move(enq));
    JOBPACT_RETURN_IF_ERROR(AppendRecordArgs(r, &a));
    JOBPACT_ASSIGN_OR_RETURN(IndexEntry ix, IndexOf(r, c.placement));
    a.push_back(std::move(ix.key));
    a.push_back(std::move(ix.member));
    a.push_back(std::move(ix.score));
    a.push_back(ReadyKeyOf(r));
    if (env.queue.empty()) {
      a.emplace_back();
    } else {
      JOBPACT_ASSIGN_OR_RETURN(std::string score, ReadyScoreOf(r));
      a.push_back(std::move(score));
    }
    a.push_back(HistoryEntryJson(c.append.front()));
  }
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Enqueue", Scripts().insert, std::move(a)));
  if (r.type != Reply::Type::kArray || r.elements.empty()) {
    return Status::Internal("Enqueue: unexpected reply from redis " + client_->server_name());
  }
  if (r.elements[0].integer == static_cast<long long>(StatusCode::kAlreadyExists)) {
    return Status::AlreadyExists("Enqueue: job id " + r.elements[1].str + " already exists");
  }
  if (r.elements.size() != 1 + 3 * jobs.size()) {
    return Status::Internal("Enqueue: redis " + client_->server_name() + " answered " +
                            std::to_string(r.elements.size()) + " values for " +
                            std::to_string(jobs.size()) + " jobs");
  }
  std::vector<EnqueueResult> out;
  out.reserve(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EnqueueResult e;
    e.duplicate = r.elements[1 + 3 * i].integer == 1;
    e.job_id = r.elements[2 + 3 * i].str;
    JOBPACT_ASSIGN_OR_RETURN(e.status, ParseJobStatus(r.elements[3 + 3 * i].str));
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Status> RedisQueueBackend::WriteJobs(std::vector<JobWrite>& writes) {
  std::vector<Status> out(writes.size());
  // The writes go in groups of kWritesPerCall, one write_many script each,
  // all groups in one round trip: each write is checked and written alone
  // inside its script (a refused one leaves the others as they are).
  std::vector<ScriptCall> calls;
  std::vector<std::vector<std::size_t>> index;  // index[c][k]: write k of call c.
  for (std::size_t i = 0; i < writes.size(); ++i) {
    const JobWrite& w = writes[i];
    const std::string& id = w.change.record.envelope.job_id;
    std::optional<redis::RedisEffect> effect;
    if (w.effect != nullptr) {
      // Runs before the script, which applies what it listed in the same
      // atomic step as the write, after the lease check: the writes happen
      // iff the completion does.
      effect.emplace(prefix_ + "app:");
      Status s = ::jobpact::internal::Guarded("transactional_effect",
                                              [&] { return (*w.effect)(&*effect); });
      if (s.ok()) s = effect->status();
      if (!s.ok()) {
        out[i] = Status(s.code(), "Complete: the transactional effect failed, the completion of job " +
                                      id + " was not written: " + s.message());
        continue;
      }
    }
    std::vector<std::string> args;
    Status s = WriteArgs(w.change, std::string(), effect ? &*effect : nullptr, &args);
    if (!s.ok()) {
      out[i] = std::move(s);
      continue;
    }
    if (calls.empty() || index.back().size() >= kWritesPerCall) {
      ScriptCall call;
      call.script = &Scripts().write_many;
      call.keys = script_keys_;
      call.args.emplace_back();  // The count, set below.
      calls.push_back(std::move(call));
      index.emplace_back();
    }
    std::vector<std::string>& a = calls.back().args;
    a.push_back(std::to_string(args.size()));
    a.insert(a.end(), std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    index.back().push_back(i);
  }
  if (calls.empty()) return out;
  for (std::size_t c = 0; c < calls.size(); ++c) calls[c].args[0] = std::to_string(index[c].size());
  Result<std::vector<Reply>> replies = client_->EvalPipeline(calls);
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const Reply* r = replies.ok() && c < replies->size() ? &(*replies)[c] : nullptr;
    for (std::size_t k = 0; k < index[c].size(); ++k) {
      const std::size_t i = index[c][k];
      if (!replies.ok()) {
        out[i] = replies.status();
      } else if (r == nullptr || r->is_error() || r->type != Reply::Type::kArray ||
                 r->elements.size() != index[c].size()) {
        out[i] = r != nullptr && r->is_error()
                     ? ReplyError("Complete", *r)
                     : Status::Internal("Complete: unexpected reply from redis " +
                                        client_->server_name());
      } else {
        out[i] = ConditionStatus("write job", writes[i].change.record.envelope.job_id,
                                 r->elements[k]);
      }
    }
  }
  return out;
}

Result<bool> RedisQueueBackend::WaitForWork(Duration timeout) {
  // BLPOP's timeout is in seconds (a decimal since Redis 6); 0 would block
  // for ever, so at least a millisecond.
  const auto ms = std::max<std::int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%lld.%03lld", static_cast<long long>(ms / 1000),
                static_cast<long long>(ms % 1000));
  JOBPACT_ASSIGN_OR_RETURN(
      Reply r, client_->BlockingCommand({"BLPOP", prefix_ + "wake", secs}, timeout));
  if (r.is_error()) {
    return Status::Unavailable("WaitForWork: redis " + client_->server_name() + ": " + r.str);
  }
  return !r.is_nil();
}

Status RedisQueueBackend::LeaseJobs(const DequeueRequest& request, TimePoint now,
                                    std::vector<Delivery>* deliveries) {
  std::vector<std::string> a;
  JOBPACT_ASSIGN_OR_RETURN(std::string now_arg, TimeArg(now, "now"));
  a.push_back(std::move(now_arg));
  a.push_back(std::to_string(request.max_jobs));
  a.push_back(request.worker_id);
  a.push_back(JsonString(request.worker_id));
  a.push_back(JsonString(reason::kDelivered));
  for (const std::string& q : request.queues) a.push_back(q);
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Dequeue", Scripts().lease, std::move(a)));
  std::vector<Delivery>& out = *deliveries;
  out.reserve(r.elements.size());
  for (Reply& job : r.elements) {
    if (job.elements.size() != 4) {
      return Status::Internal("Dequeue: unexpected reply from redis " + client_->server_name());
    }
    const std::string& id = job.elements[0].str;
    std::string& token = job.elements[1].str;
    bool quarantined = false;
    JOBPACT_ASSIGN_OR_RETURN(JobRecord before,
                             DecodeOrQuarantine(id, job.elements[3], now, true, &quarantined));
    if (quarantined) continue;
    JOBPACT_ASSIGN_OR_RETURN(TimePoint expires, ParseTime(job.elements[2].str, "lease expiry"));
    const std::int64_t epoch = before.epoch + 1;
    Result<JobChange> c = engine::Deliver(std::move(before), std::move(token), now);
    if (!c.ok()) {
      return Status::Internal("Dequeue: the lease script leased job " + id +
                              ", which engine::Deliver refuses: " + c.status().message());
    }
    if (c->record.lease_expires_at != expires || c->record.epoch != epoch) {
      return Status::Internal("Dequeue: the lease script and engine::Deliver disagree on job " +
                              id + " (lease expiry or epoch)");
    }
    Delivery& d = out.emplace_back();
    d.lease = Lease{id, c->record.lease_token, c->record.epoch, c->record.lease_expires_at,
                    c->record.cancel_requested};
    d.job = std::move(c->record);
    d.job.history = std::move(c->append);
  }
  return Status::Ok();
}

Result<Lease> RedisQueueBackend::RenewLease(const Lease& lease, TimePoint expires_at,
                                            std::string_view checkpoint, TimePoint now) {
  std::vector<std::string> a;
  a.push_back(lease.job_id);
  a.push_back(std::to_string(lease.epoch));
  a.push_back(lease.token);
  JOBPACT_ASSIGN_OR_RETURN(std::string exp, TimeArg(expires_at, "lease expiry"));
  a.push_back(std::move(exp));
  JOBPACT_ASSIGN_OR_RETURN(std::string now_arg, TimeArg(now, "now"));
  a.push_back(std::move(now_arg));
  a.emplace_back(checkpoint);
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Renew", Scripts().renew, std::move(a)));
  JOBPACT_RETURN_IF_ERROR(ConditionStatus("Renew", lease.job_id, r));
  Lease renewed = lease;
  renewed.expires_at = expires_at;
  renewed.cancel_requested = r.elements.size() > 1 && r.elements[1].str == "1";
  return renewed;
}

Result<std::vector<JobChange>> RedisQueueBackend::RecoverJobs(int max_recoveries, TimePoint now) {
  std::vector<JobChange> recovered;
  JOBPACT_ASSIGN_OR_RETURN(std::string now_arg, TimeArg(now, "now"));
  while (true) {
    JOBPACT_ASSIGN_OR_RETURN(
        Reply r, Run("RecoverExpiredLeases", Scripts().expired, {now_arg, std::to_string(kChunk)}));
    if (r.elements.empty()) break;
    std::vector<JobChange> changes;
    std::vector<ScriptCall> calls;
    for (const Reply& e : r.elements) {
      if (e.elements.size() != 2) {
        return Status::Internal("RecoverExpiredLeases: unexpected reply from redis " +
                                client_->server_name());
      }
      const std::string& id = e.elements[0].str;
      bool quarantined = false;
      JOBPACT_ASSIGN_OR_RETURN(JobRecord rec,
                               DecodeOrQuarantine(id, e.elements[1], now, true, &quarantined));
      if (quarantined) continue;
      Result<JobChange> c = engine::RecoverLease(std::move(rec), max_recoveries, now);
      if (!c.ok()) continue;  // Completed or renewed since it was read.
      ScriptCall call;
      call.script = &Scripts().write;
      call.keys = script_keys_;
      JOBPACT_RETURN_IF_ERROR(WriteArgs(*c, now_arg, nullptr, &call.args));
      calls.push_back(std::move(call));
      changes.push_back(std::move(*c));
    }
    std::size_t written = 0;
    if (!calls.empty()) {
      JOBPACT_ASSIGN_OR_RETURN(std::vector<Reply> replies, client_->EvalPipeline(calls));
      for (std::size_t k = 0; k < replies.size() && k < changes.size(); ++k) {
        Status s = ConditionStatus("RecoverExpiredLeases", changes[k].record.envelope.job_id,
                                   replies[k]);
        if (s.ok()) {
          recovered.push_back(std::move(changes[k]));
          ++written;
        } else if (s.code() != StatusCode::kAborted && s.code() != StatusCode::kNotFound) {
          return s;  // Aborted / not found: another worker got there first.
        }
      }
    }
    // A full chunk may have more behind it; stop when a pass moved nothing
    // (every entry taken by someone else meanwhile).
    if (r.elements.size() < kChunk || written == 0) break;
  }
  return recovered;
}

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
  if (NsOf(older_than) <= 0) return 0;
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
    rule.set_at = FromNsInt(j.value("set_at_ns", std::int64_t{0}));
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
                        {"set_at_ns", NsOf(rule.set_at)}};
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
                        {"published_at_ns", NsOf(p.published_at)}};
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
    p.published_at = FromNsInt(j.value("published_at_ns", std::int64_t{0}));
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const PublishedPolicy& a, const PublishedPolicy& b) {
    return a.job_type < b.job_type;
  });
  return out;
}

}  // namespace

std::shared_ptr<StoreBackend> MakeRedisQueueBackend(std::shared_ptr<RedisClient> client,
                                                    const RedisKeys& keys,
                                                    std::shared_ptr<Clock> clock) {
  return std::make_shared<RedisQueueBackend>(std::move(client), keys, std::move(clock));
}

}  // namespace redis_internal
}  // namespace jobpact
