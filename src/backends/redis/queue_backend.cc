// The Redis queue store: the storage primitives of StoreBackend, each one
// Lua script (queue_scripts*.cc, with the key layout) run by the server, so
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
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "jobpact/redis/redis_effect.h"
#include "jobpact/retry_policy.h"
#include "jobpact/transitions.h"
#include "src/backends/redis/guards.h"
#include "src/backends/redis/queue_codec.h"
#include "src/backends/redis/queue_scripts.h"
#include "src/backends/redis/queue_store.h"
#include "src/backends/redis/stores.h"
#include "src/internal/backpressure.h"
#include "src/internal/checks.h"
#include "src/internal/guarded.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace redis_internal {

using ::jobpact::internal::ToNs;

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
  // An idempotency record's state and owner from elements 1 and 2.
  auto claim_holder = [&r]() -> std::string {
    const std::string state = r.elements.size() > 1 ? r.elements[1].str : std::string();
    const std::string owner = r.elements.size() > 2 ? r.elements[2].str : std::string();
    if (state.empty()) return "no claim";
    return (state == "c" ? "completed by " : "in progress by ") + owner;
  };
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
    case 12:
      return Status::Aborted(
          std::string(what) + ": this delivery no longer holds the claim on idempotency key '" +
          (r.elements.size() > 3 ? r.elements[3].str : std::string()) + "' (" + claim_holder() +
          "): job " + id + " was not completed");
    case 11:
      return Status::Aborted(std::string(what) + ": the idempotency claim of job " + id +
                             " is no longer held by this delivery (" + claim_holder() +
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

Status RedisQueueBackend::ChangeArgs(const JobChange& c, const std::string& expired_by,
                                     bool quarantine, std::vector<std::string>* a) const {
  const JobRecord& r = c.record;
  a->push_back(r.envelope.job_id);
  if (quarantine) {
    // No status expected: unconditional, there is no state machine to
    // consult (and the job keeps no queue or type, so it can never run).
    a->emplace_back();
    a->emplace_back("0");
    a->emplace_back();
    a->emplace_back();
  } else {
    a->emplace_back(JobStatusName(c.expect.status));
    a->push_back(std::to_string(c.expect.epoch));
    a->push_back(c.expect.lease_token);
    a->push_back(expired_by);
  }
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
  return Status::Ok();
}

Status RedisQueueBackend::WriteArgs(const JobChange& c, const std::string& expired_by,
                                    const redis::RedisEffect* effect, std::vector<std::string>* a,
                                    const CompletionGuards* guards) const {
  // Every change of a stored job adds one history entry at most.
  if (c.append.size() > 1) {
    return Status::Internal("write job: more than one history entry in one change");
  }
  const JobRecord& r = c.record;
  a->reserve(23 + (effect ? effect->writes().size() * 4 : 0));
  JOBPACT_RETURN_IF_ERROR(ChangeArgs(c, expired_by, /*quarantine=*/false, a));
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
  const Duration retention = guards != nullptr ? guards->retention : kIdempotencyRetention;
  const std::int64_t now_us = ToMicros(r.updated_at);
  if (effect != nullptr && r.status == JobStatus::kSucceeded && !key.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(std::string record_key, keys_.Idempotency(key));
    a->push_back(std::move(record_key));
    a->push_back(std::to_string(now_us));
    a->push_back(std::to_string(now_us + ToMicros(retention)));
    a->push_back(GcMillis(retention));
    a->push_back(keys_.IdempotencyIndex());
    a->push_back(key);
    a->push_back(r.result);
  } else {
    a->emplace_back();
  }
  // The completion's guards (owner: the lease token). With an effect, the
  // record rides with the effect above, only if the write happens.
  const bool lock = guards != nullptr && guards->release_lock && !r.envelope.lock_key.empty();
  std::string act;
  if (guards != nullptr && !key.empty()) {
    if (guards->claim == CompletionGuards::Claim::kRecord && effect == nullptr) act = "r";
    if (guards->claim == CompletionGuards::Claim::kRelease) act = "d";
  }
  if (!lock && act.empty()) {
    a->emplace_back();
    return Status::Ok();
  }
  a->emplace_back("1");
  std::string record_key;
  if (!act.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(record_key, keys_.Idempotency(key));
  }
  std::string lock_key;
  if (lock) {
    JOBPACT_ASSIGN_OR_RETURN(lock_key, keys_.Lock(r.envelope.lock_key));
  }
  a->push_back(std::move(act));
  a->push_back(std::move(record_key));
  a->push_back(std::move(lock_key));
  a->push_back(std::to_string(now_us));
  a->push_back(std::to_string(now_us + ToMicros(retention)));
  a->push_back(GcMillis(retention));
  a->push_back(r.result);
  a->push_back(keys_.IdempotencyIndex());
  a->push_back(key);
  a->push_back(keys_.LockIndex());
  a->push_back(r.envelope.lock_key);
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
    JOBPACT_RETURN_IF_ERROR(ChangeArgs(q, std::string(), /*quarantine=*/true, &a));
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
  a.reserve(2 + jobs.size() * 19);
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
    a.push_back(std::to_string(ToNs(TimePoint{} + env.visibility_timeout)));
    JOBPACT_ASSIGN_OR_RETURN(std::string enq, TimeArg(r.enqueued_at, "enqueued_at"));
    a.push_back(std::move(enq));
    // st att upd fin ep cp tok lexp aud cx d (AppendRecordArgs).
    std::vector<std::string> v;
    v.reserve(11);
    JOBPACT_RETURN_IF_ERROR(AppendRecordArgs(r, &v));
    for (int k : {0, 1, 2, 4, 10}) a.push_back(std::move(v[static_cast<std::size_t>(k)]));
    JOBPACT_ASSIGN_OR_RETURN(IndexEntry ix, IndexOf(r, c.placement));
    a.push_back(std::move(ix.key));
    a.push_back(std::move(ix.member));
    a.push_back(std::move(ix.score));
    if (env.queue.empty()) {
      a.emplace_back();
    } else {
      JOBPACT_ASSIGN_OR_RETURN(std::string score, ReadyScoreOf(r));
      a.push_back(std::move(score));
    }
    a.push_back(HistoryEntryJson(c.append.front()));
    a.push_back(TenantPart(env.tenant_id));
    // fin cp tok lexp aud cx: sent only where one is not at its default.
    const bool defaults = v[3].empty() && v[5].empty() && v[6].empty() && v[7] == "0" &&
                          v[8] == "[]" && v[9] == "0";
    // The guard keys, for the lease step to take them (a key no script
    // may name is left to the usual calls, which refuse it by name).
    const bool lock_ok =
        !env.lock_key.empty() && RedisKeys::CheckKey("lock key", env.lock_key).ok();
    const bool claim_ok = !env.idempotency_key.empty() &&
                          RedisKeys::CheckKey("idempotency key", env.idempotency_key).ok();
    a.emplace_back(std::to_string((defaults ? 0 : 1) + (lock_ok || claim_ok ? 2 : 0)));
    if (!defaults) {
      for (int k : {3, 5, 6, 7, 8, 9}) a.push_back(std::move(v[static_cast<std::size_t>(k)]));
    }
    if (lock_ok || claim_ok) {
      a.push_back(lock_ok ? env.lock_key : std::string());
      a.push_back(claim_ok ? env.idempotency_key : std::string());
    }
  }
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Enqueue", Scripts().insert, std::move(a)));
  if (r.type != Reply::Type::kArray || r.elements.empty()) {
    return Status::Internal("Enqueue: unexpected reply from redis " + client_->server_name());
  }
  if (r.elements[0].integer == static_cast<long long>(StatusCode::kAlreadyExists)) {
    return Status::AlreadyExists("Enqueue: job id " + r.elements[1].str + " already exists");
  }
  if (r.elements[0].integer == static_cast<long long>(StatusCode::kResourceExhausted) &&
      r.elements.size() == 5) {
    return ::jobpact::internal::CheckQueueDepth(r.elements[1].str, std::stoll(r.elements[2].str),
                                                std::stoll(r.elements[3].str),
                                                std::stoll(r.elements[4].str));
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
    Status s = WriteArgs(w.change, std::string(), effect ? &*effect : nullptr, &args, w.guards);
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
  // The delivery-time dedup check in the lease script (one call per job
  // fewer for the worker).
  const bool dedup = request.dedup_window.has_value();
  a.push_back(dedup ? TimeArgClamped(now - *request.dedup_window) : std::string());
  // And the guards (steps 5 and 6), for the stores beside the jobs only.
  a.push_back(request.take_guards && own_locks_ != nullptr && own_idempotency_ != nullptr ? "1" : "");
  for (const std::string& q : request.queues) a.push_back(q);
  JOBPACT_ASSIGN_OR_RETURN(Reply r, Run("Dequeue", Scripts().lease, std::move(a)));
  std::vector<Delivery>& out = *deliveries;
  out.reserve(r.elements.size());
  for (Reply& job : r.elements) {
    if (job.elements.size() != 6) {
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
    d.dedup_checked = dedup;
    if (dedup) d.duplicate_of = std::move(job.elements[4].str);
    if (!job.elements[5].str.empty()) {
      d.guards_taken = true;
      d.fencing_token = static_cast<std::uint64_t>(std::stoull(job.elements[5].str));
    }
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

namespace {

// KEYS: lock, fence counter, lock index, idempotency record, its index.
// ARGV: owner, now, exp, gc ms, lock name, idempotency key.
// -> {lock_acquire's reply} if the lock is another owner's, else
//    {lock_acquire's reply, claim's reply} (guards.h).
const Script kLockAndClaim(JOBPACT_REDIS_LOCK_ACQUIRE_LUA JOBPACT_REDIS_CLAIM_LUA
                           "local l = lock_acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], "
                           "ARGV[3], ARGV[4], ARGV[5])\n"
                           "if l[1] == 0 then return {l} end\n"
                           "return {l, claim(KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3], "
                           "ARGV[4], ARGV[6])}\n");

}  // namespace

Result<LockLease> RedisQueueBackend::AcquireLockAndClaim(std::string_view lock_key,
                                                         std::string_view idempotency_key,
                                                         std::string_view owner, Duration ttl,
                                                         ClaimOutcome* claim) {
  constexpr std::string_view kWhat = "AcquireLockAndClaim";
  return ::jobpact::internal::Guarded(kWhat, [&]() -> Result<LockLease> {
    JOBPACT_RETURN_IF_ERROR(
        ::jobpact::internal::CheckLockAndClaim(kWhat, lock_key, idempotency_key, owner, ttl));
    JOBPACT_ASSIGN_OR_RETURN(std::string lock_hash, keys_.Lock(lock_key));
    JOBPACT_ASSIGN_OR_RETURN(std::string record_hash, keys_.Idempotency(idempotency_key));
    const std::int64_t now = ToMicros(clock()->Now());
    const std::int64_t exp = now + ToMicros(ttl);
    JOBPACT_ASSIGN_OR_RETURN(
        Reply r, client_->Eval(kLockAndClaim,
                               {lock_hash, keys_.LockFence(), keys_.LockIndex(), record_hash,
                                keys_.IdempotencyIndex()},
                               {std::string(owner), std::to_string(now), std::to_string(exp),
                                GcMillis(ttl), std::string(lock_key),
                                std::string(idempotency_key)}));
    if (r.type != Reply::Type::kArray || r.elements.empty() || r.elements.size() > 2) {
      return UnexpectedReply(*client_, kWhat, r);
    }
    JOBPACT_ASSIGN_OR_RETURN(LockLease lease,
                             ParseAcquireReply(*client_, kWhat, lock_key, r.elements[0]));
    if (r.elements.size() != 2) return UnexpectedReply(*client_, kWhat, r);
    JOBPACT_ASSIGN_OR_RETURN(*claim, ParseClaimReply(*client_, kWhat, idempotency_key, r.elements[1]));
    return lease;
  });
}

std::shared_ptr<StoreBackend> MakeRedisQueueBackend(std::shared_ptr<RedisClient> client,
                                                    const RedisKeys& keys,
                                                    std::shared_ptr<Clock> clock,
                                                    const LockStore* own_locks,
                                                    const IdempotencyStore* own_idempotency) {
  return std::make_shared<RedisQueueBackend>(std::move(client), keys, std::move(clock), own_locks,
                                             own_idempotency);
}

}  // namespace redis_internal
}  // namespace jobpact
