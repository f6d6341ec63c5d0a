// IdempotencyStore contract (SPEC 6): claim before the effect, complete
// after it (result kept for the retention), release on failure, claims that
// expire on their own.
#include <string>

#include <gtest/gtest.h>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::IdempotencyStoreContractAnchor() { return 0; }

namespace {

using Kind = ClaimOutcome::Kind;
using State = IdempotencyRecord::State;

TEST_P(IdempotencyStoreContract, ClaimThenCompleteThenClaimSkipsWithTheResult) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome c, idem_->Claim("inv:ord_1", "w1", Seconds(45)));
  EXPECT_EQ(c.kind, Kind::kClaimed);
  EXPECT_EQ(c.record.state, State::kInProgress);
  EXPECT_EQ(c.record.owner, "w1");
  EXPECT_EQ(c.record.expires_at, Now() + Seconds(45));
  ASSERT_THAT(idem_->Complete("inv:ord_1", "w1", R"({"invoice":"inv_1"})", std::chrono::hours(24)),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome again, idem_->Claim("inv:ord_1", "w2", Seconds(45)));
  EXPECT_EQ(again.kind, Kind::kCompleted);
  EXPECT_EQ(again.record.state, State::kCompleted);
  EXPECT_EQ(again.record.result, R"({"invoice":"inv_1"})");
  EXPECT_EQ(again.record.expires_at, Now() + std::chrono::hours(24));
  // Even the owner that completed it is told it is done.
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome mine, idem_->Claim("inv:ord_1", "w1", Seconds(45)));
  EXPECT_EQ(mine.kind, Kind::kCompleted);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem_->Get("inv:ord_1"));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, State::kCompleted);
  EXPECT_EQ(rec->result, R"({"invoice":"inv_1"})");
}

TEST_P(IdempotencyStoreContract, LiveClaimOfAnotherOwnerIsInProgress) {
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome other, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(other.kind, Kind::kInProgress);
  EXPECT_EQ(other.record.owner, "w1");
  // The same owner claiming again extends its claim.
  Advance(Seconds(30));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome mine, idem_->Claim("k", "w1", Seconds(45)));
  EXPECT_EQ(mine.kind, Kind::kClaimed);
  EXPECT_EQ(mine.record.expires_at, Now() + Seconds(45));
}

TEST_P(IdempotencyStoreContract, ReleaseLetsARetryClaimAgain) {
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  EXPECT_THAT(idem_->Release("k", "w2"), StatusIs(StatusCode::kAborted));
  ASSERT_THAT(idem_->Release("k", "w1"), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> gone, idem_->Get("k"));
  EXPECT_FALSE(gone.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome c, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(c.kind, Kind::kClaimed);
  EXPECT_THAT(idem_->Release("missing", "w1"), StatusIs(StatusCode::kAborted));
}

TEST_P(IdempotencyStoreContract, CompletedRecordsAreNeverReleased) {
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  ASSERT_THAT(idem_->Complete("k", "w1", "done", std::chrono::hours(24)), IsOk());
  EXPECT_THAT(idem_->Release("k", "w1"), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(idem_->Release("k", "w2"), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem_->Get("k"));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, State::kCompleted);
  EXPECT_THAT(idem_->Extend("k", "w1", Seconds(45)), StatusIs(StatusCode::kAborted));
}

TEST_P(IdempotencyStoreContract, CompleteAndExtendNeedALiveClaimOfTheOwner) {
  EXPECT_THAT(idem_->Complete("k", "w1", "r", std::chrono::hours(1)),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(idem_->Extend("k", "w1", Seconds(45)), StatusIs(StatusCode::kAborted));
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  EXPECT_THAT(idem_->Complete("k", "w2", "r", std::chrono::hours(1)),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(idem_->Extend("k", "w2", Seconds(45)), StatusIs(StatusCode::kAborted));
  Advance(Seconds(40));
  ASSERT_THAT(idem_->Extend("k", "w1", Seconds(45)), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem_->Get("k"));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->expires_at, Now() + Seconds(45));
  Advance(Seconds(40));  // Past the first expiry, within the extended one.
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome other, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(other.kind, Kind::kInProgress);
}

TEST_P(IdempotencyStoreContract, ExpiredClaimCanBeTakenAndTheOldOwnerIsFenced) {
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  Advance(Seconds(45));  // now == expires_at: expired.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> none, idem_->Get("k"));
  EXPECT_FALSE(none.has_value());
  EXPECT_THAT(idem_->Extend("k", "w1", Seconds(45)), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome c, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(c.kind, Kind::kClaimed);
  EXPECT_EQ(c.record.owner, "w2");
  // The crashed-and-back worker cannot complete or release the new claim.
  EXPECT_THAT(idem_->Complete("k", "w1", "late", std::chrono::hours(1)),
              StatusIs(StatusCode::kAborted));
  EXPECT_THAT(idem_->Release("k", "w1"), StatusIs(StatusCode::kAborted));
  ASSERT_THAT(idem_->Complete("k", "w2", "on time", std::chrono::hours(1)), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem_->Get("k"));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->result, "on time");
}

TEST_P(IdempotencyStoreContract, CompletedRecordExpiresAfterItsRetention) {
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(45)).status(), IsOk());
  ASSERT_THAT(idem_->Complete("k", "w1", "done", std::chrono::hours(24)), IsOk());
  Advance(std::chrono::hours(24) - Seconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome still, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(still.kind, Kind::kCompleted);
  Advance(Seconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> gone, idem_->Get("k"));
  EXPECT_FALSE(gone.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(ClaimOutcome fresh, idem_->Claim("k", "w2", Seconds(45)));
  EXPECT_EQ(fresh.kind, Kind::kClaimed);
  EXPECT_TRUE(fresh.record.result.empty());
}

TEST_P(IdempotencyStoreContract, PurgeExpiredDeletesOnlyExpiredRecords) {
  ASSERT_THAT(idem_->Claim("claim_short", "w1", Seconds(10)).status(), IsOk());
  ASSERT_THAT(idem_->Claim("claim_long", "w1", Seconds(100)).status(), IsOk());
  ASSERT_THAT(idem_->Claim("done_short", "w1", Seconds(10)).status(), IsOk());
  ASSERT_THAT(idem_->Complete("done_short", "w1", "r", Seconds(20)), IsOk());
  ASSERT_THAT(idem_->Claim("done_long", "w1", Seconds(10)).status(), IsOk());
  ASSERT_THAT(idem_->Complete("done_long", "w1", "r", std::chrono::hours(1)), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(int none, idem_->PurgeExpired());
  EXPECT_EQ(none, 0);
  Advance(Seconds(30));
  JOBPACT_ASSERT_OK_AND_ASSIGN(int two, idem_->PurgeExpired());
  EXPECT_EQ(two, 2);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> a, idem_->Get("claim_long"));
  EXPECT_TRUE(a.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> b, idem_->Get("done_long"));
  EXPECT_TRUE(b.has_value());
}

TEST_P(IdempotencyStoreContract, InvalidArgumentsAreRefused) {
  EXPECT_THAT(idem_->Claim("", "w1", Seconds(5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(idem_->Claim("k", "", Seconds(5)).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(idem_->Claim("k", "w1", Duration::zero()).status(),
              StatusIs(StatusCode::kInvalidArgument));
  ASSERT_THAT(idem_->Claim("k", "w1", Seconds(5)).status(), IsOk());
  EXPECT_THAT(idem_->Complete("k", "w1", "r", Duration::zero()),
              StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
