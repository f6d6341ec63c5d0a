// The envelope's stored form read and written without a JSON document
// (src/core/envelope_fast.h): it must give exactly what the nlohmann path
// gives, decline everything outside its narrow form, and take the form the
// stores hold (or the speed it exists for is lost without a test noticing).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "jobpact/job.h"
#include "src/core/envelope_fast.h"

namespace jobpact {
namespace {

using internal::IsCanonicalJson;
using internal::ParseCanonicalEnvelope;
using internal::ParseEnvelopeByParser;
using internal::SerializeCanonicalEnvelope;
using internal::SerializeEnvelopeByJson;

Envelope Typical() {
  Envelope e;
  e.job_id = "job_01HXYZ";
  e.job_type = "invoice.generate";
  e.payload = R"({"order_id":"ord_987","lines":[1,2,-3,0],"ok":true,"note":null,"x":{}})";
  e.attempt = 0;
  e.max_attempts = 5;
  e.created_at = TimePoint(std::chrono::seconds(1786960680));
  e.queue = "billing";
  e.priority = -3;
  return e;
}

Envelope EveryField() {
  Envelope e = Typical();
  e.tenant_id = "tenant_123";
  e.idempotency_key = "invoice.generate:ord_987";
  e.scheduled_at = TimePoint(std::chrono::seconds(1786960800));
  e.created_at = TimePoint(std::chrono::nanoseconds(1786960680123456789));
  e.trace_id = "trc_abcd1234";
  e.timeout = Seconds(120);
  e.visibility_timeout = Seconds(600);
  e.lock_key = "order:ord_987";
  e.dedup_key = "dedup-1";
  e.expires_at = TimePoint(std::chrono::seconds(1786970000));
  e.ttl = Seconds(3600);
  e.start_by = TimePoint(std::chrono::seconds(1786961000));
  e.deadline = TimePoint(std::chrono::seconds(1786962000));
  return e;
}

// Both paths, both directions, for `e`.
void ExpectPathsAgree(const Envelope& e) {
  const std::string by_json = SerializeEnvelopeByJson(e);
  EXPECT_EQ(SerializeEnvelope(e), by_json);
  Result<Envelope> fast = ParseEnvelope(by_json, ValidationOptions{});
  Result<Envelope> slow = ParseEnvelopeByParser(by_json, ValidationOptions{}, nullptr);
  ASSERT_EQ(fast.ok(), slow.ok()) << by_json;
  if (!fast.ok()) {
    EXPECT_EQ(fast.status().message(), slow.status().message());
    return;
  }
  EXPECT_EQ(fast->payload, slow->payload);
  EXPECT_EQ(SerializeEnvelopeByJson(*fast), SerializeEnvelopeByJson(*slow));
}

TEST(EnvelopeFastTest, TheStoredFormIsReadAndWrittenWithoutTheParser) {
  for (const Envelope& e : {Typical(), EveryField()}) {
    std::string fast;
    ASSERT_TRUE(SerializeCanonicalEnvelope(e, &fast));
    EXPECT_EQ(fast, SerializeEnvelopeByJson(e));
    Envelope back;
    ASSERT_TRUE(ParseCanonicalEnvelope(fast, &back)) << fast;
    EXPECT_EQ(SerializeEnvelopeByJson(back), fast);
    EXPECT_EQ(back.payload, e.payload);
    ExpectPathsAgree(e);
  }
}

TEST(EnvelopeFastTest, WhatTheFastWriterDeclinesTheParserPathWrites) {
  std::vector<Envelope> cases;
  Envelope e = EveryField();
  e.retry_policy = BackoffSpec{};
  cases.push_back(e);
  e = Typical();
  e.timeout = std::chrono::milliseconds(1500);  // Not whole seconds.
  cases.push_back(e);
  e = Typical();
  e.ttl = std::chrono::milliseconds(2500);
  cases.push_back(e);
  e = Typical();
  e.tenant_id = "t\xc3\xa9nant";  // UTF-8: escaped or not is the dump's business.
  cases.push_back(e);
  e = Typical();
  e.trace_id = "a\"b\\c";
  cases.push_back(e);
  e = Typical();
  e.payload = R"({ "a": 1 })";  // Not compact: stored compacted.
  cases.push_back(e);
  e = Typical();
  e.payload = R"({"a":1.50})";  // A float: the dump writes its own digits.
  cases.push_back(e);
  e = Typical();
  e.payload = R"({"a":1,"a":2})";  // A repeated key: stored as a string.
  cases.push_back(e);
  e = Typical();
  e.payload = "not json";
  cases.push_back(e);
  for (const Envelope& c : cases) {
    std::string out;
    EXPECT_FALSE(SerializeCanonicalEnvelope(c, &out)) << SerializeEnvelopeByJson(c);
    ExpectPathsAgree(c);
  }
}

TEST(EnvelopeFastTest, WhatTheFastReaderDeclinesTheParserReadsOrRefusesAsBefore) {
  const std::string good = SerializeEnvelope(Typical());
  ASSERT_FALSE(good.empty());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  const std::vector<std::string> declined = {
      "{ " + good.substr(1),                                    // Whitespace.
      with(R"("priority":-3)", R"("priority":-3.0)"),           // A float.
      with(R"("priority":-3)", R"("priority":-0)"),             // -0.
      with(R"("attempt":0)", R"("attempt":00)"),                // A leading zero.
      with(R"("max_attempts":5)", R"("max_attempts":0)"),       // The parser's own rule.
      with(R"("queue":"billing")", R"("queue":null)"),          // null: absent.
      with(R"("queue":"billing")", R"("queue":"bil\/ling")"),   // An escape.
      with(R"("queue":"billing")", R"("queue":"\u0062illing")"),
      with(R"("queue":"billing")", R"("queue":"billing","queue":"x")"),  // Repeated.
      with(R"("queue":"billing")", R"("queue":"billing","unknown":1)"),
      with(R"("ok":true)", R"("ok":true,"ok":false)"),          // Repeated in the payload.
      with(R"("ok":true)", R"("ok":"\ud800")"),                 // A lone surrogate.
      with(R"("ok":true)", "\"ok\":\"\xff\""),                  // Not UTF-8.
      with(R"("ok":true)", R"("ok":1e3)"),
      with(R"("timeout_seconds":30)", R"("timeout_seconds":0.5)"),
      with(R"("timeout_seconds":30)", R"("timeout_seconds":99999999999)"),  // Out of range.
      with(R"("job_type":"invoice.generate",)", ""),            // Required.
      with(R"("priority":-3)", R"("priority":99999)"),          // Out of range: a rule.
      good.substr(0, good.size() - 1),                          // Cut.
      good + " ",
  };
  for (const std::string& text : declined) {
    Envelope ignored;
    EXPECT_FALSE(ParseCanonicalEnvelope(text, &ignored) &&
                 ValidateEnvelope(ignored, ValidationOptions{}).empty())
        << text;
    std::vector<FieldError> fast_errors, slow_errors;
    Result<Envelope> fast = ParseEnvelope(text, ValidationOptions{}, &fast_errors);
    Result<Envelope> slow = ParseEnvelopeByParser(text, ValidationOptions{}, &slow_errors);
    ASSERT_EQ(fast.ok(), slow.ok()) << text;
    EXPECT_EQ(fast_errors.size(), slow_errors.size()) << text;
    if (fast.ok()) {
      EXPECT_EQ(SerializeEnvelope(*fast), SerializeEnvelopeByJson(*slow)) << text;
    } else {
      EXPECT_EQ(fast.status().message(), slow.status().message());
    }
  }
}

TEST(EnvelopeFastTest, ADeeplyNestedPayloadIsLeftToTheParser) {
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += "[";
  for (int i = 0; i < 70; ++i) deep += "]";
  EXPECT_FALSE(IsCanonicalJson(deep));
  Envelope e = Typical();
  e.payload = deep;
  ExpectPathsAgree(e);
}

TEST(EnvelopeFastTest, CanonicalJsonIsWhatTheCompactDumpWrites) {
  for (const char* yes : {"{}", "[]", "0", "-12", "true", "null", R"("a\"b\\c\n\t")",
                          "\"\xc3\xa9\"",
                          R"([[],[{}],{"k":[-1,0,1]}])", "123456789012345678"}) {
    EXPECT_TRUE(IsCanonicalJson(yes)) << yes;
  }
  for (const char* no : {"", " 1", "1 ", "{ }", "1.0", "-0", "01", "1e2", R"("\/")",
                         R"("\u0041")", "1234567890123456789", R"({"a":1,"a":1})", "[1,]",
                         "{\"a\"}", "tru", "\"\x01\"", "\"\x7f\""}) {
    EXPECT_FALSE(IsCanonicalJson(no)) << no;
  }
}

}  // namespace
}  // namespace jobpact
