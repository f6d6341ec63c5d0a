// File: jobpact/job.h
//
// The job envelope (SPEC 1): the standard execution metadata every job
// travels with, around a free-form JSON business payload.
//
// Example:
//   std::vector<jobpact::FieldError> problems;
//   jobpact::Result<jobpact::Envelope> env = jobpact::ParseEnvelope(raw_json, {}, &problems);
//   if (!env.ok()) {
//     for (const auto& p : problems) std::cerr << p.field << ": " << p.message << "\n";
//   }
//   std::string again = jobpact::SerializeEnvelope(*env);
#ifndef JOBPACT_JOB_H_
#define JOBPACT_JOB_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobpact/clock.h"
#include "jobpact/export.h"
#include "jobpact/result.h"
#include "jobpact/retry_policy.h"

namespace jobpact {

// One job. Durations are held as Duration; in JSON they are whole or
// fractional seconds (`timeout_seconds`), times are RFC 3339 strings.
//
// Names and keys. ValidateEnvelope (and so ParseEnvelope) accepts two
// character sets, both bounded to ValidationOptions::max_name_length
// characters (default 255: 255 is accepted, 256 refused; the characters are
// ASCII, so characters and bytes are the same count). Case is significant.
//   - Safe names (job_type, queue): one or more of A-Z a-z 0-9 . _ : -
//     (the regex [A-Za-z0-9._:-]+); never empty. No space, '/', '@' or
//     non-ASCII byte, since they name handlers, queues, metric labels and
//     backend keys.
//   - Keys (job_id, tenant_id, idempotency_key, dedup_key, lock_key,
//     trace_id): printable ASCII without space, bytes 0x21-0x7E ('!' to '~',
//     so ':' '/' '{' '=' and the like are fine); no space, tab, control
//     character, DEL (0x7F) or byte >= 0x80 (so no UTF-8). Empty means "not
//     given" (job_id is then generated at enqueue).
// Thread-compatible (a plain value).
struct Envelope {
  // Technical identity of this message; a key (see above). Generated at
  // enqueue if empty: "job_" + a ULID (sortable by creation time, unique).
  std::string job_id;
  // Required. Names the handler; a safe name: [A-Za-z0-9._:-]+, at most
  // max_name_length (255) characters.
  std::string job_type;
  // Optional; a key: bytes 0x21-0x7E, at most max_name_length (255).
  std::string tenant_id;
  // Required. The business payload as JSON text (any JSON value).
  std::string payload = "{}";
  // Identity of the business effect. Empty: none. Never derived from a
  // timestamp or an attempt number. A key: bytes 0x21-0x7E, at most
  // max_name_length (255).
  std::string idempotency_key;
  // Managed by the system: 0 while never delivered, then the number of the
  // current or last delivery. A producer's value is never trusted.
  int attempt = 0;
  // Attempts in all, the first included. 0: not given, so the job type's
  // retry policy decides (JobRunner::Enqueue fills it in); in JSON, a given
  // value must be >= 1.
  int max_attempts = 0;
  // Not before this time. Unset: as soon as possible.
  std::optional<TimePoint> scheduled_at;
  // Set at enqueue if unset.
  std::optional<TimePoint> created_at;
  // Optional; carried into every log line. A key: bytes 0x21-0x7E, at most
  // max_name_length (255).
  std::string trace_id;
  Duration timeout = Seconds(30);             // Execution timeout per attempt.
  Duration visibility_timeout = Seconds(45);  // The lease.
  // Optional: resource that needs exclusivity. A key: bytes 0x21-0x7E, at
  // most max_name_length (255).
  std::string lock_key;
  // Optional: equivalence of messages (see SPEC 6). A key: bytes 0x21-0x7E,
  // at most max_name_length (255).
  std::string dedup_key;
  // Optional per-job backoff; the job type's policy applies otherwise.
  std::optional<BackoffSpec> retry_policy;
  // Past this time the job is discarded ("expired"), never run.
  std::optional<TimePoint> expires_at;
  // Relative form of expires_at; PrepareForEnqueue turns it into expires_at.
  std::optional<Duration> ttl;
  // Start-by deadline: a job not started by then is discarded.
  std::optional<TimePoint> start_by;
  // Total deadline across all attempts and delays.
  std::optional<TimePoint> deadline;
  // A safe name, like job_type: [A-Za-z0-9._:-]+, at most max_name_length
  // (255) characters; never empty.
  std::string queue = "default";
  int priority = 0;  // Higher runs first among ready jobs of one queue.
};

// One validation problem: which field, what was wrong.
struct FieldError {
  std::string field;    // JSON name, e.g. "timeout_seconds", "retry_policy.backoff".
  std::string message;  // e.g. "must be > 0, got -3".
};

struct ValidationOptions {
  // visibility_timeout must exceed timeout + this buffer (SPEC 1, 5).
  Duration visibility_buffer = Seconds(5);
  // Bound on the payload's serialized size.
  std::size_t max_payload_bytes = 256 * 1024;
  // Bound, in characters (all ASCII), on the safe names (job_type, queue)
  // and the keys (job_id, tenant_id, idempotency_key, dedup_key, lock_key,
  // trace_id): a value this long is accepted, one longer refused.
  std::size_t max_name_length = 255;
};

// Checks every rule and returns every problem (empty: valid). Rules: job_type
// present; safe names and keys in their character sets and bounded (see
// Envelope); max_attempts >= 1 (or 0: not given); timeouts > 0;
// visibility_timeout > timeout + buffer; payload valid JSON within bounds,
// with no key repeated within one object (reported under its path, e.g.
// "payload.order_id", "payload.items[2].sku"); backoff valid; priority within
// [-1000, 1000]. Never throws.
JOBPACT_EXPORT std::vector<FieldError> ValidateEnvelope(const Envelope& env,
                                                        const ValidationOptions& options = {});

// Parses and validates an envelope from JSON. On any problem (malformed
// JSON, a duplicate key, a wrong type, a missing required field, a non-RFC
// 3339 time, an unknown backoff or jitter name, any ValidateEnvelope rule)
// returns kInvalidArgument whose message lists every problem, and appends
// them to `errors` if given. `attempt` is read but reset to 0 by
// PrepareForEnqueue. Unknown top-level fields are ignored; JSON null counts
// as absent for optional fields. A payload nested deeper than 64 levels is
// refused (the limit keeps recursive JSON code off an attacker-sized stack).
// A key repeated within one object, anywhere in the document (top level,
// retry_policy, payload, an unknown field), is refused rather than resolved
// by "last one wins", which would silently drop data: each duplicated key
// gets one FieldError whose field is its JSON path ("job_type",
// "retry_policy.backoff", "payload.order_id", "payload.items[2].sku"; a key
// that is not a plain name is quoted: payload["a.b"]), at most 10 of them
// listed. Never throws.
JOBPACT_EXPORT Result<Envelope> ParseEnvelope(std::string_view json,
                                              const ValidationOptions& options = {},
                                              std::vector<FieldError>* errors = nullptr);

// The envelope as a JSON document with the SPEC's field names. Optional
// fields that are unset are omitted; ParseEnvelope(SerializeEnvelope(e))
// gives back e. Never throws (an invalid payload, one with a duplicate key
// included, is emitted as a JSON string holding its text, so nothing of it is
// lost).
JOBPACT_EXPORT std::string SerializeEnvelope(const Envelope& env);

// Fills what the system owns before a job is stored: a generated job_id if
// empty, created_at = now if unset, expires_at = now + ttl if ttl is set
// (ttl is then cleared), attempt = 0.
JOBPACT_EXPORT void PrepareForEnqueue(Envelope& env, TimePoint now);

// A new job id: "job_" + 26-character ULID whose first 10 characters encode
// `now` in milliseconds. Ids generated by one process are strictly
// increasing. Thread-safe.
JOBPACT_EXPORT std::string NewJobId(TimePoint now);

// RFC 3339 in UTC with the fractional seconds that are non-zero
// ("2026-08-17T10:00:00Z", "2026-08-17T10:00:00.250Z"): 3, 6 or 9 digits,
// the fewest that are exact, so ParseRfc3339 gives back the same TimePoint.
JOBPACT_EXPORT std::string FormatRfc3339(TimePoint t);
// Parses RFC 3339 (with 'Z' or a numeric offset, fractional seconds
// optional). kInvalidArgument naming the problem otherwise.
// 'T'/'t' and 'Z'/'z' are accepted; fractional seconds may have up to 9
// digits; a leap second (:60) and times outside TimePoint's range are refused.
JOBPACT_EXPORT Result<TimePoint> ParseRfc3339(std::string_view text);

}  // namespace jobpact

#endif  // JOBPACT_JOB_H_
