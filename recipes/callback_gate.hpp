// SPDX-License-Identifier: Apache-2.0
// CallbackGate: how a recipe that calls back (a view, a watch, a listener) stops calling back.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "session_core.hpp"

namespace zkr::detail {

// Runs user callbacks one at a time on the session's callback thread, and stops them for good:
// after stop() no callback starts, and one running on another thread has returned. stop() from
// the callback itself returns at once (that call finishes normally).
class CallbackGate {
 public:
  template <typename Call>
  void run(Call&& call) {
    {
      std::lock_guard guard(mutex_);
      if (stopped_) return;
      running_on_ = std::this_thread::get_id();
    }
    SessionCore::run_user_callback(std::forward<Call>(call));
    std::lock_guard guard(mutex_);
    running_on_ = {};
    finished_.notify_all();
  }
  void stop() {
    std::unique_lock guard(mutex_);
    stopped_ = true;
    if (running_on_ == std::this_thread::get_id()) return;  // from the callback itself
    finished_.wait(guard, [&] { return running_on_ == std::thread::id(); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool stopped_ = false;
  std::thread::id running_on_;
};

}  // namespace zkr::detail
