// The PostgreSQL queue store (queue_store.h): what its files share (the
// parameter encodings of a record and of arrays), the constructor, raw
// input as text, and the store's construction. Insert: queue_enqueue.cc;
// write: queue_write.cc; lease, renew and lease recovery: queue_lease.cc.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobpact/job_status.h"
#include "src/backends/postgres/queue_store.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/names.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace postgres {

using internal::Params;
using internal::PgRow;
using ::jobpact::internal::AuditJson;
using ::jobpact::internal::ReadJobRow;
using ::jobpact::internal::ToNs;
using Core = PostgresBackend::Core;

// A PostgreSQL text[] literal of `items` (a parameter value, never SQL).
std::string TextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (const std::string& s : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Columns of parameter rows as PostgreSQL array literals (one parameter per
// column, for unnest): rows[r] holds the r-th row's values; a NULL value
// becomes an unquoted NULL element.
std::vector<std::string> ArrayColumns(const std::vector<Params>& rows, int columns) {
  std::vector<std::string> out(static_cast<std::size_t>(columns), "{");
  for (const Params& row : rows) {
    for (int c = 0; c < columns; ++c) {
      std::string& a = out[static_cast<std::size_t>(c)];
      if (a.size() > 1) a += ',';
      if (row.is_null(c)) {
        a += "NULL";
        continue;
      }
      a += '"';
      for (char ch : row.value(c)) {
        if (ch == '"' || ch == '\\') a += '\\';
        a += ch;
      }
      a += '"';
    }
  }
  for (std::string& a : out) a += '}';
  return out;
}

// Appends a record's mutable fields, in the order of kRecordSet / the
// insert's columns (21 parameters).
void AddRecord(Params& p, const JobRecord& r) {
  p.Add(JobStatusName(r.status))
      .Add(r.envelope.attempt)
      .Add(r.envelope.max_attempts)
      .Add(ToNs(r.ready_at))
      .Add(ToNs(r.updated_at));
  if (r.finished_at) {
    p.Add(ToNs(*r.finished_at));
  } else {
    p.Null();
  }
  p.Add(r.epoch).Add(r.lease_recoveries).Add(r.lock_waits).Add(ToNs(r.previous_delay));
  p.Add(r.checkpoint);
  if (r.last_failure) {
    p.Add(FailureClassName(r.last_failure->failure_class))
        .Add(r.last_failure->code)
        .Add(r.last_failure->message);
  } else {
    p.Null().Null().Null();
  }
  p.Add(r.reason).Add(r.result).AddOrNull(r.lease_token);
  if (r.lease_token.empty()) {
    p.Null();
  } else {
    p.Add(ToNs(r.lease_expires_at));
  }
  if (r.status == JobStatus::kDeadLettered && r.finished_at) {
    p.Add(ToNs(*r.finished_at));
  } else {
    p.Null();
  }
  p.Add(AuditJson(r.audit)).Add(r.cancel_requested ? 1 : 0);
}

PostgresQueueBackend::PostgresQueueBackend(std::shared_ptr<Core> core)
    : StoreBackend(core->clock()),
      core_(std::move(core)),
      lease_any_(core_->SqlOf(LeaseSql(false))),
      lease_some_(core_->SqlOf(LeaseSql(true))),
      batch_update_(core_->SqlOf(BatchUpdateSql())) {}

std::string RawInputToText(std::string_view raw) {
  if (raw.find('\0') == std::string_view::npos && ::jobpact::internal::IsValidUtf8(raw) &&
      raw.substr(0, kHexRawMarker.size()) != kHexRawMarker) {
    return std::string(raw);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(kHexRawMarker);
  out.reserve(kHexRawMarker.size() + 2 * raw.size());
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

std::string RawInputFromText(std::string text) {
  if (text.compare(0, kHexRawMarker.size(), kHexRawMarker) != 0) return text;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  const std::size_t n = text.size() - kHexRawMarker.size();
  out.reserve(n / 2);
  for (std::size_t i = kHexRawMarker.size(); i + 1 < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    // Not this store's writing (a hand edit): kept as it was found.
    if (hi < 0 || lo < 0) return text;
    out += static_cast<char>(hi * 16 + lo);
  }
  if (n % 2 != 0) return text;
  return out;
}

Result<JobRecord> ReadPgJobRow(const PgRow& row, bool with_history) {
  Result<JobRecord> rec = ReadJobRow(row, with_history);
  if (rec.ok() && rec->raw_input) rec->raw_input = RawInputFromText(std::move(*rec->raw_input));
  return rec;
}

std::shared_ptr<StoreBackend> PostgresBackend::Core::MakeQueue(std::shared_ptr<Core> core) {
  return std::make_shared<PostgresQueueBackend>(std::move(core));
}

}  // namespace postgres
}  // namespace jobpact
