#include "jobpact/queue_backend_wrapper.h"

#include <utility>

namespace jobpact {
namespace {

template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}
Status StatusOf(const Status& s) { return s; }

}  // namespace

// The operator side of a wrapped queue that has none: every call says so.
class QueueBackendWrapper::NoAdmin final : public QueueAdmin {
 public:
  static Status Missing() {
    return Status::Unimplemented(
        "the wrapped queue has no operator side (QueueAdmin); derive it from StoreBackend or "
        "pass its admin to QueueBackendWrapper");
  }
  Result<JobRecord> Get(std::string_view) override { return Missing(); }
  Result<std::vector<JobRecord>> ListJobs(const JobFilter&) override { return Missing(); }
  Result<QueueStats> Stats() override { return Missing(); }
  Result<CancelOutcome> Cancel(std::string_view, const DlqAction&) override { return Missing(); }
  Result<std::vector<DlqEntry>> ListDeadLetters(const DlqFilter&) override { return Missing(); }
  Result<DlqEntry> GetDeadLetter(std::string_view) override { return Missing(); }
  Status Replay(std::string_view, const DlqAction&) override { return Missing(); }
  Status Discard(std::string_view, const DlqAction&) override { return Missing(); }
  Result<int> PurgeDeadLetters(TimePoint) override { return Missing(); }
  Result<int> PurgeFinished(TimePoint) override { return Missing(); }
  Result<int> TrimFinished(const FinishedRetention&) override { return Missing(); }
  Result<ControlState> ReadControl() override { return Missing(); }
  Status SetControl(const ControlRule&) override { return Missing(); }
  Status ClearControl(const ControlRuleKey&, std::string_view, std::string_view) override {
    return Missing();
  }
  Result<std::vector<std::string>> ControlAudit(std::size_t) override { return Missing(); }
  Status PublishPolicies(const std::vector<PublishedPolicy>&) override { return Missing(); }
  Result<std::vector<PublishedPolicy>> ReadPolicies() override { return Missing(); }
};

std::string_view QueueMethodName(QueueMethod m) {
  switch (m) {
    case QueueMethod::kEnqueue:
      return "Enqueue";
    case QueueMethod::kEnqueueBatch:
      return "EnqueueBatch";
    case QueueMethod::kDeadLetterInvalid:
      return "DeadLetterInvalid";
    case QueueMethod::kDequeue:
      return "Dequeue";
    case QueueMethod::kRenew:
      return "Renew";
    case QueueMethod::kComplete:
      return "Complete";
    case QueueMethod::kCompleteBatch:
      return "CompleteBatch";
    case QueueMethod::kRecoverExpiredLeases:
      return "RecoverExpiredLeases";
    case QueueMethod::kGet:
      return "Get";
    case QueueMethod::kFindDuplicate:
      return "FindDuplicate";
    case QueueMethod::kListDeadLetters:
      return "ListDeadLetters";
    case QueueMethod::kGetDeadLetter:
      return "GetDeadLetter";
    case QueueMethod::kReplay:
      return "Replay";
    case QueueMethod::kDiscard:
      return "Discard";
    case QueueMethod::kPurgeDeadLetters:
      return "PurgeDeadLetters";
    case QueueMethod::kPurgeFinished:
      return "PurgeFinished";
    case QueueMethod::kStats:
      return "Stats";
    case QueueMethod::kListJobs:
      return "ListJobs";
    case QueueMethod::kCancel:
      return "Cancel";
    case QueueMethod::kReadControl:
      return "ReadControl";
    case QueueMethod::kSetControl:
      return "SetControl";
    case QueueMethod::kClearControl:
      return "ClearControl";
    case QueueMethod::kControlAudit:
      return "ControlAudit";
    case QueueMethod::kPublishPolicies:
      return "PublishPolicies";
    case QueueMethod::kTrimFinished:
      return "TrimFinished";
    case QueueMethod::kReadPolicies:
      return "ReadPolicies";
  }
  return "?";
}

QueueBackendWrapper::QueueBackendWrapper(std::shared_ptr<QueueBackend> target,
                                         std::shared_ptr<QueueAdmin> admin)
    : target_(std::move(target)),
      admin_(admin ? std::move(admin) : std::dynamic_pointer_cast<QueueAdmin>(target_)) {}

QueueAdmin& QueueBackendWrapper::AdminOrNone() {
  if (admin_ != nullptr) return *admin_;
  static NoAdmin none;
  return none;
}

QueueBackendWrapper::~QueueBackendWrapper() = default;

Status QueueBackendWrapper::Intercept(QueueMethod, const std::function<Status()>& call) {
  return call();
}

template <typename R, typename F>
R QueueBackendWrapper::Forward(QueueMethod method, F&& f) {
  std::optional<R> result;
  Status s = Intercept(method, [&]() -> Status {
    result.emplace(f());
    return StatusOf(*result);
  });
  if (result.has_value() && s == StatusOf(*result)) return std::move(*result);
  if (s.ok()) {
    return Status::Internal(std::string(QueueMethodName(method)) +
                            ": Intercept returned OK without calling the target");
  }
  return s;
}

Result<EnqueueResult> QueueBackendWrapper::Enqueue(const Envelope& env,
                                                   const EnqueueOptions& options) {
  return Forward<Result<EnqueueResult>>(QueueMethod::kEnqueue,
                                        [&] { return target_->Enqueue(env, options); });
}

Result<std::vector<EnqueueResult>> QueueBackendWrapper::EnqueueBatch(
    const std::vector<Envelope>& envs, const EnqueueOptions& options) {
  return Forward<Result<std::vector<EnqueueResult>>>(
      QueueMethod::kEnqueueBatch, [&] { return target_->EnqueueBatch(envs, options); });
}

Result<std::string> QueueBackendWrapper::DeadLetterInvalid(
    std::string_view raw, const std::vector<FieldError>& problems) {
  return Forward<Result<std::string>>(QueueMethod::kDeadLetterInvalid,
                                      [&] { return target_->DeadLetterInvalid(raw, problems); });
}

Result<std::vector<Delivery>> QueueBackendWrapper::Dequeue(const DequeueRequest& request) {
  return Forward<Result<std::vector<Delivery>>>(QueueMethod::kDequeue,
                                                [&] { return target_->Dequeue(request); });
}

Status QueueBackendWrapper::DequeueInto(const DequeueRequest& request,
                                        std::vector<Delivery>* out) {
  // `*out` goes to the target as it came: the spent deliveries in it may
  // be reused there (StoreBackend::ReusesDeliveries).
  Status s = Forward<Status>(QueueMethod::kDequeue,
                             [&] { return target_->DequeueInto(request, out); });
  if (!s.ok()) out->clear();
  return s;
}

Result<Lease> QueueBackendWrapper::Renew(const Lease& lease, Duration extension,
                                         std::string_view checkpoint) {
  return Forward<Result<Lease>>(QueueMethod::kRenew,
                                [&] { return target_->Renew(lease, extension, checkpoint); });
}

Status QueueBackendWrapper::Complete(const Delivery& delivery, const Completion& completion) {
  return Forward<Status>(QueueMethod::kComplete,
                         [&] { return target_->Complete(delivery, completion); });
}

Status QueueBackendWrapper::Complete(Delivery&& delivery, const Completion& completion) {
  return Forward<Status>(QueueMethod::kComplete,
                         [&] { return target_->Complete(std::move(delivery), completion); });
}

std::vector<Status> QueueBackendWrapper::CompleteBatch(
    const std::vector<CompletionRequest>& requests) {
  std::vector<Status> out;
  Status s = Intercept(QueueMethod::kCompleteBatch, [&]() -> Status {
    out = target_->CompleteBatch(requests);
    return Status::Ok();
  });
  if (s.ok() && out.size() == requests.size()) return out;
  if (s.ok()) s = Status::Internal("CompleteBatch: Intercept returned OK without calling the target");
  return std::vector<Status>(requests.size(), s);
}

Result<std::vector<LeaseRecovery>> QueueBackendWrapper::RecoverExpiredLeases(int max_recoveries) {
  return Forward<Result<std::vector<LeaseRecovery>>>(
      QueueMethod::kRecoverExpiredLeases, [&] { return target_->RecoverExpiredLeases(max_recoveries); });
}

Result<JobRecord> QueueBackendWrapper::Get(std::string_view job_id) {
  return Forward<Result<JobRecord>>(QueueMethod::kGet, [&] { return AdminOrNone().Get(job_id); });
}

Result<std::optional<std::string>> QueueBackendWrapper::FindDuplicate(std::string_view dedup_key,
                                                                      std::string_view self_job_id,
                                                                      TimePoint since) {
  return Forward<Result<std::optional<std::string>>>(QueueMethod::kFindDuplicate, [&] {
    return target_->FindDuplicate(dedup_key, self_job_id, since);
  });
}

Result<std::vector<DlqEntry>> QueueBackendWrapper::ListDeadLetters(const DlqFilter& filter) {
  return Forward<Result<std::vector<DlqEntry>>>(QueueMethod::kListDeadLetters,
                                                [&] { return AdminOrNone().ListDeadLetters(filter); });
}

Result<DlqEntry> QueueBackendWrapper::GetDeadLetter(std::string_view job_id) {
  return Forward<Result<DlqEntry>>(QueueMethod::kGetDeadLetter,
                                   [&] { return AdminOrNone().GetDeadLetter(job_id); });
}

Status QueueBackendWrapper::Replay(std::string_view job_id, const DlqAction& action) {
  return Forward<Status>(QueueMethod::kReplay, [&] { return AdminOrNone().Replay(job_id, action); });
}

Status QueueBackendWrapper::Discard(std::string_view job_id, const DlqAction& action) {
  return Forward<Status>(QueueMethod::kDiscard, [&] { return AdminOrNone().Discard(job_id, action); });
}

Result<int> QueueBackendWrapper::PurgeDeadLetters(TimePoint older_than) {
  return Forward<Result<int>>(QueueMethod::kPurgeDeadLetters,
                              [&] { return AdminOrNone().PurgeDeadLetters(older_than); });
}

Result<int> QueueBackendWrapper::PurgeFinished(TimePoint older_than) {
  return Forward<Result<int>>(QueueMethod::kPurgeFinished,
                              [&] { return AdminOrNone().PurgeFinished(older_than); });
}

Result<int> QueueBackendWrapper::TrimFinished(const FinishedRetention& keep) {
  return Forward<Result<int>>(QueueMethod::kTrimFinished,
                              [&] { return AdminOrNone().TrimFinished(keep); });
}

Result<QueueStats> QueueBackendWrapper::Stats() {
  return Forward<Result<QueueStats>>(QueueMethod::kStats, [&] { return AdminOrNone().Stats(); });
}

Result<std::vector<JobRecord>> QueueBackendWrapper::ListJobs(const JobFilter& filter) {
  return Forward<Result<std::vector<JobRecord>>>(QueueMethod::kListJobs,
                                                 [&] { return AdminOrNone().ListJobs(filter); });
}

Result<CancelOutcome> QueueBackendWrapper::Cancel(std::string_view job_id,
                                                  const DlqAction& action) {
  return Forward<Result<CancelOutcome>>(QueueMethod::kCancel,
                                        [&] { return AdminOrNone().Cancel(job_id, action); });
}

Result<ControlState> QueueBackendWrapper::ReadControl() {
  return Forward<Result<ControlState>>(QueueMethod::kReadControl,
                                       [&] { return AdminOrNone().ReadControl(); });
}

Status QueueBackendWrapper::SetControl(const ControlRule& rule) {
  return Forward<Status>(QueueMethod::kSetControl, [&] { return AdminOrNone().SetControl(rule); });
}

Status QueueBackendWrapper::ClearControl(const ControlRuleKey& key, std::string_view actor,
                                         std::string_view reason) {
  return Forward<Status>(QueueMethod::kClearControl,
                         [&] { return AdminOrNone().ClearControl(key, actor, reason); });
}

Result<std::vector<std::string>> QueueBackendWrapper::ControlAudit(std::size_t limit) {
  return Forward<Result<std::vector<std::string>>>(
      QueueMethod::kControlAudit, [&] { return AdminOrNone().ControlAudit(limit); });
}

Status QueueBackendWrapper::PublishPolicies(const std::vector<PublishedPolicy>& policies) {
  return Forward<Status>(QueueMethod::kPublishPolicies,
                         [&] { return AdminOrNone().PublishPolicies(policies); });
}

Result<std::vector<PublishedPolicy>> QueueBackendWrapper::ReadPolicies() {
  return Forward<Result<std::vector<PublishedPolicy>>>(
      QueueMethod::kReadPolicies, [&] { return AdminOrNone().ReadPolicies(); });
}

}  // namespace jobpact
