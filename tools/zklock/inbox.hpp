// SPDX-License-Identifier: Apache-2.0
// What the library's callback thread reports to zklock's main thread. Callbacks only record what
// happened here and poke the wakeup; they never act. The main thread acts.
#pragma once

#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "signals.hpp"

namespace zklock {

class Inbox {
 public:
  struct Acquired {
    std::error_code error;
    zkr::HeldLock held;
  };

  Wakeup& wakeup() { return wakeup_; }

  void post_state(zkr::SessionState state) {
    {
      std::lock_guard guard(mutex_);
      states_.push_back(state);
    }
    wakeup_.notify();
  }
  // The first loss counts; later ones change nothing.
  void post_lost(zkr::LossReason reason) {
    {
      std::lock_guard guard(mutex_);
      if (!lost_) lost_ = reason;
    }
    wakeup_.notify();
  }
  void post_acquired(std::error_code error, zkr::HeldLock held) {
    {
      std::lock_guard guard(mutex_);
      acquired_.emplace(Acquired{error, std::move(held)});
    }
    wakeup_.notify();
  }
  // The session monitor's deadline moved (Session::on_deadline): only the latest one counts.
  void post_deadline(zkr::SessionDeadline deadline) {
    {
      std::lock_guard guard(mutex_);
      deadline_ = deadline;
    }
    wakeup_.notify();
  }
  void post_connected() { wakeup_.notify(); }
  // A watch on the listed path fired (--list --watch, or the queue feedback while waiting).
  void post_path_changed() {
    {
      std::lock_guard guard(mutex_);
      path_changed_ = true;
    }
    wakeup_.notify();
  }

  std::deque<zkr::SessionState> take_states() {
    std::lock_guard guard(mutex_);
    return std::exchange(states_, {});
  }
  std::optional<zkr::LossReason> lost() const {
    std::lock_guard guard(mutex_);
    return lost_;
  }
  std::optional<zkr::SessionDeadline> deadline() const {
    std::lock_guard guard(mutex_);
    return deadline_;
  }
  bool take_path_changed() {
    std::lock_guard guard(mutex_);
    return std::exchange(path_changed_, false);
  }
  bool has_acquired() const {
    std::lock_guard guard(mutex_);
    return acquired_.has_value();
  }
  std::optional<Acquired> take_acquired() {
    std::lock_guard guard(mutex_);
    return std::exchange(acquired_, std::nullopt);
  }

 private:
  Wakeup wakeup_;
  mutable std::mutex mutex_;
  std::deque<zkr::SessionState> states_;
  std::optional<zkr::LossReason> lost_;
  std::optional<zkr::SessionDeadline> deadline_;
  std::optional<Acquired> acquired_;
  bool path_changed_ = false;
};

}  // namespace zklock
