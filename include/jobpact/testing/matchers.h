// File: jobpact/testing/matchers.h
//
// gmock matchers for Status and Result<T>, so tests assert the specific
// error instead of "not OK" (house style):
//
//   EXPECT_THAT(runner->Enqueue(env), jobpact::testing::IsOk());
//   EXPECT_THAT(locks->Acquire(key, "b", ttl),
//               jobpact::testing::StatusIs(jobpact::StatusCode::kAborted));
//   EXPECT_THAT(runner->Handle("x", h, opts),
//               jobpact::testing::StatusIs(jobpact::StatusCode::kInvalidArgument,
//                                          ::testing::HasSubstr("policy_reason")));
//
//   JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, queue->Get("job_1"));
//   EXPECT_EQ(rec.status, jobpact::JobStatus::kQueued);
//
// Header-only; include it from test code only (it pulls in gmock). Note that
// inside `namespace jobpact` code, `testing::` means jobpact::testing: spell
// GoogleTest's namespace `::testing::`.
#ifndef JOBPACT_TESTING_MATCHERS_H_
#define JOBPACT_TESTING_MATCHERS_H_

#include <gmock/gmock.h>

#include <ostream>
#include <string>
#include <utility>

#include "jobpact/result.h"
#include "jobpact/status.h"

namespace jobpact {
namespace testing {
namespace matchers_internal {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const Result<T>& r) {
  return r.status();
}

class IsOkMatcher {
 public:
  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const Status& s = GetStatus(value);
    if (!s.ok()) *listener << "whose status is " << s.ToString();
    return s.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const Status& s = GetStatus(value);
    if (s.code() != code_) {
      *listener << "whose status is " << s.ToString();
      return false;
    }
    ::testing::StringMatchResultListener inner;
    if (!message_.MatchAndExplain(s.message(), &inner)) {
      *listener << "whose message \"" << s.message() << "\" does not match";
      if (!inner.str().empty()) *listener << " (" << inner.str() << ")";
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << StatusCodeName(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have status code " << StatusCodeName(code_) << " or a message that ";
    message_.DescribeTo(os);
  }

 private:
  StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace matchers_internal

// Matches an OK Status or a Result holding a value.
inline ::testing::PolymorphicMatcher<matchers_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(matchers_internal::IsOkMatcher());
}

// Matches a Status (or a Result's status) with `code`, and optionally a
// message matching `message` (a string matcher such as HasSubstr).
inline ::testing::PolymorphicMatcher<matchers_internal::StatusIsMatcher> StatusIs(
    StatusCode code, ::testing::Matcher<const std::string&> message = ::testing::_) {
  return ::testing::MakePolymorphicMatcher(
      matchers_internal::StatusIsMatcher(code, std::move(message)));
}

}  // namespace testing
}  // namespace jobpact

// Declares or assigns `lhs` from the value of `rexpr` (a Result<T>), or
// fails the test with its status, as ASSERT_THAT(rexpr, IsOk()) would, and
// returns from the current function. `lhs` may be a declaration
// (`Lease lease`) or an existing variable; `rexpr` is evaluated once. Like
// ASSERT_*, usable only in functions returning void. Expands to more than
// one statement: do not use it as the body of an unbraced if or loop.
#define JOBPACT_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  JOBPACT_ASSERT_OK_AND_ASSIGN_IMPL_(JOBPACT_CONCAT_(jobpact_assert_result_, __LINE__), lhs, rexpr)
#define JOBPACT_ASSERT_OK_AND_ASSIGN_IMPL_(result, lhs, rexpr)        \
  auto result = (rexpr);                                              \
  ASSERT_THAT(result.status(), ::jobpact::testing::IsOk()) << #rexpr; \
  lhs = std::move(*result)

#endif  // JOBPACT_TESTING_MATCHERS_H_
