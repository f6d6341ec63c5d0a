// RedisClient: a pool of hiredis synchronous connections (see client.h).
#include "src/backends/redis/client.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "src/backends/redis/resp.h"
#include "src/internal/guarded.h"

namespace jobpact {
namespace redis_internal {
namespace {

using internal::Guarded;

timeval ToTimeval(Duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  timeval tv;
  tv.tv_sec = static_cast<time_t>(us / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1000000);
  return tv;
}

long long ToMillis(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::string ServerName(const RedisOptions& o) {
  if (!o.unix_socket.empty()) return o.unix_socket;
  const bool v6 = o.host.find(':') != std::string::npos;
  return (v6 ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.port);
}

Reply Convert(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    case REDIS_REPLY_NIL:
    default:
      out.type = Reply::Type::kNil;
      break;
  }
  return out;
}

// Writing to a socket whose peer has gone raises SIGPIPE, whose default
// action kills the process. A library must not change the process's signal
// dispositions, so (as libpq does) SIGPIPE is blocked in the calling
// thread around socket writes, and one raised meanwhile is consumed before
// the mask is restored.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

}  // namespace

// One hiredis connection.
struct RedisClient::Conn {
  explicit Conn(redisContext* c) : ctx(c) {}
  ~Conn() {
    if (ctx != nullptr) redisFree(ctx);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  redisContext* ctx;
  std::uint64_t generation = 0;
  bool blocking = false;
  // Set on a connection failure: the reply stream is lost, never reuse it.
  bool broken = false;
};

Script::Script(std::string lua) : lua_(std::move(lua)), sha1_(Sha1Hex(lua_)) {}

RedisClient::RedisClient(const RedisOptions& options)
    : options_(options),
      server_name_(ServerName(options)),
      clock_(SystemClock::Default()),
      rng_(std::random_device{}()) {}

RedisClient::~RedisClient() = default;

Result<std::shared_ptr<RedisClient>> RedisClient::Connect(const RedisOptions& o) {
  return Guarded("RedisClient::Connect", [&]() -> Result<std::shared_ptr<RedisClient>> {
    const char* bad = nullptr;
    if (o.unix_socket.empty() && o.host.empty())
      bad = "host is empty (and no unix_socket)";
    else if (o.unix_socket.empty() && (o.port < 1 || o.port > 65535))
      bad = "port must be 1..65535";
    else if (o.database < 0)
      bad = "database must be >= 0";
    else if (o.connect_timeout <= Duration::zero())
      bad = "connect_timeout must be > 0";
    else if (o.command_timeout <= Duration::zero())
      bad = "command_timeout must be > 0";
    else if (o.pool_size < 1)
      bad = "pool_size must be >= 1";
    else if (o.reconnect_backoff_min <= Duration::zero())
      bad = "reconnect_backoff_min must be > 0";
    else if (o.reconnect_backoff_max < o.reconnect_backoff_min) {
      bad = "reconnect_backoff_max must be >= reconnect_backoff_min";
    }
    if (bad != nullptr) {
      return Status::InvalidArgument(std::string("RedisOptions: ") + bad);
    }
    std::shared_ptr<RedisClient> client(new RedisClient(o));
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Conn> first, client->Checkout());
    client->Return(std::move(first));
    return client;
  });
}

Status RedisClient::Unavailable(const std::string& what) const {
  return Status::Unavailable("redis " + server_name_ + ": " + what);
}

Status RedisClient::ConnectionError(redisContext* ctx, const char* during) const {
  const int saved_errno = errno;
  std::string detail = ctx != nullptr && ctx->errstr[0] != '\0' ? ctx->errstr : "unknown error";
  const int err = ctx != nullptr ? ctx->err : REDIS_ERR_OTHER;
  if (err == REDIS_ERR_IO &&
      (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || detail == std::strerror(EAGAIN))) {
    return Status::DeadlineExceeded("redis " + server_name_ + ": no reply within " +
                                    std::to_string(ToMillis(options_.command_timeout)) +
                                    " ms while " + during +
                                    " (the command may or may not have run; connection dropped)");
  }
  if (err == REDIS_ERR_OOM) {
    return Status::ResourceExhausted("redis " + server_name_ + ": out of memory while " + during);
  }
  if (err == REDIS_ERR_PROTOCOL) {
    return Status::Internal("redis " + server_name_ + ": protocol error while " + during + ": " +
                            detail + " (connection dropped)");
  }
  if (err == REDIS_ERR_EOF) detail = "connection closed by the server";
  return Unavailable(std::string(during) + ": " + detail);
}

Result<std::unique_ptr<RedisClient::Conn>> RedisClient::OpenUnlocked() {
  SigpipeGuard no_sigpipe;
  const timeval connect_tv = ToTimeval(options_.connect_timeout);
  redisContext* ctx =
      options_.unix_socket.empty()
          ? redisConnectWithTimeout(options_.host.c_str(), options_.port, connect_tv)
          : redisConnectUnixWithTimeout(options_.unix_socket.c_str(), connect_tv);
  if (ctx == nullptr) {
    return Status::ResourceExhausted("redis " + server_name_ +
                                     ": out of memory allocating a connection");
  }
  auto conn = std::make_unique<Conn>(ctx);
  if (ctx->err != 0) {
    Status s = ConnectionError(ctx, "connecting");
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return Unavailable("connecting: no answer within " +
                         std::to_string(ToMillis(options_.connect_timeout)) + " ms");
    }
    return s;
  }
  // AUTH (if any) and SELECT in one round trip, under the connect timeout.
  // SELECT is sent even for database 0: it also tells whether the server
  // wants a password we do not have (NOAUTH).
  if (redisSetTimeout(ctx, connect_tv) != REDIS_OK) return ConnectionError(ctx, "connecting");
  std::vector<std::vector<std::string>> hello;
  if (!options_.user.empty()) {
    hello.push_back({"AUTH", options_.user, options_.password});
  } else if (!options_.password.empty()) {
    hello.push_back({"AUTH", options_.password});
  }
  hello.push_back({"SELECT", std::to_string(options_.database)});
  Result<std::vector<Reply>> replies = RoundTrip(*conn, hello);
  if (!replies.ok()) {
    if (replies.status().code() == StatusCode::kDeadlineExceeded) {
      return Unavailable("connected, but no answer to AUTH/SELECT within " +
                         std::to_string(ToMillis(options_.connect_timeout)) + " ms");
    }
    return replies.status();
  }
  for (std::size_t i = 0; i < replies->size(); ++i) {
    const Reply& r = (*replies)[i];
    if (!r.is_error()) continue;
    const std::string what =
        hello[i][0] == "AUTH"
            ? (options_.user.empty() ? "AUTH (password)" : "AUTH as user \"" + options_.user + "\"")
            : "SELECT " + std::to_string(options_.database);
    std::string hint;
    if (StartsWith(r.str, "NOAUTH")) hint = " (the server requires a password: set password=)";
    return Status::FailedPrecondition("redis " + server_name_ + ": " + what + " refused: " + r.str +
                                      hint);
  }
  if (redisSetTimeout(ctx, ToTimeval(options_.command_timeout)) != REDIS_OK) {
    return ConnectionError(ctx, "connecting");
  }
  return conn;
}

Result<std::unique_ptr<RedisClient::Conn>> RedisClient::Open(bool blocking) {
  {
    internal::MutexLock lock(mu_);
    const TimePoint now = clock_->Now();
    if (now < next_connect_at_) {
      return Unavailable("not connected (" + last_connect_error_ + "); next reconnect attempt in " +
                         std::to_string(std::max<long long>(1, ToMillis(next_connect_at_ - now))) +
                         " ms");
    }
  }
  Result<std::unique_ptr<Conn>> r = OpenUnlocked();
  internal::MutexLock lock(mu_);
  if (r.ok()) {
    backoff_ = Duration::zero();
    next_connect_at_ = TimePoint();
    (*r)->generation = generation_;
    (*r)->blocking = blocking;
  } else if (r.status().code() == StatusCode::kUnavailable) {
    backoff_ = backoff_ == Duration::zero()
                   ? options_.reconnect_backoff_min
                   : std::min<Duration>(backoff_ * 2, options_.reconnect_backoff_max);
    // Jittered in [backoff/2, backoff], so that many clients of one server
    // do not reconnect in lockstep after it restarts.
    std::uniform_int_distribution<Duration::rep> jitter(backoff_.count() / 2, backoff_.count());
    next_connect_at_ = clock_->Now() + Duration(jitter(rng_));
    std::string msg = r.status().message();
    const std::string prefix = "redis " + server_name_ + ": ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg = msg.substr(prefix.size());
    last_connect_error_ = "last error: " + msg;
  }
  return r;
}

Result<std::unique_ptr<RedisClient::Conn>> RedisClient::Checkout() {
  // Declared before the lock, so that they are closed after it is released.
  std::vector<std::unique_ptr<Conn>> stale;
  {
    internal::MutexLock lock(mu_);
    const TimePoint deadline = clock_->Now() + options_.command_timeout;
    while (true) {
      while (!idle_.empty()) {
        std::unique_ptr<Conn> c = std::move(idle_.back());
        idle_.pop_back();
        if (c->generation == generation_) return c;
        --open_;
        stale.push_back(std::move(c));
      }
      if (open_ < options_.pool_size) {
        ++open_;  // Taken now; opened below, without the lock.
        break;
      }
      if (clock_->Now() >= deadline) {
        return Status::DeadlineExceeded(
            "redis " + server_name_ + ": all " + std::to_string(options_.pool_size) +
            " connections of the pool stayed busy for " +
            std::to_string(ToMillis(options_.command_timeout)) + " ms (raise pool_size?)");
      }
      cv_.WaitUntil(mu_, *clock_, deadline);
    }
  }
  stale.clear();
  Result<std::unique_ptr<Conn>> r = Open(false);
  if (!r.ok()) {
    internal::MutexLock lock(mu_);
    --open_;
    cv_.NotifyOne();
  }
  return r;
}

void RedisClient::Return(std::unique_ptr<Conn> conn) {
  std::unique_ptr<Conn> to_close;
  {
    internal::MutexLock lock(mu_);
    if (conn->broken) ++generation_;
    const bool keep = !conn->broken && conn->generation == generation_;
    if (conn->blocking) {
      if (keep && idle_blocking_.size() < static_cast<std::size_t>(options_.pool_size)) {
        idle_blocking_.push_back(std::move(conn));
      } else {
        to_close = std::move(conn);
      }
      return;
    }
    if (keep) {
      idle_.push_back(std::move(conn));
    } else {
      --open_;
      to_close = std::move(conn);
    }
    cv_.NotifyOne();
  }
}

int RedisClient::OpenConnections() const {
  internal::MutexLock lock(mu_);
  return open_;
}

Result<std::vector<Reply>> RedisClient::RoundTrip(
    Conn& conn, const std::vector<std::vector<std::string>>& commands) {
  std::size_t size = 0;
  for (const std::vector<std::string>& cmd : commands) {
    if (cmd.empty()) return Status::InvalidArgument("redis " + server_name_ + ": empty command");
    size += RespSizeBound(cmd);
  }
  std::string request;
  request.reserve(size);
  for (const std::vector<std::string>& cmd : commands) AppendRespCommand(&request, cmd);
  return RoundTrip(conn, request, commands.size());
}

Result<std::vector<Reply>> RedisClient::RoundTrip(Conn& conn, std::string_view request,
                                                  std::size_t count) {
  SigpipeGuard no_sigpipe;
  redisContext* ctx = conn.ctx;
  if (redisAppendFormattedCommand(ctx, request.data(), request.size()) != REDIS_OK) {
    conn.broken = true;
    return ConnectionError(ctx, "sending a command");
  }
  std::vector<Reply> replies;
  replies.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    void* raw = nullptr;
    errno = 0;
    if (redisGetReply(ctx, &raw) != REDIS_OK || raw == nullptr) {
      conn.broken = true;
      Status s = ConnectionError(ctx, "waiting for a reply");
      if (raw != nullptr) freeReplyObject(raw);
      return s;
    }
    replies.push_back(Convert(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  return replies;
}

Result<Reply> RedisClient::Command(const std::vector<std::string>& argv) {
  return Guarded("RedisClient::Command", [&]() -> Result<Reply> {
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Checkout());
    Result<std::vector<Reply>> r = RoundTrip(*conn, {argv});
    Return(std::move(conn));
    if (!r.ok()) return r.status();
    return std::move(r->front());
  });
}

Result<std::vector<Reply>> RedisClient::Pipeline(
    const std::vector<std::vector<std::string>>& commands) {
  return Guarded("RedisClient::Pipeline", [&]() -> Result<std::vector<Reply>> {
    if (commands.empty()) return std::vector<Reply>();
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Checkout());
    Result<std::vector<Reply>> r = RoundTrip(*conn, commands);
    Return(std::move(conn));
    return r;
  });
}

namespace {

// EVALSHA of the script's digest, or (`with_source`) EVAL of its source,
// with `keys` and `args`, appended to `out`.
void AppendEval(std::string* out, bool with_source, const Script& script,
                const std::vector<std::string>& keys, const std::vector<std::string>& args) {
  const std::string& body = with_source ? script.lua() : script.sha1();
  out->reserve(out->size() + body.size() + RespSizeBound(keys) + RespSizeBound(args));
  AppendRespCommand(out, 3 + keys.size() + args.size());
  AppendRespArg(out, with_source ? "EVAL" : "EVALSHA");
  AppendRespArg(out, body);
  char digits[24];
  AppendRespArg(out, std::string_view(digits, std::to_chars(digits, digits + sizeof digits,
                                                            keys.size()).ptr - digits));
  for (const std::string& k : keys) AppendRespArg(out, k);
  for (const std::string& a : args) AppendRespArg(out, a);
}

bool IsNoScript(const Reply& r) { return r.is_error() && StartsWith(r.str, "NOSCRIPT"); }

}  // namespace

Result<Reply> RedisClient::Eval(const Script& script, const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) {
  return Guarded("RedisClient::Eval", [&]() -> Result<Reply> {
    std::string request;
    AppendEval(&request, false, script, keys, args);
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Checkout());
    Result<std::vector<Reply>> r = RoundTrip(*conn, request, 1);
    if (r.ok() && IsNoScript(r->front())) {
      request.clear();
      AppendEval(&request, true, script, keys, args);
      r = RoundTrip(*conn, request, 1);
    }
    Return(std::move(conn));
    if (!r.ok()) return r.status();
    return std::move(r->front());
  });
}

Result<std::vector<Reply>> RedisClient::EvalPipeline(const std::vector<ScriptCall>& calls) {
  return Guarded("RedisClient::EvalPipeline", [&]() -> Result<std::vector<Reply>> {
    if (calls.empty()) return std::vector<Reply>();
    std::string request;
    for (const ScriptCall& c : calls) {
      if (c.script == nullptr) {
        return Status::InvalidArgument("RedisClient::EvalPipeline: a call has no script");
      }
      AppendEval(&request, false, *c.script, c.keys, c.args);
    }
    JOBPACT_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Checkout());
    Result<std::vector<Reply>> r = RoundTrip(*conn, request, calls.size());
    if (r.ok()) {
      std::vector<std::size_t> again;
      request.clear();
      for (std::size_t i = 0; i < r->size(); ++i) {
        if (!IsNoScript((*r)[i])) continue;
        again.push_back(i);
        AppendEval(&request, true, *calls[i].script, calls[i].keys, calls[i].args);
      }
      if (!again.empty()) {
        Result<std::vector<Reply>> retried = RoundTrip(*conn, request, again.size());
        if (!retried.ok()) {
          r = retried.status();
        } else {
          for (std::size_t j = 0; j < again.size(); ++j) {
            (*r)[again[j]] = std::move((*retried)[j]);
          }
        }
      }
    }
    Return(std::move(conn));
    return r;
  });
}

Result<Reply> RedisClient::BlockingCommand(const std::vector<std::string>& argv, Duration timeout) {
  return Guarded("RedisClient::BlockingCommand", [&]() -> Result<Reply> {
    if (timeout < Duration::zero()) timeout = Duration::zero();
    std::unique_ptr<Conn> conn;
    {
      std::vector<std::unique_ptr<Conn>> stale;
      internal::MutexLock lock(mu_);
      while (!idle_blocking_.empty() && !conn) {
        std::unique_ptr<Conn> c = std::move(idle_blocking_.back());
        idle_blocking_.pop_back();
        if (c->generation == generation_) {
          conn = std::move(c);
        } else {
          stale.push_back(std::move(c));
        }
      }
    }
    if (!conn) {
      JOBPACT_ASSIGN_OR_RETURN(conn, Open(true));
    }
    if (redisSetTimeout(conn->ctx, ToTimeval(timeout + options_.command_timeout)) != REDIS_OK) {
      conn->broken = true;
      Status s = ConnectionError(conn->ctx, "setting a timeout");
      Return(std::move(conn));
      return s;
    }
    Result<std::vector<Reply>> r = RoundTrip(*conn, {argv});
    Return(std::move(conn));
    if (!r.ok()) return r.status();
    return std::move(r->front());
  });
}

}  // namespace redis_internal
}  // namespace jobpact
