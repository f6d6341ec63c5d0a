// CommitCutProxy: a TCP proxy on 127.0.0.1 in front of a PostgreSQL server
// that, once armed, cuts the connection at the next COMMIT a client sends:
// before the server sees it (nothing commits), or after the server's reply
// (the transaction committed; the client never hears so). That is the one
// failure a client cannot tell apart from the other, and the backend must
// answer both with an error that says the outcome is unknown, never with a
// success for work that was not stored.
//
// It reads the frontend protocol only as far as it must: the untyped
// messages before the session starts (SSLRequest, GSSENCRequest, the
// startup message) and then typed messages, where a simple query ('Q')
// whose text starts with COMMIT is the one it cuts at. Everything else is
// passed through byte for byte.
//
// Thread-safe. A test-only helper.
#ifndef JOBPACT_TESTS_BACKENDS_POSTGRES_COMMIT_CUT_PROXY_H_
#define JOBPACT_TESTS_BACKENDS_POSTGRES_COMMIT_CUT_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace jobpact {
namespace postgres_testing {

class CommitCutProxy {
 public:
  enum class Cut { kNone, kBeforeCommit, kAfterCommit };

  // Listens on a free loopback port, in front of 127.0.0.1:server_port.
  explicit CommitCutProxy(int server_port) : server_port_(server_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~CommitCutProxy() {
    stopping_ = true;
    // shutdown wakes the accept; the descriptors are closed only once no
    // thread uses them (a close racing a read is a race on the fd).
    shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    close(listen_fd_);
    std::vector<std::thread> pumps;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
      pumps.swap(pumps_);
    }
    for (std::thread& t : pumps) t.join();
    for (int fd : fds_) close(fd);
  }
  CommitCutProxy(const CommitCutProxy&) = delete;
  CommitCutProxy& operator=(const CommitCutProxy&) = delete;

  // 0 if it could not listen.
  int port() const { return port_; }
  // Cuts at the next COMMIT of any connection, once.
  void Arm(Cut cut) { armed_ = static_cast<int>(cut); }
  // How many COMMITs were cut so far.
  int cuts() const { return cuts_; }

 private:
  struct Link {
    int client = -1;
    int server = -1;
    std::atomic<bool> drop_next_reply{false};
  };

  void AcceptLoop() {
    while (!stopping_) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(server_port_));
      if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(client);
        close(server);
        continue;
      }
      auto link = std::make_shared<Link>();
      link->client = client;
      link->server = server;
      std::lock_guard<std::mutex> l(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, link] { ClientToServer(*link); });
      pumps_.emplace_back([this, link] { ServerToClient(*link); });
    }
  }

  static bool SendAll(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  static std::uint32_t Be32(const char* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return ntohl(v);
  }
  static void Sever(Link& link) {
    shutdown(link.client, SHUT_RDWR);
    shutdown(link.server, SHUT_RDWR);
  }

  // Passes the client's messages on, one whole message at a time, and
  // cuts at an armed COMMIT.
  void ClientToServer(Link& link) {
    std::string buf;
    bool typed = false;  // After the startup message, every message has a type byte.
    char chunk[65536];
    for (;;) {
      const ssize_t r = recv(link.client, chunk, sizeof chunk, 0);
      if (r <= 0) break;
      buf.append(chunk, static_cast<std::size_t>(r));
      for (;;) {
        const std::size_t head = typed ? 5 : 4;
        if (buf.size() < head) break;
        const std::size_t len = Be32(buf.data() + head - 4) + (typed ? 1 : 0);
        if (buf.size() < len) break;
        if (!typed && len >= 8) {
          const std::uint32_t code = Be32(buf.data() + 4);
          // SSLRequest and GSSENCRequest wait for a one-byte answer and
          // are followed by another untyped message; the startup message
          // (protocol 3.0) starts the typed ones.
          if (code == 196608) typed = true;
        }
        const bool commit = typed && buf[0] == 'Q' && len > 5 &&
                            buf.compare(5, 6, "COMMIT") == 0;
        const int cut = commit ? armed_.exchange(0) : 0;
        if (cut == static_cast<int>(Cut::kBeforeCommit)) {
          ++cuts_;
          Sever(link);
          return;
        }
        if (cut == static_cast<int>(Cut::kAfterCommit)) link.drop_next_reply = true;
        if (!SendAll(link.server, buf.data(), len)) return;
        if (cut == static_cast<int>(Cut::kAfterCommit)) ++cuts_;
        buf.erase(0, len);
      }
    }
    Sever(link);
  }

  // Passes the server's bytes on; after an armed COMMIT went through, the
  // next reply (the server's answer to it, sent once the commit is durable)
  // is swallowed and the connection cut.
  void ServerToClient(Link& link) {
    char chunk[65536];
    for (;;) {
      const ssize_t r = recv(link.server, chunk, sizeof chunk, 0);
      if (r <= 0) break;
      if (link.drop_next_reply) break;
      if (!SendAll(link.client, chunk, static_cast<std::size_t>(r))) break;
    }
    Sever(link);
  }

  const int server_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> armed_{0};
  std::atomic<int> cuts_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

}  // namespace postgres_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_POSTGRES_COMMIT_CUT_PROXY_H_
