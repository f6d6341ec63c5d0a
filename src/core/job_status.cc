#include "jobpact/job_status.h"

#include <cstddef>
#include <string>

namespace jobpact {
namespace {

struct StatusTransition {
  JobStatus from;
  JobStatus to;
};

// The one table of legal transitions (SPEC 2). Everything else in this file,
// including which statuses are final, is derived from it, so the contract
// cannot drift between two hand-written lists.
// clang-format off
constexpr StatusTransition kLegalTransitions[] = {
    {JobStatus::kQueued, JobStatus::kRunning},
    {JobStatus::kQueued, JobStatus::kDiscarded},
    {JobStatus::kRunning, JobStatus::kSucceeded},
    {JobStatus::kRunning, JobStatus::kRetryScheduled},
    {JobStatus::kRunning, JobStatus::kFailed},
    {JobStatus::kRunning, JobStatus::kDeadLettered},
    {JobStatus::kRunning, JobStatus::kDiscarded},
    {JobStatus::kRunning, JobStatus::kQueued},  // Lease expired: the worker was lost.
    {JobStatus::kRetryScheduled, JobStatus::kRunning},
    {JobStatus::kRetryScheduled, JobStatus::kDiscarded},
    {JobStatus::kDeadLettered, JobStatus::kQueued},     // Replay.
    {JobStatus::kDeadLettered, JobStatus::kDiscarded},  // Operator discard.
};
// clang-format on

struct StatusName {
  JobStatus status;
  std::string_view name;
};

// clang-format off
constexpr StatusName kStatusNames[] = {
    {JobStatus::kQueued, "queued"},
    {JobStatus::kRunning, "running"},
    {JobStatus::kSucceeded, "succeeded"},
    {JobStatus::kRetryScheduled, "retry_scheduled"},
    {JobStatus::kFailed, "failed"},
    {JobStatus::kDeadLettered, "dead_lettered"},
    {JobStatus::kDiscarded, "discarded"},
};
// clang-format on

constexpr bool InTable(JobStatus from, JobStatus to) {
  for (const StatusTransition& t : kLegalTransitions) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

constexpr bool HasOutgoing(JobStatus s) {
  for (const StatusTransition& t : kLegalTransitions) {
    if (t.from == s) return true;
  }
  return false;
}

// Compile-time checks of the table against the SPEC's list of final statuses:
// a final status must have no way out, and every other status must have one.
static_assert(!HasOutgoing(JobStatus::kSucceeded) && !HasOutgoing(JobStatus::kFailed) &&
                  !HasOutgoing(JobStatus::kDiscarded),
              "a final status has an outgoing transition");
static_assert(HasOutgoing(JobStatus::kQueued) && HasOutgoing(JobStatus::kRunning) &&
                  HasOutgoing(JobStatus::kRetryScheduled) && HasOutgoing(JobStatus::kDeadLettered),
              "a non-final status has no outgoing transition");
static_assert(std::size(kStatusNames) == std::size(kAllJobStatuses), "every status needs a name");

}  // namespace

std::string_view JobStatusName(JobStatus s) {
  for (const StatusName& n : kStatusNames) {
    if (n.status == s) return n.name;
  }
  // Only reachable with a value cast from an out-of-range integer.
  return "invalid_status";
}

Result<JobStatus> ParseJobStatus(std::string_view name) {
  for (const StatusName& n : kStatusNames) {
    if (n.name == name) return n.status;
  }
  std::string msg = "unknown job status '";
  msg += name;
  msg += "'; expected one of:";
  for (std::size_t i = 0; i < std::size(kStatusNames); ++i) {
    msg += i == 0 ? " " : ", ";
    msg += kStatusNames[i].name;
  }
  return Status::InvalidArgument(std::move(msg));
}

bool IsFinal(JobStatus s) { return !HasOutgoing(s); }

bool IsLegalTransition(JobStatus from, JobStatus to) { return InTable(from, to); }

Status CheckTransition(JobStatus from, JobStatus to) {
  if (InTable(from, to)) return Status::Ok();
  std::string msg = "illegal status transition ";
  msg += JobStatusName(from);
  msg += " -> ";
  msg += JobStatusName(to);
  if (IsFinal(from)) {
    msg += " (";
    msg += JobStatusName(from);
    msg += " is final)";
  }
  return Status::FailedPrecondition(std::move(msg));
}

}  // namespace jobpact
