// How the metrics count an acquisition (SessionMetrics and its per-path series, src/lock_metrics.hpp):
// from asking to its outcome, then the hold of its grant and how the hold ended. Every count a
// recipe makes goes through an AcquisitionCount, so which acquisition an event belongs to, and
// under which path, is said once, where the count is made:
//   - a contender that is an acquisition of its own (a lock, a read/write lock's lock, a term, a
//     lease of the library's own semaphore layout) counts everything under its parent's path;
//   - a recipe whose one acquisition takes several contenders (a semaphore in a peer's layout: its
//     internal lock, then the lease) makes the count itself, under the recipe's path, and decides
//     it; the contender whose grant the user gets counts the grant, the hold and its loss into it
//     (grant_part()), and the other steps count nothing (an empty count).
#pragma once

#include <chrono>
#include <string_view>
#include <system_error>

#include <zkr/session.hpp>

#include "session_core.hpp"

namespace zkr::detail {

class AcquisitionCount {
 public:
  AcquisitionCount() = default;  // counts nothing
  // An acquisition of the recipe on `recipe_path`, asked for now.
  AcquisitionCount(SessionCore& core, std::string_view recipe_path);

  // The same acquisition, for the contender whose grant it is: its grant, hold and loss count
  // here; its outcome does not (whoever made this count decides it).
  AcquisitionCount grant_part() const;

  void decided(std::error_code outcome) const;  // at most once; success: granted
  void abandoned() const;                       // gone without an outcome
  void granted(Clock::time_point at) const;     // the wait: from asking to `at`
  void hold_ended(std::chrono::nanoseconds hold) const;
  void lost(LossReason reason) const;

 private:
  SessionCore* core_ = nullptr;  // null: counts nothing; else it outlives the count (its contender's)
  LockSeries* series_ = nullptr;
  Clock::time_point asked_at_{};
  bool decides_ = false;
};

}  // namespace zkr::detail
