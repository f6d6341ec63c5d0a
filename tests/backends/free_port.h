// A loopback port the kernel calls free right now, for the test servers the
// backends' tests start (Redis, PostgreSQL). The port may still be taken
// before the server binds it; callers retry.
#ifndef JOBPACT_TESTS_BACKENDS_FREE_PORT_H_
#define JOBPACT_TESTS_BACKENDS_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace jobpact {
namespace backend_testing {

// Binds 127.0.0.1:0, reads the port and closes it; 0 on failure.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace backend_testing
}  // namespace jobpact

#endif  // JOBPACT_TESTS_BACKENDS_FREE_PORT_H_
