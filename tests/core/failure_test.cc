#include "jobpact/failure.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace jobpact {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

template <typename E>
std::exception_ptr Ptr(E e) {
  return std::make_exception_ptr(std::move(e));
}

struct NotAnException {};

class HttpError : public std::runtime_error {
 public:
  explicit HttpError(int status)
      : std::runtime_error("http " + std::to_string(status)), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

class QueueCategory : public std::error_category {
 public:
  const char* name() const noexcept override { return "queue"; }
  std::string message(int value) const override { return "queue error " + std::to_string(value); }
};

const std::error_category& queue_category() {
  static const QueueCategory* category = new QueueCategory;
  return *category;
}

// --- Status codes --------------------------------------------------------------

TEST(ClassifyStatusCodeTest, MapsEveryCodeAsDocumented) {
  for (StatusCode c : {StatusCode::kUnavailable, StatusCode::kDeadlineExceeded,
                       StatusCode::kResourceExhausted, StatusCode::kAborted}) {
    EXPECT_EQ(ClassifyStatusCode(c), FailureClass::kTransient) << c;
  }
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kAlreadyExists,
        StatusCode::kFailedPrecondition, StatusCode::kUnimplemented}) {
    EXPECT_EQ(ClassifyStatusCode(c), FailureClass::kPermanent) << c;
  }
  for (StatusCode c :
       {StatusCode::kOk, StatusCode::kCancelled, StatusCode::kUnknown, StatusCode::kInternal}) {
    EXPECT_EQ(ClassifyStatusCode(c), FailureClass::kUnknown) << c;
  }
}

TEST(FailureFromStatusTest, CarriesClassCodeNameAndMessage) {
  Failure f = FailureFromStatus(Status::Unavailable("warehouse down"));
  EXPECT_EQ(f.failure_class, FailureClass::kTransient);
  EXPECT_EQ(f.code, "UNAVAILABLE");
  EXPECT_EQ(f.message, "warehouse down");

  f = FailureFromStatus(Status::NotFound("order ord_987 does not exist"));
  EXPECT_EQ(f.failure_class, FailureClass::kPermanent);
  EXPECT_EQ(f.code, "NOT_FOUND");
  EXPECT_EQ(f.message, "order ord_987 does not exist");

  f = FailureFromStatus(Status::Internal("bug"));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_EQ(f.code, "INTERNAL");
}

// --- Classifier: defaults and JobError -------------------------------------------------

TEST(ClassifierTest, RuntimeErrorIsUnknownByDefault) {
  Classifier c;
  Failure f = c.Classify(Ptr(std::runtime_error("boom")));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_EQ(f.code, "std::runtime_error");
  EXPECT_EQ(f.message, "std::runtime_error: boom");
}

TEST(ClassifierTest, JobErrorsAreClassifiedByTheirOwnClassWithTheirCode) {
  Classifier c;
  Failure f = c.Classify(Ptr(TransientError("warehouse 503", "http_503")));
  EXPECT_EQ(f.failure_class, FailureClass::kTransient);
  EXPECT_EQ(f.code, "http_503");
  EXPECT_THAT(f.message, HasSubstr("warehouse 503"));
  EXPECT_THAT(f.message, HasSubstr("TransientError"));

  f = c.Classify(Ptr(PermanentError("no such customer")));
  EXPECT_EQ(f.failure_class, FailureClass::kPermanent);
  EXPECT_EQ(f.code, "permanent");

  f = c.Classify(Ptr(JobError(FailureClass::kUnknown, "odd", "strange")));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_EQ(f.code, "odd");
}

TEST(ClassifierTest, JobErrorsWinOverRules) {
  Classifier c;
  // Both would match a PermanentError (a std::runtime_error) if rules came first.
  c.AddType<std::runtime_error>(FailureClass::kTransient);
  c.AddPredicate("everything", [](const std::exception_ptr&) -> std::optional<FailureClass> {
    return FailureClass::kTransient;
  });
  Failure f = c.Classify(Ptr(PermanentError("invalid payload", "bad_payload")));
  EXPECT_EQ(f.failure_class, FailureClass::kPermanent);
  EXPECT_EQ(f.code, "bad_payload");
}

// --- Classifier: rules ---------------------------------------------------------------

TEST(ClassifierTest, TypeRuleMatchesTheTypeAndItsSubclasses) {
  Classifier c;
  c.AddType<std::logic_error>(FailureClass::kPermanent);
  EXPECT_EQ(c.Classify(Ptr(std::logic_error("x"))).failure_class, FailureClass::kPermanent);
  EXPECT_EQ(c.Classify(Ptr(std::invalid_argument("x"))).failure_class, FailureClass::kPermanent);
  EXPECT_EQ(c.Classify(Ptr(std::out_of_range("x"))).failure_class, FailureClass::kPermanent);
  // Not a logic_error.
  EXPECT_EQ(c.Classify(Ptr(std::runtime_error("x"))).failure_class, FailureClass::kUnknown);
}

TEST(ClassifierTest, TypeRuleOnAUserType) {
  Classifier c;
  c.AddType<HttpError>(FailureClass::kTransient);
  Failure f = c.Classify(Ptr(HttpError(503)));
  EXPECT_EQ(f.failure_class, FailureClass::kTransient);
  EXPECT_THAT(f.code, HasSubstr("HttpError"));
  EXPECT_THAT(f.message, HasSubstr("http 503"));
  EXPECT_EQ(c.Classify(Ptr(std::runtime_error("x"))).failure_class, FailureClass::kUnknown);
}

TEST(ClassifierTest, SystemErrorRuleMatchesTheConditionInAnyCategory) {
  Classifier c;
  c.AddSystemError(std::errc::connection_reset, FailureClass::kTransient);

  const int reset = static_cast<int>(std::errc::connection_reset);
  Failure f = c.Classify(Ptr(std::system_error(std::make_error_code(std::errc::connection_reset))));
  EXPECT_EQ(f.failure_class, FailureClass::kTransient);
  EXPECT_EQ(f.code, "system_error:generic:" + std::to_string(reset));

  // A raw errno from the OS, as a socket library would throw it.
  f = c.Classify(Ptr(std::system_error(ECONNRESET, std::system_category(), "recv")));
  EXPECT_EQ(f.failure_class, FailureClass::kTransient);
  EXPECT_EQ(f.code, "system_error:system:" + std::to_string(ECONNRESET));
  EXPECT_THAT(f.message, HasSubstr("recv"));

  // Another condition does not match.
  f = c.Classify(Ptr(std::system_error(std::make_error_code(std::errc::permission_denied))));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_THAT(f.code, StartsWith("system_error:generic:"));
  // Nor does a non-system_error.
  EXPECT_EQ(c.Classify(Ptr(std::runtime_error("connection reset"))).failure_class,
            FailureClass::kUnknown);
}

TEST(ClassifierTest, SystemErrorCategoryRuleMatchesEveryValueOfTheCategory) {
  Classifier c;
  c.AddSystemErrorCategory(queue_category(), FailureClass::kPermanent);
  for (int value : {1, 7, 42}) {
    Failure f = c.Classify(Ptr(std::system_error(value, queue_category())));
    EXPECT_EQ(f.failure_class, FailureClass::kPermanent) << value;
    EXPECT_EQ(f.code, "system_error:queue:" + std::to_string(value));
  }
  EXPECT_EQ(
      c.Classify(Ptr(std::system_error(std::make_error_code(std::errc::io_error)))).failure_class,
      FailureClass::kUnknown);
}

TEST(ClassifierTest, PredicateRuleSeesTheException) {
  Classifier c;
  c.AddPredicate("http 4xx is permanent, 5xx transient",
                 [](const std::exception_ptr& e) -> std::optional<FailureClass> {
                   try {
                     std::rethrow_exception(e);
                   } catch (const HttpError& h) {
                     if (h.status() >= 500) return FailureClass::kTransient;
                     if (h.status() >= 400) return FailureClass::kPermanent;
                   } catch (...) {
                   }
                   return std::nullopt;
                 });
  EXPECT_EQ(c.Classify(Ptr(HttpError(503))).failure_class, FailureClass::kTransient);
  EXPECT_EQ(c.Classify(Ptr(HttpError(404))).failure_class, FailureClass::kPermanent);
  EXPECT_EQ(c.Classify(Ptr(HttpError(302))).failure_class, FailureClass::kUnknown);
}

TEST(ClassifierTest, FirstMatchingRuleWins) {
  Classifier transient_first;
  transient_first.AddType<std::runtime_error>(FailureClass::kTransient)
      .AddType<std::exception>(FailureClass::kPermanent);
  EXPECT_EQ(transient_first.Classify(Ptr(std::runtime_error("x"))).failure_class,
            FailureClass::kTransient);
  EXPECT_EQ(transient_first.Classify(Ptr(std::logic_error("x"))).failure_class,
            FailureClass::kPermanent);

  Classifier broad_first;
  broad_first.AddType<std::exception>(FailureClass::kPermanent)
      .AddType<std::runtime_error>(FailureClass::kTransient);
  EXPECT_EQ(broad_first.Classify(Ptr(std::runtime_error("x"))).failure_class,
            FailureClass::kPermanent);
}

TEST(ClassifierTest, NonStdExceptionsAreClassifiedAndDescribed) {
  Classifier c;
  Failure f = c.Classify(Ptr(42));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_EQ(f.code, "non_std_exception");
  EXPECT_EQ(f.message, "int");

  f = c.Classify(Ptr(NotAnException{}));
  EXPECT_EQ(f.code, "non_std_exception");
  EXPECT_THAT(f.message, HasSubstr("NotAnException"));

  // Rules still apply to them.
  c.AddType<int>(FailureClass::kTransient);
  EXPECT_EQ(c.Classify(Ptr(42)).failure_class, FailureClass::kTransient);
}

TEST(ClassifierTest, ThrowingPredicateIsTreatedAsNotMatching) {
  Classifier c;
  c.AddPredicate("throws std", [](const std::exception_ptr&) -> std::optional<FailureClass> {
    throw std::runtime_error("predicate bug");
  });
  c.AddPredicate("throws int",
                 [](const std::exception_ptr&) -> std::optional<FailureClass> { throw 7; });
  c.AddPredicate("throws bad_alloc", [](const std::exception_ptr&) -> std::optional<FailureClass> {
    throw std::bad_alloc();
  });
  Failure f = c.Classify(Ptr(std::runtime_error("x")));
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_EQ(f.code, "std::runtime_error");

  // A later rule still gets its turn.
  c.AddType<std::runtime_error>(FailureClass::kTransient);
  EXPECT_EQ(c.Classify(Ptr(std::runtime_error("x"))).failure_class, FailureClass::kTransient);
}

TEST(ClassifierTest, NullExceptionIsUnknownRatherThanACrash) {
  Classifier c;
  Failure f = c.Classify(std::exception_ptr());
  EXPECT_EQ(f.failure_class, FailureClass::kUnknown);
  EXPECT_FALSE(f.code.empty());
}

TEST(ClassifierTest, DescribeListsRulesInOrder) {
  Classifier c;
  c.AddType<std::runtime_error>(FailureClass::kTransient)
      .AddSystemError(std::errc::connection_reset, FailureClass::kTransient)
      .AddSystemErrorCategory(queue_category(), FailureClass::kPermanent)
      .AddPredicate("http 4xx", [](const std::exception_ptr&) -> std::optional<FailureClass> {
        return std::nullopt;
      });
  std::vector<std::string> lines = c.Describe();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "type:std::runtime_error");
  EXPECT_THAT(lines[1], HasSubstr("generic"));
  EXPECT_THAT(lines[1], HasSubstr(std::to_string(static_cast<int>(std::errc::connection_reset))));
  EXPECT_THAT(lines[2], HasSubstr("queue"));
  EXPECT_EQ(lines[3], "http 4xx");
  EXPECT_TRUE(Classifier().Describe().empty());
}

TEST(ClassifierTest, ClassifyIsSafeFromManyThreads) {
  Classifier c;
  c.AddType<std::logic_error>(FailureClass::kPermanent)
      .AddSystemError(std::errc::timed_out, FailureClass::kTransient);
  const std::exception_ptr logic = Ptr(std::invalid_argument("bad"));
  const std::exception_ptr timeout =
      Ptr(std::system_error(std::make_error_code(std::errc::timed_out)));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (c.Classify(logic).failure_class != FailureClass::kPermanent) ++mismatches[t];
        if (c.Classify(timeout).failure_class != FailureClass::kTransient) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

// --- DescribeException -------------------------------------------------------------

TEST(DescribeExceptionTest, NamesTheTypeAndTheMessage) {
  EXPECT_EQ(DescribeException(Ptr(std::runtime_error("boom"))), "std::runtime_error: boom");
  EXPECT_EQ(DescribeException(Ptr(std::out_of_range("idx"))), "std::out_of_range: idx");
  EXPECT_EQ(DescribeException(Ptr(TransientError("later"))), "jobpact::TransientError: later");
}

TEST(DescribeExceptionTest, NamesTheTypeOfNonStdExceptions) {
  EXPECT_EQ(DescribeException(Ptr(42)), "int");
  EXPECT_EQ(DescribeException(Ptr(3.5)), "double");
  EXPECT_THAT(DescribeException(Ptr(NotAnException{})), HasSubstr("NotAnException"));
}

}  // namespace
}  // namespace jobpact
