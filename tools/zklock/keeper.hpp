// SPDX-License-Identifier: Apache-2.0
// The keeper: a small process between zklock and the job that outlives zklock's death.
//
// zklock forks it first thing, while zklock is still single-threaded (before the ZooKeeper client
// starts its threads), so it is a plain copy of zklock that needs no exec. It waits on a pipe for
// the job; when zklock ends that pipe without handing a job over (it died, or got no lock), the
// keeper exits having started nothing. The keeper is a child subreaper, so every descendant of the
// job that loses its parent comes to it, whatever group or session it moved to. It starts the
// job, reports the job's pid and exit status to zklock over a socket, and exits once the job and
// all its descendants are gone. When its end of the socket reads EOF, zklock is gone (or gave up
// on the job): the keeper SIGKILLs every descendant until none is left, then exits. It runs in a
// process group of its own and blocks every signal it can, so nothing sent to zklock's process
// group ends it, not even SIGKILL.
//
// zklock stops the job when its session monitor declares the lock lost; but a zklock that does not
// run (stopped by a signal, a debugger, swapped out, starved while the job is not) cannot, and
// its job would outlive the lock. So the keeper keeps a deadline of its own: the session monitor's
// deadline for the lock's session, which zklock relays each time it moves (each heartbeat the
// leader answers). When the latest deadline it heard passes, the keeper stops the job itself as
// zklock would: the kill signal to the whole tree, SIGKILL after the grace. zklock's silence alone
// is enough: the keeper uses no network, and it keeps time on the monitor's clock (CLOCK_BOOTTIME).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/session.hpp>

namespace zklock {

// The keeper's name in ps (its comm).
inline constexpr std::string_view keeper_name = "zklock-keeper";

// What the keeper tells zklock, one fixed-size message each.
struct KeeperReport {
  enum Kind : int {
    started = 1,      // value: the job's pid (also its process group)
    exec_failed = 2,  // value: the errno of execve; the keeper exits after it
    exited = 3,       // value: the job's wait status; descendants_left: whether any still runs
    deadline_passed = 4,  // value: the kill signal; the keeper is stopping the job (zklock fell silent)
  };
  Kind kind;
  int value;
  bool descendants_left = false;
};

// What zklock tells the keeper once the job runs, one fixed-size message each.
struct KeeperOrder {
  enum Kind : int {
    renew = 1,     // deadline: the session monitor's latest deadline for the lock's session
    stopping = 2,  // zklock sends the job its kill signal now: SIGKILL what is left after the grace
  };
  Kind kind;
  std::int64_t deadline_ns = 0;  // renew: zkr::BootClock's time since its epoch
};

// When and how the keeper stops the job by itself.
struct KeeperDeadline {
  zkr::BootClock::time_point at;      // the first deadline; KeeperOrder::renew moves it
  int kill_signal = 15;               // sent to the whole tree at the deadline (SIGTERM)
  std::chrono::milliseconds grace{0};  // then SIGKILL to what is left (--kill-after)
};

// The job zklock hands to its waiting keeper.
struct JobSpec {
  bool take_terminal = false;    // make the job's group the terminal's foreground group
  KeeperDeadline deadline;
  std::vector<int> passed_fds;   // beyond 0-2, the descriptors the job keeps; others are closed
  std::string path;              // the resolved executable
  std::vector<std::string> argv;
  std::vector<std::string> environment;
};

// The pipe's bytes: a length, then NUL-terminated fields. decode_job_spec() returns nothing for
// anything else, a spec cut short by zklock's death included.
std::string encode_job_spec(const JobSpec& spec);
std::optional<JobSpec> decode_job_spec(std::string_view bytes);

// A keeper forked and waiting for its job. Destroying it without hand_over() ends the keeper (it
// starts nothing) and reaps it.
class WaitingKeeper {
 public:
  // Forks the keeper. Call while zklock has a single thread. Throws std::system_error.
  static WaitingKeeper fork_now();
  WaitingKeeper(WaitingKeeper&& other) noexcept;
  WaitingKeeper& operator=(WaitingKeeper&&) = delete;
  ~WaitingKeeper();

  // Writes the job to the keeper and lets go of it: the caller owns the returned pid and socket
  // (the keeper's reports). False (errno set) if the keeper could not be told (it died).
  struct Handed {
    pid_t pid;
    int socket;
  };
  std::optional<Handed> hand_over(const JobSpec& spec);

 private:
  WaitingKeeper(pid_t pid, int socket, int job_pipe) : pid_(pid), socket_(socket), job_pipe_(job_pipe) {}
  pid_t pid_ = -1;
  int socket_ = -1;    // SOCK_SEQPACKET: the keeper's reports
  int job_pipe_ = -1;  // write end: the job's spec
};

}  // namespace zklock
