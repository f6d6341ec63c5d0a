#include "jobpact/retry_budget.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

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
  return Status::Ok();
}

// --- RetryBudget -----------------------------------------------------------------

Result<std::unique_ptr<RetryBudget>> RetryBudget::Create(RetryBudgetOptions options,
                                                         std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateRetryBudgetOptions(options));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<RetryBudget>(new RetryBudget(options, std::move(clock)));
}

RetryBudget::RetryBudget(const RetryBudgetOptions& options, std::shared_ptr<Clock> clock)
    : options_(options),
      clock_(std::move(clock)),
      slice_(options.window / options.buckets),
      deposit_units_(std::llround(options.percent * kUnitsPerRetry)),
      reserve_units_(std::llround(options.min_retries_per_second * ToSeconds(options.window) *
                                  kUnitsPerRetry)),
      buckets_(static_cast<std::size_t>(options.buckets)) {
  current_slice_ = FloorDiv(clock_->Now().time_since_epoch().count(), slice_.count());
}

RetryBudget::~RetryBudget() = default;

void RetryBudget::AdvanceLocked(TimePoint now) const {
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
}

std::int64_t RetryBudget::BalanceUnitsLocked() const {
  const std::int64_t deposits = SaturatingMul(first_attempts_, deposit_units_);
  const std::int64_t withdrawals = SaturatingMul(retries_, kUnitsPerRetry);
  // reserve <= 1e18 and each term is in [0, INT64_MAX]: compute in two steps
  // that cannot overflow.
  const std::int64_t credit = deposits > std::numeric_limits<std::int64_t>::max() - reserve_units_
                                  ? std::numeric_limits<std::int64_t>::max()
                                  : reserve_units_ + deposits;
  return credit - withdrawals;
}

RetryBudget::Bucket& RetryBudget::CurrentBucketLocked() const {
  const auto n = static_cast<std::int64_t>(buckets_.size());
  return buckets_[static_cast<std::size_t>(FloorMod(current_slice_, n))];
}

void RetryBudget::RecordFirstAttempt() {
  const TimePoint now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked(now);
  ++CurrentBucketLocked().first_attempts;
  ++first_attempts_;
}

bool RetryBudget::TryRetry() {
  const TimePoint now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked(now);
  if (BalanceUnitsLocked() < kUnitsPerRetry) {
    ++rejected_total_;
    return false;
  }
  ++CurrentBucketLocked().retries;
  ++retries_;
  return true;
}

double RetryBudget::Balance() const {
  const TimePoint now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked(now);
  return static_cast<double>(BalanceUnitsLocked()) / kUnitsPerRetry;
}

RetryBudgetSnapshot RetryBudget::Snapshot() const {
  const TimePoint now = clock_->Now();
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLocked(now);
  RetryBudgetSnapshot s;
  s.balance = static_cast<double>(BalanceUnitsLocked()) / kUnitsPerRetry;
  s.first_attempts = first_attempts_;
  s.retries = retries_;
  s.rejected_total = rejected_total_;
  return s;
}

// --- RetryBudgets ----------------------------------------------------------------

Result<std::unique_ptr<RetryBudgets>> RetryBudgets::Create(RetryBudgetOptions defaults,
                                                           std::shared_ptr<Clock> clock) {
  JOBPACT_RETURN_IF_ERROR(ValidateRetryBudgetOptions(defaults));
  if (clock == nullptr) clock = SystemClock::Default();
  return std::unique_ptr<RetryBudgets>(new RetryBudgets(defaults, std::move(clock)));
}

RetryBudgets::RetryBudgets(const RetryBudgetOptions& defaults, std::shared_ptr<Clock> clock)
    : defaults_(defaults), clock_(std::move(clock)) {}

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
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (budgets_.find(job_type) != budgets_.end()) {
    return Status::FailedPrecondition(fmt::format(
        "the retry budget of {} is already in use; override it before the first job", job_type));
  }
  overrides_.insert_or_assign(std::string(job_type), OverrideEntry{options, std::move(reason)});
  return Status::Ok();
}

RetryBudget& RetryBudgets::ForJobType(std::string_view job_type) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = budgets_.find(job_type);
    if (it != budgets_.end()) return *it->second;
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = budgets_.find(job_type);
  if (it != budgets_.end()) return *it->second;  // Another thread made it first.
  auto o = overrides_.find(job_type);
  const RetryBudgetOptions& options = o != overrides_.end() ? o->second.options : defaults_;
  auto budget = std::unique_ptr<RetryBudget>(new RetryBudget(options, clock_));
  return *budgets_.emplace(std::string(job_type), std::move(budget)).first->second;
}

void RetryBudgets::RecordFirstAttempt(std::string_view job_type) {
  ForJobType(job_type).RecordFirstAttempt();
}

bool RetryBudgets::TryRetry(std::string_view job_type) { return ForJobType(job_type).TryRetry(); }

double RetryBudgets::Balance(std::string_view job_type) { return ForJobType(job_type).Balance(); }

std::map<std::string, RetryBudgetSnapshot> RetryBudgets::Snapshots() const {
  std::map<std::string, RetryBudgetSnapshot> out;
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (const auto& [job_type, budget] : budgets_) out.emplace(job_type, budget->Snapshot());
  return out;
}

std::string RetryBudgets::DescribeOverrides() const {
  std::string out;
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (const auto& [job_type, entry] : overrides_) {
    const RetryBudgetOptions& o = entry.options;
    out += fmt::format("{}: percent={} window={}s min_retries_per_second={} buckets={} ({})\n",
                       job_type, o.percent, ToSeconds(o.window), o.min_retries_per_second,
                       o.buckets, entry.reason);
  }
  return out;
}

}  // namespace jobpact
