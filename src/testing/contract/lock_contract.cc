// LockStore contract (SPEC 6): TTL, owner-only renew/release, contention,
// strictly increasing fencing tokens.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::LockStoreContractAnchor() { return 0; }

namespace {

using ::testing::HasSubstr;

TEST_P(LockStoreContract, AcquireGivesALeaseUntilNowPlusTtl) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease l, locks_->Acquire("order:1", "w1", Seconds(30)));
  EXPECT_EQ(l.key, "order:1");
  EXPECT_EQ(l.owner, "w1");
  EXPECT_GT(l.fencing_token, 0u);
  EXPECT_EQ(l.expires_at, Now() + Seconds(30));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> seen, locks_->Inspect("order:1"));
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->owner, "w1");
  EXPECT_EQ(seen->fencing_token, l.fencing_token);
  EXPECT_EQ(seen->expires_at, l.expires_at);
}

TEST_P(LockStoreContract, ListShowsTheLiveLocksByKeyWithOwnerExpiryAndToken) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease b, locks_->Acquire("order:2", "w2", Seconds(60)));
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease a, locks_->Acquire("order:1", "w1", Seconds(10)));
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease c, locks_->Acquire("order:3", "w3", Seconds(60)));
  ASSERT_THAT(locks_->Release("order:3", "w3"), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LockLease> all, locks_->List(100));
  ASSERT_EQ(all.size(), 2u) << "a released lock is not listed";
  EXPECT_EQ(all[0].key, "order:1");
  EXPECT_EQ(all[0].owner, "w1");
  EXPECT_EQ(all[0].fencing_token, a.fencing_token);
  EXPECT_EQ(all[0].expires_at, a.expires_at);
  EXPECT_EQ(all[1].key, "order:2");
  EXPECT_EQ(all[1].fencing_token, b.fencing_token);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LockLease> one, locks_->List(1));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].key, "order:1");
  Advance(Seconds(11));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LockLease> later, locks_->List(100));
  ASSERT_EQ(later.size(), 1u) << "an expired lock is not listed";
  EXPECT_EQ(later[0].key, "order:2");
  EXPECT_THAT(locks_->List(0).status(), StatusIs(StatusCode::kInvalidArgument));
  (void)c;
}

TEST_P(LockStoreContract, HeldLockIsAbortedForOthersAndNamesTheHolder) {
  ASSERT_THAT(locks_->Acquire("order:1", "w1", Seconds(30)).status(), IsOk());
  Result<LockLease> other = locks_->Acquire("order:1", "w2", Seconds(30));
  EXPECT_THAT(other.status(), StatusIs(StatusCode::kAborted, HasSubstr("w1")));
  // Other keys are independent.
  EXPECT_THAT(locks_->Acquire("order:2", "w2", Seconds(30)).status(), IsOk());
}

TEST_P(LockStoreContract, ReacquireBySameOwnerExtendsAndKeepsToken) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease first, locks_->Acquire("k", "w1", Seconds(30)));
  Advance(Seconds(10));
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease again, locks_->Acquire("k", "w1", Seconds(30)));
  EXPECT_EQ(again.fencing_token, first.fencing_token);
  EXPECT_EQ(again.expires_at, Now() + Seconds(30));
}

TEST_P(LockStoreContract, ExpiredLockIsFreeWithANewerToken) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease first, locks_->Acquire("k", "w1", Seconds(30)));
  Advance(Seconds(29));
  EXPECT_THAT(locks_->Acquire("k", "w2", Seconds(30)).status(), StatusIs(StatusCode::kAborted));
  Advance(Seconds(1));  // now == expires_at: expired.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> none, locks_->Inspect("k"));
  EXPECT_FALSE(none.has_value());
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease second, locks_->Acquire("k", "w2", Seconds(30)));
  EXPECT_GT(second.fencing_token, first.fencing_token);
  // The first owner lost it: renew and release are refused.
  EXPECT_THAT(locks_->Renew("k", "w1", Seconds(30)).status(), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(locks_->Release("k", "w1"), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> holder, locks_->Inspect("k"));
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->owner, "w2");
}

TEST_P(LockStoreContract, SameOwnerAfterExpiryGetsANewToken) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease first, locks_->Acquire("k", "w1", Seconds(5)));
  Advance(Seconds(5));
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease second, locks_->Acquire("k", "w1", Seconds(5)));
  EXPECT_GT(second.fencing_token, first.fencing_token);
}

TEST_P(LockStoreContract, RenewExtendsForTheOwnerOnly) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease l, locks_->Acquire("k", "w1", Seconds(30)));
  Advance(Seconds(20));
  JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease renewed, locks_->Renew("k", "w1", Seconds(30)));
  EXPECT_EQ(renewed.expires_at, Now() + Seconds(30));
  EXPECT_EQ(renewed.fencing_token, l.fencing_token);
  EXPECT_THAT(locks_->Renew("k", "w2", Seconds(30)).status(), StatusIs(StatusCode::kAborted));
  Advance(Seconds(20));  // Past the original expiry, within the renewed one.
  EXPECT_THAT(locks_->Acquire("k", "w2", Seconds(30)).status(), StatusIs(StatusCode::kAborted));
  EXPECT_THAT(locks_->Renew("never-held", "w1", Seconds(30)).status(),
              StatusIs(StatusCode::kAborted));
}

TEST_P(LockStoreContract, ExpiredLockCannotBeRenewed) {
  ASSERT_THAT(locks_->Acquire("k", "w1", Seconds(5)).status(), IsOk());
  Advance(Seconds(6));
  EXPECT_THAT(locks_->Renew("k", "w1", Seconds(5)).status(), StatusIs(StatusCode::kAborted));
}

TEST_P(LockStoreContract, ReleaseIsOwnerOnly) {
  ASSERT_THAT(locks_->Acquire("k", "w1", Seconds(30)).status(), IsOk());
  EXPECT_THAT(locks_->Release("k", "w2"), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> still, locks_->Inspect("k"));
  EXPECT_TRUE(still.has_value());
  EXPECT_THAT(locks_->Release("k", "w1"), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<LockLease> gone, locks_->Inspect("k"));
  EXPECT_FALSE(gone.has_value());
  EXPECT_THAT(locks_->Release("k", "w1"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(locks_->Acquire("k", "w2", Seconds(30)).status(), IsOk());
}

TEST_P(LockStoreContract, ReleaseOfAnExpiredLockIsNotFound) {
  ASSERT_THAT(locks_->Acquire("k", "w1", Seconds(5)).status(), IsOk());
  Advance(Seconds(5));
  EXPECT_THAT(locks_->Release("k", "w1"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(locks_->Release("never-held", "w1"), StatusIs(StatusCode::kNotFound));
}

TEST_P(LockStoreContract, FencingTokensStrictlyIncreaseAcrossKeysAndAcquisitions) {
  std::uint64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    for (const char* key : {"a", "b", "c"}) {
      JOBPACT_ASSERT_OK_AND_ASSIGN(LockLease l,
                                   locks_->Acquire(key, "w" + std::to_string(round), Seconds(5)));
      EXPECT_GT(l.fencing_token, last) << key << " round " << round;
      last = l.fencing_token;
    }
    ASSERT_THAT(locks_->Release("a", "w" + std::to_string(round)), IsOk());  // Released...
    Advance(Seconds(5));                                                   // ...or expired.
  }
}

TEST_P(LockStoreContract, InvalidArgumentsAreRefused) {
  EXPECT_THAT(locks_->Acquire("", "w1", Seconds(5)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(locks_->Acquire("k", "", Seconds(5)).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(locks_->Acquire("k", "w1", Duration::zero()).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(locks_->Acquire("k", "w1", -Seconds(1)).status(),
              StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
