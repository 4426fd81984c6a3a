// SPDX-License-Identifier: Apache-2.0
// How the metrics count an acquisition (SessionMetrics and its per-path series, src/lock_metrics.hpp):
// from asking to its outcome, then the hold of its grant and how the hold ended. Every count a
// recipe makes goes through an AcquisitionCount, so which acquisition an event belongs to, and
// under which path, is said once, where the count is made.
//
// An acquisition's outcome (granted, or refused: timed out, cancelled, busy, failed) is decided
// exactly once, in decide(): the first call wins, and only the outcome it decided is counted. A
// grant and a timeout that race each other are therefore one outcome, never both:
//   - a contender that is an acquisition of its own (a lock, a read/write lock's lock, a term, a
//     lease of the library's own semaphore layout) decides its count itself, under the session
//     mutex, and counts everything under its parent's path;
//   - a recipe whose one acquisition takes several contenders makes a shared count under the
//     recipe's path. A semaphore in a peer's layout gives its lease a grant_part(): the lease's
//     grant decides "granted" unless the recipe decided first (a timeout, a cancel), and the
//     loser of that race yields (a late grant is released, a late timeout returns the grant).
//     A multi-lock gives each path's contenders a step_part(): it decides the whole itself. The
//     other steps (a peer's internal lock) count nothing (an empty count).
// A hold and its loss are counted only for a grant that was decided.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string_view>
#include <system_error>

#include <zkr/session.hpp>

#include "session_core.hpp"

namespace zkr::detail {

class AcquisitionCount {
 public:
  AcquisitionCount() = default;  // counts nothing
  // An acquisition of the recipe on `recipe_path`, asked for now. `shared`: one made of several
  // contenders (their counts are grant_part() or step_part() of this one, decided by any of them).
  AcquisitionCount(SessionCore& core, std::string_view recipe_path, bool shared = false);

  // The same (shared) acquisition, for the contender whose grant is the outcome: its grant
  // decides it, unless decided before; its refusals decide nothing.
  AcquisitionCount grant_part() const;
  // The same (shared) acquisition, for a contender that decides nothing: its hold counts only
  // once the acquisition was decided as a grant (by whoever made this count).
  AcquisitionCount step_part() const;

  // The one place an outcome is decided: the first call wins and counts it (success: the grant,
  // waited for until `granted_at`); a later call counts nothing. True if this call decided.
  // An unshared count has one owner that decides it (its contender, under the session mutex, or a
  // held-back start that is refused); a shared one is decided by a compare-exchange, whoever comes first.
  bool decide(std::error_code outcome, Clock::time_point granted_at = Clock::now()) const;
  void abandoned() const;  // gone without an outcome (no longer waiting), unless decided
  bool granted() const;    // decided, as a grant
  void hold_ended(std::chrono::nanoseconds hold) const;  // of a decided grant only
  void lost(LossReason reason) const;                    // of a decided grant only

 private:
  enum class State : unsigned char { pending, granted, refused, abandoned };
  enum class Part : unsigned char { whole, grant, step };
  bool claim(State to) const;
  State state() const;

  SessionCore* core_ = nullptr;  // null: counts nothing; else it outlives the count (its contender's)
  LockSeries* series_ = nullptr;
  Clock::time_point asked_at_{};
  std::shared_ptr<std::atomic<State>> shared_;  // a shared acquisition's outcome
  mutable State own_ = State::pending;          // an unshared one's
  Part part_ = Part::whole;
};

}  // namespace zkr::detail
