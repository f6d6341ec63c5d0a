// Private: the one exception boundary of the library's own code. Backends
// and stores must not throw (backend contract); user callbacks they run (a
// transactional effect) might. Whatever escapes becomes a Status here, with
// one mapping: std::bad_alloc -> kResourceExhausted, any other exception ->
// kInternal, each message naming the operation.
// (User handlers have their own boundary in the runner: a handler's throw is
// a failed attempt, classified, not a backend error.)
#ifndef JOBPACT_SRC_INTERNAL_GUARDED_H_
#define JOBPACT_SRC_INTERNAL_GUARDED_H_

#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "jobpact/status.h"

namespace jobpact {
namespace internal {

// The Status of the exception being handled. REQUIRES: called inside a
// catch block.
inline Status StatusOfCurrentException(std::string_view op) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(std::string(op) + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(op) + ": unexpected non-standard exception");
  }
}

// Runs `f`, returning what it returns, or the Status of what it threw.
template <typename F>
auto Guarded(std::string_view op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return StatusOfCurrentException(op);
  }
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_GUARDED_H_
