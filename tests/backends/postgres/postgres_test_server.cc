// The test server (postgres_test_server.h).
#include "tests/backends/postgres/postgres_test_server.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/backends/free_port.h"

namespace jobpact {
namespace postgres_testing {
namespace {

// The directory of initdb and postgres: JOBPACT_POSTGRES_BINDIR, else the
// newest /usr/lib/postgresql/<version>/bin (Debian), else "" (PATH).
std::string BinDir() {
  const char* env = std::getenv("JOBPACT_POSTGRES_BINDIR");
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  std::string best;
  int best_version = -1;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = e.path().filename().string();
    const int v = std::atoi(name.c_str());
    if (v > best_version && std::filesystem::exists(e.path() / "bin" / "postgres", ec)) {
      best_version = v;
      best = (e.path() / "bin").string();
    }
  }
  return best;
}

std::string Bin(const std::string& name) {
  const std::string dir = BinDir();
  return dir.empty() ? name : dir + "/" + name;
}

// The uid/gid to run the server as: the postgres user when we are root
// (PostgreSQL refuses root), else ourselves.
bool ServerUser(uid_t* uid, gid_t* gid, std::string* why) {
  if (geteuid() != 0) {
    *uid = geteuid();
    *gid = getegid();
    return true;
  }
  const passwd* pw = getpwnam("postgres");
  if (pw == nullptr) {
    *why = "running as root and there is no `postgres` user to run the server as";
    return false;
  }
  *uid = pw->pw_uid;
  *gid = pw->pw_gid;
  return true;
}

// In a forked child: become uid/gid, die with the parent, then exec.
[[noreturn]] void ExecAs(uid_t uid, gid_t gid, pid_t parent, const std::string& log,
                         const std::vector<std::string>& argv) {
  if (getuid() != uid) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(126);
  }
  // After the credential change, which clears it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

struct Shared {
  std::once_flag once;
  std::string url;
  std::string reason;
  std::unique_ptr<PrivatePostgresServer> server;
};

Shared& TheShared() {
  // Destroyed at exit, which stops the private server by its PID.
  static Shared shared;
  return shared;
}

void Init(Shared& s) {
  const char* env = std::getenv("JOBPACT_POSTGRES_URL");
  if (env != nullptr && *env != '\0') {
    s.url = env;
    return;
  }
  s.server = std::make_unique<PrivatePostgresServer>();
  std::string why = s.server->Start();
  if (!why.empty()) {
    s.reason = "JOBPACT_POSTGRES_URL is not set and a private PostgreSQL server did not start: " +
               why;
    s.server.reset();
    return;
  }
  s.url = s.server->url();
}

}  // namespace

std::string PostgresTestUrl() {
  Shared& s = TheShared();
  std::call_once(s.once, [&] { Init(s); });
  return s.url;
}

std::string PostgresUnavailableReason() {
  PostgresTestUrl();
  return TheShared().reason;
}

bool PostgresRequired() {
  const char* env = std::getenv("JOBPACT_REQUIRE_POSTGRES");
  return env != nullptr && std::string(env) == "1";
}

std::string FreshSchema() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[32];
  std::snprintf(buf, sizeof buf, "t_%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

postgres::PostgresOptions TestOptions() {
  Result<postgres::PostgresOptions> o = postgres::ParsePostgresUrl(PostgresTestUrl());
  postgres::PostgresOptions out = o.ok() ? *o : postgres::PostgresOptions{};
  out.schema = FreshSchema();
  out.pool_size = 4;
  return out;
}

PgConnPtr Connect(const postgres::PostgresOptions& o, std::string* error) {
  std::vector<std::string> k = {"host", "port", "dbname", "connect_timeout"};
  std::vector<std::string> v = {o.host, std::to_string(o.port), o.database, "5"};
  if (!o.user.empty()) {
    k.push_back("user");
    v.push_back(o.user);
  }
  if (!o.password.empty()) {
    k.push_back("password");
    v.push_back(o.password);
  }
  std::vector<const char*> kp, vp;
  for (auto& s : k) kp.push_back(s.c_str());
  for (auto& s : v) vp.push_back(s.c_str());
  kp.push_back(nullptr);
  vp.push_back(nullptr);
  PgConnPtr conn(PQconnectdbParams(kp.data(), vp.data(), 0));
  if (conn == nullptr || PQstatus(conn.get()) != CONNECTION_OK) {
    if (error != nullptr) *error = conn ? PQerrorMessage(conn.get()) : "out of memory";
    return nullptr;
  }
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);
  return conn;
}

std::string Query(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  std::string out;
  const ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    out = std::string("ERROR: ") + PQresultErrorMessage(r);
  } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
    out = PQgetvalue(r, 0, 0);
  }
  PQclear(r);
  return out;
}

void DropSchema(const postgres::PostgresOptions& options) {
  PgConnPtr conn = Connect(options);
  if (conn) (void)Query(conn.get(), "DROP SCHEMA IF EXISTS \"" + options.schema + "\" CASCADE");
}

PrivatePostgresServer::~PrivatePostgresServer() {
  StopImmediately();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string PrivatePostgresServer::Start() {
  if (pid_ > 0) return "";
  uid_t uid = 0;
  gid_t gid = 0;
  std::string why;
  if (!ServerUser(&uid, &gid, &why)) return why;
  const pid_t parent = getpid();
  if (dir_.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "jobpact_pg_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
    dir_ = tmpl;
    if (chown(dir_.c_str(), uid, gid) != 0) return std::string("chown: ") + std::strerror(errno);
  }
  const std::string log = dir_ + "/server.log";
  if (!initialized_) {
    const pid_t pid = fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) {
      ExecAs(uid, gid, parent, dir_ + "/initdb.log",
             {Bin("initdb"), "-D", dir_ + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8",
              "--locale=C.UTF-8", "--no-sync"});
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                 ? Bin("initdb") + " not found (install postgresql, or set JOBPACT_POSTGRES_BINDIR)"
                 : "initdb failed (see " + dir_ + "/initdb.log)";
    }
    initialized_ = true;
  }
  std::string last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const bool fixed_port = port_ != 0;
    if (!fixed_port) port_ = backend_testing::FreeLoopbackPort();
    if (port_ == 0) return "no free port on 127.0.0.1";
    const pid_t pid = fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) {
      ExecAs(uid, gid, parent, log,
             {Bin("postgres"), "-D", dir_ + "/data", "-p", std::to_string(port_), "-k", dir_, "-c",
              "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300", "-c",
              "shared_buffers=32MB"});
    }
    pid_ = pid;
    const std::string conninfo =
        "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=postgres user=postgres "
        "connect_timeout=2";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        last = (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                   ? Bin("postgres") + " not found"
                   : "postgres exited at start on port " + std::to_string(port_) + " (see " + log +
                         ")";
        break;
      }
      if (PQping(conninfo.c_str()) == PQPING_OK) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid_ > 0) {
      StopImmediately();
      last = "postgres did not accept connections on port " + std::to_string(port_) +
             " within 20 s (see " + log + ")";
    }
    if (last.find("not found") != std::string::npos) return last;
    if (!fixed_port) port_ = 0;
  }
  return last;
}

void PrivatePostgresServer::StopImmediately() {
  if (pid_ <= 0) return;
  kill(pid_, SIGQUIT);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
}

}  // namespace postgres_testing
}  // namespace jobpact
