// SPDX-License-Identifier: Apache-2.0
#include "actor.hpp"

#include <future>
#include <memory>
#include <vector>

namespace zkr::swarm {

Actor::Actor() : thread_([this](std::stop_token stop) { loop(stop); }) {}

Actor::~Actor() {
  if (abandoned_) {
    thread_.detach();
    return;
  }
  cancel();
  thread_.request_stop();
  changed_.notify_all();
}

void Actor::loop(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop.stop_requested() || task_ != nullptr; });
    if (!task_) return;
    Task task = std::move(task_);
    task_ = nullptr;
    const std::stop_token token = task_stop_.get_token();
    lock.unlock();
    task(token);
    task = nullptr;  // whatever it captured goes before the actor counts as idle
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

void Actor::post(Task task) {
  std::lock_guard lock(mutex_);
  task_stop_ = std::stop_source();
  task_ = std::move(task);
  busy_ = true;
  changed_.notify_all();
}

bool Actor::idle() const {
  std::lock_guard lock(mutex_);
  return !busy_;
}

bool Actor::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return !busy_; });
}

void Actor::cancel() {
  std::lock_guard lock(mutex_);
  task_stop_.request_stop();
}

bool Actor::run(const std::function<void()>& function, std::chrono::milliseconds timeout) {
  post([function](std::stop_token) { function(); });
  return wait_idle(timeout);
}

void Actor::abandon() { abandoned_ = true; }

void keep_for_process(std::shared_ptr<void> object) {
  static std::mutex mutex;
  // Never destroyed: a static vector's destructor would free them at exit, under the thread.
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  std::lock_guard lock(mutex);
  kept->push_back(std::move(object));
}

}  // namespace zkr::swarm
