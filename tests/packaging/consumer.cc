// A minimal consumer: it must compile against the public headers alone and
// link against jobpact::backends (and through it jobpact::jobpact),
// whichever way jobpact was brought in.
#include <iostream>

#include "jobpact/jobpact.h"

int main() {
  jobpact::Status s = jobpact::Status::Unavailable("probe");
  if (s.ok() || s.code() != jobpact::StatusCode::kUnavailable) return 1;
  auto clock = jobpact::SystemClock::Default();
  if (clock->Now().time_since_epoch().count() <= 0) return 1;
  jobpact::Result<jobpact::BackendBundle> backend = jobpact::OpenBackend("memory:");
  if (!backend.ok() || !backend->complete()) return 1;
  std::cout << "jobpact " << JOBPACT_VERSION_STRING << " linked: " << s << "\n";
  return 0;
}
