#include "src/backends/redis/queue_codec.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "jobpact/job.h"
#include "jobpact/job_status.h"
#include "src/internal/names.h"
#include "src/internal/stored_validation.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace redis_internal {
namespace {

constexpr std::int64_t kNsPerMs = 1000000;
// Ready scores: 2001 priority bands of 2^42 ms each (see queue_scripts.cc).
constexpr std::int64_t kBand = std::int64_t{1} << 42;

using ::jobpact::internal::TimeFromNs;
using ::jobpact::internal::ToNs;

bool ParseInt(std::string_view s, std::int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The six sub-millisecond digits of `ns` and the member for job `id`.
std::string Member(std::int64_t ns, std::string_view id) {
  char digits[8];
  std::snprintf(digits, sizeof digits, "%06lld", static_cast<long long>(ns % kNsPerMs));
  std::string m(digits, 6);
  m += id;
  return m;
}

const std::string& Str(const Reply& f, int i) { return f.elements[static_cast<std::size_t>(i)].str; }

}  // namespace

Result<std::string> TimeArg(TimePoint t, std::string_view what) {
  const std::int64_t ns = ToNs(t);
  if (ns < 0) {
    return Status::InvalidArgument("the Redis store keeps no time before 1970 (" +
                                   std::string(what) + " is " + FormatRfc3339(t) + ")");
  }
  return std::to_string(ns);
}

std::string TimeArgClamped(TimePoint t) { return std::to_string(std::max<std::int64_t>(0, ToNs(t))); }

Result<TimePoint> ParseTime(std::string_view ns, std::string_view what) {
  std::int64_t v = 0;
  if (!ParseInt(ns, &v)) {
    return Status::Internal("stored " + std::string(what) + " is not a time: '" +
                            std::string(ns) + "'");
  }
  return TimeFromNs(v);
}

namespace {

// The items of the packed field `d`, in this order.
enum DataItem {
  kDEnqueuedAt,
  kDReadyAt,
  kDFinishedAt,  // '' if unset.
  kDMaxAttempts,
  kDRecoveries,
  kDLockWaits,
  kDPreviousDelay,
  kDFailureClass,  // '' if no failure.
  kDFailureCode,
  kDFailureMessage,
  kDReason,
  kDResult,
  kDRawFlag,  // "1": quarantined input, kept in kDRaw.
  kDRaw,
  kDataItemCount,
};

void Item(std::string_view v, std::string* out) {
  char len[24];
  auto [p, ec] = std::to_chars(len, len + sizeof len, v.size());
  (void)ec;
  out->append(len, p);
  out->push_back(':');
  out->append(v);
}

void IntItem(std::int64_t v, std::string* out) {
  char digits[24];
  auto [p, ec] = std::to_chars(digits, digits + sizeof digits, v);
  (void)ec;
  Item(std::string_view(digits, static_cast<std::size_t>(p - digits)), out);
}

// The items of `d`, or false if it is not kDataItemCount of them.
bool SplitData(std::string_view d, std::string_view* items) {
  for (int i = 0; i < kDataItemCount; ++i) {
    const std::size_t colon = d.find(':');
    if (colon == std::string_view::npos) return false;
    std::uint64_t len = 0;
    auto [p, ec] = std::from_chars(d.data(), d.data() + colon, len);
    if (ec != std::errc() || p != d.data() + colon || len > d.size() - colon - 1) return false;
    items[i] = d.substr(colon + 1, len);
    d.remove_prefix(colon + 1 + len);
  }
  return d.empty();
}

}  // namespace

Result<std::string> EncodeRecordData(const JobRecord& r) {
  std::string d;
  d.reserve(96 + r.reason.size() + r.result.size() +
            (r.last_failure ? r.last_failure->message.size() + r.last_failure->code.size() : 0) +
            (r.raw_input ? r.raw_input->size() : 0));
  JOBPACT_ASSIGN_OR_RETURN(std::string enq, TimeArg(r.enqueued_at, "enqueued_at"));
  Item(enq, &d);
  JOBPACT_ASSIGN_OR_RETURN(std::string ready, TimeArg(r.ready_at, "ready_at"));
  Item(ready, &d);
  if (r.finished_at) {
    JOBPACT_ASSIGN_OR_RETURN(std::string fin, TimeArg(*r.finished_at, "finished_at"));
    Item(fin, &d);
  } else {
    Item({}, &d);
  }
  IntItem(r.envelope.max_attempts, &d);
  IntItem(r.lease_recoveries, &d);
  IntItem(r.lock_waits, &d);
  IntItem(ToNs(r.previous_delay), &d);
  if (r.last_failure) {
    Item(FailureClassName(r.last_failure->failure_class), &d);
    Item(r.last_failure->code, &d);
    Item(r.last_failure->message, &d);
  } else {
    Item({}, &d);
    Item({}, &d);
    Item({}, &d);
  }
  Item(r.reason, &d);
  Item(r.result, &d);
  Item(r.raw_input ? "1" : "0", &d);
  Item(r.raw_input ? std::string_view(*r.raw_input) : std::string_view(), &d);
  return d;
}

Status AppendRecordArgs(const JobRecord& r, std::vector<std::string>* a) {
  a->emplace_back(JobStatusName(r.status));
  a->push_back(std::to_string(r.envelope.attempt));
  JOBPACT_ASSIGN_OR_RETURN(std::string updated, TimeArg(r.updated_at, "updated_at"));
  a->push_back(std::move(updated));
  if (r.finished_at) {
    JOBPACT_ASSIGN_OR_RETURN(std::string fin, TimeArg(*r.finished_at, "finished_at"));
    a->push_back(std::move(fin));
  } else {
    a->emplace_back();
  }
  a->push_back(std::to_string(r.epoch));
  a->push_back(r.checkpoint);
  a->push_back(r.lease_token);
  if (r.lease_token.empty()) {
    a->emplace_back("0");
  } else {
    JOBPACT_ASSIGN_OR_RETURN(std::string exp, TimeArg(r.lease_expires_at, "lease_expires_at"));
    a->push_back(std::move(exp));
  }
  a->push_back(r.audit.empty()
                   ? std::string("[]")
                   : nlohmann::json(r.audit).dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace));
  a->emplace_back(r.cancel_requested ? "1" : "0");
  JOBPACT_ASSIGN_OR_RETURN(std::string d, EncodeRecordData(r));
  a->push_back(std::move(d));
  return Status::Ok();
}

std::string ReadyKeyOf(const JobRecord& r) {
  if (r.envelope.queue.empty()) return {};
  return "ready:" + r.envelope.queue + "|" + r.envelope.job_type;
}

std::string TenantPart(std::string_view tenant_id) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(tenant_id.size());
  for (const char c : tenant_id) {
    if (::jobpact::internal::IsSafeNameChar(c)) {
      out.push_back(c);
    } else {
      const auto b = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xF]);
    }
  }
  return out;
}

Result<std::string> ReadyScoreOf(const JobRecord& r) {
  const std::int64_t ns = ToNs(r.ready_at);
  if (ns < 0) return Status::InvalidArgument("the Redis store keeps no ready_at before 1970");
  const int priority = std::clamp(r.envelope.priority, -1000, 1000);
  const std::int64_t ms = std::min(ns / kNsPerMs, kBand - 1);
  return std::to_string((1000 - priority) * kBand + ms);
}

Result<IndexEntry> IndexOf(const JobRecord& r, JobPlacement placement) {
  IndexEntry e;
  TimePoint at;
  switch (placement) {
    case JobPlacement::kReady: {
      if (r.envelope.queue.empty()) {
        return Status::Internal("job " + r.envelope.job_id + " has no queue and cannot be ready");
      }
      e.key = ReadyKeyOf(r);
      JOBPACT_ASSIGN_OR_RETURN(e.score, ReadyScoreOf(r));
      e.member = Member(std::max<std::int64_t>(0, ToNs(r.ready_at)), r.envelope.job_id);
      return e;
    }
    case JobPlacement::kScheduled:
      e.key = "scheduled";
      at = r.ready_at;
      break;
    case JobPlacement::kLeased:
      e.key = "leases";
      at = r.lease_expires_at;
      break;
    case JobPlacement::kDeadLettered:
      e.key = "dlq";
      at = r.finished_at.value_or(r.updated_at);
      break;
    case JobPlacement::kFinal:
      e.key = "finished";
      at = r.finished_at.value_or(r.updated_at);
      break;
  }
  const std::int64_t ns = ToNs(at);
  if (ns < 0) {
    return Status::InvalidArgument("the Redis store keeps no time before 1970 (job " +
                                   r.envelope.job_id + ")");
  }
  e.member = Member(ns, r.envelope.job_id);
  e.score = std::to_string(ns / kNsPerMs);
  return e;
}

Result<JobRecord> DecodeRecord(std::string_view job_id, const Reply& f) {
  const std::string id(job_id);
  if (f.type != Reply::Type::kArray || f.elements.size() != kRecordFieldCount) {
    return Status::Internal("stored record of job " + id + " has the wrong shape");
  }
  auto bad = [&](std::string_view what) {
    return Status::Internal("stored record of job " + id + ": " + std::string(what));
  };
  std::string_view d[kDataItemCount];
  if (f.elements[kFData].is_nil() || !SplitData(Str(f, kFData), d)) {
    return bad("the packed fields (d) do not decode");
  }
  JobRecord rec;
  const bool has_raw = d[kDRawFlag] == "1";
  Result<Envelope> env =
      ParseEnvelope(Str(f, kFEnv), ::jobpact::internal::StoredEnvelopeValidation());
  if (env.ok()) {
    rec.envelope = std::move(*env);
  } else if (has_raw) {
    // Quarantined input kept in the DLQ: what could be read of it.
    rec.envelope.job_type = Str(f, kFType);
    rec.envelope.queue = Str(f, kFQueue);
    nlohmann::json stored =
        nlohmann::json::parse(Str(f, kFEnv), nullptr, /*allow_exceptions=*/false);
    if (stored.is_object()) {
      auto trace = stored.find("trace_id");
      if (trace != stored.end() && trace->is_string()) {
        rec.envelope.trace_id = trace->get<std::string>();
      }
      auto created = stored.find("created_at");
      if (created != stored.end() && created->is_string()) {
        Result<TimePoint> t = ParseRfc3339(created->get<std::string>());
        if (t.ok()) rec.envelope.created_at = *t;
      }
    }
  } else {
    return bad("the envelope does not parse: " + env.status().message());
  }
  rec.envelope.job_id = id;
  std::int64_t v = 0;
  auto integer_of = [&](std::string_view s, std::string_view what) -> Result<std::int64_t> {
    if (!ParseInt(s, &v)) return bad(std::string(what) + " is not a number");
    return v;
  };
  auto integer = [&](int field, std::string_view what) -> Result<std::int64_t> {
    return integer_of(Str(f, field), what);
  };
  auto time_of = [&](std::string_view s, std::string_view what) -> Result<TimePoint> {
    JOBPACT_ASSIGN_OR_RETURN(std::int64_t ns, integer_of(s, what));
    return TimeFromNs(ns);
  };
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t attempt, integer(kFAttempt, "attempt"));
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t max_attempts,
                           integer_of(d[kDMaxAttempts], "max_attempts"));
  rec.envelope.attempt = static_cast<int>(attempt);
  rec.envelope.max_attempts = static_cast<int>(max_attempts);
  Result<JobStatus> status = ParseJobStatus(Str(f, kFStatus));
  if (!status.ok()) return bad("status: " + status.status().message());
  rec.status = *status;
  JOBPACT_ASSIGN_OR_RETURN(rec.enqueued_at, time_of(d[kDEnqueuedAt], "enqueued_at"));
  JOBPACT_ASSIGN_OR_RETURN(rec.ready_at, time_of(d[kDReadyAt], "ready_at"));
  JOBPACT_ASSIGN_OR_RETURN(rec.updated_at, time_of(Str(f, kFUpdatedAt), "updated_at"));
  if (!d[kDFinishedAt].empty()) {
    JOBPACT_ASSIGN_OR_RETURN(rec.finished_at, time_of(d[kDFinishedAt], "finished_at"));
  }
  JOBPACT_ASSIGN_OR_RETURN(rec.epoch, integer(kFEpoch, "epoch"));
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t recoveries,
                           integer_of(d[kDRecoveries], "lease_recoveries"));
  rec.lease_recoveries = static_cast<int>(recoveries);
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t lock_waits, integer_of(d[kDLockWaits], "lock_waits"));
  rec.lock_waits = static_cast<int>(lock_waits);
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t delay,
                           integer_of(d[kDPreviousDelay], "previous_delay"));
  rec.previous_delay = std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(delay));
  rec.checkpoint = Str(f, kFCheckpoint);
  if (!d[kDFailureClass].empty()) {
    Failure failure;
    Result<FailureClass> c = ParseFailureClass(d[kDFailureClass]);
    failure.failure_class = c.ok() ? *c : FailureClass::kUnknown;
    failure.code = std::string(d[kDFailureCode]);
    failure.message = std::string(d[kDFailureMessage]);
    rec.last_failure = std::move(failure);
  }
  rec.reason = std::string(d[kDReason]);
  rec.result = std::string(d[kDResult]);
  rec.lease_token = Str(f, kFToken);
  if (!rec.lease_token.empty()) {
    JOBPACT_ASSIGN_OR_RETURN(rec.lease_expires_at,
                             time_of(Str(f, kFLeaseExp), "lease_expires_at"));
  }
  if (has_raw) rec.raw_input = std::string(d[kDRaw]);
  const std::string& audit = Str(f, kFAudit);
  if (!audit.empty() && audit != "[]") {
    nlohmann::json j = nlohmann::json::parse(audit, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) return bad("the audit trail is not a JSON array");
    for (const auto& line : j) {
      if (line.is_string()) rec.audit.push_back(line.get<std::string>());
    }
  }
  rec.cancel_requested = Str(f, kFCancel) == "1";
  return rec;
}

std::string RawFields(const Reply& f) {
  static const char* const kNames[kRecordFieldCount] = {
      "env", "d", "q", "t", "st", "att", "ep", "upd", "cp", "tok", "lexp", "aud", "cx"};
  nlohmann::json row = nlohmann::json::object();
  for (std::size_t i = 0; i < f.elements.size() && i < kRecordFieldCount; ++i) {
    if (f.elements[i].is_nil()) {
      row[kNames[i]] = nullptr;
    } else {
      row[kNames[i]] = f.elements[i].str;
    }
  }
  return row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::vector<Transition>> DecodeHistory(std::string_view text) {
  std::vector<Transition> out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view entry = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    nlohmann::json j = nlohmann::json::parse(entry, nullptr, /*allow_exceptions=*/false);
    JOBPACT_ASSIGN_OR_RETURN(Transition t, ::jobpact::internal::HistoryEntryFromJson(j));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace redis_internal
}  // namespace jobpact
