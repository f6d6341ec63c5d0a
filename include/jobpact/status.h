// File: jobpact/status.h
//
// Status is the error model of every public jobpact API and every backend
// interface: runtime failures are returned, never thrown. A Status is either
// OK or carries a StatusCode and a message that says what went wrong.
//
// Example:
//   jobpact::Status s = backend->Ack(lease);
//   if (!s.ok()) SPDLOG_WARN("ack failed: {}", s.ToString());
//
// Thread-compatible.
#ifndef JOBPACT_STATUS_H_
#define JOBPACT_STATUS_H_

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "jobpact/export.h"

namespace jobpact {

// The codes and their numbers are those of gRPC and abseil, so that a code
// survives a trip through any store and means the same thing everywhere.
enum class StatusCode : int {
  kOk = 0,
  // The operation was cancelled, typically by the caller or by shutdown.
  kCancelled = 1,
  // An unclassified failure, e.g. a handler threw an exception of an unknown
  // type. Retried on the smaller "unknown" budget.
  kUnknown = 2,
  // The caller passed something malformed: a bad envelope, a bad option.
  // Not retryable.
  kInvalidArgument = 3,
  // A deadline passed: an execution timeout, a start-by deadline.
  kDeadlineExceeded = 4,
  // The named job, lock, key or DLQ entry does not exist.
  kNotFound = 5,
  // The thing already exists: a duplicate idempotency key or job id.
  kAlreadyExists = 6,
  // The system is not in a state that allows the operation, e.g. an illegal
  // status transition. Do not retry until the state changes.
  kFailedPrecondition = 9,
  // The caller lost a race: a stale lease (fenced completion), a lock held by
  // someone else, a lost lock. Retry at a higher level, if at all.
  kAborted = 10,
  // A bound was reached: queue full, payload too large, wait budget spent.
  kResourceExhausted = 8,
  // The operation is not implemented by this backend.
  kUnimplemented = 12,
  // An invariant broke; a bug in jobpact or a backend.
  kInternal = 13,
  // Transient: the service or store is unreachable for now. Retry with backoff.
  kUnavailable = 14,
};

// Returns the canonical name of `code`, e.g. "UNAVAILABLE".
JOBPACT_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] JOBPACT_EXPORT Status {
 public:
  // An OK status.
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status Cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
  static Status Unknown(std::string msg) { return {StatusCode::kUnknown, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status DeadlineExceeded(std::string msg) {
    return {StatusCode::kDeadlineExceeded, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) {
    return {StatusCode::kAlreadyExists, std::move(msg)};
  }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) {
    return {StatusCode::kResourceExhausted, std::move(msg)};
  }
  static Status Unimplemented(std::string msg) {
    return {StatusCode::kUnimplemented, std::move(msg)};
  }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status Unavailable(std::string msg) {
    return {StatusCode::kUnavailable, std::move(msg)};
  }

  [[nodiscard]] bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OK", or "<CODE>: <message>".
  std::string ToString() const;

  // Explicitly ignores this status (documents that dropping it is intended).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }
  friend bool operator!=(const Status& a, const Status& b) { return !(a == b); }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

JOBPACT_EXPORT std::ostream& operator<<(std::ostream& os, const Status& s);
JOBPACT_EXPORT std::ostream& operator<<(std::ostream& os, StatusCode code);

}  // namespace jobpact

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define JOBPACT_RETURN_IF_ERROR(expr)               \
  do {                                              \
    ::jobpact::Status jobpact_status_ = (expr);     \
    if (!jobpact_status_.ok()) return jobpact_status_; \
  } while (0)

#endif  // JOBPACT_STATUS_H_
