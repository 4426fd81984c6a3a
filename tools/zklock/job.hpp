// SPDX-License-Identifier: Apache-2.0
// The job: the command zklock runs under the lock, in a process group of its own so that signals
// passed on reach the command's own children too, and every process descending from it, wherever
// it moved (process_tree.hpp), started and watched by the keeper (keeper.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "keeper.hpp"

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

// The descriptors open now. Called first in main, these are the ones zklock was given: the job
// gets them too, and no other (none the ZooKeeper client opened without close-on-exec).
std::vector<int> open_descriptors();

// Marks zklock as the reaper of orphaned descendants. The keeper normally takes the job's orphans;
// should the keeper itself die, its orphans come to zklock rather than to init, so that zklock can
// still find, stop and reap them.
void become_subreaper();

// What the supervisor (supervisor.hpp) does with a running job; Job below is the real one, tests
// drive the supervisor with fakes. Everything here runs on zklock's main thread.
class JobControl {
 public:
  virtual ~JobControl() = default;
  // Readable when the job has something to report (-1: nothing to watch).
  virtual int keeper_socket() const noexcept = 0;
  // Sends `signal` to the command's process group (what zklock passes on from the user).
  virtual void signal_group(int signal) const = 0;
  // Sends `signal` to every process of the job; pids in `already` are skipped, pids signalled are
  // added to it.
  virtual void signal_tree(int signal, std::vector<pid_t>* already = nullptr) const = 0;
  // SIGKILLs every process of the job once (call until tree_gone()).
  virtual void kill_everything() = 0;
  // Moves the keeper's deadline (keeper.hpp) to the session monitor's latest one.
  virtual void renew_deadline(zkr::BootClock::time_point deadline) = 0;
  // Tells the keeper that zklock is stopping the job now (its kill signal, SIGKILL after the
  // grace): should zklock stall meanwhile, the keeper SIGKILLs what is left after the grace.
  virtual void announce_stop() = 0;
  // Without blocking: true once the command has exited (wait_status()) or its watcher failed
  // (keeper_failed()).
  virtual bool poll() = 0;
  // Whether the keeper is stopping the job because its deadline passed unrenewed (as of poll()).
  virtual bool stopped_by_keeper() const noexcept = 0;
  virtual int wait_status() const = 0;
  virtual bool keeper_failed() const noexcept = 0;
  // Whether, when the command exited, processes it started were still running.
  virtual bool left_processes_behind() const noexcept = 0;
  // True once no process of the job is left.
  virtual bool tree_gone() = 0;
};

// The job: its keeper process (see keeper.hpp) and, under it, the command and whatever the command
// starts.
class Job final : public JobControl {
 public:
  // Resolves argv[0] (searched in $PATH), then hands the job to the keeper, which starts it with
  // `environment` in a new process group, with stdin/stdout/stderr inherited and an empty signal
  // mask. If zklock owns the terminal, the job's group becomes the terminal's foreground group.
  // Of zklock's descriptors beyond stdin, stdout and stderr only `passed_on` reach the command.
  // The keeper stops the job by itself once `deadline` passes unrenewed (renew_deadline()).
  // Throws JobStartError (126 not executable, 127 not found).
  static Job start(WaitingKeeper keeper, const std::vector<std::string>& argv,
                   const std::vector<std::string>& environment, const std::vector<int>& passed_on,
                   const KeeperDeadline& deadline);

  Job(Job&& other) noexcept;
  Job& operator=(Job&&) = delete;
  // The last line of defence: SIGKILLs whatever is left of the tree (bounded) if it is not gone.
  ~Job() override;

  pid_t pid() const noexcept { return pid_; }  // the command's pid, also its process group id
  // Readable when the keeper has something to say: poll it with the signals. -1 once the keeper is
  // gone (its closed socket would be readable for ever).
  int keeper_socket() const noexcept override { return keeper_gone_ ? -1 : socket_; }

  // Sends `signal` to the command's process group (what zklock passes on from the user).
  void signal_group(int signal) const override;
  // Sends `signal` to the command's group and to every descendant of zklock but the keeper,
  // wherever they moved; pids in `already` are skipped, pids signalled are added to it.
  void signal_tree(int signal, std::vector<pid_t>* already = nullptr) const override;
  // SIGKILLs the keeper and every descendant once (call until tree_gone()).
  void kill_everything() override;
  void renew_deadline(zkr::BootClock::time_point deadline) override;
  void announce_stop() override;
  bool stopped_by_keeper() const noexcept override { return stopped_by_keeper_; }

  // Reads the keeper's reports and reaps, without blocking. True once the command has exited
  // (then wait_status() is its status) or the keeper died without saying (keeper_failed()).
  bool poll() override;
  bool exited() const noexcept { return wait_status_.has_value(); }
  int wait_status() const override { return wait_status_.value(); }
  bool keeper_failed() const noexcept override { return keeper_gone_ && !wait_status_; }
  // Whether, when the command exited, processes it started were still running.
  bool left_processes_behind() const noexcept override { return left_processes_behind_; }
  // True once no process of the job is left: the keeper reported none left when the command
  // exited, or the keeper is gone (it exits only when its tree is empty) and zklock, a subreaper,
  // has no child left either. The keeper process itself may still be exiting.
  bool tree_gone() override;

  // Gives the terminal back to zklock's process group if the job had it. Idempotent.
  void reclaim_terminal();

 private:
  Job(pid_t keeper, int socket, bool owns_terminal) : keeper_(keeper), socket_(socket), owns_terminal_(owns_terminal) {}
  void read_reports();
  void order(const KeeperOrder& order);
  // True once the keeper and every child of zklock are reaped.
  bool all_reaped();
  // Waits up to `bound` for the keeper to exit on its own.
  void wait_for_keeper_exit(std::chrono::milliseconds bound);

  pid_t keeper_ = -1;
  pid_t pid_ = -1;
  int socket_ = -1;
  bool owns_terminal_ = false;
  bool keeper_gone_ = false;
  bool no_child_left_ = false;
  bool left_processes_behind_ = false;
  bool stopped_by_keeper_ = false;
  std::optional<int> wait_status_;
};

}  // namespace zklock
