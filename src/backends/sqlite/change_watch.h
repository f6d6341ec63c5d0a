// Private to the SQLite backend: wakes an idle worker when any connection,
// in any process, commits to the database file, without polling it.
//
// In WAL mode (every writable jobpact database) a commit appends its frames
// to "<file>-wal" with write(2); inotify reports each such write. The watch
// is on the file's directory, not on the WAL file itself, because SQLite
// deletes the WAL when the last connection closes and creates a new one
// later: a watch on the directory sees every WAL the file will have.
// Linux only; elsewhere, or where inotify is out of watches, Create says
// kUnimplemented and the runner keeps its poll interval.
#ifndef JOBPACT_SRC_BACKENDS_SQLITE_CHANGE_WATCH_H_
#define JOBPACT_SRC_BACKENDS_SQLITE_CHANGE_WATCH_H_

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "jobpact/clock.h"
#include "jobpact/result.h"

namespace jobpact {
namespace sqlite {
namespace internal {

// Not thread-safe: one thread waits at a time (internal::WakeFanout).
class ChangeWatch {
 public:
  // Starts watching `db_file`'s WAL. Writes from then on are seen by the
  // next Wait, however long after them it comes.
  static Result<std::unique_ptr<ChangeWatch>> Create(const std::filesystem::path& db_file);

  ~ChangeWatch();
  ChangeWatch(const ChangeWatch&) = delete;
  ChangeWatch& operator=(const ChangeWatch&) = delete;

  // True at once if the WAL was written since the last call that returned
  // true (or since Create); otherwise blocks up to `timeout` for a write.
  // A lost event (the kernel's queue overflowed) or a watch the kernel
  // dropped (the directory went away) counts as a write: a spurious
  // wake-up costs one Dequeue, a missed one a whole poll interval.
  Result<bool> Wait(Duration timeout);

 private:
  ChangeWatch(int fd, int timer_fd, std::string wal_name)
      : fd_(fd), timer_fd_(timer_fd), wal_name_(std::move(wal_name)) {}
  // Reads the pending events without blocking; true if one is a write to
  // the WAL (or stands for one).
  Result<bool> Drain();

  const int fd_;        // inotify, on the file's directory.
  const int timer_fd_;  // A one-shot CLOCK_MONOTONIC timer: Wait's deadline.
  const std::string wal_name_;  // "<file name>-wal", without the directory.
};

}  // namespace internal
}  // namespace sqlite
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_SQLITE_CHANGE_WATCH_H_
