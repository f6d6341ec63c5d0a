// The WAL watch of the SQLite backend (change_watch.h).
#include "src/backends/sqlite/change_watch.h"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__linux__)
#include <poll.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <unistd.h>
#endif

#include "jobpact/status.h"

namespace jobpact {
namespace sqlite {
namespace internal {

#if defined(__linux__)

Result<std::unique_ptr<ChangeWatch>> ChangeWatch::Create(const std::filesystem::path& db_file) {
  const std::filesystem::path dir = db_file.parent_path().empty() ? "." : db_file.parent_path();
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    return Status::Unimplemented(std::string("SQLite change watch: inotify_init1: ") +
                                 std::strerror(errno));
  }
  // IN_MODIFY: a commit's write to the WAL. IN_CREATE: a new WAL (its
  // first frames come with an IN_MODIFY too; a watch that sees only the
  // creation still wakes at once).
  if (inotify_add_watch(fd, dir.c_str(), IN_MODIFY | IN_CREATE) < 0) {
    const int err = errno;
    close(fd);
    return Status::Unimplemented("SQLite change watch on " + dir.string() +
                                 ": inotify_add_watch: " + std::strerror(err));
  }
  const int timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd < 0) {
    const int err = errno;
    close(fd);
    return Status::Unimplemented(std::string("SQLite change watch: timerfd_create: ") +
                                 std::strerror(err));
  }
  return std::unique_ptr<ChangeWatch>(
      new ChangeWatch(fd, timer_fd, db_file.filename().string() + "-wal"));
}

ChangeWatch::~ChangeWatch() {
  close(timer_fd_);
  close(fd_);
}

Result<bool> ChangeWatch::Drain() {
  // Aligned as the kernel writes struct inotify_event.
  alignas(struct inotify_event) char buf[4096];
  bool changed = false;
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return changed;
      return Status::Unavailable(std::string("SQLite change watch: read: ") +
                                 std::strerror(errno));
    }
    for (ssize_t at = 0; at < n;) {
      struct inotify_event ev;
      std::memcpy(&ev, buf + at, sizeof ev);
      if ((ev.mask & (IN_Q_OVERFLOW | IN_IGNORED)) != 0) {
        changed = true;
      } else if (ev.len > 0 && wal_name_ == buf + at + sizeof ev) {
        changed = true;  // The name is NUL-terminated (and padded).
      }
      at += static_cast<ssize_t>(sizeof ev + ev.len);
    }
  }
}

Result<bool> ChangeWatch::Wait(Duration timeout) {
  JOBPACT_ASSIGN_OR_RETURN(bool changed, Drain());
  if (changed) return true;
  if (timeout <= Duration::zero()) return false;
  // The kernel keeps the deadline (a one-shot timer beside the watch), so
  // writes to other files of the directory, which wake the poll too, do
  // not restart the wait.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  itimerspec deadline{};
  deadline.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
  deadline.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
  if (timerfd_settime(timer_fd_, 0, &deadline, nullptr) != 0) {
    return Status::Unavailable(std::string("SQLite change watch: timerfd_settime: ") +
                               std::strerror(errno));
  }
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {timer_fd_, POLLIN, 0}};
    const int ready = poll(p, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(std::string("SQLite change watch: poll: ") +
                                 std::strerror(errno));
    }
    if ((p[0].revents & POLLIN) != 0) {
      JOBPACT_ASSIGN_OR_RETURN(changed, Drain());
      if (changed) return true;
    }
    if ((p[1].revents & POLLIN) != 0) {
      std::uint64_t expirations = 0;
      (void)read(timer_fd_, &expirations, sizeof expirations);
      return false;
    }
  }
}

#else  // !defined(__linux__)

Result<std::unique_ptr<ChangeWatch>> ChangeWatch::Create(const std::filesystem::path&) {
  return Status::Unimplemented("SQLite change watch: needs inotify (Linux)");
}
ChangeWatch::~ChangeWatch() = default;
Result<bool> ChangeWatch::Drain() { return false; }
Result<bool> ChangeWatch::Wait(Duration) { return false; }

#endif

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact
