// CacheStore contract (jobpact/testing/cache_store_contract.h): windows and
// expiry, key and entry checks, invalidation by key and prefix, counting,
// concurrent use.
#include "jobpact/testing/cache_store_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::CacheStoreContractAnchor() { return 0; }

void CacheStoreContract::SetUp() {
  clock_ = std::make_shared<ManualClock>();
  store_ = GetParam().make(clock_);
  if (store_ == nullptr) GTEST_SKIP() << "cache store unavailable";
}

CacheEntry CacheStoreContract::Entry(std::string value, Duration fresh, Duration stale) const {
  CacheEntry e;
  e.value = std::move(value);
  e.fresh_until = clock_->Now() + fresh;
  e.stale_until = e.fresh_until + stale;
  e.error_until = e.fresh_until;
  e.as_of = clock_->Now() - Seconds(3);
  e.stored_at = clock_->Now();
  e.load_duration = Millis(40);
  return e;
}

namespace {

using ::testing::HasSubstr;

std::optional<std::string> ValueOf(CacheStore& store, std::string_view key) {
  Result<std::optional<CacheEntry>> got = store.Get(key);
  EXPECT_THAT(got.status(), IsOk());
  if (!got.ok() || !*got) return std::nullopt;
  return (*got)->value;
}

TEST_P(CacheStoreContract, GetReturnsTheEntryAsStored) {
  CacheEntry e = Entry("v", Seconds(10), Seconds(20));
  e.error_until = e.fresh_until + Seconds(50);
  ASSERT_THAT(store_->Put("user:1", e), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> got, store_->Get("user:1"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "v");
  EXPECT_FALSE(got->not_found);
  EXPECT_EQ(got->fresh_until, e.fresh_until);
  EXPECT_EQ(got->stale_until, e.stale_until);
  EXPECT_EQ(got->error_until, e.error_until);
  EXPECT_EQ(got->as_of, e.as_of);
  EXPECT_EQ(got->stored_at, e.stored_at);
  EXPECT_EQ(got->load_duration, e.load_duration);
  CacheEntry negative = Entry("");
  negative.not_found = true;
  ASSERT_THAT(store_->Put("user:404", negative), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> neg, store_->Get("user:404"));
  ASSERT_TRUE(neg.has_value());
  EXPECT_TRUE(neg->not_found);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> none, store_->Get("user:2"));
  EXPECT_FALSE(none.has_value());
}

TEST_P(CacheStoreContract, KeepsAnEntryUntilItsLastWindowEndsAndNeverReturnsItAfter) {
  CacheEntry e = Entry("v", Seconds(10), Seconds(20));
  e.error_until = e.fresh_until + Seconds(50);
  ASSERT_THAT(store_->Put("user:1", e), IsOk());
  EXPECT_EQ(e.expires_at(), e.error_until);
  clock_->Advance(Seconds(59));
  EXPECT_EQ(ValueOf(*store_, "user:1"), "v");
  clock_->Advance(Seconds(1));
  EXPECT_EQ(ValueOf(*store_, "user:1"), std::nullopt);
  EXPECT_EQ(*store_->CountByPrefix(""), 0u);
}

TEST_P(CacheStoreContract, PutReplacesAndAnEntryAlreadyOverIsNotStoredAndReplacesNothing) {
  ASSERT_THAT(store_->Put("user:1", Entry("old", Seconds(30))), IsOk());
  ASSERT_THAT(store_->Put("user:1", Entry("newer", Seconds(30))), IsOk());
  EXPECT_EQ(ValueOf(*store_, "user:1"), "newer");
  EXPECT_THAT(store_->Put("user:1", Entry("over", Seconds(0))), IsOk());
  EXPECT_EQ(ValueOf(*store_, "user:1"), "newer");
  EXPECT_EQ(*store_->CountByPrefix(""), 1u);
}

TEST_P(CacheStoreContract, RefusesBadKeysAndWindowsOutOfOrderByName) {
  EXPECT_THAT(store_->Put("", Entry("v")),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("key is empty")));
  EXPECT_THAT(store_->Get(std::string(1025, 'k')).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("1025 bytes")));
  EXPECT_THAT(store_->Erase(std::string("a\0b", 3)).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("NUL")));
  CacheEntry e = Entry("v");
  e.stale_until = e.fresh_until - Seconds(1);
  EXPECT_THAT(store_->Put("k", e),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("stale_until is before")));
  e = Entry("v");
  e.error_until = e.fresh_until - Seconds(1);
  EXPECT_THAT(store_->Put("k", e),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("error_until is before")));
  EXPECT_THAT(store_->Put(std::string(1024, 'k'), Entry("v")), IsOk());
  EXPECT_EQ(*store_->CountByPrefix(""), 1u);
}

TEST_P(CacheStoreContract, ErasesByKeyAndByPrefixAndCountsLiveEntries) {
  for (const char* k : {"user:1", "user:2", "user:3", "order:1"}) {
    ASSERT_THAT(store_->Put(k, Entry(k)), IsOk());
  }
  EXPECT_EQ(*store_->CountByPrefix("user:"), 3u);
  EXPECT_EQ(*store_->Erase("user:1"), true);
  EXPECT_EQ(*store_->Erase("user:1"), false);
  EXPECT_EQ(*store_->EraseByPrefix("user:"), 2u);
  EXPECT_EQ(*store_->CountByPrefix("user:"), 0u);
  EXPECT_EQ(ValueOf(*store_, "order:1"), "order:1");
  EXPECT_THAT(store_->EraseByPrefix("").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("prefix is empty")));
  EXPECT_EQ(*store_->CountByPrefix(""), 1u);
}

TEST_P(CacheStoreContract, ExpiredEntriesCountNowhere) {
  ASSERT_THAT(store_->Put("user:1", Entry("1", Seconds(1))), IsOk());
  ASSERT_THAT(store_->Put("user:2", Entry("2", Seconds(100))), IsOk());
  clock_->Advance(Seconds(2));
  EXPECT_EQ(*store_->CountByPrefix("user:"), 1u);
  EXPECT_EQ(*store_->Erase("user:1"), false);
  ASSERT_THAT(store_->Put("user:3", Entry("3", Seconds(1))), IsOk());
  clock_->Advance(Seconds(2));
  EXPECT_EQ(*store_->EraseByPrefix("user:"), 1u);
}

TEST_P(CacheStoreContract, ConcurrentPutsGetsAndErasesAreSafe) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string key = "k:" + std::to_string((i * 7 + t) % 40);
        if (i % 3 == 0) {
          EXPECT_THAT(store_->Put(key, Entry(key)), IsOk());
        } else if (i % 17 == 0) {
          EXPECT_THAT(store_->Erase(key).status(), IsOk());
        } else {
          Result<std::optional<CacheEntry>> got = store_->Get(key);
          EXPECT_THAT(got.status(), IsOk());
          if (got.ok() && *got) {
            EXPECT_EQ((*got)->value, key);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(*store_->CountByPrefix("k:"), 40u);
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
