// The job: the command zklock runs under the lock, in a process group of its own so that every
// signal reaches the command's own children too.
#pragma once

#include <sys/types.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace zklock {

// The command could not be started. exit_code is 126 (not executable) or 127 (not found).
class JobStartError : public std::runtime_error {
 public:
  JobStartError(int exit_code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// The current environment with `overrides` replacing (or adding) the named variables.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides);

// Marks zklock as the reaper of orphaned descendants, so that a job's background processes whose
// parent died are reparented to zklock (and reaped by Job::reap) rather than to init, which in a
// container may never reap them: their zombies would keep the process group alive.
void become_subreaper();

class Job {
 public:
  // Forks and execs argv[0] (searched in $PATH) with `environment`. The child leads a new process
  // group, dies with SIGKILL if zklock dies (parent-death signal), inherits stdin/stdout/stderr and
  // starts with an empty signal mask. If zklock owns the terminal, the job's group is made the
  // terminal's foreground group. Exec failure is reported back through a close-on-exec pipe.
  // Throws JobStartError.
  static Job start(const std::vector<std::string>& argv, const std::vector<std::string>& environment);

  Job(Job&& other) noexcept;
  Job& operator=(Job&&) = delete;
  ~Job();

  pid_t pid() const noexcept { return pid_; }  // also the process group id

  // Sends `signal` to every process of the job's group (ignored once the group is empty).
  void signal_group(int signal) const;
  // True while any process of the group exists (the command, or children it left behind).
  bool group_alive() const;

  // Reaps exited children without blocking: the command and any orphan reparented to zklock.
  // True once the command itself has exited; then wait_status() is its status.
  bool reap();
  bool exited() const noexcept { return wait_status_.has_value(); }
  int wait_status() const { return wait_status_.value(); }

  // Gives the terminal back to zklock's process group if the job had it. Idempotent.
  void reclaim_terminal();

 private:
  Job(pid_t pid, bool owns_terminal) : pid_(pid), owns_terminal_(owns_terminal) {}

  pid_t pid_ = -1;
  bool owns_terminal_ = false;
  std::optional<int> wait_status_;
};

}  // namespace zklock
