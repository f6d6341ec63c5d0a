// RetryPolicy <-> JSON (jobpact/retry_policy.h): how a runner's policies are
// published to a store for operator tools (QueueAdmin::PublishPolicies).
#include <nlohmann/json.hpp>

#include <string>

#include "jobpact/retry_policy.h"

namespace jobpact {
namespace {

using Json = nlohmann::json;

// The member `key` of `obj` of JSON type `type`, or an error naming it.
Result<const Json*> Member(const Json& obj, const char* key, Json::value_t type,
                           const char* type_name) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Status::InvalidArgument(std::string("retry policy JSON: missing field ") + key);
  }
  const bool number = type == Json::value_t::number_float;
  if (number ? !it->is_number() : it->type() != type) {
    return Status::InvalidArgument(std::string("retry policy JSON: field ") + key +
                                   " must be " + type_name);
  }
  return &*it;
}

Result<std::int64_t> Int(const Json& obj, const char* key) {
  JOBPACT_ASSIGN_OR_RETURN(const Json* v, Member(obj, key, Json::value_t::number_float, "a number"));
  if (!v->is_number_integer()) {
    return Status::InvalidArgument(std::string("retry policy JSON: field ") + key +
                                   " must be an integer");
  }
  return v->get<std::int64_t>();
}

Result<std::string> Text(const Json& obj, const char* key) {
  JOBPACT_ASSIGN_OR_RETURN(const Json* v, Member(obj, key, Json::value_t::string, "a string"));
  return v->get<std::string>();
}

}  // namespace

std::string RetryPolicyToJson(const RetryPolicy& p) {
  Json backoff = {{"kind", BackoffKindName(p.backoff.kind)},
                  {"base_delay_ns", p.backoff.base_delay.count()},
                  {"multiplier", p.backoff.multiplier},
                  {"max_delay_ns", p.backoff.max_delay.count()},
                  {"jitter", JitterKindName(p.backoff.jitter)}};
  Json j = {{"max_attempts", p.max_attempts},
            {"max_unknown_attempts", p.max_unknown_attempts},
            {"backoff", std::move(backoff)},
            {"on_transient", FailureActionName(p.on_transient)},
            {"on_permanent", FailureActionName(p.on_permanent)},
            {"on_unknown", FailureActionName(p.on_unknown)}};
  return j.dump();
}

Result<RetryPolicy> ParseRetryPolicyJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("retry policy JSON: not a JSON object");
  RetryPolicy p;
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t max_attempts, Int(j, "max_attempts"));
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t max_unknown, Int(j, "max_unknown_attempts"));
  p.max_attempts = static_cast<int>(max_attempts);
  p.max_unknown_attempts = static_cast<int>(max_unknown);
  JOBPACT_ASSIGN_OR_RETURN(const Json* b, Member(j, "backoff", Json::value_t::object, "an object"));
  JOBPACT_ASSIGN_OR_RETURN(std::string kind, Text(*b, "kind"));
  JOBPACT_ASSIGN_OR_RETURN(p.backoff.kind, ParseBackoffKind(kind));
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t base, Int(*b, "base_delay_ns"));
  JOBPACT_ASSIGN_OR_RETURN(std::int64_t cap, Int(*b, "max_delay_ns"));
  p.backoff.base_delay = Duration(base);
  p.backoff.max_delay = Duration(cap);
  JOBPACT_ASSIGN_OR_RETURN(const Json* m,
                           Member(*b, "multiplier", Json::value_t::number_float, "a number"));
  p.backoff.multiplier = m->get<double>();
  JOBPACT_ASSIGN_OR_RETURN(std::string jitter, Text(*b, "jitter"));
  JOBPACT_ASSIGN_OR_RETURN(p.backoff.jitter, ParseJitterKind(jitter));
  JOBPACT_ASSIGN_OR_RETURN(std::string on_t, Text(j, "on_transient"));
  JOBPACT_ASSIGN_OR_RETURN(std::string on_p, Text(j, "on_permanent"));
  JOBPACT_ASSIGN_OR_RETURN(std::string on_u, Text(j, "on_unknown"));
  JOBPACT_ASSIGN_OR_RETURN(p.on_transient, ParseFailureAction(on_t));
  JOBPACT_ASSIGN_OR_RETURN(p.on_permanent, ParseFailureAction(on_p));
  JOBPACT_ASSIGN_OR_RETURN(p.on_unknown, ParseFailureAction(on_u));
  return p;
}

}  // namespace jobpact
