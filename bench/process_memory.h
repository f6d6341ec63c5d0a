// The bench programs' view of their own memory (Linux).
#ifndef JOBPACT_BENCH_PROCESS_MEMORY_H_
#define JOBPACT_BENCH_PROCESS_MEMORY_H_

#include <unistd.h>

#include <cstdio>

namespace jobpact {
namespace bench {

// The process's resident set in bytes (/proc/self/statm), 0 if unknown.
inline long ResidentBytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
  std::fclose(f);
  return pages_resident * sysconf(_SC_PAGESIZE);
}

}  // namespace bench
}  // namespace jobpact

#endif  // JOBPACT_BENCH_PROCESS_MEMORY_H_
