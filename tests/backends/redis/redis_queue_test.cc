// What the conformance suite cannot see of the Redis queue store: several
// processes' stores on one namespace, names that try to reach another
// namespace, stats from counters, big batches, the script cache flushed
// mid-run, the Redis transactional effect, and the exact time order kept
// by millisecond zset scores.
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <chrono>
#include <map>
#include <random>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "jobpact/job.h"
#include "jobpact/redis/redis_effect.h"
#include "jobpact/store_backend.h"
#include "jobpact/testing/manual_clock.h"
#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"
#include "src/backends/redis/queue_backend.h"
#include "src/backends/redis/stores.h"
#include "tests/backends/redis/redis_test_server.h"

namespace jobpact {
namespace {

using redis_internal::MakeRedisQueueBackend;
using redis_internal::RedisClient;
using redis_internal::RedisKeys;
using redis_internal::Reply;
using testing::IsOk;
using testing::ManualClock;
using testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every key of the server matching `pattern`.
std::vector<std::string> Keys(RedisClient& client, const std::string& pattern) {
  std::vector<std::string> out;
  std::string cursor = "0";
  do {
    auto r = client.Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (!r.ok() || r->elements.size() != 2) break;
    cursor = r->elements[0].str;
    for (const Reply& k : r->elements[1].elements) out.push_back(k.str);
  } while (cursor != "0");
  return out;
}

// A redis-server of this test's own with appendonly yes and appendfsync
// always (every acknowledged write is on disk), restartable on the same
// port and directory. Killed (SIGKILL, by PID) by Kill() and the destructor.
class DurableRedisServer {
 public:
  ~DurableRedisServer() {
    Kill();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // "" or what went wrong.
  std::string Start(int port) {
    if (dir_.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_raof_XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) return "mkdtemp failed";
      dir_ = tmpl;
    }
    port_ = port;
    const std::string p = std::to_string(port);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const std::string log = dir_ + "/redis.log";
      execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--dir",
             dir_.c_str(), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--daemonize", "no", "--logfile", log.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 250; ++i) {
      auto opts = redis::ParseRedisUrl("redis://127.0.0.1:" + p);
      if (opts.ok()) {
        auto c = RedisClient::Connect(*opts);
        if (c.ok()) {
          auto r = (*c)->Command({"PING"});
          if (r.ok() && r->str == "PONG") return "";
        }
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "redis-server exited at start (see " + dir_ + "/redis.log)";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "redis-server did not answer PING within 5 s";
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

class RedisQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JOBPACT_REDIS_URL_OR_SKIP(url);
    options_ = redis_testing::TestOptions();
    JOBPACT_ASSERT_OK_AND_ASSIGN(client_, RedisClient::Connect(options_));
    JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys keys, RedisKeys::Create(options_.key_namespace));
    prefix_ = keys.prefix();
    queue_ = MakeRedisQueueBackend(client_, keys, clock_);
    ASSERT_NE(queue_, nullptr);
  }
  void TearDown() override {
    if (client_ == nullptr) return;
    for (const std::string& ns : {prefix_, other_prefix_}) {
      if (ns.empty()) continue;
      for (const std::string& k : Keys(*client_, ns + "*")) (void)client_->Command({"DEL", k});
    }
  }

  // Another store on the same namespace, as another process has: its own
  // connection pool and clock object.
  std::shared_ptr<StoreBackend> SecondStore() {
    auto client = RedisClient::Connect(options_);
    EXPECT_THAT(client.status(), IsOk());
    if (!client.ok()) return nullptr;
    auto keys = RedisKeys::Create(options_.key_namespace);
    return MakeRedisQueueBackend(*client, *keys, clock_);
  }

  Envelope Job(std::string id, std::string type = "t", int priority = 0,
               std::string queue = "default") {
    Envelope env;
    env.job_id = std::move(id);
    env.job_type = std::move(type);
    env.priority = priority;
    env.queue = std::move(queue);
    PrepareForEnqueue(env, clock_->Now());
    return env;
  }

  std::string Put(const Envelope& env) {
    auto r = queue_->Enqueue(env, {});
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? r->job_id : std::string();
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  redis::RedisOptions options_;
  std::shared_ptr<RedisClient> client_;
  std::string prefix_;
  std::string other_prefix_;
  std::shared_ptr<StoreBackend> queue_;
};

TEST_F(RedisQueueTest, TwoStoresOnOneNamespaceShareTheQueueAndLeaseEachJobOnce) {
  std::shared_ptr<StoreBackend> other = SecondStore();
  ASSERT_NE(other, nullptr);
  constexpr int kJobs = 600;
  std::vector<Envelope> envs;
  for (int i = 0; i < kJobs; ++i) envs.push_back(Job("job_" + std::to_string(10000 + i)));
  ASSERT_THAT(queue_->EnqueueBatch(envs, {}).status(), IsOk());
  // Visible from the other store at once.
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord rec, other->Get("job_10000"));
  EXPECT_EQ(rec.status, JobStatus::kQueued);

  std::vector<std::string> got[2];
  std::atomic<int> errors{0};
  auto drain = [&](StoreBackend* store, int slot) {
    DequeueRequest req;
    req.worker_id = "w" + std::to_string(slot);
    req.max_jobs = 7;
    for (;;) {
      auto batch = store->Dequeue(req);
      if (!batch.ok()) {
        ++errors;
        return;
      }
      if (batch->empty()) return;
      for (Delivery& d : *batch) {
        got[slot].push_back(d.lease.job_id);
        Completion done;
        done.to = JobStatus::kSucceeded;
        done.reason = "succeeded";
        if (!store->Complete(d, done).ok()) ++errors;
      }
    }
  };
  std::thread a(drain, queue_.get(), 0);
  std::thread b(drain, other.get(), 1);
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
  std::set<std::string> all(got[0].begin(), got[0].end());
  all.insert(got[1].begin(), got[1].end());
  EXPECT_EQ(got[0].size() + got[1].size(), static_cast<std::size_t>(kJobs));  // None twice.
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kJobs));                     // None lost.
  EXPECT_GT(got[0].size(), 0u);
  EXPECT_GT(got[1].size(), 0u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, other->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], kJobs);
  EXPECT_EQ(st.queues["default"].depth, 0);
}

TEST_F(RedisQueueTest, AnIdleWorkerIsWokenByAnotherProcesssEnqueueAndNotByStaleTokens) {
  std::shared_ptr<StoreBackend> other = SecondStore();
  ASSERT_NE(other, nullptr);
  // Nothing ready: the wait times out.
  JOBPACT_ASSERT_OK_AND_ASSIGN(bool woken, queue_->WaitForWork(std::chrono::milliseconds(20)));
  EXPECT_FALSE(woken);

  // A worker of this store waits; the other process enqueues. Whether the
  // enqueue comes before the BLPOP or during it, the wait returns woken (a
  // 30 s bound: a missed wake-up fails the test, never a timing).
  Result<bool> waited = false;
  std::thread waiter([&] { waited = queue_->WaitForWork(std::chrono::seconds(30)); });
  EXPECT_THAT(other->Enqueue(Job("job_w1"), {}).status(), IsOk());
  waiter.join();
  ASSERT_THAT(waited.status(), IsOk());
  EXPECT_TRUE(*waited);

  // A lease of every queue that leaves nothing ready clears the tokens
  // left, so the next wait does not return for a job already taken.
  DequeueRequest all;
  all.max_jobs = 16;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> batch, queue_->Dequeue(all));
  EXPECT_EQ(batch.size(), 1u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, queue_->WaitForWork(std::chrono::milliseconds(20)));
  EXPECT_FALSE(woken);

  // A requeue that makes a job ready wakes too (a retry ready now).
  Completion retry;
  retry.to = JobStatus::kRetryScheduled;
  retry.reason = "unavailable";
  retry.ready_at = clock_->Now();
  ASSERT_THAT(queue_->Complete(batch[0], retry), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(woken, other->WaitForWork(std::chrono::seconds(30)));
  EXPECT_TRUE(woken);
}

TEST_F(RedisQueueTest, AJobReadyOnlyByALaterClockIsPassedOverNotLeasedAndRefused) {
  // Another process whose clock is 2 s ahead enqueues (ready_at = its now).
  auto ahead = std::make_shared<ManualClock>(clock_->Now() + Seconds(2));
  JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys keys, RedisKeys::Create(options_.key_namespace));
  std::shared_ptr<StoreBackend> producer = MakeRedisQueueBackend(client_, keys, ahead);
  Envelope later = Job("job_later");
  PrepareForEnqueue(later, ahead->Now());
  ASSERT_THAT(producer->Enqueue(later, {}).status(), IsOk());
  Put(Job("job_now"));
  // By this store's clock only job_now is ready: the lease takes it and
  // passes over job_later (no INTERNAL error, nothing leased and refused).
  DequeueRequest req;
  req.max_jobs = 16;
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> batch, queue_->Dequeue(req));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].job.envelope.job_id, "job_now");
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, queue_->Get("job_later"));
  EXPECT_EQ(r.status, JobStatus::kQueued);
  // Once this clock reaches its ready time, it is leased.
  clock_->Advance(Seconds(2));
  JOBPACT_ASSERT_OK_AND_ASSIGN(batch, queue_->Dequeue(req));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].job.envelope.job_id, "job_later");
}

TEST_F(RedisQueueTest, ALeaseExpiredInOneProcessIsRecoveredByAnother) {
  std::shared_ptr<StoreBackend> other = SecondStore();
  ASSERT_NE(other, nullptr);
  Put(Job("job_a"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 1, "dies"}));
  ASSERT_EQ(d.size(), 1u);
  clock_->Advance(Seconds(45));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> rec, other->RecoverExpiredLeases(3));
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].job_id, "job_a");
  // The dead worker's lease is fenced, the other process gets the job.
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  EXPECT_THAT(queue_->Complete(d[0], done), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> again, other->Dequeue({{}, 1, "lives"}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].lease.epoch, 2);
  EXPECT_THAT(other->Complete(again[0], done), IsOk());
}

TEST_F(RedisQueueTest, ARenewalBetweenReadingAndRecoveringAnExpiredLeaseWins) {
  Put(Job("job_a"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 1, "slow"}));
  ASSERT_EQ(d.size(), 1u);
  clock_->Advance(Seconds(50));
  // The holder renews an expired (not yet recovered) lease: it is its own
  // again, and a recovery must leave it alone.
  JOBPACT_ASSERT_OK_AND_ASSIGN(Lease renewed, queue_->Renew(d[0].lease, Seconds(60), "cp"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> rec, queue_->RecoverExpiredLeases(3));
  EXPECT_TRUE(rec.empty());
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, queue_->Get("job_a"));
  EXPECT_EQ(r.status, JobStatus::kRunning);
  EXPECT_EQ(r.lease_expires_at, renewed.expires_at);
}

TEST_F(RedisQueueTest, NamesNeverReachAnotherNamespaceOrAnotherKindOfKey) {
  // A second namespace with a job of its own, which nothing below may touch.
  redis::RedisOptions other_options = options_;
  other_options.key_namespace = redis_testing::FreshNamespace();
  JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys other_keys, RedisKeys::Create(other_options.key_namespace));
  other_prefix_ = other_keys.prefix();
  auto victim = MakeRedisQueueBackend(client_, other_keys, clock_);
  ASSERT_THAT(victim->Enqueue(Job("job_victim"), {}).status(), IsOk());
  const std::vector<std::string> victim_keys = Keys(*client_, other_prefix_ + "*");

  // Ids, dedup keys and effect keys are keys (any printable ASCII): braces,
  // colons and the other namespace's own prefix included.
  const std::string evil_prefix = "}:" + other_prefix_;
  std::vector<std::string> ids = {"job_}", "job_{x}", other_prefix_ + "job:job_victim",
                                  "job:job_victim", "a|b", "job_" + evil_prefix};
  for (const std::string& id : ids) {
    Envelope env = Job(id);
    env.dedup_key = evil_prefix + "dedup:" + id;
    env.idempotency_key = "{" + other_options.key_namespace + "}";
    ASSERT_THAT(queue_->Enqueue(env, {}).status(), IsOk()) << id;
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> all,
                               queue_->Dequeue({{}, static_cast<int>(ids.size()), "w"}));
  ASSERT_EQ(all.size(), ids.size());
  for (Delivery& d : all) {
    Completion done;
    done.to = JobStatus::kSucceeded;
    done.reason = "succeeded";
    done.transactional_effect = [&](void* native) {
      auto* fx = static_cast<redis::RedisEffect*>(native);
      return fx->IncrBy(evil_prefix + "job:job_victim", 1);
    };
    ASSERT_THAT(queue_->Complete(d, done), IsOk()) << d.lease.job_id;
  }
  // The victim's keys are exactly as they were, and its job is intact.
  EXPECT_EQ(Keys(*client_, other_prefix_ + "*").size(), victim_keys.size());
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord v, victim->Get("job_victim"));
  EXPECT_EQ(v.status, JobStatus::kQueued);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> vd, victim->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(vd.size(), 1u);
  // Each of ours is what it should be, found by its own id.
  for (const std::string& id : ids) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, queue_->Get(id));
    EXPECT_EQ(r.status, JobStatus::kSucceeded) << id;
  }
  // The effect's key lives in this namespace's app: area.
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply n,
                               client_->Command({"GET", prefix_ + "app:" + evil_prefix +
                                                            "job:job_victim"}));
  EXPECT_EQ(n.str, std::to_string(ids.size()));
  // And no key of ours escaped the prefix: every key the server has is of
  // one of the two namespaces' prefixes (or of some other test).
  for (const std::string& k : Keys(*client_, "*job_victim*")) {
    EXPECT_TRUE(k.rfind(prefix_, 0) == 0 || k.rfind(other_prefix_, 0) == 0) << k;
  }
}

TEST_F(RedisQueueTest, TheEffectIsWrittenIfAndOnlyIfTheCompletionIs) {
  Put(Job("job_a"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 1, "w"}));
  ASSERT_EQ(d.size(), 1u);
  auto incr = [](void* native) {
    auto* fx = static_cast<redis::RedisEffect*>(native);
    JOBPACT_RETURN_IF_ERROR(fx->IncrBy("done:job_a", 1));
    return fx->HSet("invoice:job_a", "state", "issued");
  };
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  done.transactional_effect = incr;
  // A stale lease: nothing is written.
  Delivery stale = d[0];
  stale.lease.token = stale.job.lease_token = "someone-else#1";
  EXPECT_THAT(queue_->Complete(stale, done), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply before, client_->Command({"EXISTS", prefix_ + "app:done:job_a"}));
  EXPECT_EQ(before.integer, 0);
  // An op that cannot apply (the key holds a list): nothing at all written,
  // the job still running.
  ASSERT_THAT(client_->Command({"RPUSH", prefix_ + "app:invoice:job_a", "x"}).status(), IsOk());
  EXPECT_THAT(queue_->Complete(d[0], done),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("holds a list")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply none, client_->Command({"EXISTS", prefix_ + "app:done:job_a"}));
  EXPECT_EQ(none.integer, 0);
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord running, queue_->Get("job_a"));
  EXPECT_EQ(running.status, JobStatus::kRunning);
  // A bad key is refused even if the effect ignores the Status.
  Completion sloppy = done;
  sloppy.transactional_effect = [](void* native) {
    (void)static_cast<redis::RedisEffect*>(native)->Set("has space", "v");
    return Status::Ok();
  };
  EXPECT_THAT(queue_->Complete(d[0], sloppy), StatusIs(StatusCode::kInvalidArgument));
  // The live lease and a good effect: both, once.
  ASSERT_THAT(client_->Command({"DEL", prefix_ + "app:invoice:job_a"}).status(), IsOk());
  ASSERT_THAT(queue_->Complete(d[0], done), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply n, client_->Command({"GET", prefix_ + "app:done:job_a"}));
  EXPECT_EQ(n.str, "1");
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply h,
                               client_->Command({"HGET", prefix_ + "app:invoice:job_a", "state"}));
  EXPECT_EQ(h.str, "issued");
  // A second completion of the same delivery is stale: still once.
  EXPECT_THAT(queue_->Complete(d[0], done), StatusIs(StatusCode::kAborted));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply n2, client_->Command({"GET", prefix_ + "app:done:job_a"}));
  EXPECT_EQ(n2.str, "1");
}

TEST_F(RedisQueueTest, ATransactionalSuccessCompletesItsIdempotencyClaimInTheSameStep) {
  JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys keys, RedisKeys::Create(options_.key_namespace));
  auto idem = redis_internal::MakeRedisIdempotencyStore(client_, keys, clock_);
  Envelope mine = Job("job_mine");
  mine.idempotency_key = "invoice:1";
  Envelope theirs = Job("job_theirs");
  theirs.idempotency_key = "invoice:2";
  Put(mine);
  Put(theirs);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 2, "w"}));
  ASSERT_EQ(d.size(), 2u);
  const Delivery& dm = d[0].lease.job_id == "job_mine" ? d[0] : d[1];
  const Delivery& dt = d[0].lease.job_id == "job_mine" ? d[1] : d[0];
  // The runner's claim owner is the lease token.
  ASSERT_THAT(idem->Claim("invoice:1", dm.lease.token, Seconds(45)).status(), IsOk());
  // The other key was taken over by another delivery meanwhile.
  ASSERT_THAT(idem->Claim("invoice:2", "another-delivery#9", Seconds(45)).status(), IsOk());
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  done.result = "invoice 1 issued";
  done.transactional_effect = [](void* native) {
    return static_cast<redis::RedisEffect*>(native)->IncrBy("issued", 1);
  };
  ASSERT_THAT(queue_->Complete(dm, done), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> rec, idem->Get("invoice:1"));
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, IdempotencyRecord::State::kCompleted);
  EXPECT_EQ(rec->owner, dm.lease.token);
  EXPECT_EQ(rec->result, "invoice 1 issued");
  // Lost claim: neither the job, nor the effect, nor the record is written.
  EXPECT_THAT(queue_->Complete(dt, done),
              StatusIs(StatusCode::kAborted, HasSubstr("idempotency claim")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord still, queue_->Get("job_theirs"));
  EXPECT_EQ(still.status, JobStatus::kRunning);
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply n, client_->Command({"GET", prefix_ + "app:issued"}));
  EXPECT_EQ(n.str, "1");
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::optional<IdempotencyRecord> other, idem->Get("invoice:2"));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->state, IdempotencyRecord::State::kInProgress);
  EXPECT_EQ(other->owner, "another-delivery#9");
}

TEST_F(RedisQueueTest, StatsComeFromCountersNotFromAScanOfTheJobs) {
  // A private server, so that the command counts below are this test's.
  redis_testing::PrivateRedisServer server;
  const std::string started = server.Start();
  if (!started.empty()) GTEST_SKIP() << "no private redis-server: " << started;
  JOBPACT_ASSERT_OK_AND_ASSIGN(redis::RedisOptions opts, redis::ParseRedisUrl(server.url()));
  opts.key_namespace = "stats";
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto client, RedisClient::Connect(opts));
  JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys keys, RedisKeys::Create("stats"));
  auto queue = MakeRedisQueueBackend(client, keys, clock_);
  std::vector<Envelope> envs;
  for (int i = 0; i < 3000; ++i) {
    envs.push_back(Job("job_" + std::to_string(10000 + i), i % 2 ? "a" : "b", i % 5 - 2,
                       i % 3 ? "q1" : "q2"));
  }
  ASSERT_THAT(queue->EnqueueBatch(envs, {}).status(), IsOk());
  clock_->Advance(Seconds(7));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue->Dequeue({{"q1"}, 100, "w"}));
  ASSERT_EQ(d.size(), 100u);
  for (std::size_t i = 0; i < 40; ++i) {
    Completion c;
    c.to = i % 2 ? JobStatus::kSucceeded : JobStatus::kDeadLettered;
    c.reason = i % 2 ? "succeeded" : "permanent_error";
    ASSERT_THAT(queue->Complete(d[i], c), IsOk());
  }
  ASSERT_THAT(client->Command({"CONFIG", "RESETSTAT"}).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kQueued], 2900);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 60);
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], 20);
  EXPECT_EQ(st.by_status[JobStatus::kDeadLettered], 20);
  EXPECT_EQ(st.dead_letters, 20);
  EXPECT_EQ(st.queues["q1"].depth, 2000 - 100);
  EXPECT_EQ(st.queues["q1"].running, 60);
  EXPECT_EQ(st.queues["q2"].depth, 1000);
  EXPECT_EQ(st.queues["q1"].oldest_ready_age, Seconds(7));
  // The script read no job: no HGET / HMGET / HGETALL of a job hash, and a
  // handful of zset seeks (one per priority band of each pair).
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply info, client->Command({"INFO", "commandstats"}));
  EXPECT_THAT(info.str, ::testing::Not(HasSubstr("cmdstat_hmget")));
  EXPECT_THAT(info.str, ::testing::Not(HasSubstr("cmdstat_hget:")));
  std::map<std::string, long> calls;
  std::size_t pos = 0;
  while ((pos = info.str.find("cmdstat_", pos)) != std::string::npos) {
    const std::size_t colon = info.str.find(':', pos);
    const std::size_t eq = info.str.find("calls=", colon);
    calls[info.str.substr(pos + 8, colon - pos - 8)] = std::stol(info.str.substr(eq + 6));
    pos = colon;
  }
  // 4 pairs x 5 priority bands, each seek plus the one finding nothing.
  EXPECT_LE(calls["zrangebyscore"], 4 * 6 + 1);
}

// --- Tenant fairness and the per-tenant cap (issue 11) beyond the suite ---

// A job of `tenant` (empty: none).
Envelope TenantJob(Envelope env, std::string tenant) {
  env.tenant_id = std::move(tenant);
  return env;
}

TEST_F(RedisQueueTest, TenantsTakeTurnsAcrossLeasesAndProcesses) {
  // The turn is stored in the namespace: two stores (two processes), each
  // leasing one job at a time in alternation, still hand the tenants out
  // in turn, the higher priority first.
  std::shared_ptr<StoreBackend> other = SecondStore();
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 3; ++i) {
    for (const char* tenant : {"acme", "bolt", "corp"}) {
      Put(TenantJob(Job(std::string("job_") + tenant + std::to_string(i)), tenant));
    }
    clock_->Advance(Millis(1));
  }
  Put(TenantJob(Job("job_urgent", "t", 7), "corp"));
  std::vector<std::string> order;
  for (int i = 0; i < 10; ++i) {
    StoreBackend& store = i % 2 == 0 ? *queue_ : *other;
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got,
                                 store.Dequeue({{}, 1, "w" + std::to_string(i)}));
    ASSERT_EQ(got.size(), 1u);
    order.push_back(got[0].job.envelope.job_id);
  }
  EXPECT_THAT(order, ElementsAre("job_urgent", "job_acme0", "job_bolt0", "job_corp0", "job_acme1",
                                 "job_bolt1", "job_corp1", "job_acme2", "job_bolt2", "job_corp2"));
}

TEST_F(RedisQueueTest, TheTurnIsTheQueuesAcrossItsJobTypes) {
  // acme has jobs of two types, bolt of one: they still alternate (acme
  // is not served once per type).
  for (int i = 0; i < 3; ++i) {
    Put(TenantJob(Job("job_ax" + std::to_string(i), "x"), "acme"));
    Put(TenantJob(Job("job_ay" + std::to_string(i), "y"), "acme"));
    Put(TenantJob(Job("job_bx" + std::to_string(i), "x"), "bolt"));
    clock_->Advance(Millis(1));
  }
  std::string tenants;
  for (int i = 0; i < 6; ++i) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, queue_->Dequeue({{}, 1, "w"}));
    ASSERT_EQ(got.size(), 1u);
    tenants += got[0].job.envelope.tenant_id[0];
  }
  EXPECT_EQ(tenants, "ababab");
}

TEST_F(RedisQueueTest, TenantIdsAreEscapedIntoKeysAndStayDistinct) {
  // Tenant ids are any printable ASCII: '|' (which ends a queue and a type
  // in a key), '%' (the escape), braces and another namespace's prefix.
  // Each is a tenant of its own under the cap, and no key leaves the
  // namespace.
  const std::string other_ns = redis_testing::FreshNamespace();
  const std::string other = "jobpact:{" + other_ns + "}:";
  const std::vector<std::string> tenants = {"x|y", "x%7Cy", "x%257Cy", "}:" + other + "ready:q",
                                            "A",   "%41"};
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      Put(TenantJob(Job("job_" + std::to_string(i) + "_" + std::to_string(k)), tenants[i]));
    }
  }
  ControlRule cap;
  cap.kind = ControlKind::kTenantConcurrencyLimit;
  cap.subject = "default";
  cap.limit = 1;
  cap.actor = "alice";
  cap.reason = "test";
  ASSERT_THAT(queue_->SetControl(cap), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, queue_->Dequeue({{}, 100, "w"}));
  std::set<std::string> seen;
  for (const Delivery& d : got) seen.insert(d.job.envelope.tenant_id);
  EXPECT_EQ(got.size(), tenants.size()) << "one job of each tenant, none of any twice";
  EXPECT_EQ(seen, std::set<std::string>(tenants.begin(), tenants.end()));
  for (const std::string& k : Keys(*client_, "*" + other_ns + "*")) {
    EXPECT_EQ(k.rfind(prefix_, 0), 0u) << k;
  }
  EXPECT_TRUE(Keys(*client_, other + "*").empty());
  // Finished, every tenant's running count is gone (no field left at 0).
  for (Delivery& d : got) {
    Completion done;
    done.to = JobStatus::kSucceeded;
    done.reason = "succeeded";
    ASSERT_THAT(queue_->Complete(d, done), IsOk());
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply running,
                               client_->Command({"HLEN", prefix_ + "tenant-running"}));
  EXPECT_EQ(running.integer, 0);
}

TEST_F(RedisQueueTest, JobsWithoutATenantAreOneTenantUnderTheCap) {
  // Their running count is the queue's less the tenants' (no count of
  // their own): a cap of 1 lets one of them run beside one of acme's.
  for (int i = 0; i < 3; ++i) Put(Job("job_n" + std::to_string(i)));
  for (int i = 0; i < 2; ++i) Put(TenantJob(Job("job_a" + std::to_string(i)), "acme"));
  ControlRule cap;
  cap.kind = ControlKind::kTenantConcurrencyLimit;
  cap.subject = "default";
  cap.limit = 1;
  cap.actor = "alice";
  cap.reason = "test";
  ASSERT_THAT(queue_->SetControl(cap), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, queue_->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].job.envelope.tenant_id, got[1].job.envelope.tenant_id);
  Delivery& none = got[0].job.envelope.tenant_id.empty() ? got[0] : got[1];
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  ASSERT_THAT(queue_->Complete(none, done), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> next, queue_->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].job.envelope.tenant_id, "");
}

TEST_F(RedisQueueTest, AJobStoredBeforeTenantsWereKeptIsLeasedAsNoTenants) {
  // The layout before issue 11: a job of a tenant in its (queue, type)
  // ready set, with no tn field. It is leased as no tenant's (counted in
  // no tenant's running jobs, the others' counts untouched): no migration
  // needed.
  Put(TenantJob(Job("job_old"), "acme"));
  const std::string tenant_set = prefix_ + "ready:default|t|acme";
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply members,
                               client_->Command({"ZRANGE", tenant_set, "0", "-1", "WITHSCORES"}));
  ASSERT_EQ(members.elements.size(), 2u);
  const std::string member = members.elements[0].str;
  const std::string score = members.elements[1].str;
  // Rewritten as the old layout had it.
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"DEL", tenant_set, prefix_ + "tenants:default|t"},
        {"ZADD", prefix_ + "ready:default|t", score, member},
        {"HDEL", prefix_ + "job:job_old", "tn"},
        {"HSET", prefix_ + "job:job_old", "ixk", "ready:default|t"}}) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(Reply r, client_->Command(cmd));
    ASSERT_FALSE(r.is_error()) << r.str;
  }
  Put(TenantJob(Job("job_new"), "acme"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> got, queue_->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(got.size(), 2u);
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply running,
                               client_->Command({"HGETALL", prefix_ + "tenant-running"}));
  ASSERT_EQ(running.elements.size(), 4u);
  for (Delivery& d : got) {
    Completion done;
    done.to = JobStatus::kSucceeded;
    done.reason = "succeeded";
    ASSERT_THAT(queue_->Complete(d, done), IsOk());
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(running, client_->Command({"HLEN", prefix_ + "tenant-running"}));
  EXPECT_EQ(running.integer, 0);
}

TEST_F(RedisQueueTest, ARestartOfAnAppendFsyncAlwaysServerLosesNoAcknowledgedWrite) {
  // A random high port (redis_test_server.cc's free-port helper is
  // private to it); a taken one fails the start and the next is tried.
  DurableRedisServer server;
  std::string started = "not tried";
  int port = 0;
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 5 && !started.empty(); ++attempt) {
    port = 20000 + static_cast<int>(rng() % 20000);
    started = server.Start(port);
  }
  if (!started.empty()) GTEST_SKIP() << "no durable redis-server: " << started;
  JOBPACT_ASSERT_OK_AND_ASSIGN(redis::RedisOptions opts,
                               redis::ParseRedisUrl("redis://127.0.0.1:" + std::to_string(port)));
  opts.key_namespace = "restart";
  opts.command_timeout = Seconds(2);
  opts.reconnect_backoff_min = Millis(20);
  opts.reconnect_backoff_max = Millis(200);
  JOBPACT_ASSERT_OK_AND_ASSIGN(auto client, RedisClient::Connect(opts));
  JOBPACT_ASSERT_OK_AND_ASSIGN(RedisKeys keys, RedisKeys::Create("restart"));
  auto clock = SystemClock::Default();
  auto queue = MakeRedisQueueBackend(client, keys, clock);

  std::mutex mu;
  std::vector<std::string> enqueued, completed;
  std::atomic<int> unavailable{0};
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    for (int i = 0; !stop.load(); ++i) {
      Envelope env;
      env.job_type = "t";
      PrepareForEnqueue(env, clock->Now());
      auto r = queue->Enqueue(env, {});
      if (r.ok()) {
        std::lock_guard<std::mutex> l(mu);
        enqueued.push_back(r->job_id);
      } else {
        ++unavailable;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  });
  std::thread consumer([&] {
    while (!stop.load()) {
      auto d = queue->Dequeue({{}, 4, "w"});
      if (!d.ok() || d->empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      std::vector<CompletionRequest> acks;
      for (Delivery& x : *d) {
        CompletionRequest r;
        r.delivery = std::move(x);
        r.completion.to = JobStatus::kSucceeded;
        r.completion.reason = "succeeded";
        acks.push_back(std::move(r));
      }
      std::vector<Status> s = queue->CompleteBatch(acks);
      std::lock_guard<std::mutex> l(mu);
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i].ok()) completed.push_back(acks[i].delivery.lease.job_id);
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  server.Kill();  // In the middle of enqueues and completions.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(server.Start(port), "");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  stop.store(true);
  producer.join();
  consumer.join();
  EXPECT_GT(unavailable.load(), 0) << "the restart was not seen by the producer";
  ASSERT_GT(enqueued.size(), 0u);
  ASSERT_GT(completed.size(), 0u);
  // Every acknowledged enqueue is there, every acknowledged completion is
  // succeeded.
  std::set<std::string> done(completed.begin(), completed.end());
  for (const std::string& id : enqueued) {
    JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord r, queue->Get(id));
    if (done.count(id) > 0) {
      EXPECT_EQ(r.status, JobStatus::kSucceeded) << id;
    }
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue->Stats());
  std::int64_t total = 0;
  for (const auto& [status, n] : st.by_status) total += n;
  EXPECT_GE(total, static_cast<std::int64_t>(enqueued.size()));
  EXPECT_GE(st.by_status[JobStatus::kSucceeded], static_cast<std::int64_t>(done.size()));
  std::printf("restart: %zu enqueues and %zu completions acknowledged, %d calls refused meanwhile\n",
              enqueued.size(), done.size(), unavailable.load());
}

TEST_F(RedisQueueTest, BigBatchesGoInOneCallAndEachWriteStandsAlone) {
  constexpr int kJobs = 5000;
  std::vector<Envelope> envs;
  for (int i = 0; i < kJobs; ++i) envs.push_back(Job("job_" + std::to_string(100000 + i)));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<EnqueueResult> put, queue_->EnqueueBatch(envs, {}));
  ASSERT_EQ(put.size(), static_cast<std::size_t>(kJobs));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, kJobs, "w"}));
  ASSERT_EQ(d.size(), static_cast<std::size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) ASSERT_EQ(d[i].lease.job_id, envs[i].job_id);  // In order.
  std::vector<CompletionRequest> acks;
  for (int i = 0; i < kJobs; ++i) {
    CompletionRequest r;
    r.delivery = d[i];
    r.completion.to = JobStatus::kSucceeded;
    r.completion.reason = "succeeded";
    if (i == 1234) r.delivery.lease.token = r.delivery.job.lease_token = "stale#1";
    acks.push_back(std::move(r));
  }
  std::vector<Status> s = queue_->CompleteBatch(acks);
  ASSERT_EQ(s.size(), static_cast<std::size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) {
    if (i == 1234) {
      EXPECT_THAT(s[i], StatusIs(StatusCode::kAborted));
    } else {
      ASSERT_THAT(s[i], IsOk()) << i;
    }
  }
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], kJobs - 1);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 1);
  // An id already taken refuses the whole batch, even at its end.
  std::vector<Envelope> more;
  for (int i = 0; i < 100; ++i) more.push_back(Job("job_new_" + std::to_string(i)));
  more.push_back(Job("job_100000"));
  EXPECT_THAT(queue_->EnqueueBatch(more, {}).status(), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(queue_->Get("job_new_0").status(), StatusIs(StatusCode::kNotFound));
}

TEST_F(RedisQueueTest, ACommandFailingMidBatchLeavesTheWritesBeforeItIndexed) {
  // The write script holds index and counter changes until its end; a
  // command that fails midway (here an effect's INCRBY overflowing, which
  // no check before it can see) must not lose those of the writes already
  // stored: Redis rolls nothing back.
  Put(Job("job_a"));
  Put(Job("job_b"));
  Put(Job("job_c"));
  ASSERT_THAT(client_->Command({"SET", prefix_ + "app:big", "9223372036854775807"}).status(),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 3, "w"}));
  ASSERT_EQ(d.size(), 3u);
  std::vector<CompletionRequest> acks(3);
  for (int i = 0; i < 3; ++i) {
    acks[i].delivery = d[i];
    acks[i].completion.to = JobStatus::kSucceeded;
    acks[i].completion.reason = "succeeded";
  }
  acks[1].completion.transactional_effect = [](void* native) {
    return static_cast<redis::RedisEffect*>(native)->IncrBy("big", 1);
  };
  std::vector<Status> s = queue_->CompleteBatch(acks);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_THAT(s[1], StatusIs(StatusCode::kInternal));
  // job_a was stored before the failure: succeeded, out of the lease set,
  // in the final one, counted.
  JOBPACT_ASSERT_OK_AND_ASSIGN(JobRecord a, queue_->Get("job_a"));
  EXPECT_EQ(a.status, JobStatus::kSucceeded);
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply leases, client_->Command({"ZRANGE", prefix_ + "leases", "0", "-1"}));
  JOBPACT_ASSERT_OK_AND_ASSIGN(Reply fin, client_->Command({"ZRANGE", prefix_ + "finished", "0", "-1"}));
  ASSERT_EQ(fin.elements.size(), 1u);
  EXPECT_THAT(fin.elements[0].str, ::testing::EndsWith("job_a"));
  EXPECT_EQ(leases.elements.size(), 2u);
  for (const Reply& m : leases.elements) EXPECT_THAT(m.str, ::testing::Not(::testing::EndsWith("job_a")));
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], 1);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 2);
  // The others are still theirs to complete.
  Completion done;
  done.to = JobStatus::kSucceeded;
  done.reason = "succeeded";
  EXPECT_THAT(queue_->Complete(d[1], done), IsOk());
  EXPECT_THAT(queue_->Complete(d[2], done), IsOk());
}

TEST_F(RedisQueueTest, AFlushedScriptCacheIsReloadedMidRun) {
  for (int i = 0; i < 10; ++i) Put(Job("job_" + std::to_string(10 + i)));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 4, "w"}));
  ASSERT_EQ(d.size(), 4u);
  ASSERT_THAT(client_->Command({"SCRIPT", "FLUSH"}).status(), IsOk());
  std::vector<CompletionRequest> acks;
  for (Delivery& x : d) {
    CompletionRequest r;
    r.delivery = x;
    r.completion.to = JobStatus::kSucceeded;
    r.completion.reason = "succeeded";
    acks.push_back(std::move(r));
  }
  for (const Status& s : queue_->CompleteBatch(acks)) EXPECT_THAT(s, IsOk());
  ASSERT_THAT(client_->Command({"SCRIPT", "FLUSH"}).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> rest, queue_->Dequeue({{}, 10, "w"}));
  EXPECT_EQ(rest.size(), 6u);
  ASSERT_THAT(client_->Command({"SCRIPT", "FLUSH"}).status(), IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kSucceeded], 4);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 6);
}

TEST_F(RedisQueueTest, ReadyOrderIsExactBelowAMillisecondAndAtThePriorityBounds) {
  // Three jobs ready within one millisecond, ids in the opposite order of
  // their times: the store must order by the nanoseconds, not the ids.
  Put(Job("job_c"));
  clock_->Advance(std::chrono::nanoseconds(300));
  Put(Job("job_b"));
  clock_->Advance(std::chrono::nanoseconds(300));
  Put(Job("job_a"));
  Put(Job("job_low", "t", -1000));
  Put(Job("job_high", "t", 1000));
  // Scheduled 1 ns in the future: not ready until then.
  Envelope later = Job("job_later", "t", 1000);
  later.scheduled_at = clock_->Now() + std::chrono::nanoseconds(1);
  Put(later);
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 10, "w"}));
  std::vector<std::string> ids;
  for (const Delivery& x : d) ids.push_back(x.lease.job_id);
  EXPECT_THAT(ids, ElementsAre("job_high", "job_c", "job_b", "job_a", "job_low"));
  for (const Delivery& x : d) {
    Completion done;
    done.to = JobStatus::kSucceeded;
    done.reason = "succeeded";
    ASSERT_THAT(queue_->Complete(x, done), IsOk());
  }
  clock_->Advance(std::chrono::nanoseconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> next, queue_->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].lease.job_id, "job_later");
  // A lease expires at exactly its expiry, not a millisecond later.
  clock_->Advance(Seconds(45) - std::chrono::nanoseconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> none, queue_->RecoverExpiredLeases(3));
  EXPECT_TRUE(none.empty());
  clock_->Advance(std::chrono::nanoseconds(1));
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<LeaseRecovery> one, queue_->RecoverExpiredLeases(3));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].job_id, "job_later");
}

TEST_F(RedisQueueTest, AnUndecodableRecordIsQuarantinedAndDoesNotBlockTheOthers) {
  Put(Job("job_bad"));
  Put(Job("job_good"));
  ASSERT_THAT(client_->Command({"HSET", prefix_ + "job:job_bad", "env", "{not json"}).status(),
              IsOk());
  JOBPACT_ASSERT_OK_AND_ASSIGN(std::vector<Delivery> d, queue_->Dequeue({{}, 10, "w"}));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].lease.job_id, "job_good");
  JOBPACT_ASSERT_OK_AND_ASSIGN(DlqEntry e, queue_->GetDeadLetter("job_bad"));
  EXPECT_EQ(e.reason, kUndecodableRecord);
  EXPECT_THAT(e.raw_envelope, HasSubstr("{not json"));
  JOBPACT_ASSERT_OK_AND_ASSIGN(QueueStats st, queue_->Stats());
  EXPECT_EQ(st.by_status[JobStatus::kDeadLettered], 1);
  EXPECT_EQ(st.by_status[JobStatus::kRunning], 1);
  EXPECT_EQ(st.queues["default"].running, 1);
}

}  // namespace
}  // namespace jobpact
