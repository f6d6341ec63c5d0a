// Private: the exception boundary of the in-memory backends, which must not
// throw (backend contract). Runs `f` and turns an escaping exception into a
// Status; the usual one is std::bad_alloc.
#ifndef JOBPACT_SRC_INTERNAL_GUARDED_H_
#define JOBPACT_SRC_INTERNAL_GUARDED_H_

#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "jobpact/status.h"

namespace jobpact {
namespace internal {

template <typename F>
auto Guarded(std::string_view op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(std::string(op) + ": " + e.what());
  } catch (...) {
    return Status::Internal(std::string(op) + ": unknown exception");
  }
}

}  // namespace internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_INTERNAL_GUARDED_H_
