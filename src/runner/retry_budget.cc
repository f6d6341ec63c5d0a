#include "jobpact/retry_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "src/internal/mutex.h"

namespace jobpact {
namespace {

// Balances are kept in millionths of a retry, so that percent = 0.2 deposits
// exactly 200000 units and sums never drift the way doubles would.
constexpr std::int64_t kUnitsPerRetry = 1'000'000;
// Keeps min_retries_per_second * window (and so the reserve) far from overflow.
constexpr double kMaxReserveRetries = 1e12;

std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

std::int64_t FloorMod(std::int64_t a, std::int64_t b) { return a - FloorDiv(a, b) * b; }

// a * b, saturated to the int64 range. REQUIRES: a, b >= 0.
std::int64_t SaturatingMul(std::int64_t a, std::int64_t b) {
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) {
    return std::numeric_limits<std::int64_t>::max();
  }
  return a * b;
}

}  // namespace

std::string_view RetryBudgetExhaustedActionName(RetryBudgetExhaustedAction a) {
  switch (a) {
    case RetryBudgetExhaustedAction::kDefer:
      return "defer";
    case RetryBudgetExhaustedAction::kDeadLetter:
      return "dead_letter";
  }
  return "unknown";
}

Status ValidateRetryBudgetOptions(const RetryBudgetOptions& o) {
  if (!std::isfinite(o.percent) || o.percent < 0 || o.percent > 1000) {
    return Status::InvalidArgument(
        fmt::format("retry budget: percent must be in [0, 1000], got {}", o.percent));
  }
  if (o.window <= Duration::zero()) {
    return Status::InvalidArgument(
        fmt::format("retry budget: window must be positive, got {}s", ToSeconds(o.window)));
  }
  if (!std::isfinite(o.min_retries_per_second) || o.min_retries_per_second < 0) {
    return Status::InvalidArgument(fmt::format(
        "retry budget: min_retries_per_second must be >= 0, got {}", o.min_retries_per_second));
  }
  if (o.min_retries_per_second * ToSeconds(o.window) > kMaxReserveRetries) {
    return Status::InvalidArgument(
        "retry budget: min_retries_per_second * window is too large (over 1e12 retries)");
  }
  if (o.buckets < 1 || o.buckets > 3600) {
    return Status::InvalidArgument(
        fmt::format("retry budget: buckets must be in [1, 3600], got {}", o.buckets));
  }
  if (o.window / o.buckets <= Duration::zero()) {
    return Status::InvalidArgument("retry budget: window / buckets is shorter than a clock tick");
  }
  if (o.on_exhausted != RetryBudgetExhaustedAction::kDefer &&
      o.on_exhausted != RetryBudgetExhaustedAction::kDeadLetter) {
    return Status::InvalidArgument("retry budget: on_exhausted must be kDefer or kDeadLetter");
  }
  if (o.min_deferral <= Duration::zero()) {
    return Status::InvalidArgument(fmt::format(
        "retry budget: min_deferral must be positive, got {}s", ToSeconds(o.min_deferral)));
  }
  return Status::Ok();
}

// --- RetryBudget -----------------------------------------------------------------

class RetryBudget::Impl {
 public:
  Impl(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock);

  void RecordFirstAttempt() JOBPACT_EXCLUDES(mu_);
  bool TryRetry() JOBPACT_EXCLUDES(mu_);
  RetryReservation ReserveRetry(std::optional<TimePoint> not_after) JOBPACT_EXCLUDES(mu_);
  double Balance() JOBPACT_EXCLUDES(mu_);
  RetryBudgetSnapshot Snapshot() JOBPACT_EXCLUDES(mu_);

 private:
  struct Bucket {
    std::int64_t first_attempts = 0;
    std::int64_t retries = 0;
  };

  // Moves the window to the slice holding `now`, forgetting expired slices.
  // A clock that went backwards leaves the window where it is.
  void AdvanceLocked(TimePoint now) JOBPACT_REQUIRES(mu_);
  // The balance in millionths of a retry of a window holding these events.
  std::int64_t BalanceUnits(std::int64_t first_attempts, std::int64_t retries) const;
  // The balance in millionths of a retry. REQUIRES: window advanced.
  std::int64_t BalanceUnitsLocked() const JOBPACT_REQUIRES(mu_);
  // The balances of slices current_slice_ .. last, counting the events
  // known now and the booked retries (no new first attempts). REQUIRES:
  // window advanced, last >= current_slice_.
  std::vector<std::int64_t> FutureBalancesLocked(std::int64_t last) const JOBPACT_REQUIRES(mu_);
  // Retries booked for `slice`. (A member, not a lambda: the analysis
  // checks a lambda's body as if no lock were held.)
  std::int64_t BookedLocked(std::int64_t slice) const JOBPACT_REQUIRES(mu_);
  // The bucket of the newest slice.
  Bucket& CurrentBucketLocked() JOBPACT_REQUIRES(mu_);
  // TryRetry's decision. REQUIRES: window advanced.
  bool CanRetryNowLocked() const JOBPACT_REQUIRES(mu_);
  // The earliest slice >= `first` where one more retry fits (see
  // ReserveRetry and the file comment), or, if none can, the slice one
  // window after the last known event. REQUIRES: window advanced,
  // first > current_slice_.
  std::int64_t EarliestSliceLocked(std::int64_t first) const JOBPACT_REQUIRES(mu_);
  TimePoint SliceStart(std::int64_t slice) const;

  // Immutable after construction.
  const RetryBudgetOptions options_;
  const std::shared_ptr<Clock> clock_;
  const Duration slice_;
  const std::int64_t deposit_units_;  // percent, in millionths of a retry.
  const std::int64_t reserve_units_;  // min_retries_per_second * window, ditto.

  // Reads take it too: they advance the window.
  internal::PlainMutex mu_;
  std::vector<Bucket> buckets_ JOBPACT_GUARDED_BY(mu_);
  std::int64_t current_slice_ JOBPACT_GUARDED_BY(mu_) = 0;   // Index of the newest slice.
  std::int64_t first_attempts_ JOBPACT_GUARDED_BY(mu_) = 0;  // Sums over buckets_.
  std::int64_t retries_ JOBPACT_GUARDED_BY(mu_) = 0;
  // Retries booked for slices after current_slice_, by slice; moved into
  // buckets_ by AdvanceLocked when their slice begins.
  std::map<std::int64_t, std::int64_t> reserved_ JOBPACT_GUARDED_BY(mu_);
  std::int64_t reserved_total_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::int64_t rejected_total_ JOBPACT_GUARDED_BY(mu_) = 0;
  std::int64_t deferred_total_ JOBPACT_GUARDED_BY(mu_) = 0;
};

Result<std::unique_ptr<RetryBudget>> RetryBudget::Create(RetryBudgetOptions options,
                                                         std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateRetryBudgetOptions(options));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<RetryBudget>(new RetryBudget(options, std::move(clock)));
}

RetryBudget::RetryBudget(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock)
    : options_(options), impl_(std::make_unique<Impl>(options, std::move(clock))) {}

RetryBudget::Impl::Impl(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock)
    : options_(options),
      clock_(std::move(clock)),
      slice_(options.window / options.buckets),
      deposit_units_(std::llround(options.percent * kUnitsPerRetry)),
      reserve_units_(std::llround(options.min_retries_per_second * ToSeconds(options.window) *
                                  kUnitsPerRetry)) {
  // Not shared yet: the lock only keeps the analysis' rule simple.
  internal::MutexLock lock(mu_);
  buckets_.resize(static_cast<std::size_t>(options.buckets));
  current_slice_ = FloorDiv(clock_->Now().time_since_epoch().count(), slice_.count());
}

RetryBudget::~RetryBudget() = default;

void RetryBudget::RecordFirstAttempt() { impl_->RecordFirstAttempt(); }
bool RetryBudget::TryRetry() { return impl_->TryRetry(); }
RetryReservation RetryBudget::ReserveRetry(std::optional<TimePoint> not_after) {
  return impl_->ReserveRetry(not_after);
}
double RetryBudget::Balance() const { return impl_->Balance(); }
RetryBudgetSnapshot RetryBudget::Snapshot() const { return impl_->Snapshot(); }

void RetryBudget::Impl::AdvanceLocked(TimePoint now) {
  const std::int64_t slice = FloorDiv(now.time_since_epoch().count(), slice_.count());
  if (slice <= current_slice_) return;  // Same slice, or the clock went back.
  const auto n = static_cast<std::int64_t>(buckets_.size());
  if (slice - current_slice_ >= n) {
    for (Bucket& b : buckets_) b = Bucket{};
    first_attempts_ = 0;
    retries_ = 0;
  } else {
    for (std::int64_t s = current_slice_ + 1; s <= slice; ++s) {
      Bucket& b = buckets_[static_cast<std::size_t>(FloorMod(s, n))];
      first_attempts_ -= b.first_attempts;
      retries_ -= b.retries;
      b = Bucket{};
    }
  }
  current_slice_ = slice;
  // Retries booked for the slices that have begun are retries of their
  // slice now (or already forgotten, after a long pause).
  while (!reserved_.empty() && reserved_.begin()->first <= slice) {
    const auto [booked_slice, count] = *reserved_.begin();
    if (booked_slice > slice - n) {
      buckets_[static_cast<std::size_t>(FloorMod(booked_slice, n))].retries += count;
      retries_ += count;
    }
    reserved_total_ -= count;
    reserved_.erase(reserved_.begin());
  }
}

std::int64_t RetryBudget::Impl::BalanceUnits(std::int64_t first_attempts, std::int64_t retries) const {
  const std::int64_t deposits = SaturatingMul(first_attempts, deposit_units_);
  const std::int64_t withdrawals = SaturatingMul(retries, kUnitsPerRetry);
  // reserve <= 1e18 and each term is in [0, INT64_MAX]: compute in two steps
  // that cannot overflow.
  const std::int64_t credit = deposits > std::numeric_limits<std::int64_t>::max() - reserve_units_
                                  ? std::numeric_limits<std::int64_t>::max()
                                  : reserve_units_ + deposits;
  return credit - withdrawals;
}

std::int64_t RetryBudget::Impl::BalanceUnitsLocked() const {
  return BalanceUnits(first_attempts_, retries_);
}

std::int64_t RetryBudget::Impl::BookedLocked(std::int64_t slice) const {
  auto it = reserved_.find(slice);
  return it == reserved_.end() ? 0 : it->second;
}

std::vector<std::int64_t> RetryBudget::Impl::FutureBalancesLocked(std::int64_t last) const {
  const auto n = static_cast<std::int64_t>(buckets_.size());
  const std::int64_t c = current_slice_;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(last - c + 1));
  // Sums over the window (t - n, t], slid one slice at a time.
  std::int64_t first_attempts = first_attempts_;
  std::int64_t retries = retries_;
  for (std::int64_t t = c; t <= last; ++t) {
    if (t > c) {
      retries += BookedLocked(t);             // Slice t enters the window...
      const std::int64_t gone = t - n;  // ...and slice t - n leaves it.
      if (gone <= c) {
        const Bucket& b = buckets_[static_cast<std::size_t>(FloorMod(gone, n))];
        first_attempts -= b.first_attempts;
        retries -= b.retries;
      } else {
        retries -= BookedLocked(gone);
      }
    }
    out.push_back(BalanceUnits(first_attempts, retries));
  }
  return out;
}

bool RetryBudget::Impl::CanRetryNowLocked() const {
  if (BalanceUnitsLocked() < kUnitsPerRetry) return false;
  if (reserved_.empty()) return true;
  // A retry now stays in the window until slice c + n - 1; every retry
  // booked there must stay paid for.
  const auto n = static_cast<std::int64_t>(buckets_.size());
  const std::int64_t c = current_slice_;
  const std::vector<std::int64_t> balance = FutureBalancesLocked(c + n - 1);
  for (const auto& [slice, count] : reserved_) {
    if (slice > c + n - 1) break;
    if (balance[static_cast<std::size_t>(slice - c)] < kUnitsPerRetry) return false;
  }
  return true;
}

std::int64_t RetryBudget::Impl::EarliestSliceLocked(std::int64_t first) const {
  const auto n = static_cast<std::int64_t>(buckets_.size());
  const std::int64_t c = current_slice_;
  const std::int64_t last_booked = reserved_.empty() ? c : reserved_.rbegin()->first;
  // From `horizon` on, every event known now has left the window and no
  // booked retry is in it: the balance is the reserve alone, so if a retry
  // does not fit there, it never will without new first attempts.
  const std::int64_t horizon = std::max({first, c + n, last_booked + n});
  const std::int64_t last = horizon + n - 1;
  const std::vector<std::int64_t> balance = FutureBalancesLocked(last);
  auto at = [&](std::int64_t t) { return static_cast<std::size_t>(t - c); };
  // A booked slice whose balance is below one retry cannot afford another
  // retry in its window. overdrawn[i] counts those in (c, c + i).
  std::vector<std::int64_t> overdrawn(balance.size() + 1, 0);
  for (std::int64_t t = c; t <= last; ++t) {
    const bool full = t > c && balance[at(t)] < kUnitsPerRetry && reserved_.count(t) != 0;
    overdrawn[at(t) + 1] = overdrawn[at(t)] + (full ? 1 : 0);
  }
  for (std::int64_t t = first; t <= horizon; ++t) {
    // A retry booked in slice t is in the windows of slices t .. t + n - 1.
    if (balance[at(t)] >= kUnitsPerRetry &&
        overdrawn[at(t + n - 1) + 1] - overdrawn[at(t) + 1] == 0) {
      return t;
    }
  }
  return horizon;  // No floor and nothing left to pay for it.
}

TimePoint RetryBudget::Impl::SliceStart(std::int64_t slice) const {
  return TimePoint(Duration(slice * slice_.count()));
}

RetryBudget::Impl::Bucket& RetryBudget::Impl::CurrentBucketLocked() {
  const auto n = static_cast<std::int64_t>(buckets_.size());
  return buckets_[static_cast<std::size_t>(FloorMod(current_slice_, n))];
}

void RetryBudget::Impl::RecordFirstAttempt() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  AdvanceLocked(now);
  ++CurrentBucketLocked().first_attempts;
  ++first_attempts_;
}

bool RetryBudget::Impl::TryRetry() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  AdvanceLocked(now);
  if (!CanRetryNowLocked()) {
    ++rejected_total_;
    return false;
  }
  ++CurrentBucketLocked().retries;
  ++retries_;
  return true;
}

RetryReservation RetryBudget::Impl::ReserveRetry(std::optional<TimePoint> not_after) {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  AdvanceLocked(now);
  if (CanRetryNowLocked()) {
    ++CurrentBucketLocked().retries;
    ++retries_;
    return RetryReservation{RetryReservation::Kind::kNow, now};
  }
  ++rejected_total_;
  const TimePoint earliest = now + options_.min_deferral;
  const std::int64_t first =
      std::max(current_slice_ + 1, FloorDiv(earliest.time_since_epoch().count(), slice_.count()));
  const std::int64_t slice = EarliestSliceLocked(first);
  const TimePoint at = std::max(earliest, SliceStart(slice));
  if (not_after.has_value() && at > *not_after) {
    return RetryReservation{RetryReservation::Kind::kPastDeadline, at};
  }
  ++reserved_[slice];
  ++reserved_total_;
  ++deferred_total_;
  return RetryReservation{RetryReservation::Kind::kDeferred, at};
}

double RetryBudget::Impl::Balance() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  AdvanceLocked(now);
  return static_cast<double>(BalanceUnitsLocked()) / kUnitsPerRetry;
}

RetryBudgetSnapshot RetryBudget::Impl::Snapshot() {
  const TimePoint now = clock_->Now();
  internal::MutexLock lock(mu_);
  AdvanceLocked(now);
  RetryBudgetSnapshot s;
  s.balance = static_cast<double>(BalanceUnitsLocked()) / kUnitsPerRetry;
  s.first_attempts = first_attempts_;
  s.retries = retries_;
  s.reserved = reserved_total_;
  s.rejected_total = rejected_total_;
  s.deferred_total = deferred_total_;
  return s;
}

// --- RetryBudgets ----------------------------------------------------------------

Result<std::unique_ptr<RetryBudgets>> RetryBudgets::Create(RetryBudgetOptions defaults,
                                                           std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateRetryBudgetOptions(defaults));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<RetryBudgets>(new RetryBudgets(defaults, std::move(clock)));
}

struct RetryBudgets::Registry {
  struct OverrideEntry {
    RetryBudgetOptions options;
    std::string reason;
  };

  // Shared on the hot path (a worker finding its type's budget), exclusive
  // to add a budget or an override.
  mutable internal::SharedMutex mu;
  std::map<std::string, std::unique_ptr<RetryBudget>, std::less<>> budgets JOBPACT_GUARDED_BY(mu);
  std::map<std::string, OverrideEntry, std::less<>> overrides JOBPACT_GUARDED_BY(mu);
};

RetryBudgets::RetryBudgets(const RetryBudgetOptions& defaults, std::shared_ptr<Clock> clock)
    : defaults_(defaults), clock_(std::move(clock)), registry_(std::make_unique<Registry>()) {}

RetryBudgets::~RetryBudgets() = default;

Status RetryBudgets::Override(std::string_view job_type, const RetryBudgetOptions& options,
                              std::string reason) {
  Status valid = ValidateRetryBudgetOptions(options);
  if (!valid.ok()) {
    return Status::InvalidArgument(fmt::format("override of {}: {}", job_type, valid.message()));
  }
  if (reason.empty()) {
    return Status::InvalidArgument(fmt::format(
        "override of {}: a reason is required (SPEC 11: every override is documented)", job_type));
  }
  Registry& r = *registry_;
  internal::MutexLock lock(r.mu);
  if (r.budgets.find(job_type) != r.budgets.end()) {
    return Status::FailedPrecondition(fmt::format(
        "the retry budget of {} is already in use; override it before the first job", job_type));
  }
  r.overrides.insert_or_assign(std::string(job_type), Registry::OverrideEntry{options, std::move(reason)});
  return Status::Ok();
}

RetryBudget& RetryBudgets::ForJobType(std::string_view job_type) {
  Registry& r = *registry_;
  {
    internal::ReaderMutexLock lock(r.mu);
    auto it = r.budgets.find(job_type);
    if (it != r.budgets.end()) return *it->second;
  }
  internal::MutexLock lock(r.mu);
  auto it = r.budgets.find(job_type);
  if (it != r.budgets.end()) return *it->second;  // Another thread made it first.
  auto o = r.overrides.find(job_type);
  const RetryBudgetOptions& options = o != r.overrides.end() ? o->second.options : defaults_;
  auto budget = std::unique_ptr<RetryBudget>(new RetryBudget(options, clock_));
  return *r.budgets.emplace(std::string(job_type), std::move(budget)).first->second;
}

void RetryBudgets::RecordFirstAttempt(std::string_view job_type) {
  ForJobType(job_type).RecordFirstAttempt();
}

bool RetryBudgets::TryRetry(std::string_view job_type) { return ForJobType(job_type).TryRetry(); }

RetryReservation RetryBudgets::ReserveRetry(std::string_view job_type,
                                            std::optional<TimePoint> not_after) {
  return ForJobType(job_type).ReserveRetry(not_after);
}

double RetryBudgets::Balance(std::string_view job_type) { return ForJobType(job_type).Balance(); }

std::map<std::string, RetryBudgetSnapshot> RetryBudgets::Snapshots() const {
  std::map<std::string, RetryBudgetSnapshot> out;
  const Registry& r = *registry_;
  internal::ReaderMutexLock lock(r.mu);
  for (const auto& [job_type, budget] : r.budgets) out.emplace(job_type, budget->Snapshot());
  return out;
}

std::string RetryBudgets::DescribeOverrides() const {
  std::string out;
  const Registry& r = *registry_;
  internal::ReaderMutexLock lock(r.mu);
  for (const auto& [job_type, entry] : r.overrides) {
    const RetryBudgetOptions& o = entry.options;
    out += fmt::format("{}: percent={} window={}s min_retries_per_second={} buckets={}", job_type,
                       o.percent, ToSeconds(o.window), o.min_retries_per_second, o.buckets);
    const RetryBudgetOptions defaults;
    if (o.on_exhausted != defaults.on_exhausted) {
      out += fmt::format(" on_exhausted={}", RetryBudgetExhaustedActionName(o.on_exhausted));
    }
    if (o.min_deferral != defaults.min_deferral) {
      out += fmt::format(" min_deferral={}s", ToSeconds(o.min_deferral));
    }
    out += fmt::format(" ({})\n", entry.reason);
  }
  return out;
}

}  // namespace jobpact
