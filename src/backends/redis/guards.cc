#include "src/backends/redis/guards.h"

#include <cstdint>
#include <string>

#include "jobpact/job.h"
#include "src/backends/redis/stores.h"

namespace jobpact {
namespace redis_internal {

Result<LockLease> ParseAcquireReply(const RedisClient& client, std::string_view op,
                                    std::string_view key, const Reply& r) {
  std::int64_t taken = -1;
  std::int64_t token = 0;
  std::int64_t exp = 0;
  if (r.type != Reply::Type::kArray || r.elements.size() != 4 ||
      !ReplyInt(r.elements[0], &taken) || (taken != 0 && taken != 1) ||
      r.elements[1].type != Reply::Type::kString || !ReplyInt(r.elements[2], &token) ||
      token <= 0 || !ReplyInt(r.elements[3], &exp)) {
    return UnexpectedReply(client, op, r);
  }
  LockLease lease;
  lease.key = std::string(key);
  lease.owner = r.elements[1].str;
  lease.fencing_token = static_cast<std::uint64_t>(token);
  lease.expires_at = FromMicros(exp);
  if (taken == 0) {
    return Status::Aborted("lock " + std::string(key) + " is held by " + lease.owner + " until " +
                           FormatRfc3339(lease.expires_at));
  }
  return lease;
}

Result<ClaimOutcome> ParseClaimReply(const RedisClient& client, std::string_view op,
                                     std::string_view key, const Reply& r) {
  std::int64_t kind = -1;
  std::int64_t exp = 0;
  if (r.type != Reply::Type::kArray || r.elements.size() != 5 || !ReplyInt(r.elements[0], &kind) ||
      kind < 0 || kind > 2 || !ReplyInt(r.elements[4], &exp)) {
    return UnexpectedReply(client, op, r);
  }
  ClaimOutcome out;
  out.kind = kind == 0   ? ClaimOutcome::Kind::kClaimed
             : kind == 1 ? ClaimOutcome::Kind::kCompleted
                         : ClaimOutcome::Kind::kInProgress;
  out.record.key = std::string(key);
  out.record.state = r.elements[1].str == "c" ? IdempotencyRecord::State::kCompleted
                                              : IdempotencyRecord::State::kInProgress;
  out.record.owner = r.elements[2].str;
  out.record.result = r.elements[3].str;
  out.record.expires_at = FromMicros(exp);
  return out;
}

}  // namespace redis_internal
}  // namespace jobpact
