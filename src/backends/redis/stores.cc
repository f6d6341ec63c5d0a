// Helpers shared by the Redis lock and idempotency stores (stores.h).
#include "src/backends/redis/stores.h"

#include <charconv>
#include <string>

namespace jobpact {
namespace redis_internal {

Status UnexpectedReply(const RedisClient& client, std::string_view op, const Reply& reply) {
  std::string what;
  switch (reply.type) {
    case Reply::Type::kError:
      what = "error reply: " + reply.str;
      break;
    case Reply::Type::kNil:
      what = "nil reply";
      break;
    case Reply::Type::kInteger:
      what = "integer reply " + std::to_string(reply.integer);
      break;
    case Reply::Type::kArray:
      what = "array reply of " + std::to_string(reply.elements.size()) + " elements";
      break;
    default:
      what = "reply \"" + reply.str.substr(0, 80) + "\"";
      break;
  }
  return Status::Internal("redis " + client.server_name() + ": " + std::string(op) +
                          ": unexpected " + what +
                          " (was a key of this namespace changed by something else?)");
}

bool ReplyInt(const Reply& r, std::int64_t* out) {
  if (r.type == Reply::Type::kInteger) {
    *out = r.integer;
    return true;
  }
  if (r.type != Reply::Type::kString && r.type != Reply::Type::kStatus) return false;
  const char* end = r.str.data() + r.str.size();
  auto [ptr, ec] = std::from_chars(r.str.data(), end, *out);
  return !r.str.empty() && ec == std::errc() && ptr == end;
}

}  // namespace redis_internal
}  // namespace jobpact
