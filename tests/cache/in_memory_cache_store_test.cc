// The in-memory CacheStore (MakeInMemoryCacheStore) beyond the CacheStore
// contract it passes (tests/contract/in_memory_contract_test.cc, which also
// runs it from several threads): the entry and byte bounds with LRU
// eviction.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "jobpact/backend.h"
#include "jobpact/cache_store.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

class InMemoryCacheStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<CacheStore> Make(InMemoryCacheStoreOptions options = {}) {
    Result<std::shared_ptr<CacheStore>> store = MakeInMemoryCacheStore(clock_, options);
    EXPECT_THAT(store.status(), IsOk());
    return store.ok() ? *store : nullptr;
  }

  // An entry fresh for `fresh`, then stale for `stale` more.
  CacheEntry Entry(std::string value, Duration fresh = Seconds(10), Duration stale = Seconds(0)) {
    CacheEntry e;
    e.value = std::move(value);
    e.fresh_until = clock_->Now() + fresh;
    e.stale_until = e.fresh_until + stale;
    e.error_until = e.fresh_until;
    e.as_of = clock_->Now();
    e.stored_at = clock_->Now();
    return e;
  }

  std::optional<std::string> ValueOf(CacheStore& store, std::string_view key) {
    Result<std::optional<CacheEntry>> got = store.Get(key);
    EXPECT_THAT(got.status(), IsOk());
    if (!got.ok() || !*got) return std::nullopt;
    return (*got)->value;
  }

  std::shared_ptr<testing::ManualClock> clock_ = std::make_shared<testing::ManualClock>();
};

TEST_F(InMemoryCacheStoreTest, RefusesABoundOfZeroByName) {
  EXPECT_THAT(MakeInMemoryCacheStore(clock_, {0, 1}).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_entries")));
  EXPECT_THAT(MakeInMemoryCacheStore(clock_, {1, 0}).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_bytes")));
}

TEST_F(InMemoryCacheStoreTest, PastMaxEntriesTheLeastRecentlyUsedIsEvicted) {
  auto store = Make({/*max_entries=*/3, /*max_bytes=*/1 << 20});
  ASSERT_THAT(store->Put("a", Entry("1")), IsOk());
  ASSERT_THAT(store->Put("b", Entry("2")), IsOk());
  ASSERT_THAT(store->Put("c", Entry("3")), IsOk());
  EXPECT_EQ(ValueOf(*store, "a"), "1");  // Now "b" is the least recently used.
  ASSERT_THAT(store->Put("d", Entry("4")), IsOk());
  EXPECT_EQ(*store->CountByPrefix(""), 3u);
  EXPECT_EQ(ValueOf(*store, "b"), std::nullopt);
  EXPECT_EQ(ValueOf(*store, "a"), "1");
  EXPECT_EQ(ValueOf(*store, "c"), "3");
  EXPECT_EQ(ValueOf(*store, "d"), "4");
  // Replacing a key does not count twice.
  ASSERT_THAT(store->Put("d", Entry("5")), IsOk());
  EXPECT_EQ(*store->CountByPrefix(""), 3u);
  EXPECT_EQ(ValueOf(*store, "a"), "1");
}

TEST_F(InMemoryCacheStoreTest,
       PastMaxBytesTheLeastRecentlyUsedIsEvictedAndAnOversizedEntryRefused) {
  // Each entry costs its key and value plus a fixed overhead (under 1 KiB).
  auto store = Make({/*max_entries=*/100, /*max_bytes=*/5000});
  const std::string kilo(1000, 'x');
  ASSERT_THAT(store->Put("a", Entry(kilo)), IsOk());
  ASSERT_THAT(store->Put("b", Entry(kilo)), IsOk());
  ASSERT_THAT(store->Put("c", Entry(kilo)), IsOk());
  EXPECT_TRUE(ValueOf(*store, "a").has_value());  // "b" is now the oldest.
  ASSERT_THAT(store->Put("d", Entry(kilo + kilo)), IsOk());
  EXPECT_EQ(ValueOf(*store, "b"), std::nullopt);
  EXPECT_TRUE(ValueOf(*store, "a").has_value());
  EXPECT_TRUE(ValueOf(*store, "d").has_value());
  EXPECT_THAT(store->Put("huge", Entry(std::string(5000, 'y'))),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("at most 5000")));
  EXPECT_TRUE(ValueOf(*store, "a").has_value());  // Nothing evicted for it.
}

TEST_F(InMemoryCacheStoreTest, TheInMemoryBundleCarriesACacheStore) {
  BackendBundle b = InMemoryBackend(clock_);
  ASSERT_NE(b.cache, nullptr);
  EXPECT_EQ(b.cache->Name(), "in_memory");
  ASSERT_THAT(b.cache->Put("k", Entry("v")), IsOk());
  EXPECT_EQ(ValueOf(*b.cache, "k"), "v");
}

}  // namespace
}  // namespace jobpact
