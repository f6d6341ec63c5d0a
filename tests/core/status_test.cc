#include "jobpact/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "jobpact/result.h"

namespace jobpact {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = Status::Unavailable("redis down");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "redis down");
  EXPECT_EQ(s.ToString(), "UNAVAILABLE: redis down");
}

TEST(StatusTest, CodesKeepGrpcNumbers) {
  EXPECT_EQ(static_cast<int>(StatusCode::kAborted), 10);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 8);
  EXPECT_EQ(StatusCodeName(StatusCode::kFailedPrecondition), "FAILED_PRECONDITION");
}

TEST(StatusTest, OkCodeDropsMessage) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

Status FailsWith(StatusCode code) { return Status(code, "inner"); }
Status Wrapper(StatusCode code, bool* reached_end) {
  JOBPACT_RETURN_IF_ERROR(FailsWith(code));
  *reached_end = true;
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorPropagates) {
  bool reached = false;
  EXPECT_EQ(Wrapper(StatusCode::kAborted, &reached).code(), StatusCode::kAborted);
  EXPECT_FALSE(reached);
  EXPECT_TRUE(Wrapper(StatusCode::kOk, &reached).ok());
  EXPECT_TRUE(reached);
}

TEST(ResultTest, HoldsValue) {
  Result<std::string> r = std::string("hello");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "hello");
  EXPECT_EQ(r->size(), 5u);
  EXPECT_TRUE(r.status().ok());
}

TEST(ResultTest, HoldsErrorAndValueThrowsBadResultAccess) {
  Result<int> r = Status::NotFound("no job");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THROW(r.value(), BadResultAccess);
  EXPECT_EQ(r.value_or(7), 7);
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  Result<int> r = Status::Ok();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(3);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 3);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}
Result<int> Quarter(int x) {
  JOBPACT_ASSIGN_OR_RETURN(int h, Half(x));
  JOBPACT_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(ResultTest, AssignOrReturn) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace jobpact
