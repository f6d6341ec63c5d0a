// ParseRedisUrl (jobpact/redis/redis_backend.h): every form, every error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "jobpact/redis/redis_backend.h"
#include "jobpact/testing/matchers.h"

namespace jobpact {
namespace redis {
namespace {

using ::jobpact::testing::IsOk;
using ::jobpact::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

RedisOptions MustParse(const std::string& url) {
  Result<RedisOptions> r = ParseRedisUrl(url);
  EXPECT_THAT(r, IsOk()) << url;
  return r.ok() ? *r : RedisOptions{};
}

void ExpectInvalid(const std::string& url, const std::string& says) {
  EXPECT_THAT(ParseRedisUrl(url), StatusIs(StatusCode::kInvalidArgument, HasSubstr(says))) << url;
}

TEST(RedisUrlTest, HostPortDatabaseAndDefaults) {
  RedisOptions o = MustParse("redis://localhost");
  EXPECT_EQ(o.host, "localhost");
  EXPECT_EQ(o.port, 6379);
  EXPECT_EQ(o.database, 0);
  EXPECT_EQ(o.key_namespace, "jobpact");
  EXPECT_TRUE(o.user.empty());
  EXPECT_TRUE(o.password.empty());
  EXPECT_TRUE(o.unix_socket.empty());

  o = MustParse("redis://10.0.0.5:6380/3");
  EXPECT_EQ(o.host, "10.0.0.5");
  EXPECT_EQ(o.port, 6380);
  EXPECT_EQ(o.database, 3);

  o = MustParse("REDIS://h:1/");  // Scheme case-insensitive; "/" is database 0.
  EXPECT_EQ(o.host, "h");
  EXPECT_EQ(o.port, 1);
  EXPECT_EQ(o.database, 0);

  o = MustParse("redis://[::1]:7000/2");
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 7000);
  EXPECT_EQ(o.database, 2);
  o = MustParse("redis://[fe80::1]");
  EXPECT_EQ(o.host, "fe80::1");
  EXPECT_EQ(o.port, 6379);
}

TEST(RedisUrlTest, UserAndPasswordArePercentDecoded) {
  RedisOptions o = MustParse("redis://:p%40ss%3Aw%2Fd@h");
  EXPECT_EQ(o.user, "");
  EXPECT_EQ(o.password, "p@ss:w/d");
  o = MustParse("redis://alice:secret@h:6379/1");
  EXPECT_EQ(o.user, "alice");
  EXPECT_EQ(o.password, "secret");
  o = MustParse("redis://alice@h");
  EXPECT_EQ(o.user, "alice");
  EXPECT_EQ(o.password, "");
  // A raw '@' in the password: the userinfo ends at the last one.
  o = MustParse("redis://bob:a@b@h");
  EXPECT_EQ(o.password, "a@b");
  EXPECT_EQ(o.host, "h");
}

TEST(RedisUrlTest, UnixSocket) {
  RedisOptions o = MustParse("redis+unix:///run/redis/redis.sock?db=4&namespace=orders");
  EXPECT_EQ(o.unix_socket, "/run/redis/redis.sock");
  EXPECT_EQ(o.database, 4);
  EXPECT_EQ(o.key_namespace, "orders");
  o = MustParse("redis+unix://u:pw@/tmp/my%20redis.sock");
  EXPECT_EQ(o.unix_socket, "/tmp/my redis.sock");
  EXPECT_EQ(o.user, "u");
  EXPECT_EQ(o.password, "pw");
  ExpectInvalid("redis+unix://host/tmp/r.sock", "takes no host");
  ExpectInvalid("redis+unix://", "no socket path");
  ExpectInvalid("redis+unix:///", "no socket path");
  ExpectInvalid("redis+unix:///run/redis/", "names a directory");
}

TEST(RedisUrlTest, QueryParameters) {
  RedisOptions o = MustParse(
      "redis://h/1?namespace=app.orders:v2&connect_timeout_ms=250&command_timeout_ms=1500&"
      "pool_size=16&reconnect_backoff_min_ms=10&reconnect_backoff_max_ms=2000");
  EXPECT_EQ(o.database, 1);
  EXPECT_EQ(o.key_namespace, "app.orders:v2");
  EXPECT_EQ(o.connect_timeout, Millis(250));
  EXPECT_EQ(o.command_timeout, Millis(1500));
  EXPECT_EQ(o.pool_size, 16);
  EXPECT_EQ(o.reconnect_backoff_min, Millis(10));
  EXPECT_EQ(o.reconnect_backoff_max, Millis(2000));
  EXPECT_EQ(MustParse("redis://h?db=7").database, 7);
  EXPECT_EQ(MustParse("redis://h?&&pool_size=2&").pool_size, 2);  // Empty items skipped.
}

TEST(RedisUrlTest, RedissSaysThereIsNoTlsAndWhatToDo) {
  Result<RedisOptions> r = ParseRedisUrl("rediss://:secret@redis.example:6380/0");
  EXPECT_THAT(r, StatusIs(StatusCode::kUnimplemented,
                          AllOf(HasSubstr("TLS"), HasSubstr("hiredis 0.14"), HasSubstr("stunnel"),
                                HasSubstr("redis://127.0.0.1"))));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("secret")));
}

TEST(RedisUrlTest, MalformedUrlsAreNamed) {
  ExpectInvalid("", "empty");
  ExpectInvalid("localhost:6379", "scheme must be redis: or redis+unix:");
  ExpectInvalid("http://h", "scheme must be redis: or redis+unix:");
  ExpectInvalid("redis:h", "must be followed by //");
  ExpectInvalid("redis://", "no host");
  ExpectInvalid("redis://:pw@", "no host");
  ExpectInvalid("redis://:6379", "no host");
  ExpectInvalid("redis://h:", "port after ':' is empty");
  ExpectInvalid("redis://h:abc", "the port \"abc\" is not an integer");
  ExpectInvalid("redis://h:0", "out of range (1 to 65535)");
  ExpectInvalid("redis://h:65536", "out of range");
  ExpectInvalid("redis://::1:6379", "write an IPv6 address in brackets");
  ExpectInvalid("redis://[::1", "no closing ']'");
  ExpectInvalid("redis://[::1]x", "after the IPv6 address");
  ExpectInvalid("redis://[::1]:", "port after ':' is empty");
  ExpectInvalid("redis://h/x", "database in the path \"x\" is not an integer");
  ExpectInvalid("redis://h/-1", "database in the path \"-1\" is out of range");
  ExpectInvalid("redis://h/1/2", "more than the database number");
  ExpectInvalid("redis://h/1?db=2", "given twice");
  ExpectInvalid("redis://h#frag", "fragment");
  ExpectInvalid("redis://h x", "a space at offset 9");
  ExpectInvalid("redis://h\n", "a control character");
  ExpectInvalid("redis://:p%4@h", "bad percent-encoding in the password");
  ExpectInvalid("redis://u%zz@h", "bad percent-encoding in the user name");
  ExpectInvalid("redis://:p%00@h", "password holds a NUL byte");
  ExpectInvalid("redis://h%2@", "");  // Userinfo "h%2": bad encoding of the user name.
  ExpectInvalid("redis://h?pool_size", "has no value");
  ExpectInvalid("redis://h?=1", "has no name");
  ExpectInvalid("redis://h?pool_size=0", "pool_size= \"0\" is out of range (1 to 1024)");
  ExpectInvalid("redis://h?pool_size=2&pool_size=3", "given more than once");
  ExpectInvalid("redis://h?poolsize=2", "unknown query parameter \"poolsize\" (known: db,");
  ExpectInvalid("redis://h?command_timeout_ms=0", "out of range");
  ExpectInvalid("redis://h?connect_timeout_ms=x", "not an integer");
  ExpectInvalid("redis://h?reconnect_backoff_min_ms=500&reconnect_backoff_max_ms=100",
                "reconnect_backoff_max_ms must be >= reconnect_backoff_min_ms");
  ExpectInvalid("redis://h?namespace=a%7Bb%7D", "holds '{'");
  ExpectInvalid("redis://h?namespace=" + std::string(65, 'n'), "at most 64");
  ExpectInvalid("redis://h?namespace=%0A", "a newline");
}

TEST(RedisUrlTest, ErrorsNeverRepeatThePassword) {
  for (const char* url :
       {"redis://:hunter2@h:bad", "redis://:hunter2@h/x", "redis://:hunter2@h?x=1",
        "redis://u:hunter2@h#f", "redis://u:hunter2@[::1"}) {
    Result<RedisOptions> r = ParseRedisUrl(url);
    EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument)) << url;
    EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2"))) << url;
  }
}

}  // namespace
}  // namespace redis
}  // namespace jobpact
