// SPDX-License-Identifier: Apache-2.0
#include "acquisition_count.hpp"

#include <zkr/error.hpp>

namespace zkr::detail {

AcquisitionCount::AcquisitionCount(SessionCore& core, std::string_view recipe_path, bool shared)
    : core_(&core),
      series_(&core.lock_metrics().series_for(recipe_path)),
      asked_at_(Clock::now()),
      shared_(shared ? std::make_shared<std::atomic<State>>(State::pending) : nullptr) {
  series_->asked();
}

AcquisitionCount AcquisitionCount::grant_part() const {
  AcquisitionCount part = *this;
  part.part_ = Part::grant;
  return part;
}

AcquisitionCount AcquisitionCount::step_part() const {
  AcquisitionCount part = *this;
  part.part_ = Part::step;
  return part;
}

bool AcquisitionCount::claim(State to) const {
  if (!shared_) {
    if (own_ != State::pending) return false;
    own_ = to;
    return true;
  }
  State expected = State::pending;
  return shared_->compare_exchange_strong(expected, to, std::memory_order_acq_rel);
}

AcquisitionCount::State AcquisitionCount::state() const {
  return shared_ ? shared_->load(std::memory_order_acquire) : own_;
}

bool AcquisitionCount::decide(std::error_code outcome, Clock::time_point granted_at) const {
  if (!core_ || part_ == Part::step || (part_ == Part::grant && outcome)) return false;
  if (!claim(outcome ? State::refused : State::granted)) return false;
  series_->decided(outcome);
  if (outcome == errc::timed_out) ++core_->acquire_timeouts;
  else if (outcome == errc::cancelled) ++core_->acquire_cancellations;
  if (!outcome) {
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(granted_at - asked_at_);
    ++core_->acquisitions;
    core_->total_wait_ns += wait.count();
    series_->granted(wait);
  }
  return true;
}

void AcquisitionCount::abandoned() const {
  if (core_ && part_ == Part::whole && claim(State::abandoned)) series_->abandoned();
}

bool AcquisitionCount::granted() const { return core_ && state() == State::granted; }

void AcquisitionCount::hold_ended(std::chrono::nanoseconds hold) const {
  if (!granted()) return;
  core_->total_hold_ns += hold.count();
  series_->hold_ended(hold);
}

void AcquisitionCount::lost(LossReason reason) const {
  if (!granted()) return;
  ++core_->locks_lost;
  series_->lost(reason);
}

}  // namespace zkr::detail
