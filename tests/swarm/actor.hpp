// SPDX-License-Identifier: Apache-2.0
// An actor: one thread of the program under test, running one operation at a time. Blocking calls
// and the library's per-thread state (a reentrant lock's holds, an open AcquisitionBatch) belong
// to the thread that makes them, so each actor is a thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

namespace zkr::swarm {

class Actor {
 public:
  using Task = std::function<void(std::stop_token)>;

  Actor();
  ~Actor();  // stops its current wait and joins (see abandon())
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  // Runs `task` on the actor's thread; the actor must be idle. The task's stop token is requested
  // by cancel().
  void post(Task task);
  bool idle() const;
  // Waits at most `timeout` for the current task to return.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  // Requests stop of the current task's token.
  void cancel();
  // Runs `function` on the actor's thread and waits for it (the actor must be idle); false if it
  // did not return within `timeout` (it then still runs, as the actor's current task).
  bool run(const std::function<void()>& function, std::chrono::milliseconds timeout);
  // The thread could not be stopped (a task that never returns): leave it running, never joined,
  // rather than hang the test's teardown. Keep the actor, and whatever its task may still use, in
  // keep_for_process().
  void abandon();

 private:
  void loop(std::stop_token stop);

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  Task task_;
  bool busy_ = false;
  std::stop_source task_stop_;
  bool abandoned_ = false;
  std::jthread thread_;  // last: starts once the members above exist
};

// Keeps `object` until the process ends, never destroyed: what an abandoned actor's thread may
// still use (the actor, the sessions and recipes its task calls). Such a run has failed already;
// kept here, the objects stay reachable (LeakSanitizer does not report them a second time) and
// are never freed under that thread.
void keep_for_process(std::shared_ptr<void> object);

}  // namespace zkr::swarm
