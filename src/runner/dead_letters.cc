// The SPEC 7 guard-railed DLQ actions of a runner: ReplayDeadLetters and
// DiscardDeadLetter go through the operations facade (jobpact/operations.h),
// which a tool without a runner uses too; the runner reports each
// transition they make as one operator event, and logs what failed.
#include <string>
#include <utility>

#include "src/runner/runner_core.h"

namespace jobpact {
namespace internal {

namespace {

// The queue label of input that never parsed (it names no queue): the
// envelope's default, as on every other counter.
constexpr std::string_view kNoQueue = "default";

// The event of an operator's action on DLQ entry `e` (views into `e`).
TransitionEvent OperatorEvent(const DlqEntry& e, TimePoint at, std::string_view actor,
                              std::string_view why) {
  TransitionEvent event;
  event.job_id = e.job_id;
  event.job_type = e.job_type;
  event.queue = e.queue.empty() ? kNoQueue : std::string_view(e.queue);
  event.trace_id = e.trace_id;
  event.attempt = e.attempts;
  event.origin = TransitionOrigin::kOperator;
  event.from = JobStatus::kDeadLettered;
  event.dlq_reason = e.reason;
  event.actor = actor;
  event.operator_reason = why;
  event.at = at;
  event.total = at - e.created_at;
  return event;
}

class DlqListener final : public OperationsListener {
 public:
  DlqListener(const JobLogger& logger, const Clock& clock,
              std::function<void(const TransitionEvent&)> emit)
      : logger_(logger), clock_(clock), emit_(std::move(emit)) {}

  void OnReplayed(const DlqEntry& e, const ReplayRequest& req, TimePoint ready_at) override {
    TransitionEvent event = OperatorEvent(e, clock_.Now(), req.actor, req.reason);
    event.to = JobStatus::kQueued;
    event.reason = reason::kReplay;
    event.ready_at = ready_at;
    event.reset_attempts = req.reset_attempts;
    emit_(event);
  }

  void OnReplayFailed(const DlqEntry& e, const ReplayRequest& req, const Status& st) override {
    logger_.Log(LogLevel::kWarn, "dlq_replay_failed", nullptr,
                {{"job_id", e.job_id},
                 {"job_type", e.job_type},
                 {"actor", req.actor},
                 {"reason", req.reason},
                 {"error", st.ToString()}});
  }

  void OnDryRun(const ReplayRequest& req, const ReplayReport& report) override {
    logger_.Log(LogLevel::kInfo, "dlq_replay_dry_run", nullptr,
                {{"actor", req.actor},
                 {"reason", req.reason},
                 {"would_replay", static_cast<std::int64_t>(report.would_replay.size())},
                 {"failed", static_cast<std::int64_t>(report.failed.size())}});
  }

  void OnDiscarded(const DlqEntry& e, std::string_view queue, std::string_view actor,
                   std::string_view why) override {
    TransitionEvent event = OperatorEvent(e, clock_.Now(), actor, why);
    event.queue = queue;
    event.to = JobStatus::kDiscarded;
    event.reason = reason::kOperatorDiscard;
    emit_(event);
  }

 private:
  const JobLogger& logger_;
  const Clock& clock_;
  const std::function<void(const TransitionEvent&)> emit_;
};

}  // namespace

std::shared_ptr<OperationsListener> RunnerCore::NewDlqListener() {
  return std::make_shared<DlqListener>(logger_, clock(),
                                       [this](const TransitionEvent& e) { Emit(e); });
}

Result<ReplayReport> RunnerCore::ReplayDeadLetters(const ReplayRequest& req) {
  JOBPACT_ASSIGN_OR_RETURN(ReplayReport report, ops_->ReplayDeadLetters(req));
  if (!report.replayed.empty()) WakeOneWorker();
  return report;
}

Status RunnerCore::DiscardDeadLetter(std::string_view job_id, std::string_view actor,
                                     std::string_view why) {
  return ops_->DiscardDeadLetter(job_id, actor, why);
}

}  // namespace internal
}  // namespace jobpact
