// Hostile input on every store (issue 12): names and text with quotes, NUL
// bytes, path separators, SQL and Lua metacharacters, glob and key-tag
// characters, invalid UTF-8 and megabyte lengths, in every field that
// reaches a store. Each must get a clear error (kInvalidArgument) or be
// stored exactly -- read back byte for byte, under its own key only, with
// the store still working afterwards. Never an injection, a truncation, a
// collision with another key, or a store that no longer reads.
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/job.h"
#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/internal/names.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::HostileInputContractAnchor() { return 0; }

namespace {

using ::testing::HasSubstr;

struct Hostile {
  const char* what;
  std::string value;
};

// A megabyte of the characters a careless store would trip over.
std::string MegabyteOfMetacharacters() {
  const std::string unit = "'\";--/*%_\\]]..{x}*?[a]\n";
  std::string s;
  while (s.size() < (1u << 20)) s += unit;
  return s;
}

std::vector<Hostile> HostileValues() {
  return {
      {"single quote", "o'brien"},
      {"double quote", "say \"hi\""},
      {"NUL byte", std::string("nul\0byte", 8)},
      {"leading NUL byte", std::string("\0x", 2)},
      {"path separators", "../../etc/passwd"},
      {"backslashes", "C:\\jobs\\x"},
      {"SQL", "x'); DROP TABLE jobpact_jobs; --"},
      {"SQL comment and LIKE wildcards", "%_ /* -- ;"},
      {"Lua string end", "]]..redis.call('FLUSHALL')..[["},
      {"Lua pattern", "%d+.-[^a]"},
      {"glob and key tag", "{tag}:*?[a]"},
      {"control characters", "a\nb\tc\r\x01"},
      {"invalid UTF-8", "\xff\xfe\xc3("},
      {"a megabyte of plain text", std::string(1u << 20, 'm')},
      {"a megabyte of metacharacters", MegabyteOfMetacharacters()},
  };
}

// `value` as a JSON string literal (control characters and bytes >= 0x80
// escaped as \u00XX: the payload stays JSON, whatever the value is).
std::string JsonLiteral(const std::string& value) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x80) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// What a Status or Result is, for a failure message.
std::string Described(const Status& s) { return s.ok() ? "OK" : s.ToString().substr(0, 200); }

// Each name field of the envelope: how to set it and read it back.
struct NameField {
  const char* name;
  std::function<void(Envelope&, const std::string&)> set;
  std::function<std::string(const Envelope&)> get;
};

std::vector<NameField> NameFields() {
  return {
      {"job_type", [](Envelope& e, const std::string& v) { e.job_type = v; },
       [](const Envelope& e) { return e.job_type; }},
      {"queue", [](Envelope& e, const std::string& v) { e.queue = v; },
       [](const Envelope& e) { return e.queue; }},
      {"tenant_id", [](Envelope& e, const std::string& v) { e.tenant_id = v; },
       [](const Envelope& e) { return e.tenant_id; }},
      {"idempotency_key", [](Envelope& e, const std::string& v) { e.idempotency_key = v; },
       [](const Envelope& e) { return e.idempotency_key; }},
      {"dedup_key", [](Envelope& e, const std::string& v) { e.dedup_key = v; },
       [](const Envelope& e) { return e.dedup_key; }},
      {"lock_key", [](Envelope& e, const std::string& v) { e.lock_key = v; },
       [](const Envelope& e) { return e.lock_key; }},
      {"trace_id", [](Envelope& e, const std::string& v) { e.trace_id = v; },
       [](const Envelope& e) { return e.trace_id; }},
  };
}

TEST_P(QueueBackendContract, HostileNamesAreRefusedOrStoredExactly) {
  Put(MakeJob("job_canary"));
  int n = 0;
  for (const Hostile& h : HostileValues()) {
    // As the job id itself.
    {
      Result<EnqueueResult> r = queue_->Enqueue(MakeJob(h.value), {});
      if (r.ok()) {
        Result<JobRecord> rec = admin_->Get(h.value);
        ASSERT_THAT(rec, IsOk()) << "job_id with " << h.what;
        EXPECT_EQ(rec->envelope.job_id, h.value) << "job_id with " << h.what;
      } else {
        EXPECT_THAT(r.status(), StatusIs(StatusCode::kInvalidArgument))
            << "job_id with " << h.what;
      }
    }
    for (const NameField& f : NameFields()) {
      const std::string id = "job_h" + std::to_string(n++);
      Envelope env = MakeJob(id);
      f.set(env, h.value);
      Result<EnqueueResult> r = queue_->Enqueue(env, {});
      if (!r.ok()) {
        EXPECT_THAT(r.status(), StatusIs(StatusCode::kInvalidArgument))
            << f.name << " with " << h.what;
        EXPECT_THAT(admin_->Get(id).status(), StatusIs(StatusCode::kNotFound))
            << f.name << " with " << h.what << ": refused but stored";
        continue;
      }
      Result<JobRecord> rec = admin_->Get(id);
      ASSERT_THAT(rec, IsOk()) << f.name << " with " << h.what;
      EXPECT_EQ(f.get(rec->envelope), h.value) << f.name << " with " << h.what;
    }
  }
  // Nothing reached beyond its own record: the first job is untouched,
  // and every stored job is still delivered, each once, under its own id.
  EXPECT_EQ(MustGet("job_canary").status, JobStatus::kQueued);
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  const std::int64_t queued = st.by_status[JobStatus::kQueued];
  std::set<std::string> delivered;
  for (const Delivery& d : Take(10000)) {
    EXPECT_TRUE(delivered.insert(d.job.envelope.job_id).second) << d.job.envelope.job_id;
  }
  EXPECT_EQ(static_cast<std::int64_t>(delivered.size()), queued);
  EXPECT_EQ(delivered.count("job_canary"), 1u);
}

TEST_P(QueueBackendContract, HostileTextIsRefusedOrStoredExactly) {
  int n = 0;
  for (const Hostile& h : HostileValues()) {
    SCOPED_TRACE(h.what);
    // The payload: free JSON, holding the value as a string.
    const std::string id = "job_t" + std::to_string(n++);
    Envelope env = MakeJob(id);
    env.payload = "{\"v\":" + JsonLiteral(h.value) + "}";
    Result<EnqueueResult> r = queue_->Enqueue(env, {});
    if (!r.ok()) {
      EXPECT_THAT(r.status(), StatusIs(StatusCode::kInvalidArgument));
      continue;
    }
    // The same JSON value; a store may keep it re-serialized ("\u000a"
    // as "\n"), so both are compared in SerializeEnvelope's form.
    Envelope stored_payload = env;
    stored_payload.payload = MustGet(id).envelope.payload;
    EXPECT_EQ(SerializeEnvelope(stored_payload), SerializeEnvelope(env));
    // What a completion writes: the result, or the failure and a
    // checkpoint. Each is either refused (the job still running) or kept.
    Delivery d = TakeOne(id);
    Completion retry = Outcome(JobStatus::kRetryScheduled, std::string(reason::kTransientError));
    retry.failure = Failure{FailureClass::kTransient, h.value, h.value};
    retry.checkpoint = h.value;
    retry.ready_at = Now() + Seconds(1);
    retry.delay = Seconds(1);
    Status s = queue_->Complete(d, retry);
    JobRecord rec = MustGet(id);
    if (s.ok()) {
      // A failure's code and message are diagnostics: the engine keeps
      // them as text every store can hold (a NUL byte or a byte that is
      // not UTF-8 written as \xNN; engine::Complete), the same on every
      // store. The checkpoint is data and comes back byte for byte.
      ASSERT_TRUE(rec.last_failure.has_value());
      EXPECT_EQ(rec.last_failure->code, ::jobpact::internal::StorableText(h.value));
      EXPECT_EQ(rec.last_failure->message, ::jobpact::internal::StorableText(h.value));
      EXPECT_EQ(rec.checkpoint, h.value);
      Advance(Seconds(1));
      d = TakeOne(id);
    } else {
      EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument)) << Described(s);
      EXPECT_EQ(rec.status, JobStatus::kRunning);
    }
    Completion done = Outcome(JobStatus::kSucceeded, std::string(reason::kSucceeded));
    done.result = h.value;
    s = queue_->Complete(d, done);
    rec = MustGet(id);
    if (s.ok()) {
      EXPECT_EQ(rec.status, JobStatus::kSucceeded);
      EXPECT_EQ(rec.result, h.value);
    } else {
      EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument)) << Described(s);
      EXPECT_EQ(rec.status, JobStatus::kRunning);
    }
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.dead_letters, 0);
}

TEST_P(QueueAdminContract, HostileActorsAndReasonsAreRefusedOrAuditedExactly) {
  int n = 0;
  for (const Hostile& h : HostileValues()) {
    SCOPED_TRACE(h.what);
    const std::string id = "job_c" + std::to_string(n++);
    Put(MakeJob(id));
    DlqAction who;
    who.actor = h.value;
    who.reason = h.value;
    Result<CancelOutcome> r = admin_->Cancel(id, who);
    JobRecord rec = MustGet(id);
    if (!r.ok()) {
      EXPECT_THAT(r.status(), StatusIs(StatusCode::kInvalidArgument));
      EXPECT_EQ(rec.status, JobStatus::kQueued);
      continue;
    }
    EXPECT_EQ(rec.status, JobStatus::kDiscarded);
    ASSERT_FALSE(rec.audit.empty());
    EXPECT_THAT(rec.audit.back(), HasSubstr(" by " + h.value + ": " + h.value));
  }
}

TEST_P(DeadLetterContract, HostileRawInputIsKeptWhole) {
  for (const Hostile& h : HostileValues()) {
    SCOPED_TRACE(h.what);
    // Raw input is kept whatever it is: no refusal here (SPEC 1: an invalid
    // envelope is never dropped).
    const std::string raw = "{\"job_type\":" + JsonLiteral(h.value) + ",\"raw\":\"" + h.value;
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::string id,
                                 queue_->DeadLetterInvalid(raw, {{"job_type", h.value}}));
    JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, admin_->GetDeadLetter(id));
    EXPECT_EQ(e.raw_envelope, raw);
    ASSERT_TRUE(e.last_failure.has_value());
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.dead_letters, static_cast<std::int64_t>(HostileValues().size()));
}

TEST_P(LockStoreContract, HostileKeysAndOwnersAreRefusedOrStoredExactly) {
  // A key that a pattern-matching store would take for every key.
  ASSERT_THAT(locks_->Acquire("order:1", "w_plain", Seconds(30)), IsOk());
  for (const Hostile& h : HostileValues()) {
    SCOPED_TRACE(h.what);
    Result<LockLease> l = locks_->Acquire(h.value, h.value, Seconds(30));
    if (!l.ok()) {
      EXPECT_THAT(l.status(), StatusIs(StatusCode::kInvalidArgument));
      continue;
    }
    EXPECT_EQ(l->key, h.value);
    EXPECT_EQ(l->owner, h.value);
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> seen, locks_->Inspect(h.value));
    ASSERT_TRUE(seen.has_value());
    EXPECT_EQ(seen->owner, h.value);
    // Held under its own key only: another owner is refused it, and a
    // plain key's holder is untouched.
    EXPECT_THAT(locks_->Acquire(h.value, "w_other", Seconds(30)).status(),
                StatusIs(StatusCode::kAborted));
    ASSERT_THAT(locks_->Release(h.value, h.value), IsOk());
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> plain, locks_->Inspect("order:1"));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->owner, "w_plain");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LockLease> live, locks_->List(100));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].key, "order:1");
}

TEST_P(IdempotencyStoreContract, HostileKeysOwnersAndResultsAreRefusedOrStoredExactly) {
  ASSERT_THAT(idem_->Claim("charge:1", "w_plain", Seconds(30)), IsOk());
  for (const Hostile& h : HostileValues()) {
    SCOPED_TRACE(h.what);
    Result<ClaimOutcome> c = idem_->Claim(h.value, h.value, Seconds(30));
    if (!c.ok()) {
      EXPECT_THAT(c.status(), StatusIs(StatusCode::kInvalidArgument));
      continue;
    }
    EXPECT_EQ(c->kind, ClaimOutcome::Kind::kClaimed);
    Status done = idem_->Complete(h.value, h.value, h.value, Seconds(60));
    if (!done.ok()) {
      EXPECT_THAT(done, StatusIs(StatusCode::kInvalidArgument));
      continue;
    }
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem_->Get(h.value));
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->key, h.value);
    EXPECT_EQ(rec->state, IdempotencyRecord::State::kCompleted);
    EXPECT_EQ(rec->result, h.value);
    JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome again, idem_->Claim(h.value, "w_other", Seconds(30)));
    EXPECT_EQ(again.kind, ClaimOutcome::Kind::kCompleted);
    EXPECT_EQ(again.record.result, h.value);
  }
  // The plain key's claim is untouched.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> plain, idem_->Get("charge:1"));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->state, IdempotencyRecord::State::kInProgress);
  EXPECT_EQ(plain->owner, "w_plain");
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
