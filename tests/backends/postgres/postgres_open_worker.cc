// A process for PostgresBackendTest.ProcessesStartingTogetherMigrateOnce:
// waits until a given wall-clock instant (so that several start their
// migration together), opens the backend on <schema> (creating or
// migrating it) and exits 0, or prints why not and exits 1.
//
//   postgres_open_worker <postgres url> <schema> <start at, ms since the epoch>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "jobpact/clock.h"
#include "jobpact/postgres/postgres_backend.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <postgres url> <schema> <start at, ms since the epoch>\n",
                 argv[0]);
    return 2;
  }
  auto options = jobpact::postgres::ParsePostgresUrl(argv[1]);
  if (!options.ok()) {
    std::fprintf(stderr, "url: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->schema = argv[2];
  options->pool_size = 1;
  std::this_thread::sleep_until(std::chrono::system_clock::time_point(
      std::chrono::milliseconds(std::strtoll(argv[3], nullptr, 10))));
  auto backend = jobpact::postgres::PostgresBackend::Open(*options, jobpact::SystemClock::Default());
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  return 0;
}
