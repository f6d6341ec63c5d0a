#include "jobpact/failure.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

#if defined(__has_include)
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define JOBPACT_HAVE_CXXABI 1
#endif
#endif

namespace jobpact {
namespace {

// A human-readable type name ("std::runtime_error" rather than
// "St13runtime_error"): the code of an unclassified exception ends up in the
// DLQ and in metrics labels, where people read it. Falls back to the
// implementation's name when demangling is unavailable or fails.
std::string Demangle(const char* mangled) {
  if (mangled == nullptr) return "unknown type";
#ifdef JOBPACT_HAVE_CXXABI
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  if (status == 0 && demangled != nullptr) return demangled.get();
#endif
  return mangled;
}

// The type of the exception currently being handled, for exceptions that are
// not std::exception (a thrown int). Must be called inside a catch block.
std::string CurrentExceptionTypeName() {
#ifdef JOBPACT_HAVE_CXXABI
  if (const std::type_info* type = abi::__cxa_current_exception_type(); type != nullptr) {
    return Demangle(type->name());
  }
#endif
  return "unknown exception";
}

// The machine-readable code of an exception that is not a JobError.
std::string ExceptionCode(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& se) {
    return "system_error:" + std::string(se.code().category().name()) + ":" +
           std::to_string(se.code().value());
  } catch (const std::exception& ex) {
    return Demangle(typeid(ex).name());
  } catch (...) {
    return "non_std_exception";
  }
}

constexpr std::string_view kTypeRulePrefix = "type:";

}  // namespace

FailureClass ClassifyStatusCode(StatusCode code) {
  switch (code) {
    // "Not processed, try again later": the gRPC retryable set plus aborted
    // (a lost race, which a later attempt may win).
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kResourceExhausted:
    case StatusCode::kAborted:
      return FailureClass::kTransient;
    // The input or the world is wrong; repeating the same job cannot help.
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      return FailureClass::kPermanent;
    case StatusCode::kOk:
    case StatusCode::kCancelled:
    case StatusCode::kUnknown:
    case StatusCode::kInternal:
      return FailureClass::kUnknown;
  }
  return FailureClass::kUnknown;
}

Failure FailureFromStatus(const Status& status) {
  Failure f;
  f.failure_class = ClassifyStatusCode(status.code());
  f.code = std::string(StatusCodeName(status.code()));
  // An OK status is a caller bug (there was no failure); say so instead of
  // recording an empty message.
  f.message = status.ok() ? "FailureFromStatus called with an OK status" : status.message();
  return f;
}

Classifier& Classifier::AddRule(std::string name, Rule rule) {
  // AddType names its rule after typeid(E).name(), which is mangled; show
  // the readable name in Describe().
  if (name.compare(0, kTypeRulePrefix.size(), kTypeRulePrefix) == 0) {
    name = std::string(kTypeRulePrefix) + Demangle(name.c_str() + kTypeRulePrefix.size());
  }
  rules_.push_back(NamedRule{std::move(name), std::move(rule)});
  return *this;
}

Classifier& Classifier::AddSystemError(std::error_condition code, FailureClass c) {
  std::string name = "system_error == " + std::string(code.category().name()) + ":" +
                     std::to_string(code.value()) + " (" + code.message() + ")";
  return AddRule(std::move(name),
                 [code, c](const std::exception_ptr& e) -> std::optional<FailureClass> {
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::system_error& se) {
                     // error_code == error_condition asks the code's category
                     // for equivalence, so errc::connection_reset matches both
                     // generic_category and system_category codes.
                     if (se.code() == code) return c;
                     return std::nullopt;
                   } catch (...) {
                     return std::nullopt;
                   }
                 });
}

Classifier& Classifier::AddSystemErrorCategory(const std::error_category& category,
                                               FailureClass c) {
  std::string name = "system_error category " + std::string(category.name());
  // Categories are singletons compared by address, so holding a pointer is
  // what operator== does anyway.
  const std::error_category* cat = &category;
  return AddRule(std::move(name),
                 [cat, c](const std::exception_ptr& e) -> std::optional<FailureClass> {
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::system_error& se) {
                     if (se.code().category() == *cat) return c;
                     return std::nullopt;
                   } catch (...) {
                     return std::nullopt;
                   }
                 });
}

// Order: JobError (the handler said what it meant) before any rule, then the
// rules in order, first match wins, then kUnknown. Everything runs inside a
// try block because this is called from the runner's catch boundary on a
// worker thread, where a second exception would have nowhere to go; a rule
// that throws is treated as not matching.
Failure Classifier::Classify(const std::exception_ptr& e) const {
  try {
    Failure f;
    if (e == nullptr) {
      f.code = "null_exception";
      f.message = "Classify called with a null exception_ptr";
      return f;
    }
    f.message = DescribeException(e);
    try {
      std::rethrow_exception(e);
    } catch (const JobError& je) {
      f.failure_class = je.failure_class();
      f.code = je.code();
      return f;
    } catch (...) {
      f.code = ExceptionCode(e);
    }
    for (const NamedRule& r : rules_) {
      std::optional<FailureClass> c;
      try {
        c = r.rule(e);
      } catch (...) {
        continue;
      }
      if (c.has_value()) {
        f.failure_class = *c;
        return f;
      }
    }
    f.failure_class = FailureClass::kUnknown;
    return f;
  } catch (...) {
    // Out of memory while building strings, most likely. Short literals fit
    // the small-string buffer, so this path does not allocate.
    Failure f;
    f.code = "classify_failed";
    return f;
  }
}

std::vector<std::string> Classifier::Describe() const {
  std::vector<std::string> out;
  out.reserve(rules_.size());
  for (const NamedRule& r : rules_) out.push_back(r.name);
  return out;
}

std::string DescribeException(const std::exception_ptr& e) {
  try {
    if (e == nullptr) return "null exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return Demangle(typeid(ex).name()) + ": " + ex.what();
    } catch (...) {
      return CurrentExceptionTypeName();
    }
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace jobpact
