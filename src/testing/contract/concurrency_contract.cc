// Concurrency contract: many threads on one store with no external
// synchronization (the first rule of every backend header).
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "jobpact/testing/backend_contract.h"
#include "jobpact/testing/matchers.h"
#include "src/testing/contract/suite_anchors.h"

namespace jobpact {
namespace testing {

// Links this file into every program that instantiates the suite.
int contract_internal::ConcurrencyContractAnchor() { return 0; }

namespace {

// Starts `n` threads running body(i) at the same moment and joins them.
template <typename Body>
void RunTogether(int n, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      body(i);
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
}

TEST_P(ConcurrencyContract, EightThreadsDequeueEveryJobExactlyOnce) {
  if (queue_ == nullptr) GTEST_SKIP() << "no QueueBackend";
  constexpr int kJobs = 2000;
  constexpr int kThreads = 8;
  std::vector<Envelope> envs;
  for (int i = 0; i < kJobs; ++i) {
    envs.push_back(MakeJob("job_" + std::to_string(100000 + i), "t", i % 3, i % 2 ? "q1" : "q2"));
  }
  ASSERT_THAT(queue_->EnqueueBatch(envs, {}).status(), IsOk());

  std::vector<std::vector<std::string>> got(kThreads);
  std::atomic<int> errors{0};
  RunTogether(kThreads, [&](int t) {
    DequeueRequest req;
    req.worker_id = "w" + std::to_string(t);
    req.max_jobs = 1 + t % 4;  // Mix single and batch dequeues.
    if (t % 3 == 1) req.queues = {"q1"};
    if (t % 3 == 2) req.queues = {"q2", "q1"};
    for (;;) {
      Result<std::vector<Delivery>> r = queue_->Dequeue(req);
      if (!r.ok()) {
        ++errors;
        return;
      }
      if (r->empty()) return;
      for (Delivery& d : *r) {
        got[t].push_back(d.job.envelope.job_id);
        Completion c;
        c.to = JobStatus::kSucceeded;
        c.reason = "succeeded";
        if (!queue_->Complete(d, c).ok()) ++errors;
      }
    }
  });
  EXPECT_EQ(errors.load(), 0);
  std::set<std::string> all;
  std::size_t total = 0;
  for (const auto& ids : got) {
    total += ids.size();
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(total, static_cast<std::size_t>(kJobs)) << "a job was delivered twice or lost";
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kJobs));
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, admin_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], kJobs);
}

TEST_P(ConcurrencyContract, ConcurrentEnqueueOfOneDedupKeyStoresOneJob) {
  if (queue_ == nullptr) GTEST_SKIP() << "no QueueBackend";
  constexpr int kThreads = 16;
  std::atomic<int> stored{0}, duplicates{0}, errors{0};
  RunTogether(kThreads, [&](int t) {
    Envelope env = MakeJob("job_" + std::to_string(t));
    env.dedup_key = "same";
    Result<EnqueueResult> r = queue_->Enqueue(env, {});
    if (!r.ok()) {
      ++errors;
    } else if (r->duplicate) {
      ++duplicates;
    } else {
      ++stored;
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(stored.load(), 1);
  EXPECT_EQ(duplicates.load(), kThreads - 1);
}

TEST_P(ConcurrencyContract, SixteenThreadsClaimOneKeyExactlyOneWins) {
  if (idem_ == nullptr) GTEST_SKIP() << "no IdempotencyStore";
  constexpr int kThreads = 16;
  std::atomic<int> claimed{0}, in_progress{0}, errors{0};
  RunTogether(kThreads, [&](int t) {
    Result<ClaimOutcome> r = idem_->Claim("inv:ord_1", "w" + std::to_string(t), Seconds(45));
    if (!r.ok()) {
      ++errors;
    } else if (r->kind == ClaimOutcome::Kind::kClaimed) {
      ++claimed;
    } else if (r->kind == ClaimOutcome::Kind::kInProgress) {
      ++in_progress;
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(claimed.load(), 1);
  EXPECT_EQ(in_progress.load(), kThreads - 1);
}

TEST_P(ConcurrencyContract, SixteenThreadsAcquireOneLockExactlyOneWins) {
  if (locks_ == nullptr) GTEST_SKIP() << "no LockStore";
  constexpr int kThreads = 16;
  std::atomic<int> won{0}, lost{0}, errors{0};
  RunTogether(kThreads, [&](int t) {
    Result<LockLease> r = locks_->Acquire("order:1", "w" + std::to_string(t), Seconds(30));
    if (r.ok()) {
      ++won;
    } else if (r.status().code() == StatusCode::kAborted) {
      ++lost;
    } else {
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(lost.load(), kThreads - 1);
}

TEST_P(ConcurrencyContract, ConcurrentAcquisitionsGetDistinctIncreasingTokens) {
  if (locks_ == nullptr) GTEST_SKIP() << "no LockStore";
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  std::vector<std::vector<std::uint64_t>> tokens(kThreads);
  std::atomic<int> errors{0};
  RunTogether(kThreads, [&](int t) {
    for (int i = 0; i < kPerThread; ++i) {
      std::string key = "k" + std::to_string(t) + "_" + std::to_string(i);
      Result<LockLease> r = locks_->Acquire(key, "w" + std::to_string(t), Seconds(30));
      if (!r.ok()) {
        ++errors;
        continue;
      }
      tokens[t].push_back(r->fencing_token);
    }
  });
  EXPECT_EQ(errors.load(), 0);
  std::set<std::uint64_t> all;
  for (const auto& ts : tokens) {
    for (std::size_t i = 1; i < ts.size(); ++i) EXPECT_GT(ts[i], ts[i - 1]);
    all.insert(ts.begin(), ts.end());
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace testing
}  // namespace jobpact
