// The SQL stores' row decoder (src/internal/job_row_codec.h): a row that
// does not decode is kInternal naming the job, as documented, whatever
// the row holds, so the store quarantines it.
#include "src/internal/job_row_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace internal {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::HasSubstr;

// A row as the codec reads it: every column text, or NULL.
class FakeRow {
 public:
  explicit FakeRow(std::vector<std::optional<std::string>> cols) : cols_(std::move(cols)) {}
  bool IsNull(int col) const { return !cols_[static_cast<std::size_t>(col)].has_value(); }
  std::int64_t Int(int col) const {
    return IsNull(col) ? 0 : std::strtoll(cols_[static_cast<std::size_t>(col)]->c_str(), nullptr, 10);
  }
  std::string Text(int col) const { return cols_[static_cast<std::size_t>(col)].value_or(""); }

 private:
  std::vector<std::optional<std::string>> cols_;
};

// fuzz/sqlite_row_fuzzer's and fuzz/postgres_row_fuzzer's first input (an
// empty row): an unknown stored status came back as kInvalidArgument, as if
// the caller's input were at fault; ReadJobRow documents kInternal.
TEST(JobRowCodecTest, UnknownStoredStatusIsInternal) {
  std::vector<std::optional<std::string>> cols(kColCancelRequested + 1, std::string());
  cols[kColJobId] = "job_1";
  cols[kColEnvelope] = R"({"job_id":"job_1","job_type":"t","payload":{}})";
  cols[kColHistory] = "[]";
  cols[kColStatus] = "bogus";
  EXPECT_THAT(ReadJobRow(FakeRow(cols)).status(),
              StatusIs(StatusCode::kInternal, HasSubstr("job_1")));
  cols[kColStatus] = "queued";
  EXPECT_THAT(ReadJobRow(FakeRow(cols)), IsOk());
}

}  // namespace
}  // namespace internal
}  // namespace jobpact
