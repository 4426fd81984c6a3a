#include "acquisition_count.hpp"

#include <zkr/error.hpp>

namespace zkr::detail {

AcquisitionCount::AcquisitionCount(SessionCore& core, std::string_view recipe_path)
    : core_(&core), series_(&core.lock_metrics().series_for(recipe_path)), asked_at_(Clock::now()), decides_(true) {
  series_->asked();
}

AcquisitionCount AcquisitionCount::grant_part() const {
  AcquisitionCount part = *this;
  part.decides_ = false;
  return part;
}

void AcquisitionCount::decided(std::error_code outcome) const {
  if (!decides_) return;
  if (outcome == errc::timed_out) ++core_->acquire_timeouts;
  else if (outcome == errc::cancelled) ++core_->acquire_cancellations;
  series_->decided(outcome);
}

void AcquisitionCount::abandoned() const {
  if (decides_) series_->abandoned();
}

void AcquisitionCount::granted(Clock::time_point at) const {
  if (!core_) return;
  const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(at - asked_at_);
  ++core_->acquisitions;
  core_->total_wait_ns += wait.count();
  series_->granted(wait);
}

void AcquisitionCount::hold_ended(std::chrono::nanoseconds hold) const {
  if (!core_) return;
  core_->total_hold_ns += hold.count();
  series_->hold_ended(hold);
}

void AcquisitionCount::lost(LossReason reason) const {
  if (!core_) return;
  ++core_->locks_lost;
  series_->lost(reason);
}

}  // namespace zkr::detail
