// Private to the Redis client: a request in the protocol's own form (RESP:
// an array of bulk strings per command), written straight into one buffer
// that hiredis sends as it is (redisAppendFormattedCommand).
//
// Why not redisAppendCommandArgv: it formats each command into an sds of
// its own, argument by argument, after the caller has copied every argument
// into an argv array; for the queue's scripts (20-30 arguments a job, an
// envelope among them) that was 26 k instructions a job in the worker's
// process (callgrind, bench/peers). Here each argument is copied once.
#ifndef JOBPACT_SRC_BACKENDS_REDIS_RESP_H_
#define JOBPACT_SRC_BACKENDS_REDIS_RESP_H_

#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace jobpact {
namespace redis_internal {

// "<marker><n>\r\n": an array's or a bulk string's header.
inline void AppendRespHeader(std::string* out, char marker, std::size_t n) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out->push_back(marker);
  out->append(digits, end);
  out->append("\r\n", 2);
}

// Starts a command of `argc` arguments.
inline void AppendRespCommand(std::string* out, std::size_t argc) {
  AppendRespHeader(out, '*', argc);
}

// One argument: binary-safe (any byte, NUL included).
inline void AppendRespArg(std::string* out, std::string_view arg) {
  AppendRespHeader(out, '$', arg.size());
  out->append(arg.data(), arg.size());
  out->append("\r\n", 2);
}

// A whole command from its arguments.
inline void AppendRespCommand(std::string* out, const std::vector<std::string>& argv) {
  AppendRespCommand(out, argv.size());
  for (const std::string& a : argv) AppendRespArg(out, a);
}

// The bytes a command of these arguments takes, for reserving (an upper
// bound: 16 bytes of framing per argument).
inline std::size_t RespSizeBound(const std::vector<std::string>& args) {
  std::size_t n = 16;
  for (const std::string& a : args) n += a.size() + 16;
  return n;
}

}  // namespace redis_internal
}  // namespace jobpact

#endif  // JOBPACT_SRC_BACKENDS_REDIS_RESP_H_
