// File: jobpact/failure.h
//
// Turning a failed attempt into a FailureClass (SPEC 4).
//
// A handler says how it failed in one of three ways:
//   1. it returns a non-OK Status: the code decides the class
//      (kUnavailable, kDeadlineExceeded, kResourceExhausted, kAborted are
//      transient; kInvalidArgument, kNotFound, kAlreadyExists,
//      kFailedPrecondition, kUnimplemented are permanent;
//      everything else is unknown);
//   2. it throws TransientError or PermanentError;
//   3. it throws anything else, and the job type's Classifier chain decides:
//      rules by exception type, by std::system_error code, or by predicate,
//      first match wins; no match is kUnknown.
//
// Example:
//   jobpact::Classifier c;
//   c.AddType<std::bad_alloc>(jobpact::FailureClass::kTransient);
//   c.AddSystemError(std::errc::connection_reset, jobpact::FailureClass::kTransient);
//   c.AddPredicate("http 4xx", [](std::exception_ptr e) -> std::optional<FailureClass> {...});
#ifndef JOBPACT_FAILURE_H_
#define JOBPACT_FAILURE_H_

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "jobpact/export.h"
#include "jobpact/retry_policy.h"
#include "jobpact/status.h"

namespace jobpact {

// Base of the exceptions a handler throws to state its failure class.
// `code` is a short machine-readable code kept in the DLQ ("http_503").
class JOBPACT_EXPORT JobError : public std::runtime_error {
 public:
  JobError(FailureClass failure_class, std::string code, const std::string& message)
      : std::runtime_error(message), class_(failure_class), code_(std::move(code)) {}
  FailureClass failure_class() const { return class_; }
  const std::string& code() const { return code_; }

 private:
  FailureClass class_;
  std::string code_;
};

// "Try again later": timeouts, resets, 502/503, rate limits.
class JOBPACT_EXPORT TransientError : public JobError {
 public:
  explicit TransientError(const std::string& message, std::string code = "transient")
      : JobError(FailureClass::kTransient, std::move(code), message) {}
};

// "Never going to work": invalid payload, missing entity, business rule.
class JOBPACT_EXPORT PermanentError : public JobError {
 public:
  explicit PermanentError(const std::string& message, std::string code = "permanent")
      : JobError(FailureClass::kPermanent, std::move(code), message) {}
};

// "Rate limited, retry after": what JobContext::RateLimited says, thrown
// from code deep in a handler (an HTTP client seeing a 429 with
// Retry-After). Transient, code "rate_limited"; the runner schedules the
// retry no earlier than retry_after() and backs off the limiter.
class JOBPACT_EXPORT RateLimitedError : public TransientError {
 public:
  RateLimitedError(std::chrono::system_clock::duration retry_after, const std::string& message)
      : TransientError(message, "rate_limited"), retry_after_(retry_after) {}
  std::chrono::system_clock::duration retry_after() const { return retry_after_; }

 private:
  std::chrono::system_clock::duration retry_after_;
};

// A classified failure, as recorded in history, metrics and the DLQ.
struct Failure {
  FailureClass failure_class = FailureClass::kUnknown;
  // Machine-readable: a JobError code, "system_error:<category>:<value>", a
  // StatusCode name, "timeout", or the exception's type name.
  std::string code;
  // Human-readable: "<type>: <what()>" for exceptions, the Status message.
  std::string message;
};

// The class of a Status code returned by a handler (see the file comment).
JOBPACT_EXPORT FailureClass ClassifyStatusCode(StatusCode code);
// The Failure for a non-OK Status returned by a handler.
JOBPACT_EXPORT Failure FailureFromStatus(const Status& status);

// An ordered chain of rules mapping exceptions to classes. Rules are tried in
// the order added; the first that matches wins. JobError subclasses are
// classified by their own class before any rule. Adding rules is
// thread-compatible; Classify is thread-safe once rules are added.
class JOBPACT_EXPORT Classifier {
 public:
  // Returns the class if the rule matches `e`.
  using Rule = std::function<std::optional<FailureClass>(const std::exception_ptr& e)>;

  // Matches exceptions of type E or derived from it.
  template <typename E>
  Classifier& AddType(FailureClass c) {
    return AddRule(std::string("type:") + typeid(E).name(),
                   [c](const std::exception_ptr& e) -> std::optional<FailureClass> {
                     try {
                       std::rethrow_exception(e);
                     } catch (const E&) {
                       return c;
                     } catch (...) {
                       return std::nullopt;
                     }
                   });
  }
  // Matches a std::system_error whose code equals `code` (compared with ==,
  // so std::errc conditions match the generic and system categories).
  Classifier& AddSystemError(std::error_condition code, FailureClass c);
  Classifier& AddSystemError(std::errc code, FailureClass c) {
    return AddSystemError(std::make_error_condition(code), c);
  }
  // Matches every std::system_error of `category`.
  Classifier& AddSystemErrorCategory(const std::error_category& category, FailureClass c);
  // A user predicate; `name` is shown in Describe().
  Classifier& AddPredicate(std::string name, Rule rule) { return AddRule(std::move(name), std::move(rule)); }

  // Classifies a caught exception. Never throws. REQUIRES: e != nullptr.
  Failure Classify(const std::exception_ptr& e) const;

  // One line per rule, in order, for logs and docs.
  std::vector<std::string> Describe() const;

 private:
  Classifier& AddRule(std::string name, Rule rule);
  struct NamedRule {
    std::string name;
    Rule rule;
  };
  std::vector<NamedRule> rules_;
};

// "<type name>: <what()>" for a std::exception, "<type name>" otherwise
// (e.g. a thrown int: "int"). Never throws.
JOBPACT_EXPORT std::string DescribeException(const std::exception_ptr& e);

}  // namespace jobpact

#endif  // JOBPACT_FAILURE_H_
