// File: jobpact/result.h
//
// Result<T> holds either a value of type T or a non-OK Status, like
// absl::StatusOr<T> (std::expected is C++23).
//
// Example:
//   jobpact::Result<Envelope> env = jobpact::ParseEnvelope(json);
//   if (!env.ok()) return env.status();
//   Use(*env);
//
// Thread-compatible.
#ifndef JOBPACT_RESULT_H_
#define JOBPACT_RESULT_H_

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "jobpact/export.h"
#include "jobpact/status.h"

namespace jobpact {

// Thrown by Result<T>::value() when the Result holds an error. This is a
// programming error (the caller did not check ok()), not a runtime failure.
class JOBPACT_EXPORT BadResultAccess : public std::logic_error {
 public:
  explicit BadResultAccess(const Status& status)
      : std::logic_error("value() on an error Result: " + status.ToString()), status_(status) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> is not allowed");

 public:
  // REQUIRES: !status.ok(). An OK status is turned into kInternal, since a
  // Result without a value must carry an error.
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK Status");
  }
  Result(const T& value) : value_(value) {}       // NOLINT: implicit by design
  Result(T&& value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  template <typename U,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, T> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, Result<T>>>>
  Result(U&& value) : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT

  [[nodiscard]] bool ok() const { return value_.has_value(); }
  // OK when a value is held.
  const Status& status() const { return status_; }

  const T& value() const& {
    if (!ok()) throw BadResultAccess(status_);
    return *value_;
  }
  T& value() & {
    if (!ok()) throw BadResultAccess(status_);
    return *value_;
  }
  T&& value() && {
    if (!ok()) throw BadResultAccess(status_);
    return std::move(*value_);
  }
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

  // REQUIRES: ok().
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace jobpact

#define JOBPACT_CONCAT_INNER_(a, b) a##b
#define JOBPACT_CONCAT_(a, b) JOBPACT_CONCAT_INNER_(a, b)

// JOBPACT_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error from the
// enclosing function, or assigns the value to `lhs`.
#define JOBPACT_ASSIGN_OR_RETURN(lhs, rexpr) \
  JOBPACT_ASSIGN_OR_RETURN_IMPL_(JOBPACT_CONCAT_(jobpact_result_, __LINE__), lhs, rexpr)
#define JOBPACT_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                   \
  if (!result.ok()) return result.status();               \
  lhs = std::move(*result)

#endif  // JOBPACT_RESULT_H_
