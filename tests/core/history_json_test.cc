// The stored history entry (src/internal/history_json.h): whatever a store
// holds, reading it returns kInternal naming the problem and never throws,
// so the store can quarantine the record.
#include "src/internal/history_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "jobpact/testing/matchers.h"
#include "src/internal/job_row_codec.h"
#include "src/internal/time_ns.h"

namespace jobpact {
namespace internal {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::HasSubstr;

nlohmann::json Entry(const char* text) { return nlohmann::json::parse(text); }

TEST(HistoryJsonTest, StoredEntryReadsBack) {
  Transition t;
  t.from = JobStatus::kQueued;
  t.to = JobStatus::kRunning;
  t.at = TimeFromNs(1796514539117444824);
  t.reason = "delivered \"quoted\"";
  Result<Transition> back = HistoryEntryFromJson(nlohmann::json::parse(HistoryEntryJson(t, "w1")));
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->from, t.from);
  EXPECT_EQ(back->to, t.to);
  EXPECT_EQ(back->at, t.at);
  EXPECT_EQ(back->reason, t.reason);
}

// fuzz/redis_record_fuzzer's input: "at_ns" as a float out of int64's range
// was converted with undefined behaviour (UBSan: "1.79651e+27 is outside
// the range of representable values of type 'long'").
TEST(HistoryJsonTest, TimeThatIsNotAnInt64IsAnError) {
  for (const char* at : {"1.79651e+27", "1.5", "-1e300", "18446744073709551615", "\"0\"", "null"}) {
    const std::string text =
        std::string(R"({"from":"queued","to":"running","at_ns":)") + at + R"(,"reason":"x"})";
    EXPECT_THAT(HistoryEntryFromJson(Entry(text.c_str())),
                StatusIs(StatusCode::kInternal, HasSubstr("at_ns")))
        << at;
  }
  Result<Transition> max = HistoryEntryFromJson(
      Entry(R"({"from":"queued","to":"running","at_ns":9223372036854775807,"reason":"x"})"));
  ASSERT_THAT(max, IsOk());
  EXPECT_EQ(ToNs(max->at), INT64_MAX);
}

// A member of another type made json::value() throw type_error out of the
// store's read.
TEST(HistoryJsonTest, MemberOfTheWrongTypeIsAnErrorNotAThrow) {
  for (const char* text : {R"({"from":1,"to":"running","at_ns":0,"reason":"x"})",
                           R"({"from":"queued","to":[],"at_ns":0,"reason":"x"})",
                           R"({"from":"queued","to":"running","at_ns":0,"reason":{}})"}) {
    EXPECT_THAT(HistoryEntryFromJson(Entry(text)), StatusIs(StatusCode::kInternal)) << text;
  }
  EXPECT_THAT(ParseHistory(R"([{"from":"queued","to":"running","at_ns":0,"reason":false}])"),
              StatusIs(StatusCode::kInternal, HasSubstr("reason")));
}

// The header promised kInternal for an unknown status; the parser's
// kInvalidArgument came through instead.
TEST(HistoryJsonTest, UnknownStatusIsInternal) {
  EXPECT_THAT(HistoryEntryFromJson(Entry(R"({"from":"bogus","to":"running"})")),
              StatusIs(StatusCode::kInternal, HasSubstr("bogus")));
}

}  // namespace
}  // namespace internal
}  // namespace jobpact
