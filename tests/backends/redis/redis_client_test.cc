// RedisClient (src/backends/redis/client.h) against a real server: commands,
// pipelines, scripts and NOSCRIPT, the pool under threads, and what calls
// return while the server is down and after it comes back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "jobpact/testing/matchers.h"
#include "src/backends/redis/client.h"
#include "src/backends/redis/keys.h"
#include "tests/backends/redis/redis_test_server.h"

namespace jobpact {
namespace redis_internal {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::HasSubstr;
using Type = Reply::Type;

class RedisClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JOBPACT_REDIS_URL_OR_SKIP(url);
    options_ = redis_testing::TestOptions();
    prefix_ = "jobpact:{" + options_.key_namespace + "}:";
    Result<std::shared_ptr<RedisClient>> c = RedisClient::Connect(options_);
    ASSERT_THAT(c, IsOk());
    client_ = *c;
  }
  void TearDown() override {
    if (!client_) return;
    // Leave nothing behind on a shared server.
    Result<Reply> keys = client_->Command({"KEYS", prefix_ + "*"});
    if (keys.ok() && keys->type == Type::kArray && !keys->elements.empty()) {
      std::vector<std::string> del = {"DEL"};
      for (const Reply& k : keys->elements) del.push_back(k.str);
      (void)client_->Command(del);
    }
  }
  std::string Key(const std::string& name) const { return prefix_ + name; }

  redis::RedisOptions options_;
  std::string prefix_;
  std::shared_ptr<RedisClient> client_;
};

TEST(Sha1Test, MatchesKnownDigests) {
  EXPECT_EQ(Sha1Hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(Sha1Hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(Sha1Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  EXPECT_EQ(Sha1Hex(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  // 55, 56 and 64 bytes: the padding edge cases.
  EXPECT_EQ(Sha1Hex(std::string(55, 'a')), "c1c8bbdc22796e28c0e15163d20899b65621d65a");
  EXPECT_EQ(Sha1Hex(std::string(56, 'a')), "c2db330f6083854c99d4b5bfb6e8f29f201be699");
  EXPECT_EQ(Sha1Hex(std::string(64, 'a')), "0098ba824b5c16427bd7a1122a5a442a25ec644d");
}

TEST_F(RedisClientTest, CommandsAreBinarySafeAndErrorRepliesAreReplies) {
  const std::string value("a\0b\r\nc", 6);
  ASSERT_THAT(client_->Command({"SET", Key("bin"), value}), IsOk());
  Result<Reply> got = client_->Command({"GET", Key("bin")});
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->type, Type::kString);
  EXPECT_EQ(got->str, value);

  Result<Reply> missing = client_->Command({"GET", Key("missing")});
  ASSERT_THAT(missing, IsOk());
  EXPECT_EQ(missing->type, Type::kNil);

  Result<Reply> n = client_->Command({"INCRBY", Key("n"), "41"});
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(n->type, Type::kInteger);
  EXPECT_EQ(n->integer, 41);

  Result<Reply> wrong = client_->Command({"LPUSH", Key("bin"), "x"});
  ASSERT_THAT(wrong, IsOk());  // The connection is fine; the command was refused.
  EXPECT_EQ(wrong->type, Type::kError);
  EXPECT_THAT(wrong->str, HasSubstr("WRONGTYPE"));

  Result<Reply> status = client_->Command({"PING"});
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->type, Type::kStatus);
  EXPECT_EQ(status->str, "PONG");
}

TEST_F(RedisClientTest, PipelineKeepsOrderAndPerCommandErrors) {
  Result<std::vector<Reply>> r = client_->Pipeline({{"RPUSH", Key("l"), "a", "b"},
                                                    {"INCR", Key("l")},  // WRONGTYPE
                                                    {"LRANGE", Key("l"), "0", "-1"},
                                                    {"EXISTS", Key("l")}});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].integer, 2);
  EXPECT_EQ((*r)[1].type, Type::kError);
  ASSERT_EQ((*r)[2].type, Type::kArray);
  ASSERT_EQ((*r)[2].elements.size(), 2u);
  EXPECT_EQ((*r)[2].elements[1].str, "b");
  EXPECT_EQ((*r)[3].integer, 1);
  Result<std::vector<Reply>> none = client_->Pipeline({});
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
}

TEST_F(RedisClientTest, ScriptShaIsTheServersAndEvalReloadsAfterScriptFlush) {
  const Script script("return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}");
  Result<Reply> loaded = client_->Command({"SCRIPT", "LOAD", script.lua()});
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->str, script.sha1());

  Result<Reply> first = client_->Eval(script, {Key("c")}, {"hello"});
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->type, Type::kArray);
  ASSERT_EQ(first->elements.size(), 3u);
  EXPECT_EQ(first->elements[0].str, Key("c"));
  EXPECT_EQ(first->elements[1].str, "hello");
  EXPECT_EQ(first->elements[2].integer, 1);

  // The server forgets every script: EVALSHA gets NOSCRIPT, the client
  // runs it with EVAL once, which caches it again.
  ASSERT_THAT(client_->Command({"SCRIPT", "FLUSH"}), IsOk());
  Result<Reply> exists = client_->Command({"SCRIPT", "EXISTS", script.sha1()});
  ASSERT_THAT(exists, IsOk());
  EXPECT_EQ(exists->elements.at(0).integer, 0);
  Result<Reply> second = client_->Eval(script, {Key("c")}, {"again"});
  ASSERT_THAT(second, IsOk());
  ASSERT_EQ(second->type, Type::kArray) << second->str;
  EXPECT_EQ(second->elements.at(2).integer, 2);  // Ran exactly once more.
  // (Whether the server has it cached again is not asserted: the tests
  // share one server under ctest -j, and another test's SCRIPT FLUSH may
  // come in between. The next EVALSHA reloads it either way.)

  // A Lua error is an error reply, not a connection failure.
  const Script broken("return redis.call('NOSUCHCOMMAND')");
  Result<Reply> err = client_->Eval(broken, {}, {});
  ASSERT_THAT(err, IsOk());
  EXPECT_EQ(err->type, Type::kError);
}

TEST_F(RedisClientTest, EvalPipelineRunsEachCallOnceAcrossNoScript) {
  const Script incr("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  const Script get("return redis.call('GET', KEYS[1])");
  ASSERT_THAT(client_->Command({"SCRIPT", "FLUSH"}), IsOk());
  ASSERT_THAT(client_->Command({"SCRIPT", "LOAD", get.lua()}), IsOk());  // Only one cached.
  std::vector<ScriptCall> calls;
  for (int i = 1; i <= 5; ++i) calls.push_back({&incr, {Key("a" + std::to_string(i))}, {"7"}});
  calls.push_back({&get, {Key("missing")}, {}});
  Result<std::vector<Reply>> r = client_->EvalPipeline(calls);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->size(), 6u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*r)[i].type, Type::kInteger) << (*r)[i].str;
    EXPECT_EQ((*r)[i].integer, 7);  // Once each, not twice.
  }
  EXPECT_EQ((*r)[5].type, Type::kNil);
  EXPECT_THAT(client_->EvalPipeline({ScriptCall{nullptr, {}, {}}}),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(RedisClientTest, BlockingCommandTimesOutWithNilAndWakesOnPush) {
  const auto start = std::chrono::steady_clock::now();
  Result<Reply> idle = client_->BlockingCommand({"BLPOP", Key("wake"), "0.2"}, Millis(200));
  ASSERT_THAT(idle, IsOk());
  EXPECT_EQ(idle->type, Type::kNil);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));

  std::thread pusher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_THAT(client_->Command({"RPUSH", Key("wake"), "go"}), IsOk());
  });
  Result<Reply> woken = client_->BlockingCommand({"BLPOP", Key("wake"), "5"}, Seconds(5));
  pusher.join();
  ASSERT_THAT(woken, IsOk());
  ASSERT_EQ(woken->type, Type::kArray);
  EXPECT_EQ(woken->elements.at(1).str, "go");
  // The wait does not hold a pooled connection.
  EXPECT_LE(client_->OpenConnections(), options_.pool_size);
}

TEST_F(RedisClientTest, PoolServesManyThreadsWithItsConnections) {
  redis::RedisOptions small = options_;
  small.pool_size = 3;
  Result<std::shared_ptr<RedisClient>> c = RedisClient::Connect(small);
  ASSERT_THAT(c, IsOk());
  std::shared_ptr<RedisClient> client = *c;
  constexpr int kThreads = 8;
  constexpr int kEach = 200;
  std::atomic<int> failures{0};
  std::atomic<int> max_open{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        Result<Reply> r = i % 2 == 0 ? client->Command({"INCR", Key("count")})
                                     : client->Eval(Script("return redis.call('INCR', KEYS[1])"),
                                                    {Key("count")}, {});
        if (!r.ok() || r->type != Type::kInteger) failures.fetch_add(1);
        int open = client->OpenConnections();
        int seen = max_open.load();
        while (open > seen && !max_open.compare_exchange_weak(seen, open)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(max_open.load(), 3);
  Result<Reply> count = client->Command({"GET", Key("count")});
  ASSERT_THAT(count, IsOk());
  EXPECT_EQ(count->str, std::to_string(kThreads * kEach));
}

TEST_F(RedisClientTest, RefusedCredentialsAndDatabaseNameTheServer) {
  redis::RedisOptions bad_db = options_;
  bad_db.database = 100000;
  EXPECT_THAT(
      RedisClient::Connect(bad_db),
      StatusIs(StatusCode::kFailedPrecondition,
               ::testing::AllOf(HasSubstr("SELECT 100000"), HasSubstr(client_->server_name()))));
  redis::RedisOptions bad_user = options_;
  bad_user.user = "nobody_here";
  bad_user.password = "s3cret-value";
  Result<std::shared_ptr<RedisClient>> r = RedisClient::Connect(bad_user);
  EXPECT_THAT(r,
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("AUTH as user \"nobody_here\"")));
  EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("s3cret-value")));
}

TEST(RedisClientOptionsTest, BadOptionsAreNamed) {
  redis::RedisOptions o;
  o.pool_size = 0;
  EXPECT_THAT(RedisClient::Connect(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("pool_size")));
  o = {};
  o.port = 70000;
  EXPECT_THAT(RedisClient::Connect(o), StatusIs(StatusCode::kInvalidArgument, HasSubstr("port")));
  o = {};
  o.command_timeout = Duration::zero();
  EXPECT_THAT(RedisClient::Connect(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("command_timeout")));
  o = {};
  o.reconnect_backoff_max = Millis(1);
  EXPECT_THAT(RedisClient::Connect(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("reconnect_backoff_max")));
  o = {};
  o.host = "";
  EXPECT_THAT(RedisClient::Connect(o), StatusIs(StatusCode::kInvalidArgument, HasSubstr("host")));
}

TEST(RedisClientDownTest, NothingListeningIsUnavailableNamingTheServer) {
  // A private server, started and killed: its port is known to be closed.
  redis_testing::PrivateRedisServer server;
  const std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  server.Kill();
  redis::RedisOptions o;
  o.port = server.port();
  EXPECT_THAT(RedisClient::Connect(o),
              StatusIs(StatusCode::kUnavailable,
                       HasSubstr("redis 127.0.0.1:" + std::to_string(server.port()))));
  redis::RedisOptions sock;
  sock.unix_socket = "/nonexistent/jobpact-test.sock";
  EXPECT_THAT(RedisClient::Connect(sock),
              StatusIs(StatusCode::kUnavailable, HasSubstr("/nonexistent/jobpact-test.sock")));
}

TEST(RedisClientDownTest, UnavailableWhileDownThenRecoversAfterRestart) {
  redis_testing::PrivateRedisServer server;
  std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  redis::RedisOptions o;
  o.port = server.port();
  o.pool_size = 2;
  o.reconnect_backoff_min = Millis(20);
  o.reconnect_backoff_max = Millis(200);
  o.command_timeout = Seconds(2);
  Result<std::shared_ptr<RedisClient>> c = RedisClient::Connect(o);
  ASSERT_THAT(c, IsOk());
  std::shared_ptr<RedisClient> client = *c;
  ASSERT_THAT(client->Command({"SET", "jobpact:{t}:k", "v"}), IsOk());

  server.Kill();
  const std::string name = "redis 127.0.0.1:" + std::to_string(server.port());
  // Every call fails with kUnavailable naming the server (the broken
  // connection, then refused connects, then the backoff), and none hangs.
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Result<Reply> r = client->Command({"GET", "jobpact:{t}:k"});
    EXPECT_THAT(r, StatusIs(StatusCode::kUnavailable, HasSubstr(name))) << "call " << i;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    Result<Reply> e = client->Eval(Script("return 1"), {}, {});
    EXPECT_THAT(e, StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
  }

  why = server.Start();  // Same port, no data (no persistence).
  ASSERT_EQ(why, "");
  // Reconnects on its own, within the backoff bound.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Result<Reply> back = Status::Unavailable("not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    back = client->Command({"PING"});
    if (back.ok()) break;
    EXPECT_THAT(back, StatusIs(StatusCode::kUnavailable, HasSubstr(name)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->str, "PONG");
  // And all of the pool works again (stale idle connections were dropped).
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(client->Command({"INCR", "jobpact:{t}:n"}), IsOk()) << i;
    EXPECT_THAT(client->Eval(Script("return 2"), {}, {}), IsOk()) << i;
  }
}

TEST(RedisClientDownTest, NoReplyWithinTheCommandTimeoutIsDeadlineExceeded) {
  redis_testing::PrivateRedisServer server;
  std::string why = server.Start();
  if (!why.empty()) {
    if (redis_testing::RedisRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  redis::RedisOptions o;
  o.port = server.port();
  o.pool_size = 1;
  o.command_timeout = Millis(200);
  Result<std::shared_ptr<RedisClient>> c = RedisClient::Connect(o);
  ASSERT_THAT(c, IsOk());
  std::shared_ptr<RedisClient> client = *c;
  // A server that accepts the bytes but never answers: stopped, not dead.
  ASSERT_EQ(kill(server.pid(), SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  Result<Reply> r = client->Command({"INCR", "jobpact:{t}:n"});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(kill(server.pid(), SIGCONT), 0);
  EXPECT_THAT(r,
              StatusIs(StatusCode::kDeadlineExceeded,
                       ::testing::AllOf(HasSubstr("no reply within 200 ms"),
                                        HasSubstr("may or may not have run"),
                                        HasSubstr("127.0.0.1:" + std::to_string(server.port())))));
  EXPECT_GE(took, std::chrono::milliseconds(150));
  EXPECT_LT(took, std::chrono::seconds(2));
  // That connection was dropped (its late reply would answer the wrong
  // command); the next call gets a fresh one and sees the INCR that did run.
  Result<Reply> n = client->Command({"GET", "jobpact:{t}:n"});
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(n->str, "1");
}

}  // namespace
}  // namespace redis_internal
}  // namespace jobpact
