// The job: the command zklock runs under the lock, in a process group of its own so that signals
// passed on reach the command's own children too, and every process descending from it, wherever
// it moved (process_tree.hpp), started and watched by the keeper (keeper.hpp).
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

// The descriptors open now. Called first in main, these are the ones zklock was given: the job
// gets them too, and no other (none the ZooKeeper client opened without close-on-exec).
std::vector<int> open_descriptors();

// Marks zklock as the reaper of orphaned descendants. The keeper normally takes the job's orphans;
// should the keeper itself die, its orphans come to zklock rather than to init, so that zklock can
// still find, stop and reap them.
void become_subreaper();

// The job: its keeper process (see keeper.hpp) and, under it, the command and whatever the command
// starts. Everything here runs on zklock's main thread.
class Job {
 public:
  // Resolves argv[0] (searched in $PATH), then starts the keeper, which starts the command with
  // `environment` in a new process group, with stdin/stdout/stderr inherited and an empty signal
  // mask. If zklock owns the terminal, the job's group becomes the terminal's foreground group.
  // Of zklock's descriptors beyond stdin, stdout and stderr only `passed_on` reach the command.
  // Throws JobStartError (126 not executable, 127 not found).
  static Job start(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                   const std::vector<int>& passed_on);

  Job(Job&& other) noexcept;
  Job& operator=(Job&&) = delete;
  // The last line of defence: SIGKILLs whatever is left of the tree (bounded) if it is not gone.
  ~Job();

  pid_t pid() const noexcept { return pid_; }  // the command's pid, also its process group id
  // Readable when the keeper has something to say: poll it with the signals. -1 once the keeper is
  // gone (its closed socket would be readable for ever).
  int keeper_socket() const noexcept { return keeper_gone_ ? -1 : socket_; }

  // Sends `signal` to the command's process group (what zklock passes on from the user).
  void signal_group(int signal) const;
  // Sends `signal` to the command's group and to every descendant of zklock but the keeper,
  // wherever they moved; pids in `already` are skipped, pids signalled are added to it.
  void signal_tree(int signal, std::vector<pid_t>* already = nullptr) const;
  // SIGKILLs the keeper and every descendant once (call until tree_gone()).
  void kill_everything();

  // Reads the keeper's reports and reaps, without blocking. True once the command has exited
  // (then wait_status() is its status) or the keeper died without saying (keeper_failed()).
  bool poll();
  bool exited() const noexcept { return wait_status_.has_value(); }
  int wait_status() const { return wait_status_.value(); }
  bool keeper_failed() const noexcept { return keeper_gone_ && !wait_status_; }
  // Whether, when the command exited, processes it started were still running.
  bool left_processes_behind() const noexcept { return left_processes_behind_; }
  // True once no process of the job is left: the keeper exits only when its tree is empty, and
  // zklock, a subreaper, has no child left either.
  bool tree_gone();

  // Gives the terminal back to zklock's process group if the job had it. Idempotent.
  void reclaim_terminal();

 private:
  Job(pid_t keeper, int socket, bool owns_terminal) : keeper_(keeper), socket_(socket), owns_terminal_(owns_terminal) {}
  void read_reports();

  pid_t keeper_ = -1;
  pid_t pid_ = -1;
  int socket_ = -1;
  bool owns_terminal_ = false;
  bool keeper_gone_ = false;
  bool no_child_left_ = false;
  bool left_processes_behind_ = false;
  std::optional<int> wait_status_;
};

}  // namespace zklock
