#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/job.h"
#include "jobpact/testing/manual_clock.h"
#include "src/internal/ulid.h"

namespace jobpact {

// Readable failure output for matchers over FieldError (found by ADL).
void PrintTo(const FieldError& e, std::ostream* os) { *os << e.field << ": " << e.message; }

namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

// The reference example of SPEC 1, verbatim.
constexpr const char* kReferenceEnvelope = R"json({
  "job_id": "job_01HXYZ...",
  "job_type": "invoice.generate",
  "tenant_id": "tenant_123",
  "payload": { "order_id": "ord_987", "customer_id": "cus_456" },
  "idempotency_key": "invoice.generate:ord_987",
  "attempt": 1,
  "max_attempts": 5,
  "scheduled_at": "2026-08-17T10:00:00Z",
  "created_at": "2026-08-17T09:58:00Z",
  "trace_id": "trc_abcd1234",
  "timeout_seconds": 30,
  "visibility_timeout_seconds": 45,
  "lock_key": "order:ord_987",
  "dedup_key": "invoice.generate:ord_987",
  "retry_policy": { "backoff": "exponential", "base_delay_seconds": 5,
                    "max_delay_seconds": 300, "jitter": true }
})json";

TimePoint FromUnixSeconds(std::int64_t s) { return TimePoint(std::chrono::seconds(s)); }

const TimePoint kAug17At10 = FromUnixSeconds(1786960800);  // 2026-08-17T10:00:00Z

// Matches a FieldError on `field` whose message contains `text`.
::testing::Matcher<FieldError> ErrorOn(const std::string& field, const std::string& text = "") {
  return AllOf(Field(&FieldError::field, field), Field(&FieldError::message, HasSubstr(text)));
}
::testing::Matcher<std::vector<FieldError>> HasErrorOn(const std::string& field,
                                                       const std::string& text = "") {
  return Contains(ErrorOn(field, text));
}

// Every field of two envelopes, so that a lost field fails the test.
void ExpectSameEnvelope(const Envelope& a, const Envelope& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.job_type, b.job_type);
  EXPECT_EQ(a.tenant_id, b.tenant_id);
  EXPECT_EQ(nlohmann::json::parse(a.payload), nlohmann::json::parse(b.payload));
  EXPECT_EQ(a.idempotency_key, b.idempotency_key);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.max_attempts, b.max_attempts);
  EXPECT_EQ(a.scheduled_at, b.scheduled_at);
  EXPECT_EQ(a.created_at, b.created_at);
  EXPECT_EQ(a.trace_id, b.trace_id);
  EXPECT_EQ(a.timeout, b.timeout);
  EXPECT_EQ(a.visibility_timeout, b.visibility_timeout);
  EXPECT_EQ(a.lock_key, b.lock_key);
  EXPECT_EQ(a.dedup_key, b.dedup_key);
  ASSERT_EQ(a.retry_policy.has_value(), b.retry_policy.has_value());
  if (a.retry_policy) {
    EXPECT_EQ(a.retry_policy->kind, b.retry_policy->kind);
    EXPECT_EQ(a.retry_policy->base_delay, b.retry_policy->base_delay);
    EXPECT_EQ(a.retry_policy->multiplier, b.retry_policy->multiplier);
    EXPECT_EQ(a.retry_policy->max_delay, b.retry_policy->max_delay);
    EXPECT_EQ(a.retry_policy->jitter, b.retry_policy->jitter);
  }
  EXPECT_EQ(a.expires_at, b.expires_at);
  EXPECT_EQ(a.ttl, b.ttl);
  EXPECT_EQ(a.start_by, b.start_by);
  EXPECT_EQ(a.deadline, b.deadline);
  EXPECT_EQ(a.queue, b.queue);
  EXPECT_EQ(a.priority, b.priority);
}

// The reference envelope with `patch` merged in (RFC 7386: null deletes).
std::string Patched(const std::string& patch) {
  nlohmann::json doc = nlohmann::json::parse(kReferenceEnvelope);
  doc.merge_patch(nlohmann::json::parse(patch));
  return doc.dump();
}

std::vector<FieldError> ErrorsOf(const std::string& json, const ValidationOptions& options = {}) {
  std::vector<FieldError> errors;
  Result<Envelope> env = ParseEnvelope(json, options, &errors);
  EXPECT_FALSE(env.ok()) << "expected invalid: " << json;
  if (!env.ok()) {
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  }
  return errors;
}

Envelope ValidEnvelope() {
  Envelope env;
  env.job_type = "invoice.generate";
  env.payload = R"({"order_id":"ord_987"})";
  return env;
}

// --- Parsing the reference example ---------------------------------------------

TEST(ParseEnvelopeTest, ParsesTheSpecReferenceExample) {
  Result<Envelope> env = ParseEnvelope(kReferenceEnvelope);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->job_id, "job_01HXYZ...");
  EXPECT_EQ(env->job_type, "invoice.generate");
  EXPECT_EQ(env->tenant_id, "tenant_123");
  EXPECT_EQ(nlohmann::json::parse(env->payload),
            nlohmann::json({{"order_id", "ord_987"}, {"customer_id", "cus_456"}}));
  EXPECT_EQ(env->idempotency_key, "invoice.generate:ord_987");
  EXPECT_EQ(env->attempt, 1);
  EXPECT_EQ(env->max_attempts, 5);
  EXPECT_EQ(env->scheduled_at, kAug17At10);
  EXPECT_EQ(env->created_at, kAug17At10 - std::chrono::minutes(2));
  EXPECT_EQ(env->trace_id, "trc_abcd1234");
  EXPECT_EQ(env->timeout, Seconds(30));
  EXPECT_EQ(env->visibility_timeout, Seconds(45));
  EXPECT_EQ(env->lock_key, "order:ord_987");
  EXPECT_EQ(env->dedup_key, "invoice.generate:ord_987");
  ASSERT_TRUE(env->retry_policy.has_value());
  EXPECT_EQ(env->retry_policy->kind, BackoffKind::kExponential);
  EXPECT_EQ(env->retry_policy->base_delay, Seconds(5));
  EXPECT_EQ(env->retry_policy->max_delay, Seconds(300));
  EXPECT_EQ(env->retry_policy->multiplier, 2.0);  // Not given: the default.
  EXPECT_EQ(env->retry_policy->jitter, JitterKind::kFull);  // `true` means full jitter.
  // Not in the example: the struct's defaults.
  EXPECT_FALSE(env->expires_at.has_value());
  EXPECT_FALSE(env->ttl.has_value());
  EXPECT_EQ(env->queue, "default");
  EXPECT_EQ(env->priority, 0);
}

TEST(ParseEnvelopeTest, PayloadKeepsTheProducersKeyOrder) {
  Result<Envelope> env = ParseEnvelope(kReferenceEnvelope);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->payload, R"({"order_id":"ord_987","customer_id":"cus_456"})");
}

// Equivalence, as promised by SerializeEnvelope: (1) every field of the input
// appears in the output with the same JSON value, nested ones included (the
// reference example has no jitter that needs a name, so no normalisation
// applies to it); (2) the output adds only fields at their defaults; (3)
// parsing the output gives back an identical Envelope.
TEST(SerializeEnvelopeTest, ReferenceExampleRoundTrips) {
  Result<Envelope> env = ParseEnvelope(kReferenceEnvelope);
  ASSERT_TRUE(env.ok()) << env.status();
  const std::string out = SerializeEnvelope(*env);
  const nlohmann::json input = nlohmann::json::parse(kReferenceEnvelope);
  const nlohmann::json output = nlohmann::json::parse(out);

  for (const auto& [key, value] : input.items()) {
    ASSERT_TRUE(output.contains(key)) << key;
    if (key == "retry_policy") {
      for (const auto& [sub, sub_value] : value.items()) {
        EXPECT_EQ(output[key][sub], sub_value) << key << "." << sub;
      }
    } else {
      EXPECT_EQ(output[key], value) << key;
    }
  }
  nlohmann::json extras = output;
  for (const auto& [key, value] : input.items()) extras.erase(key);
  EXPECT_EQ(extras, nlohmann::json({{"queue", "default"}, {"priority", 0}}));
  EXPECT_EQ(output["retry_policy"]["multiplier"], 2);

  Result<Envelope> again = ParseEnvelope(out);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameEnvelope(*env, *again);
}

TEST(SerializeEnvelopeTest, EveryFieldRoundTrips) {
  Envelope env = ValidEnvelope();
  env.job_id = "job_01J00000000000000000000000";
  env.tenant_id = "t-1";
  env.payload = R"([1,"two",{"three":3.5},null,true])";
  env.idempotency_key = "k:1";
  env.attempt = 2;
  env.max_attempts = 7;
  env.scheduled_at = kAug17At10 + Millis(250);
  env.created_at = kAug17At10 - Seconds(1);
  env.trace_id = "trc";
  env.timeout = Millis(1500);
  env.visibility_timeout = Millis(7250);
  env.lock_key = "lock:1";
  env.dedup_key = "dedup:1";
  env.retry_policy = BackoffSpec{BackoffKind::kDecorrelated, Millis(100), 3.5, Seconds(60),
                                 JitterKind::kEqual};
  env.ttl = Seconds(3600);
  env.start_by = kAug17At10 + Seconds(60);
  env.deadline = kAug17At10 + std::chrono::hours(2);
  env.queue = "reports.slow";
  env.priority = -20;

  const std::string out = SerializeEnvelope(env);
  Result<Envelope> again = ParseEnvelope(out);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << out;
  ExpectSameEnvelope(env, *again);
  const nlohmann::json doc = nlohmann::json::parse(out);
  EXPECT_EQ(doc["timeout_seconds"], 1.5);
  EXPECT_EQ(doc["ttl_seconds"], 3600);
  EXPECT_EQ(doc["scheduled_at"], "2026-08-17T10:00:00.250Z");
  EXPECT_EQ(doc["retry_policy"]["jitter"], "equal");
  EXPECT_EQ(doc["retry_policy"]["backoff"], "decorrelated");
}

TEST(SerializeEnvelopeTest, OmitsUnsetOptionalFields) {
  const nlohmann::json doc = nlohmann::json::parse(SerializeEnvelope(ValidEnvelope()));
  for (const char* key : {"job_id", "tenant_id", "idempotency_key", "scheduled_at", "created_at",
                          "trace_id", "lock_key", "dedup_key", "retry_policy", "expires_at",
                          "ttl_seconds", "start_by", "deadline"}) {
    EXPECT_FALSE(doc.contains(key)) << key;
  }
  EXPECT_EQ(doc["job_type"], "invoice.generate");
  EXPECT_EQ(doc["payload"], nlohmann::json({{"order_id", "ord_987"}}));
}

TEST(SerializeEnvelopeTest, JitterIsABooleanForFullAndNoneAndANameOtherwise) {
  struct Case {
    JitterKind kind;
    nlohmann::json expected;
  };
  for (const Case& c : {Case{JitterKind::kFull, true}, Case{JitterKind::kNone, false},
                        Case{JitterKind::kEqual, "equal"},
                        Case{JitterKind::kDecorrelated, "decorrelated"}}) {
    Envelope env = ValidEnvelope();
    env.retry_policy = BackoffSpec{};
    env.retry_policy->jitter = c.kind;
    const std::string out = SerializeEnvelope(env);
    EXPECT_EQ(nlohmann::json::parse(out)["retry_policy"]["jitter"], c.expected);
    Result<Envelope> again = ParseEnvelope(out);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->retry_policy->jitter, c.kind);
  }
}

TEST(SerializeEnvelopeTest, InvalidPayloadIsEmittedAsAString) {
  Envelope env = ValidEnvelope();
  env.payload = "{not json";
  const nlohmann::json doc = nlohmann::json::parse(SerializeEnvelope(env));
  EXPECT_EQ(doc["payload"], "{not json");
}

TEST(SerializeEnvelopeTest, InvalidUtf8DoesNotThrow) {
  Envelope env = ValidEnvelope();
  env.tenant_id = "bad\xFF";
  std::string out;
  EXPECT_NO_THROW(out = SerializeEnvelope(env));
  EXPECT_TRUE(nlohmann::json::accept(out)) << out;
}

// --- Parsing: accepted forms -------------------------------------------------------

TEST(ParseEnvelopeTest, AcceptsJitterNamesAndBooleans) {
  struct Case {
    const char* jitter;
    JitterKind expected;
  };
  for (const Case& c : {Case{"false", JitterKind::kNone}, Case{"true", JitterKind::kFull},
                        Case{R"("none")", JitterKind::kNone}, Case{R"("full")", JitterKind::kFull},
                        Case{R"("equal")", JitterKind::kEqual},
                        Case{R"("decorrelated")", JitterKind::kDecorrelated}}) {
    Result<Envelope> env =
        ParseEnvelope(Patched(std::string(R"({"retry_policy":{"jitter":)") + c.jitter + "}}"));
    ASSERT_TRUE(env.ok()) << c.jitter << ": " << env.status();
    EXPECT_EQ(env->retry_policy->jitter, c.expected) << c.jitter;
  }
}

TEST(ParseEnvelopeTest, AcceptsEveryBackoffKind) {
  for (const auto& [name, kind] : {std::pair{"fixed", BackoffKind::kFixed},
                                   std::pair{"exponential", BackoffKind::kExponential},
                                   std::pair{"decorrelated", BackoffKind::kDecorrelated}}) {
    Result<Envelope> env = ParseEnvelope(
        Patched(std::string(R"({"retry_policy":{"multiplier":1.5,"backoff":")") + name + "\"}}"));
    ASSERT_TRUE(env.ok()) << name << ": " << env.status();
    EXPECT_EQ(env->retry_policy->kind, kind);
    EXPECT_EQ(env->retry_policy->multiplier, 1.5);
  }
}

TEST(ParseEnvelopeTest, SecondsMayBeFractional) {
  Result<Envelope> env = ParseEnvelope(
      Patched(R"({"timeout_seconds":0.3,"visibility_timeout_seconds":5.301,"ttl_seconds":1.5,
                  "retry_policy":{"base_delay_seconds":0.25}})"));
  ASSERT_TRUE(env.ok()) << env.status();
  // Rounded to the nearest nanosecond, not truncated (0.3 * 1e9 is 299999999.99...).
  EXPECT_EQ(env->timeout, std::chrono::milliseconds(300));
  EXPECT_EQ(env->visibility_timeout, std::chrono::milliseconds(5301));
  EXPECT_EQ(env->ttl, std::chrono::milliseconds(1500));
  EXPECT_EQ(env->retry_policy->base_delay, std::chrono::milliseconds(250));
}

TEST(ParseEnvelopeTest, OnlyJobTypeAndPayloadAreRequired) {
  Result<Envelope> env = ParseEnvelope(R"({"job_type":"a","payload":[1,2]})");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->payload, "[1,2]");
  EXPECT_EQ(env->max_attempts, 0);  // Not given: the job type's policy decides.
  EXPECT_EQ(env->timeout, Seconds(30));
  EXPECT_EQ(env->visibility_timeout, Seconds(45));
  EXPECT_FALSE(env->retry_policy.has_value());
  EXPECT_EQ(env->queue, "default");
}

TEST(ParseEnvelopeTest, PayloadMayBeAnyJsonValue) {
  for (const char* payload : {"\"text\"", "42", "-1.5", "null", "true", "[]", "{}"}) {
    Result<Envelope> env =
        ParseEnvelope(std::string(R"({"job_type":"a","payload":)") + payload + "}");
    ASSERT_TRUE(env.ok()) << payload << ": " << env.status();
    EXPECT_EQ(nlohmann::json::parse(env->payload), nlohmann::json::parse(payload));
  }
}

TEST(ParseEnvelopeTest, ReadsQueuePriorityAndTimes) {
  Result<Envelope> env = ParseEnvelope(Patched(
      R"({"queue":"billing","priority":-1000,"expires_at":"2026-08-18T10:00:00+02:00",
          "start_by":"2026-08-17T10:05:00Z","deadline":"2026-08-17T12:00:00.5Z"})"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->queue, "billing");
  EXPECT_EQ(env->priority, -1000);
  EXPECT_EQ(env->expires_at, kAug17At10 + std::chrono::hours(22));
  EXPECT_EQ(env->start_by, kAug17At10 + std::chrono::minutes(5));
  EXPECT_EQ(env->deadline, kAug17At10 + std::chrono::hours(2) + Millis(500));
}

TEST(ParseEnvelopeTest, IgnoresUnknownFieldsAndTreatsNullAsAbsent) {
  Result<Envelope> env =
      ParseEnvelope(Patched(R"({"x_custom":{"deep":[1,2,3]},"future_field":7})"));
  ASSERT_TRUE(env.ok()) << env.status();
  Result<Envelope> with_nulls = ParseEnvelope(
      R"({"job_type":"a","payload":{},"tenant_id":null,"expires_at":null,"priority":null})");
  ASSERT_TRUE(with_nulls.ok()) << with_nulls.status();
  EXPECT_EQ(with_nulls->tenant_id, "");
  EXPECT_FALSE(with_nulls->expires_at.has_value());
  EXPECT_EQ(with_nulls->priority, 0);
}

TEST(ParseEnvelopeTest, AcceptsIntegralFloatsForIntegers) {
  Result<Envelope> env = ParseEnvelope(Patched(R"({"max_attempts":7.0})"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->max_attempts, 7);
}

// --- Parsing: errors ---------------------------------------------------------------

TEST(ParseEnvelopeTest, MalformedJsonNamesThePosition) {
  std::vector<FieldError> errors = ErrorsOf(R"({"job_type": "a", "payload": {,}})");
  ASSERT_THAT(errors, SizeIs(1));
  EXPECT_THAT(errors[0], ErrorOn("$", "malformed JSON"));
  EXPECT_THAT(errors[0].message, HasSubstr("column 31"));
  EXPECT_THAT(errors[0].message, Not(StartsWith("[json.exception")));
}

TEST(ParseEnvelopeTest, RejectsEmptyInputAndInvalidUtf8) {
  EXPECT_THAT(ErrorsOf(""), HasErrorOn("$", "malformed JSON"));
  EXPECT_THAT(ErrorsOf("{\"job_type\":\"a\xFF\",\"payload\":{}}"),
              HasErrorOn("$", "malformed JSON"));
  EXPECT_THAT(ErrorsOf(std::string("{\"job_type\":\"a\"\0}", 17)),
              HasErrorOn("$", "malformed JSON"));
}

TEST(ParseEnvelopeTest, TopLevelMustBeAnObject) {
  EXPECT_THAT(ErrorsOf("[1,2]"), HasErrorOn("$", "must be a JSON object, got array"));
  EXPECT_THAT(ErrorsOf("\"job\""), HasErrorOn("$", "must be a JSON object, got string"));
}

TEST(ParseEnvelopeTest, MissingRequiredFieldsAreEachReported) {
  std::vector<FieldError> errors;
  Result<Envelope> env = ParseEnvelope(R"({"tenant_id":"t"})", {}, &errors);
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(errors, HasErrorOn("job_type", "is required"));
  EXPECT_THAT(errors, HasErrorOn("payload", "is required"));
  EXPECT_THAT(errors, SizeIs(2));
  EXPECT_EQ(env.status().message(),
            "invalid envelope: job_type: is required; payload: is required");
}

TEST(ParseEnvelopeTest, EmptyOrNullJobTypeIsReportedOnce) {
  EXPECT_THAT(ErrorsOf(Patched(R"({"job_type":""})")),
              AllOf(SizeIs(1), HasErrorOn("job_type", "required")));
  EXPECT_THAT(ErrorsOf(R"({"job_type":null,"payload":1})"),
              AllOf(SizeIs(1), HasErrorOn("job_type", "required")));
}

TEST(ParseEnvelopeTest, WrongTypesNameTheFieldAndTheType) {
  std::vector<FieldError> errors = ErrorsOf(Patched(
      R"({"job_type":42,"max_attempts":"5","timeout_seconds":"30","tenant_id":true,
          "scheduled_at":1786960800,"priority":[1],"attempt":{}})"));
  EXPECT_THAT(errors, HasErrorOn("job_type", "must be a string, got number"));
  EXPECT_THAT(errors, HasErrorOn("max_attempts", "must be an integer, got string"));
  EXPECT_THAT(errors, HasErrorOn("timeout_seconds", "must be a number of seconds, got string"));
  EXPECT_THAT(errors, HasErrorOn("tenant_id", "must be a string, got boolean"));
  EXPECT_THAT(errors, HasErrorOn("scheduled_at", "must be an RFC 3339 time string, got number"));
  EXPECT_THAT(errors, HasErrorOn("priority", "must be an integer, got array"));
  EXPECT_THAT(errors, HasErrorOn("attempt", "must be an integer, got object"));
  // One error per field: the wrong-typed job_type is not also "required".
  EXPECT_THAT(errors, SizeIs(7));
}

TEST(ParseEnvelopeTest, RetryPolicyTypeErrorsAreNested) {
  EXPECT_THAT(ErrorsOf(Patched(R"({"retry_policy":"fast"})")),
              HasErrorOn("retry_policy", "must be an object, got string"));
  std::vector<FieldError> errors = ErrorsOf(Patched(
      R"({"retry_policy":{"backoff":1,"jitter":3,"multiplier":"x","base_delay_seconds":"5"}})"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.backoff", "must be a string"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.jitter", "must be a boolean or a string"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.multiplier", "must be a number"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.base_delay_seconds", "must be a number"));
}

TEST(ParseEnvelopeTest, UnknownBackoffAndJitterNames) {
  std::vector<FieldError> errors =
      ErrorsOf(Patched(R"({"retry_policy":{"backoff":"linear","jitter":"some"}})"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.backoff", "unknown backoff \"linear\""));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.jitter", "unknown jitter \"some\""));
  EXPECT_THAT(errors, SizeIs(2));
}

TEST(ParseEnvelopeTest, IntegersMustBeWholeAndInRange) {
  EXPECT_THAT(ErrorsOf(Patched(R"({"max_attempts":1.5})")),
              HasErrorOn("max_attempts", "must be an integer, got 1.5"));
  EXPECT_THAT(ErrorsOf(Patched(R"({"max_attempts":1e20})")),
              HasErrorOn("max_attempts", "must be an integer within"));
  EXPECT_THAT(ErrorsOf(Patched(R"({"priority":99999999999})")),
              HasErrorOn("priority", "must be an integer within"));
  EXPECT_THAT(ErrorsOf(Patched(R"({"priority":-99999999999})")),
              HasErrorOn("priority", "must be an integer within"));
}

TEST(ParseEnvelopeTest, FractionalMaxAttemptsIsOneProblem) {
  // Not also "must be >= 1, got 0" for the value it was left at.
  EXPECT_THAT(ErrorsOf(Patched(R"({"max_attempts":2.5})")),
              ElementsAre(ErrorOn("max_attempts", "must be an integer, got 2.5")));
}

TEST(ParseEnvelopeTest, AnUnreadableTimeoutIsOneProblemNotAlsoTheVisibilityRule) {
  // The default 30 s timeout must not stand in for the unreadable one and
  // make a 20 s visibility timeout look too short.
  EXPECT_THAT(ErrorsOf(Patched(R"({"timeout_seconds":"soon","visibility_timeout_seconds":20})")),
              ElementsAre(ErrorOn("timeout_seconds", "must be a number of seconds")));
  EXPECT_THAT(ErrorsOf(Patched(R"({"timeout_seconds":10,"visibility_timeout_seconds":"x"})")),
              ElementsAre(ErrorOn("visibility_timeout_seconds", "must be a number of seconds")));
}

TEST(ParseEnvelopeTest, EveryBadIntegerFieldIsOneProblem) {
  for (const char* field : {"attempt", "max_attempts", "priority"}) {
    for (const char* bad :
         {"2.5", "-0.5", "1e20", "-1e20", "99999999999", R"("5")", "true", "[1]"}) {
      const std::string patch = std::string(R"({")") + field + R"(":)" + bad + "}";
      EXPECT_THAT(ErrorsOf(Patched(patch)), ElementsAre(ErrorOn(field, "must be an integer")))
          << patch;
    }
  }
}

TEST(ParseEnvelopeTest, HugeSecondsAreRejectedNotOverflowed) {
  EXPECT_THAT(ErrorsOf(Patched(R"({"timeout_seconds":1e300})")),
              HasErrorOn("timeout_seconds", "must be within"));
  EXPECT_THAT(ErrorsOf(Patched(R"({"ttl_seconds":-1e19})")),
              HasErrorOn("ttl_seconds", "must be within"));
}

TEST(ParseEnvelopeTest, NonRfc3339TimesAreRejectedPerField) {
  std::vector<FieldError> errors = ErrorsOf(Patched(
      R"({"scheduled_at":"2026-08-17 10:00","created_at":"yesterday",
          "expires_at":"2026-13-01T00:00:00Z","deadline":"2026-02-30T00:00:00Z",
          "start_by":"2026-08-17T10:00:00"})"));
  EXPECT_THAT(errors, HasErrorOn("scheduled_at", "expected 'T'"));
  EXPECT_THAT(errors, HasErrorOn("created_at", "\"yesterday\" is not an RFC 3339 time"));
  EXPECT_THAT(errors, HasErrorOn("expires_at", "month 13"));
  EXPECT_THAT(errors, HasErrorOn("deadline", "day 30 does not exist in 2026-02"));
  EXPECT_THAT(errors, HasErrorOn("start_by", "expected 'Z' or an offset"));
  EXPECT_THAT(errors, SizeIs(5));
}

TEST(ParseEnvelopeTest, ReportsEveryProblemAtOnce) {
  std::vector<FieldError> errors = ErrorsOf(Patched(
      R"({"max_attempts":0,"timeout_seconds":-3,"job_type":"bad type","queue":"a/b",
          "priority":5000,"attempt":-1,"ttl_seconds":0,"lock_key":"has space",
          "retry_policy":{"backoff":"linear"}})"));
  EXPECT_THAT(errors, HasErrorOn("max_attempts", "must be >= 1, got 0"));
  EXPECT_THAT(errors, HasErrorOn("timeout_seconds", "must be > 0, got -3"));
  EXPECT_THAT(errors, HasErrorOn("job_type", "byte 0x20 at offset 3"));
  EXPECT_THAT(errors, HasErrorOn("queue", "'/' at offset 1"));
  EXPECT_THAT(errors, HasErrorOn("priority", "must be within [-1000, 1000], got 5000"));
  EXPECT_THAT(errors, HasErrorOn("attempt", "must be >= 0, got -1"));
  EXPECT_THAT(errors, HasErrorOn("ttl_seconds", "must be > 0, got 0"));
  EXPECT_THAT(errors, HasErrorOn("lock_key", "byte 0x20 at offset 3"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.backoff", "unknown backoff"));
  EXPECT_THAT(errors, SizeIs(9));
}

TEST(ParseEnvelopeTest, MessageListsEveryProblemAndErrorsAreAppended) {
  std::vector<FieldError> errors = {{"earlier", "kept"}};
  Result<Envelope> env = ParseEnvelope(Patched(R"({"max_attempts":0,"priority":5000})"), {},
                                       &errors);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(env.status().message(),
            "invalid envelope: max_attempts: must be >= 1, got 0; "
            "priority: must be within [-1000, 1000], got 5000");
  ASSERT_THAT(errors, SizeIs(3));
  EXPECT_EQ(errors[0].field, "earlier");
}

TEST(ParseEnvelopeTest, PayloadSizeIsBounded) {
  ValidationOptions options;
  options.max_payload_bytes = 64;
  const std::string big = Patched(R"({"payload":{"blob":")" + std::string(100, 'x') + "\"}}");
  EXPECT_THAT(ErrorsOf(big, options), HasErrorOn("payload", "over the limit of 64 bytes"));
  EXPECT_TRUE(ParseEnvelope(big).ok());  // Within the default 256 KiB.
}

// --- Nesting depth: nothing recursive may see unbounded input -----------------------

std::string Nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// "\"k<i>\"": a JSON object key.
std::string JsonKey(int i) { return "\"k" + std::to_string(i) + "\""; }

TEST(ParseEnvelopeTest, HundredThousandOpenBracketsFailCleanly) {
  std::vector<FieldError> errors;
  Result<Envelope> env = ParseEnvelope(std::string(100000, '['), {}, &errors);
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(errors, HasErrorOn("$", "nested deeper than"));
  EXPECT_THAT(errors, HasErrorOn("$", "malformed JSON"));
}

TEST(ParseEnvelopeTest, DeeplyNestedPayloadIsRejected) {
  const std::string json = R"({"job_type":"a","payload":)" + Nested(100000) + "}";
  std::vector<FieldError> errors = ErrorsOf(json);
  EXPECT_THAT(errors, ElementsAre(ErrorOn("payload", "nested deeper than 64 levels")));
}

TEST(ParseEnvelopeTest, PayloadDepthBoundIsSixtyFourLevels) {
  EXPECT_TRUE(ParseEnvelope(R"({"job_type":"a","payload":)" + Nested(64) + "}").ok());
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":)" + Nested(65) + "}"),
              HasErrorOn("payload", "nested deeper than 64 levels"));
}

TEST(ParseEnvelopeTest, DeeplyNestedUnknownFieldIsRejectedByName) {
  EXPECT_THAT(ErrorsOf(Patched("{}").insert(1, R"("extra":)" + Nested(1000) + ",")),
              HasErrorOn("extra", "nested deeper than"));
}

TEST(ValidateEnvelopeTest, DeeplyNestedPayloadTextIsRejected) {
  Envelope env = ValidEnvelope();
  env.payload = Nested(100000);
  EXPECT_THAT(ValidateEnvelope(env), HasErrorOn("payload", "nested deeper than 64 levels"));
  // Serialising it must not recurse either: it is kept as a string.
  const nlohmann::json doc = nlohmann::json::parse(SerializeEnvelope(env));
  EXPECT_TRUE(doc["payload"].is_string());
}

// --- Duplicate keys: refused wherever they are, named by their JSON path --------------

TEST(ParseEnvelopeTest, DuplicateTopLevelKeyIsRefusedByName) {
  std::vector<FieldError> errors;
  Result<Envelope> env =
      ParseEnvelope(R"({"job_type":"a","payload":{},"job_type":"b"})", {}, &errors);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(env.status().message(), HasSubstr("job_type: is a duplicate key"));
  // One problem: the field is not read further, so not also "required".
  EXPECT_THAT(errors, ElementsAre(ErrorOn("job_type", "is a duplicate key")));
  // Nor judged by one of its values.
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{},"max_attempts":3,"max_attempts":2.5})"),
              ElementsAre(ErrorOn("max_attempts", "is a duplicate key")));
}

TEST(ParseEnvelopeTest, DuplicateKeyInRetryPolicyIsNamedWithItsPath) {
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{},
                           "retry_policy":{"backoff":"fixed","jitter":true,"backoff":"fixed"}})"),
              ElementsAre(ErrorOn("retry_policy.backoff", "is a duplicate key")));
}

TEST(ParseEnvelopeTest, DuplicateKeyInThePayloadIsNamedWithItsJsonPath) {
  // The payload would silently lose "ord_1": bad input, like any other.
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"order_id":"ord_1","order_id":"ord_2"}})"),
              ElementsAre(ErrorOn("payload.order_id", "is a duplicate key")));
  EXPECT_THAT(
      ErrorsOf(R"({"job_type":"a","payload":{"items":[{"sku":1},{"sku":2,"qty":1,"sku":3}]}})"),
      ElementsAre(ErrorOn("payload.items[1].sku")));
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":[[0,{"x":{"y":1,"y":2}}]]})"),
              ElementsAre(ErrorOn("payload[0][1].x.y")));
  // A key that is not a plain name is quoted, escaped, in the path.
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"a.b":1,"a.b":2}})"),
              ElementsAre(ErrorOn(R"(payload["a.b"])")));
  EXPECT_THAT(ErrorsOf("{\"job_type\":\"a\",\"payload\":{\"a\\nb\":1,\"a\\nb\":2}}"),
              ElementsAre(ErrorOn(R"(payload["a\x0Ab"])")));
}

TEST(ParseEnvelopeTest, DuplicateKeysInAnUnknownFieldAreRefusedToo) {
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{},"x_custom":{"k":1,"k":2}})"),
              ElementsAre(ErrorOn("x_custom.k", "is a duplicate key")));
}

TEST(ParseEnvelopeTest, DuplicateKeysAreComparedAfterUnescaping) {
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"a":1,"a":2}})"),
              ElementsAre(ErrorOn("payload.a", "is a duplicate key")));
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"a/b":1,"a\/b":2}})"),
              ElementsAre(ErrorOn(R"(payload["a/b"])", "is a duplicate key")));
}

TEST(ParseEnvelopeTest, EachDuplicatedKeyIsReportedOnceInDocumentOrder) {
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"b":1,"a":1,"b":2,"a":2,"b":3},
                           "payload":1})"),
              ElementsAre(ErrorOn("payload.b"), ErrorOn("payload.a"), ErrorOn("payload")));
}

TEST(ParseEnvelopeTest, TheSameKeyInDifferentObjectsIsFine) {
  Result<Envelope> env = ParseEnvelope(
      R"({"job_type":"a","payload":{"id":1,"child":{"id":2},"list":[{"id":3},{"id":4}]},
          "retry_policy":{"backoff":"fixed"},"x":{"backoff":"fixed"}})");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->payload, R"({"id":1,"child":{"id":2},"list":[{"id":3},{"id":4}]})");
}

TEST(ParseEnvelopeTest, ManyDuplicateKeysAreListedUpToTenThenSummedUp) {
  std::string payload = "{";
  for (int i = 0; i < 50; ++i) payload += JsonKey(i) + ":1," + JsonKey(i) + ":2,";
  payload.back() = '}';
  std::vector<FieldError> errors = ErrorsOf(R"({"job_type":"a","payload":)" + payload + "}");
  ASSERT_THAT(errors, SizeIs(11));
  EXPECT_THAT(errors[0], ErrorOn("payload.k0", "is a duplicate key"));
  EXPECT_THAT(errors[9], ErrorOn("payload.k9", "is a duplicate key"));
  EXPECT_THAT(errors[10], ErrorOn("$", "has more duplicate keys than the 10 listed"));
}

TEST(ParseEnvelopeTest, DuplicateKeyNextToATooDeepFieldIsStillNamed) {
  // Discarding the too deep member also shrinks its object; that alone is
  // not a duplicate.
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{},"extra":)" + Nested(1000) + R"(,"z":{}})"),
              ElementsAre(ErrorOn("extra", "nested deeper than")));
  EXPECT_THAT(ErrorsOf(R"({"job_type":"a","payload":{"x":1,"x":2},"extra":)" + Nested(1000) + "}"),
              ElementsAre(ErrorOn("extra", "nested deeper than"),
                          ErrorOn("payload.x", "is a duplicate key")));
}

TEST(ValidateEnvelopeTest, DuplicateKeyInThePayloadTextIsRefused) {
  Envelope env = ValidEnvelope();
  env.payload = R"({"order_id":"ord_1","order_id":"ord_2"})";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("payload.order_id", "duplicate key")));
  env.payload = R"([{"a":1},{"b":1,"c":{"d":1},"b":2}])";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("payload[1].b", "duplicate key")));
  // Spellings that differ only in escapes name the same key.
  env.payload = R"({"a\/b":1,"a/b":2})";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn(R"(payload["a/b"])", "duplicate key")));
  env.payload = R"({"x":{"a":1},"y":{"a":1},"a":[{"a":1}]})";
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
}

TEST(ValidateEnvelopeTest, DuplicateKeysAreFoundInLargeObjectsToo) {
  // More keys than the quick scan tracks: the parser decides.
  std::string payload = "{";
  for (int i = 0; i < 300; ++i) payload += JsonKey(i) + ":" + std::to_string(i) + ",";
  Envelope env = ValidEnvelope();
  env.payload = payload.substr(0, payload.size() - 1) + "}";
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
  env.payload = payload + JsonKey(7) + ":0}";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("payload.k7", "duplicate key")));
}

TEST(SerializeEnvelopeTest, PayloadWithADuplicateKeyIsKeptWholeAsAString) {
  Envelope env = ValidEnvelope();
  env.payload = R"({"order_id":"ord_1","order_id":"ord_2"})";
  const nlohmann::json doc = nlohmann::json::parse(SerializeEnvelope(env));
  ASSERT_TRUE(doc["payload"].is_string());
  EXPECT_EQ(doc["payload"].get<std::string>(), env.payload);
}

// --- ValidateEnvelope ----------------------------------------------------------------

TEST(ValidateEnvelopeTest, DefaultsWithJobTypeAreValid) {
  EXPECT_THAT(ValidateEnvelope(ValidEnvelope()), IsEmpty());
  Envelope env;
  env.job_type = "a";  // The default payload "{}" is valid too.
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
}

TEST(ValidateEnvelopeTest, PayloadMustBeJson) {
  Envelope env = ValidEnvelope();
  env.payload = "{\"a\":";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("payload", "is not valid JSON")));
  env.payload = "";
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("payload", "is not valid JSON")));
}

TEST(ValidateEnvelopeTest, VisibilityMustExceedTimeoutPlusBuffer) {
  Envelope env = ValidEnvelope();
  env.timeout = Seconds(30);
  env.visibility_timeout = Seconds(35);
  EXPECT_THAT(ValidateEnvelope(env),
              ElementsAre(ErrorOn("visibility_timeout_seconds",
                                  "must be > timeout_seconds + buffer (30 + 5 = 35), got 35")));
  env.visibility_timeout = Millis(35001);
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());

  ValidationOptions options;
  options.visibility_buffer = Seconds(10);
  EXPECT_THAT(ValidateEnvelope(env, options),
              HasErrorOn("visibility_timeout_seconds", "(30 + 10 = 40), got 35.001"));
}

TEST(ValidateEnvelopeTest, TimeoutsMustBePositive) {
  Envelope env = ValidEnvelope();
  env.timeout = Duration::zero();
  env.visibility_timeout = Seconds(-1);
  std::vector<FieldError> errors = ValidateEnvelope(env);
  EXPECT_THAT(errors, HasErrorOn("timeout_seconds", "must be > 0, got 0"));
  EXPECT_THAT(errors, HasErrorOn("visibility_timeout_seconds", "must be > 0, got -1"));
  EXPECT_THAT(errors, SizeIs(2));  // No buffer complaint on top.
}

TEST(ValidateEnvelopeTest, TtlMustBePositiveAndNotWithExpiresAt) {
  Envelope env = ValidEnvelope();
  env.ttl = Seconds(-5);
  EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn("ttl_seconds", "must be > 0, got -5")));
  env.ttl = Seconds(60);
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
  env.expires_at = kAug17At10;
  EXPECT_THAT(ValidateEnvelope(env),
              ElementsAre(ErrorOn("ttl_seconds", "must not be given together with expires_at")));
}

TEST(ValidateEnvelopeTest, PriorityBounds) {
  Envelope env = ValidEnvelope();
  for (int ok : {-1000, 0, 1000}) {
    env.priority = ok;
    EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << ok;
  }
  for (int bad : {-1001, 1001}) {
    env.priority = bad;
    EXPECT_THAT(ValidateEnvelope(env), HasErrorOn("priority", "must be within")) << bad;
  }
}

TEST(ValidateEnvelopeTest, SafeNamesForJobTypeAndQueue) {
  Envelope env = ValidEnvelope();
  env.job_type = "Invoice.generate:v2_final-1";
  env.queue = "q.1:high_prio-x";
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
  env.job_type = "invoice/generate";
  env.queue = "";
  std::vector<FieldError> errors = ValidateEnvelope(env);
  EXPECT_THAT(errors, HasErrorOn("job_type", "'/' at offset 7"));
  EXPECT_THAT(errors, HasErrorOn("queue", "must not be empty"));
  env.job_type = "caf\xC3\xA9";
  EXPECT_THAT(ValidateEnvelope(env), HasErrorOn("job_type", "byte 0xC3 at offset 3"));
}

TEST(ValidateEnvelopeTest, KeysArePrintableAsciiWithoutWhitespace) {
  struct Case {
    void (*set)(Envelope&, std::string);
    const char* field;
  };
  const Case cases[] = {
      {[](Envelope& e, std::string v) { e.job_id = std::move(v); }, "job_id"},
      {[](Envelope& e, std::string v) { e.tenant_id = std::move(v); }, "tenant_id"},
      {[](Envelope& e, std::string v) { e.idempotency_key = std::move(v); }, "idempotency_key"},
      {[](Envelope& e, std::string v) { e.trace_id = std::move(v); }, "trace_id"},
      {[](Envelope& e, std::string v) { e.lock_key = std::move(v); }, "lock_key"},
      {[](Envelope& e, std::string v) { e.dedup_key = std::move(v); }, "dedup_key"},
  };
  for (const Case& c : cases) {
    Envelope env = ValidEnvelope();
    c.set(env, "invoice.generate:ord_987/{x}=[y]");  // Punctuation is fine.
    EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << c.field;
    const std::vector<std::string> bad_values = {"a b", "a\tb", "a\nb", std::string("a\0b", 3),
                                                 "a\x7F"};
    for (const std::string& bad : bad_values) {
      c.set(env, bad);
      EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn(c.field, "offset 1"))) << c.field;
    }
    c.set(env, std::string(256, 'k'));
    EXPECT_THAT(ValidateEnvelope(env),
                ElementsAre(ErrorOn(c.field, "is 256 characters long, over the limit of 255")))
        << c.field;
  }
}

// The exact sets docs/contract.md and job.h state, byte by byte.
TEST(ValidateEnvelopeTest, NameAndKeyCharacterSetsAreExactlyTheDocumentedOnes) {
  struct Case {
    const char* field;
    bool safe_name;  // Else a key.
    void (*set)(Envelope&, std::string);
  };
  const Case cases[] = {
      {"job_type", true, [](Envelope& e, std::string v) { e.job_type = std::move(v); }},
      {"queue", true, [](Envelope& e, std::string v) { e.queue = std::move(v); }},
      {"job_id", false, [](Envelope& e, std::string v) { e.job_id = std::move(v); }},
      {"tenant_id", false, [](Envelope& e, std::string v) { e.tenant_id = std::move(v); }},
      {"idempotency_key", false,
       [](Envelope& e, std::string v) { e.idempotency_key = std::move(v); }},
      {"dedup_key", false, [](Envelope& e, std::string v) { e.dedup_key = std::move(v); }},
      {"lock_key", false, [](Envelope& e, std::string v) { e.lock_key = std::move(v); }},
      {"trace_id", false, [](Envelope& e, std::string v) { e.trace_id = std::move(v); }},
  };
  // Written out rather than with <cctype>, whose answers depend on the locale.
  auto in_safe_set = [](int c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  };
  auto in_key_set = [](int c) { return c >= 0x21 && c <= 0x7E; };
  for (const Case& c : cases) {
    for (int byte = 0; byte < 256; ++byte) {
      Envelope env = ValidEnvelope();
      c.set(env, std::string("a") + static_cast<char>(byte) + "b");
      const bool documented = c.safe_name ? in_safe_set(byte) : in_key_set(byte);
      if (documented) {
        EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << c.field << " byte " << byte;
      } else {
        EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn(c.field, "at offset 1")))
            << c.field << " byte " << byte;
      }
    }
    Envelope env = ValidEnvelope();
    c.set(env, std::string(255, 'k'));
    EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << c.field;
    c.set(env, std::string(256, 'k'));
    EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn(c.field, "over the limit of 255")))
        << c.field;
    c.set(env, "");
    if (c.safe_name) {
      EXPECT_THAT(ValidateEnvelope(env), ElementsAre(ErrorOn(c.field, "must not be empty")));
    } else {
      EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << c.field;  // Not given.
    }
  }
}

// Keys are checked eight bytes at a time; every byte at every offset of a
// long key, and every pair of neighbours (where a borrow or a carry between
// bytes could hide one), must give what the byte-by-byte rule gives.
TEST(ValidateEnvelopeTest, LongKeysAreCheckedByteForByte) {
  auto in_key_set = [](int c) { return c >= 0x21 && c <= 0x7E; };
  for (std::size_t at = 0; at < 17; ++at) {
    for (int byte = 0; byte < 256; ++byte) {
      Envelope env = ValidEnvelope();
      env.dedup_key = std::string(17, 'k');
      env.dedup_key[at] = static_cast<char>(byte);
      if (in_key_set(byte)) {
        EXPECT_THAT(ValidateEnvelope(env), IsEmpty()) << "byte " << byte << " at " << at;
      } else {
        EXPECT_THAT(ValidateEnvelope(env),
                    ElementsAre(ErrorOn("dedup_key", "at offset " + std::to_string(at))))
            << "byte " << byte << " at " << at;
      }
    }
  }
  for (std::size_t at : {3, 7}) {  // Within one word, and across two.
    for (int a = 0; a < 256; ++a) {
      for (int b = 0; b < 256; ++b) {
        Envelope env = ValidEnvelope();
        env.lock_key = std::string(16, 'k');
        env.lock_key[at] = static_cast<char>(a);
        env.lock_key[at + 1] = static_cast<char>(b);
        const bool valid = in_key_set(a) && in_key_set(b);
        ASSERT_EQ(ValidateEnvelope(env).empty(), valid) << a << " " << b << " at " << at;
      }
    }
  }
}

// The contract page states both sets and their bound, and names the test
// above, so the page and the code are checked against the same thing.
TEST(ValidateEnvelopeTest, ContractDocStatesTheNameAndKeyCharacterSets) {
  std::ifstream in(std::string(JOBPACT_SOURCE_DIR) + "docs/contract.md");
  ASSERT_TRUE(in) << "cannot read docs/contract.md";
  std::string line;
  std::string doc, safe_row, key_row;
  while (std::getline(in, line)) {
    if (line.rfind("| safe name |", 0) == 0) safe_row = line;
    if (line.rfind("| key |", 0) == 0) key_row = line;
    doc += line + "\n";
  }
  EXPECT_THAT(safe_row, HasSubstr("`job_type`, `queue`"));
  EXPECT_THAT(safe_row, HasSubstr("`[A-Za-z0-9._:-]`"));
  for (const char* key : {"`job_id`", "`tenant_id`", "`idempotency_key`", "`dedup_key`",
                          "`lock_key`", "`trace_id`"}) {
    EXPECT_THAT(key_row, HasSubstr(key));
  }
  EXPECT_THAT(key_row, HasSubstr("`0x21`-`0x7E`"));
  EXPECT_THAT(doc, HasSubstr("255 is accepted, 256 refused"));
  EXPECT_THAT(doc, HasSubstr("NameAndKeyCharacterSetsAreExactlyTheDocumentedOnes"));
}

TEST(ValidateEnvelopeTest, NameLengthBoundIsConfigurable) {
  Envelope env = ValidEnvelope();
  ValidationOptions options;
  options.max_name_length = 8;
  EXPECT_THAT(ValidateEnvelope(env, options), HasErrorOn("job_type", "over the limit of 8"));
}

TEST(ValidateEnvelopeTest, RetryPolicyFieldsAreEachReported) {
  Envelope env = ValidEnvelope();
  env.retry_policy = BackoffSpec{};
  env.retry_policy->base_delay = Seconds(-1);
  env.retry_policy->max_delay = Seconds(-2);
  env.retry_policy->multiplier = 0.5;
  std::vector<FieldError> errors = ValidateEnvelope(env);
  EXPECT_THAT(errors, HasErrorOn("retry_policy.base_delay_seconds", "must be >= 0, got -1"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.max_delay_seconds",
                                 "must be >= base_delay_seconds (-1), got -2"));
  EXPECT_THAT(errors, HasErrorOn("retry_policy.multiplier", "got 0.5"));
  EXPECT_THAT(errors, SizeIs(3));
}

TEST(ParseEnvelopeTest, ZeroBaseDelayIsAnImmediateRetry) {
  Result<Envelope> env = ParseEnvelope(Patched(
      R"({"retry_policy":{"backoff":"fixed","base_delay_seconds":0,"max_delay_seconds":0}})"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->retry_policy->base_delay, Duration::zero());
  EXPECT_EQ(env->retry_policy->max_delay, Duration::zero());
  Result<Envelope> again = ParseEnvelope(SerializeEnvelope(*env));
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameEnvelope(*env, *again);
  EXPECT_THAT(ErrorsOf(Patched(R"({"retry_policy":{"base_delay_seconds":-0.5}})")),
              ElementsAre(ErrorOn("retry_policy.base_delay_seconds", "must be >= 0, got -0.5")));
}

TEST(ValidateEnvelopeTest, RetryPolicyDefersToValidateBackoffForTheRest) {
  Envelope env = ValidEnvelope();
  env.retry_policy = BackoffSpec{};
  env.retry_policy->kind = static_cast<BackoffKind>(99);
  std::vector<FieldError> errors = ValidateEnvelope(env);
  ASSERT_THAT(errors, SizeIs(1));
  EXPECT_THAT(errors[0].field, StartsWith("retry_policy"));
}

TEST(ValidateEnvelopeTest, ParsedRetryPolicyIsValidated) {
  EXPECT_THAT(ErrorsOf(Patched(R"({"retry_policy":{"base_delay_seconds":10,
                                                    "max_delay_seconds":5}})")),
              ElementsAre(ErrorOn("retry_policy.max_delay_seconds", "(10), got 5")));
}

// --- PrepareForEnqueue ---------------------------------------------------------------

TEST(PrepareForEnqueueTest, FillsWhatTheSystemOwns) {
  testing::ManualClock clock(kAug17At10);
  Envelope env = ValidEnvelope();
  env.attempt = 3;  // A producer's value is never trusted.
  env.ttl = Seconds(90);
  PrepareForEnqueue(env, clock.Now());
  EXPECT_EQ(env.attempt, 0);
  EXPECT_EQ(env.created_at, kAug17At10);
  EXPECT_EQ(env.expires_at, kAug17At10 + Seconds(90));
  EXPECT_FALSE(env.ttl.has_value());
  EXPECT_THAT(env.job_id, StartsWith("job_"));
  EXPECT_EQ(env.job_id.size(), 4 + 26);
  EXPECT_THAT(ValidateEnvelope(env), IsEmpty());
}

TEST(PrepareForEnqueueTest, KeepsWhatTheProducerSet) {
  testing::ManualClock clock(kAug17At10);
  Envelope env = ValidEnvelope();
  env.job_id = "job_mine";
  env.created_at = kAug17At10 - Seconds(30);
  env.expires_at = kAug17At10 + Seconds(5);
  clock.Advance(Seconds(10));
  PrepareForEnqueue(env, clock.Now());
  EXPECT_EQ(env.job_id, "job_mine");
  EXPECT_EQ(env.created_at, kAug17At10 - Seconds(30));
  EXPECT_EQ(env.expires_at, kAug17At10 + Seconds(5));  // No ttl: untouched.
}

TEST(PrepareForEnqueueTest, TtlIsRelativeToEnqueueTime) {
  testing::ManualClock clock(kAug17At10);
  Envelope env = ValidEnvelope();
  env.ttl = Millis(1500);
  clock.Advance(std::chrono::hours(1));
  PrepareForEnqueue(env, clock.Now());
  EXPECT_EQ(env.expires_at, kAug17At10 + std::chrono::hours(1) + Millis(1500));
  const nlohmann::json doc = nlohmann::json::parse(SerializeEnvelope(env));
  EXPECT_EQ(doc["expires_at"], "2026-08-17T11:00:01.500Z");
  EXPECT_FALSE(doc.contains("ttl_seconds"));
}

// --- Job ids (ULID) ---------------------------------------------------------------

const std::string_view kCrockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

// The 80-bit random part of a ULID as (high 16 bits, low 64 bits).
std::pair<std::uint64_t, std::uint64_t> RandomPart(const std::string& ulid) {
  std::uint64_t hi = 0, lo = 0;
  for (std::size_t i = 10; i < 26; ++i) {
    const std::uint64_t digit = kCrockford.find(ulid[i]);
    hi = (hi << 5) | (lo >> 59);
    lo = (lo << 5) | digit;
  }
  return {hi & 0xFFFF, lo};
}

TEST(UlidTest, EncodesTheSpecExampleTimestamp) {
  // github.com/ulid/spec: 01ARYZ6S41... encodes 1469918176385 ms.
  internal::UlidGenerator gen(1);
  const std::string id = gen.Next(TimePoint(std::chrono::milliseconds(1469918176385)));
  EXPECT_EQ(id.substr(0, 10), "01ARYZ6S41");
  EXPECT_EQ(internal::UlidMillis(id), 1469918176385u);
}

TEST(UlidTest, SameMillisecondIncrementsTheRandomPart) {
  internal::UlidGenerator gen(7);
  const std::string a = gen.Next(kAug17At10);
  const std::string b = gen.Next(kAug17At10 + std::chrono::microseconds(300));
  EXPECT_EQ(a.substr(0, 10), b.substr(0, 10));
  auto [a_hi, a_lo] = RandomPart(a);
  auto [b_hi, b_lo] = RandomPart(b);
  if (a_lo == UINT64_MAX) {
    EXPECT_EQ(b_lo, 0u);
    EXPECT_EQ(b_hi, a_hi + 1);
  } else {
    EXPECT_EQ(b_lo, a_lo + 1);
    EXPECT_EQ(b_hi, a_hi);
  }
}

TEST(UlidTest, LaterMillisecondSortsAfterAndEncodesItsTime) {
  internal::UlidGenerator gen(7);
  const std::string a = gen.Next(kAug17At10);
  const std::string b = gen.Next(kAug17At10 + Millis(1));
  EXPECT_LT(a, b);
  EXPECT_EQ(internal::UlidMillis(b), internal::UlidMillis(a).value() + 1);
  const std::string c = gen.Next(kAug17At10 + std::chrono::hours(24 * 365));
  EXPECT_LT(b, c);
}

TEST(UlidTest, ClockSteppingBackStillIncreases) {
  internal::UlidGenerator gen(7);
  const std::string a = gen.Next(kAug17At10);
  const std::string b = gen.Next(kAug17At10 - Seconds(5));
  EXPECT_LT(a, b);
  EXPECT_EQ(internal::UlidMillis(b), internal::UlidMillis(a));
}

TEST(UlidTest, HundredThousandIdsInOneMillisecondAreStrictlyIncreasing) {
  internal::UlidGenerator gen(11);
  std::string previous = gen.Next(kAug17At10);
  for (int i = 0; i < 100000; ++i) {
    std::string next = gen.Next(kAug17At10);
    ASSERT_LT(previous, next) << i;
    previous = std::move(next);
  }
}

TEST(UlidTest, AppendToWritesWhatNextWould) {
  internal::UlidGenerator next(13);
  internal::UlidGenerator append(13);
  for (int i = 0; i < 3; ++i) {
    const TimePoint t = kAug17At10 + Millis(i / 2);
    std::string out = "job_";
    append.AppendTo(t, &out);
    EXPECT_EQ(out, "job_" + next.Next(t)) << i;
  }
}

TEST(UlidTest, AForkedChildDoesNotRepeatItsParentsNextMillisecond) {
  // The fork is noticed without a getpid() per id (a pthread_atfork
  // counter): the child reseeds, so its next millisecond's random part is
  // not its parent's.
  internal::UlidGenerator gen;
  gen.Next(kAug17At10).size();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string id = gen.Next(kAug17At10 + Millis(5));
    const ssize_t n = ::write(fds[1], id.data(), id.size());
    ::_exit(n == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  char buf[internal::kUlidLength] = {};
  std::size_t got = 0;
  while (got < sizeof(buf)) {
    const ssize_t n = ::read(fds[0], buf + got, sizeof(buf) - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_EQ(got, sizeof(buf));
  const std::string from_child(buf, sizeof(buf));
  const std::string from_parent = gen.Next(kAug17At10 + Millis(5));
  EXPECT_EQ(from_child.substr(0, 10), from_parent.substr(0, 10));
  EXPECT_NE(from_child, from_parent);
}

TEST(NewJobIdTest, HasThePrefixAndCrockfordCharacters) {
  const std::string id = NewJobId(kAug17At10);
  ASSERT_EQ(id.size(), 30u);
  EXPECT_EQ(id.substr(0, 4), "job_");
  for (char c : id.substr(4)) EXPECT_NE(kCrockford.find(c), std::string_view::npos) << c;
  // Monotonic mode: never before the time given.
  EXPECT_GE(internal::UlidMillis(id.substr(4)).value(), 1786960800000u);
}

TEST(NewJobIdTest, HundredThousandIdsAreUniqueAndSorted) {
  testing::ManualClock clock(kAug17At10);
  std::vector<std::string> ids;
  ids.reserve(100000);
  for (int i = 0; i < 100000; ++i) {
    if (i % 1000 == 0) clock.Advance(std::chrono::microseconds(700));  // Sometimes a new ms.
    ids.push_back(NewJobId(clock.Now()));
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
}

TEST(NewJobIdTest, LaterTimeSortsAfter) {
  // The process-wide generator never goes back to an earlier millisecond, so
  // start past the last one it used (an id for time 0 carries it).
  const std::uint64_t last_ms = internal::UlidMillis(NewJobId(TimePoint{}).substr(4)).value();
  const TimePoint far =
      TimePoint(std::chrono::milliseconds(last_ms)) + std::chrono::hours(1);
  const std::string a = NewJobId(far);
  const std::string b = NewJobId(far + Millis(1));
  EXPECT_LT(a, b);
  EXPECT_EQ(internal::UlidMillis(b.substr(4)), internal::UlidMillis(a.substr(4)).value() + 1);
}

TEST(NewJobIdTest, TwoThreadsNeverCollide) {
  constexpr int kPerThread = 50000;
  std::vector<std::string> first, second;
  auto run = [](std::vector<std::string>* out) {
    out->reserve(kPerThread);
    for (int i = 0; i < kPerThread; ++i) out->push_back(NewJobId(kAug17At10));
  };
  std::thread t1(run, &first);
  std::thread t2(run, &second);
  t1.join();
  t2.join();
  EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
  EXPECT_TRUE(std::is_sorted(second.begin(), second.end()));
  std::set<std::string> all(first.begin(), first.end());
  all.insert(second.begin(), second.end());
  EXPECT_EQ(all.size(), 2u * kPerThread);
}

// --- RFC 3339 ----------------------------------------------------------------------

TEST(Rfc3339Test, ParsesUtcAgainstKnownEpochSeconds) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z").value(), TimePoint{});
  EXPECT_EQ(ParseRfc3339("2000-03-01T00:00:00Z").value(), FromUnixSeconds(951868800));
  EXPECT_EQ(ParseRfc3339("2026-08-17T10:00:00Z").value(), kAug17At10);
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:59:59Z").value(), FromUnixSeconds(-1));
}

TEST(Rfc3339Test, AcceptsLowerCaseAndOffsets) {
  EXPECT_EQ(ParseRfc3339("2026-08-17t10:00:00z").value(), kAug17At10);
  EXPECT_EQ(ParseRfc3339("2026-08-17T12:30:00+02:30").value(), kAug17At10);
  EXPECT_EQ(ParseRfc3339("2026-08-17T05:00:00-05:00").value(), kAug17At10);
  EXPECT_EQ(ParseRfc3339("2026-08-17T10:00:00-00:00").value(), kAug17At10);
  EXPECT_EQ(ParseRfc3339("2026-08-18T00:00:00+14:00").value(), kAug17At10);
}

TEST(Rfc3339Test, FractionalSecondsUpToNanoseconds) {
  EXPECT_EQ(ParseRfc3339("2026-08-17T10:00:00.5Z").value(), kAug17At10 + Millis(500));
  EXPECT_EQ(ParseRfc3339("2026-08-17T10:00:00.250Z").value(), kAug17At10 + Millis(250));
  EXPECT_EQ(ParseRfc3339("2026-08-17T10:00:00.123456789Z").value(),
            kAug17At10 + std::chrono::nanoseconds(123456789));
}

TEST(Rfc3339Test, LeapDays) {
  EXPECT_TRUE(ParseRfc3339("2024-02-29T00:00:00Z").ok());
  EXPECT_TRUE(ParseRfc3339("2000-02-29T00:00:00Z").ok());
  EXPECT_FALSE(ParseRfc3339("2023-02-29T00:00:00Z").ok());
  EXPECT_FALSE(ParseRfc3339("1900-02-29T00:00:00Z").ok());
}

TEST(Rfc3339Test, RejectsEverythingElseWithAReason) {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"2026-08-17 10:00", "expected 'T'"},
      {"yesterday", "expected a date"},
      {"", "expected a date"},
      {"2026-8-17T10:00:00Z", "expected a date"},
      {"2026-13-01T00:00:00Z", "month 13 is out of range"},
      {"2026-00-01T00:00:00Z", "month 00 is out of range"},
      {"2026-02-30T00:00:00Z", "day 30 does not exist in 2026-02"},
      {"2026-04-31T00:00:00Z", "day 31 does not exist"},
      {"2026-08-17T24:00:00Z", "hour 24"},
      {"2026-08-17T10:60:00Z", "minute 60"},
      {"2026-08-17T23:59:60Z", "leap second"},
      {"2026-08-17T10:00Z", "expected a time hh:mm:ss"},
      {"2026-08-17T10:00:00", "expected 'Z' or an offset"},
      {"2026-08-17T10:00:00.Z", "expected digits after '.'"},
      {"2026-08-17T10:00:00.1234567891Z", "more than 9 fractional digits"},
      {"2026-08-17T10:00:00+0200", "expected an offset"},
      {"2026-08-17T10:00:00+24:00", "offset 24:00 is out of range"},
      {"2026-08-17T10:00:00Z ", "unexpected text at offset 20"},
      {"2026-08-17T10:00:00ZZ", "unexpected text"},
      {"9999-12-31T23:59:59Z", "outside the range"},
  };
  for (const Case& c : cases) {
    Result<TimePoint> t = ParseRfc3339(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr(c.reason)) << c.text;
    EXPECT_THAT(t.status().message(), HasSubstr("is not an RFC 3339 time")) << c.text;
  }
}

TEST(Rfc3339Test, ErrorMessagesEscapeControlCharacters) {
  Result<TimePoint> t = ParseRfc3339("bad\n\x1b[31m");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(R"("bad\x0A\x1B[31m")"));
}

TEST(Rfc3339Test, FormatsInUtcWithTheFractionThatIsNeeded) {
  EXPECT_EQ(FormatRfc3339(kAug17At10), "2026-08-17T10:00:00Z");
  EXPECT_EQ(FormatRfc3339(kAug17At10 + Millis(250)), "2026-08-17T10:00:00.250Z");
  EXPECT_EQ(FormatRfc3339(kAug17At10 + std::chrono::microseconds(1)),
            "2026-08-17T10:00:00.000001Z");
  EXPECT_EQ(FormatRfc3339(kAug17At10 + std::chrono::nanoseconds(123456789)),
            "2026-08-17T10:00:00.123456789Z");
  EXPECT_EQ(FormatRfc3339(TimePoint{}), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(TimePoint{} - Millis(500)), "1969-12-31T23:59:59.500Z");
  EXPECT_EQ(FormatRfc3339(FromUnixSeconds(951782400)), "2000-02-29T00:00:00Z");
}

TEST(Rfc3339Test, MillisecondTimesRoundTripExactly) {
  // Steps chosen to visit many days, months, leap years and both sides of 1970.
  for (std::int64_t ms = -2000000000000; ms < 7000000000000; ms += 7777777777) {
    const TimePoint t{std::chrono::milliseconds(ms)};
    Result<TimePoint> back = ParseRfc3339(FormatRfc3339(t));
    ASSERT_TRUE(back.ok()) << FormatRfc3339(t) << ": " << back.status();
    ASSERT_EQ(*back, t) << FormatRfc3339(t);
  }
}

}  // namespace
}  // namespace jobpact

namespace jobpact {
namespace {

TEST(ParseEnvelopeTest, GivenMaxAttemptsOfZeroIsRefusedButAbsenceIsNot) {
  std::vector<FieldError> errors;
  EXPECT_FALSE(ParseEnvelope(R"({"job_type":"a","payload":{},"max_attempts":0})", {}, &errors).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "max_attempts");
  Result<Envelope> absent = ParseEnvelope(R"({"job_type":"a","payload":{}})");
  ASSERT_TRUE(absent.ok()) << absent.status();
  // Not given stays not given through a round trip.
  EXPECT_EQ(SerializeEnvelope(*absent).find("max_attempts"), std::string::npos);
}

}  // namespace
}  // namespace jobpact
