// The test server (redis_test_server.h).
#include "tests/backends/redis/redis_test_server.h"

#include "tests/backends/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace jobpact {
namespace redis_testing {
namespace {

int FreePort() { return backend_testing::FreeLoopbackPort(); }

// True if 127.0.0.1:port answers PING with +PONG.
bool Pings(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
    char buf[16] = {};
    ok = recv(fd, buf, sizeof buf - 1, 0) > 0 && std::strncmp(buf, "+PONG", 5) == 0;
  }
  close(fd);
  return ok;
}

struct Shared {
  std::once_flag once;
  std::string url;
  std::string reason;
  std::unique_ptr<PrivateRedisServer> server;
};

Shared& TheShared() {
  // Destroyed at exit, which kills the private server by its PID.
  static Shared shared;
  return shared;
}

void Init(Shared& s) {
  const char* env = std::getenv("JOBPACT_REDIS_URL");
  if (env != nullptr && *env != '\0') {
    s.url = env;
    return;
  }
  s.server = std::make_unique<PrivateRedisServer>();
  std::string why = s.server->Start();
  if (!why.empty()) {
    s.reason = "JOBPACT_REDIS_URL is not set and a private redis-server did not start: " + why;
    s.server.reset();
    return;
  }
  s.url = s.server->url();
}

}  // namespace

std::string RedisTestUrl() {
  Shared& s = TheShared();
  std::call_once(s.once, [&] { Init(s); });
  return s.url;
}

std::string RedisUnavailableReason() {
  RedisTestUrl();
  return TheShared().reason;
}

bool RedisRequired() {
  const char* env = std::getenv("JOBPACT_REQUIRE_REDIS");
  return env != nullptr && std::string(env) == "1";
}

std::string FreshNamespace() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[32];
  std::snprintf(buf, sizeof buf, "t_%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

redis::RedisOptions TestOptions() {
  Result<redis::RedisOptions> o = redis::ParseRedisUrl(RedisTestUrl());
  redis::RedisOptions out = o.ok() ? *o : redis::RedisOptions{};
  out.key_namespace = FreshNamespace();
  return out;
}

PrivateRedisServer::~PrivateRedisServer() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string PrivateRedisServer::Start() {
  if (pid_ > 0) return "";
  if (dir_.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_redis_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
    dir_ = tmpl;
  }
  const char* bin_env = std::getenv("JOBPACT_REDIS_SERVER");
  const std::string bin = bin_env != nullptr && *bin_env != '\0' ? bin_env : "redis-server";
  std::string last;
  // A port found free may be taken before the server binds it: a few tries.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const bool fixed_port = port_ != 0;
    if (!fixed_port) port_ = FreePort();
    if (port_ == 0) return "no free port on 127.0.0.1";
    const std::string port = std::to_string(port_);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) {
      // The server dies with the test program, whatever kills that.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const std::string log = dir_ + "/redis.log";
      execlp(bin.c_str(), bin.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--dir",
             dir_.c_str(), "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile",
             log.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        last = WIFEXITED(status) && WEXITSTATUS(status) == 127
                   ? bin + " not found (install redis-server, or set JOBPACT_REDIS_SERVER)"
                   : bin + " exited at start on port " + port + " (see " + dir_ + "/redis.log)";
        break;
      }
      if (Pings(port_)) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ > 0) {
      Kill();
      last = bin + " did not answer PING on port " + port + " within 5 s";
    }
    if (last.find("not found") != std::string::npos) return last;
    if (!fixed_port) port_ = 0;
  }
  return last;
}

void PrivateRedisServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace redis_testing
}  // namespace jobpact
