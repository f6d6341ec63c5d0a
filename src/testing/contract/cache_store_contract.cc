// CacheStore contract (jobpact/cache_store.h, SPEC 10): every promise of
// the header, and what jobpact/testing/cache_store_contract.h pins down
// beyond it, on a ManualClock with no sleeps.
#include "jobpact/testing/cache_store_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace testing {

int contract_internal::LinkCacheStoreSuites() { return 0; }

void CacheStoreContract::SetUp() {
  clock_ = std::make_shared<ManualClock>();
  ASSERT_TRUE(GetParam().make) << "factory " << GetParam().name << " has no make()";
  store_ = GetParam().make(clock_);
  if (store_ == nullptr) GTEST_SKIP() << GetParam().name << ": backend unavailable";
}

CacheEntry CacheStoreContract::Entry(std::string value, Duration fresh, Duration stale,
                                     Duration error) const {
  CacheEntry e;
  e.value = std::move(value);
  e.fresh_until = Now() + fresh;
  e.stale_until = e.fresh_until + stale;
  e.error_until = e.fresh_until + error;
  e.as_of = Now() - Seconds(61) - std::chrono::microseconds(250001);
  e.stored_at = Now();
  e.load_duration = Millis(1234) + std::chrono::microseconds(567);
  return e;
}

void CacheStoreContract::MustPut(const std::string& key, const CacheEntry& entry) {
  EXPECT_THAT(store_->Put(key, entry), IsOk()) << "Put(" << key << ")";
}

std::string CacheStoreContract::ValueOf(const std::string& key) {
  Result<std::optional<CacheEntry>> r = store_->Get(key);
  EXPECT_THAT(r.status(), IsOk()) << "Get(" << key << ")";
  if (!r.ok()) return r.status().ToString();
  return r->has_value() ? (*r)->value : "<none>";
}

long long CacheStoreContract::Count(const std::string& prefix) {
  Result<std::size_t> r = store_->CountByPrefix(prefix);
  EXPECT_THAT(r.status(), IsOk()) << "CountByPrefix(" << prefix << ")";
  return r.ok() ? static_cast<long long>(*r) : -1;
}

namespace {

using std::chrono::microseconds;
using ::testing::HasSubstr;

// Every byte value, so that a store which escapes, trims or re-encodes
// anything is caught.
std::string AllBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

void ExpectSameEntry(const CacheEntry& got, const CacheEntry& want) {
  EXPECT_EQ(got.value, want.value);
  EXPECT_EQ(got.not_found, want.not_found);
  EXPECT_EQ(got.fresh_until, want.fresh_until);
  EXPECT_EQ(got.stale_until, want.stale_until);
  EXPECT_EQ(got.error_until, want.error_until);
  EXPECT_EQ(got.as_of, want.as_of);
  EXPECT_EQ(got.stored_at, want.stored_at);
  EXPECT_EQ(got.load_duration, want.load_duration);
  EXPECT_EQ(got.expires_at(), want.expires_at());
}

TEST_P(CacheStoreContract, HasAName) { EXPECT_FALSE(store_->Name().empty()); }

TEST_P(CacheStoreContract, GetOfAKeyNeverPutIsEmpty) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> got, store_->Get("user:1"));
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(Count(""), 0);
}

TEST_P(CacheStoreContract, GetAfterPutReturnsEveryFieldToTheMicrosecond) {
  CacheEntry e;
  e.value = R"({"name":"Ada"})";
  e.fresh_until = Now() + Seconds(30) + microseconds(1);
  e.stale_until = Now() + Seconds(90) + microseconds(999999);
  e.error_until = Now() + Seconds(3600) + microseconds(7);
  e.as_of = Now() - Seconds(5) - microseconds(123457);
  e.stored_at = Now() - microseconds(3);
  e.load_duration = microseconds(1234567);
  ASSERT_THAT(store_->Put("user:1", e), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> got, store_->Get("user:1"));
  ASSERT_TRUE(got.has_value());
  ExpectSameEntry(*got, e);
  // Reading does not change it.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> again, store_->Get("user:1"));
  ASSERT_TRUE(again.has_value());
  ExpectSameEntry(*again, e);
}

TEST_P(CacheStoreContract, NotFoundEntriesAreKeptAsSuch) {
  CacheEntry negative = Entry("", Seconds(10));
  negative.not_found = true;
  MustPut("user:404", negative);
  MustPut("user:1", Entry("Ada"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> got, store_->Get("user:404"));
  ASSERT_TRUE(got.has_value()) << "a cached 'no such thing' is an entry, not a miss";
  ExpectSameEntry(*got, negative);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> positive, store_->Get("user:1"));
  ASSERT_TRUE(positive.has_value());
  EXPECT_FALSE(positive->not_found);
  EXPECT_EQ(Count("user:"), 2);
}

TEST_P(CacheStoreContract, PutReplacesTheWholeEntry) {
  CacheEntry first = Entry("v1", Seconds(60), Seconds(60), Seconds(600));
  MustPut("k", first);
  Advance(Seconds(1));
  CacheEntry second = Entry("v2", Seconds(5));
  second.not_found = false;
  second.as_of = Now() - microseconds(10);
  MustPut("k", second);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> got, store_->Get("k"));
  ASSERT_TRUE(got.has_value());
  ExpectSameEntry(*got, second);
  EXPECT_EQ(Count(""), 1);
  // Kept until the second entry's expiry, not the first's.
  Advance(Seconds(5));
  EXPECT_EQ(ValueOf("k"), "<none>");
}

TEST_P(CacheStoreContract, EntryIsKeptUntilItsLastWindowEndsAndNoLonger) {
  struct Shape {
    const char* name;
    Duration fresh, stale, error;
  };
  const Shape shapes[] = {
      {"fresh only", Seconds(10), Duration(0), Duration(0)},
      {"stale window last", Seconds(10), Seconds(30), Seconds(20)},
      {"error window last", Seconds(10), Seconds(5), Seconds(300)},
  };
  int i = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.name);
    const std::string key = "shape:" + std::to_string(i++);
    const CacheEntry e = Entry(s.name, s.fresh, s.stale, s.error);
    MustPut(key, e);
    const Duration life = e.expires_at() - Now();
    EXPECT_EQ(life, s.fresh + std::max(s.stale, s.error));
    Advance(life - microseconds(1));
    EXPECT_EQ(ValueOf(key), s.name) << "one microsecond before expires_at()";
    EXPECT_EQ(Count("shape:"), 1);
    Advance(microseconds(1));
    EXPECT_EQ(ValueOf(key), "<none>") << "at expires_at()";
    EXPECT_EQ(Count("shape:"), 0);
    JOBPACT_ASSERT_OK_AND_ASSIGN(bool erased, store_->Erase(key));
    EXPECT_FALSE(erased) << "an expired entry is not there";
  }
}

TEST_P(CacheStoreContract, ExpiryFollowsTheStoresClockNotTheRealOne) {
  // The ManualClock is at 2026-01-01; an hour later is long past in real
  // time, so a store reading the real clock would call this entry expired.
  MustPut("k", Entry("v", Seconds(3600)));
  EXPECT_EQ(ValueOf("k"), "v");
  // And moving the clock back (another process's skew) keeps it live.
  clock_->SetTime(Now() - Seconds(86400));
  EXPECT_EQ(ValueOf("k"), "v");
  clock_->SetTime(Now() + Seconds(86400 + 3600));
  EXPECT_EQ(ValueOf("k"), "<none>");
}

TEST_P(CacheStoreContract, PutOfAnExpiredEntryStoresNothingAndReplacesNothing) {
  CacheEntry dead = Entry("dead", Seconds(10));
  dead.fresh_until = dead.stale_until = dead.error_until = Now();  // expires_at() == now.
  EXPECT_THAT(store_->Put("new", dead), IsOk());
  EXPECT_EQ(ValueOf("new"), "<none>");
  EXPECT_EQ(Count(""), 0);

  MustPut("live", Entry("kept"));
  EXPECT_THAT(store_->Put("live", dead), IsOk());
  EXPECT_EQ(ValueOf("live"), "kept") << "an expired Put replaces nothing";
  CacheEntry older = dead;
  older.fresh_until = older.stale_until = older.error_until = Now() - Seconds(1);
  EXPECT_THAT(store_->Put("live", older), IsOk());
  EXPECT_EQ(ValueOf("live"), "kept");
  EXPECT_EQ(Count(""), 1);
}

TEST_P(CacheStoreContract, WindowsOutOfOrderAreRefused) {
  MustPut("k", Entry("kept"));
  CacheEntry stale_first = Entry("bad", Seconds(60));
  stale_first.stale_until = stale_first.fresh_until - microseconds(1);
  EXPECT_THAT(store_->Put("k", stale_first),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("stale_until")));
  CacheEntry error_first = Entry("bad", Seconds(60));
  error_first.error_until = error_first.fresh_until - Seconds(1);
  EXPECT_THAT(store_->Put("k", error_first),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("error_until")));
  EXPECT_THAT(store_->Put("other", error_first), StatusIs(StatusCode::kInvalidArgument));
  // Checked before the expiry: an expired entry out of order is refused too.
  CacheEntry past = Entry("bad", -Seconds(10));
  past.stale_until = past.fresh_until - Seconds(1);
  EXPECT_THAT(store_->Put("k", past), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(ValueOf("k"), "kept");
  EXPECT_EQ(ValueOf("other"), "<none>");
  // Equal windows are in order.
  EXPECT_THAT(store_->Put("equal", Entry("ok", Seconds(1))), IsOk());
  EXPECT_EQ(ValueOf("equal"), "ok");
}

TEST_P(CacheStoreContract, BadKeysAreRefusedNamingTheProblem) {
  const std::string too_long(1025, 'k');
  const std::string with_nul("user\0:1", 7);
  struct Bad {
    std::string key;
    const char* names;
  };
  const Bad bads[] = {{"", "empty"}, {too_long, "1024"}, {with_nul, "NUL"}};
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.names);
    EXPECT_THAT(store_->Get(b.key).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(b.names)));
    EXPECT_THAT(store_->Put(b.key, Entry("v")),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(b.names)));
    EXPECT_THAT(store_->Erase(b.key).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(b.names)));
  }
  EXPECT_EQ(Count(""), 0) << "nothing stored by a refused Put";
  // The bound itself is fine.
  const std::string longest(1024, 'k');
  MustPut(longest, Entry("longest"));
  EXPECT_EQ(ValueOf(longest), "longest");
}

TEST_P(CacheStoreContract, AnyByteButNulMayBeInAKey) {
  const std::string everything = AllBytes().substr(1);  // 0x01..0xFF
  const std::vector<std::string> keys = {
      everything, "with space", "line\nbreak", "}:lock:x",    "{other}:cache:k",  "*",
      "user:*",   "\xff",       "\xff\xff",    "caf\xc3\xa9", "jobpact:{x}:job:1"};
  for (std::size_t i = 0; i < keys.size(); ++i) MustPut(keys[i], Entry("v" + std::to_string(i)));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(ValueOf(keys[i]), "v" + std::to_string(i)) << "key #" << i;
  }
  EXPECT_EQ(Count(""), static_cast<long long>(keys.size()));
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool erased, store_->Erase(everything));
  EXPECT_TRUE(erased);
  EXPECT_EQ(ValueOf(everything), "<none>");
  EXPECT_EQ(Count(""), static_cast<long long>(keys.size()) - 1);
}

TEST_P(CacheStoreContract, ValuesAreBinarySafe) {
  const std::string with_nuls("a\0b\0\0c\r\n", 8);
  std::string big(std::size_t{1} << 20, '\0');  // 1 MiB of every byte.
  std::mt19937 rng(11);
  for (char& c : big) c = static_cast<char>(rng() & 0xFF);
  MustPut("nuls", Entry(with_nuls));
  MustPut("all", Entry(AllBytes()));
  MustPut("big", Entry(big));
  MustPut("empty", Entry(""));
  EXPECT_EQ(ValueOf("nuls"), with_nuls);
  EXPECT_EQ(ValueOf("all"), AllBytes());
  const std::string got = ValueOf("big");
  EXPECT_EQ(got.size(), big.size());
  EXPECT_TRUE(got == big) << "the 1 MiB value came back changed";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> empty, store_->Get("empty"));
  ASSERT_TRUE(empty.has_value()) << "an empty value is a value";
  EXPECT_EQ(empty->value, "");
  EXPECT_FALSE(empty->not_found);
}

TEST_P(CacheStoreContract, EraseSaysWhetherAnEntryWasThere) {
  MustPut("a", Entry("1"));
  MustPut("ab", Entry("2"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool first, store_->Erase("a"));
  EXPECT_TRUE(first);
  EXPECT_EQ(ValueOf("a"), "<none>");
  EXPECT_EQ(ValueOf("ab"), "2") << "Erase takes one key, not a prefix";
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool again, store_->Erase("a"));
  EXPECT_FALSE(again);
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool never, store_->Erase("never"));
  EXPECT_FALSE(never);
  // A key erased can be put again.
  MustPut("a", Entry("3"));
  EXPECT_EQ(ValueOf("a"), "3");
  EXPECT_EQ(Count("a"), 2);
}

TEST_P(CacheStoreContract, EraseByPrefixRemovesExactlyTheKeysStartingWithIt) {
  const std::vector<std::string> hit = {"user:1", "user:2", "user:10", "user:"};
  const std::vector<std::string> kept = {"users:1", "user",   "account:user:1",
                                         "xuser:1", "User:1", "use"};
  for (const auto& k : hit) MustPut(k, Entry("h"));
  for (const auto& k : kept) MustPut(k, Entry("k"));
  EXPECT_EQ(Count("user:"), 4);
  EXPECT_EQ(Count("user"), 6);
  EXPECT_EQ(Count(""), 10);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t removed, store_->EraseByPrefix("user:"));
  EXPECT_EQ(removed, 4u);
  for (const auto& k : hit) EXPECT_EQ(ValueOf(k), "<none>") << k;
  for (const auto& k : kept) EXPECT_EQ(ValueOf(k), "k") << k;
  EXPECT_EQ(Count("user:"), 0);
  EXPECT_EQ(Count(""), 6);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t none, store_->EraseByPrefix("user:"));
  EXPECT_EQ(none, 0u);
  // The whole key is a prefix of itself.
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t one, store_->EraseByPrefix("account:user:1"));
  EXPECT_EQ(one, 1u);
}

TEST_P(CacheStoreContract, PrefixesAreLiteralBytesNotPatterns) {
  const std::vector<std::string> keys = {"a*b:1",
                                         "a*b:2",
                                         "aXb:1",
                                         "a?c",
                                         "abc",
                                         "a[b]:1",
                                         "ab]:1",
                                         "b:1",
                                         "100%:x",
                                         "100%y",
                                         "1000",
                                         "a_b",
                                         "aXb",
                                         "a.b",
                                         "azb",
                                         "a\\b",
                                         "a\\\\b",
                                         "\xff\xff"
                                         "1",
                                         "\xff\xff\xff",
                                         "\xff",
                                         "\xfe\xff",
                                         "^a",
                                         "a$"};
  for (const auto& k : keys) MustPut(k, Entry(k));
  struct Case {
    std::string prefix;
    long long matches;
  };
  const Case cases[] = {
      {"a*", 2},                      // a*b:1, a*b:2 (not aXb:1, abc, ...)
      {"a?", 1},                      // a?c
      {"a[b]", 1},                    // a[b]:1 (not ab]:1 or b:1)
      {"a[", 1},    {"100%", 2},      // 100%:x, 100%y (not 1000)
      {"a_", 1},                      // a_b (not aXb, azb)
      {"a.", 1},                      // a.b
      {"a\\", 2},                     // a\b and a\\b
      {"a\\\\", 1}, {"\xff\xff", 2},  // \xff\xff1 and \xff\xff\xff (the top of the byte range)
      {"\xff", 3},  {"^", 1},        {"a$", 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("prefix \"" + c.prefix + "\"");
    EXPECT_EQ(Count(c.prefix), c.matches);
  }
  long long left = static_cast<long long>(keys.size());
  for (const Case& c : cases) {
    SCOPED_TRACE("prefix \"" + c.prefix + "\"");
    const long long before = Count(c.prefix);
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t removed, store_->EraseByPrefix(c.prefix));
    EXPECT_EQ(static_cast<long long>(removed), before);
    left -= before;
    EXPECT_EQ(Count(""), left);
  }
  // What no case's prefix starts.
  for (const char* k : {"aXb:1", "abc", "ab]:1", "b:1", "1000", "aXb", "azb", "\xfe\xff"}) {
    EXPECT_EQ(ValueOf(k), k) << k;
  }
}

TEST_P(CacheStoreContract, EmptyPrefixIsRefusedForEraseAndMeansEverythingForCount) {
  MustPut("a", Entry("1"));
  MustPut("b", Entry("2"));
  EXPECT_THAT(store_->EraseByPrefix("").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_EQ(Count(""), 2) << "a refused flush removes nothing";
  EXPECT_EQ(ValueOf("a"), "1");
}

TEST_P(CacheStoreContract, CountAndEraseByPrefixSeeLiveEntriesOnly) {
  MustPut("p:short", Entry("s", Seconds(5)));
  MustPut("p:long1", Entry("l", Seconds(60)));
  MustPut("p:long2", Entry("l", Seconds(30), Seconds(30)));
  EXPECT_EQ(Count("p:"), 3);
  Advance(Seconds(5));
  EXPECT_EQ(Count("p:"), 2);
  EXPECT_EQ(Count(""), 2);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t removed, store_->EraseByPrefix("p:"));
  EXPECT_EQ(removed, 2u) << "the dry run's count (CountByPrefix) is what is removed";
  EXPECT_EQ(Count(""), 0);
  // Keys removed by prefix can be put again.
  MustPut("p:short", Entry("again"));
  EXPECT_EQ(ValueOf("p:short"), "again");
  EXPECT_EQ(Count("p:"), 1);
}

TEST_P(CacheStoreContract, EraseByPrefixRemovesThousandsOfEntries) {
  constexpr int kEntries = 2500;
  for (int i = 0; i < kEntries; ++i) MustPut("bulk:" + std::to_string(i), Entry("v"));
  MustPut("bulk", Entry("kept"));
  MustPut("bulkier", Entry("kept"));
  EXPECT_EQ(Count("bulk:"), kEntries);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t removed, store_->EraseByPrefix("bulk:"));
  EXPECT_EQ(removed, static_cast<std::size_t>(kEntries));
  EXPECT_EQ(Count("bulk:"), 0);
  EXPECT_EQ(Count(""), 2);
  EXPECT_EQ(ValueOf("bulk:2499"), "<none>");
}

// Every field of an entry written by thread t in round i is derived from
// (t, i), so a reader can tell a whole entry from a torn one.
CacheEntry Derived(TimePoint base, int t, int i) {
  CacheEntry e;
  e.value = "t" + std::to_string(t) + "i" + std::to_string(i) + std::string(64 + i % 200, 'x');
  e.not_found = (i % 7) == 0;
  if (e.not_found) e.value.clear();
  e.fresh_until = base + Seconds(600) + microseconds(t * 1000 + i);
  e.stale_until = e.fresh_until + microseconds(i);
  e.error_until = e.fresh_until + microseconds(t);
  e.as_of = base - microseconds(t * 1000 + i);
  e.stored_at = base + microseconds(i);
  e.load_duration = microseconds(t * 1000 + i);
  return e;
}

bool IsWhole(const CacheEntry& e, TimePoint base) {
  const auto tag = std::chrono::duration_cast<microseconds>(e.load_duration).count();
  const int t = static_cast<int>(tag / 1000);
  const int i = static_cast<int>(tag % 1000);
  const CacheEntry want = Derived(base, t, i);
  return e.value == want.value && e.not_found == want.not_found &&
         e.fresh_until == want.fresh_until && e.stale_until == want.stale_until &&
         e.error_until == want.error_until && e.as_of == want.as_of &&
         e.stored_at == want.stored_at;
}

TEST_P(CacheStoreConcurrencyContract, ConcurrentPutsAndGetsSeeWholeEntries) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 150;
  const TimePoint base = Now();
  std::atomic<int> torn{0}, errors{0}, seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        // A key every thread writes, and one of this thread's own.
        for (const std::string& key : {std::string("shared"), "own:" + std::to_string(t)}) {
          if (!store_->Put(key, Derived(base, t, i)).ok()) ++errors;
          Result<std::optional<CacheEntry>> got = store_->Get(i % 2 ? "shared" : key);
          if (!got.ok()) {
            ++errors;
          } else if (got->has_value()) {
            ++seen;
            if (!IsWhole(**got, base)) ++torn;
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "a Get saw fields of two different Puts";
  EXPECT_EQ(seen.load(), kThreads * kRounds * 2) << "every Get after a Put finds an entry";
  for (int t = 0; t < kThreads; ++t) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<CacheEntry> own,
                                 store_->Get("own:" + std::to_string(t)));
    ASSERT_TRUE(own.has_value());
    EXPECT_EQ(own->load_duration, Derived(base, t, kRounds - 1).load_duration)
        << "thread " << t << "'s last Put is what stays";
  }
  EXPECT_EQ(Count(""), kThreads + 1);
}

TEST_P(CacheStoreConcurrencyContract, EraseByPrefixRacingPutsLeavesCountsAndEntriesAgreeing) {
  constexpr int kWriters = 4;
  constexpr int kKeys = 100;
  std::atomic<bool> done{false};
  std::atomic<int> errors{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kKeys; ++i) {
        if (!store_->Put("race:" + std::to_string(t) + ":" + std::to_string(i), Entry("v")).ok()) {
          ++errors;
        }
      }
    });
  }
  std::thread eraser([&] {
    while (!done.load()) {
      if (!store_->EraseByPrefix("race:").ok()) ++errors;
    }
  });
  for (std::thread& th : writers) th.join();
  done = true;
  eraser.join();
  EXPECT_EQ(errors.load(), 0);
  long long live = 0;
  for (int t = 0; t < kWriters; ++t) {
    for (int i = 0; i < kKeys; ++i) {
      if (ValueOf("race:" + std::to_string(t) + ":" + std::to_string(i)) == "v") ++live;
    }
  }
  EXPECT_EQ(Count("race:"), live) << "the count and the entries disagree after the race";
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::size_t removed, store_->EraseByPrefix("race:"));
  EXPECT_EQ(static_cast<long long>(removed), live);
  EXPECT_EQ(Count(""), 0);
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
