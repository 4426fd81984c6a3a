// The keeper: a small process between zklock and the job that outlives zklock's death.
//
// zklock starts it by re-executing its own binary (a fresh single-threaded process, unlike a fork
// of zklock, which runs the ZooKeeper client's threads). The keeper is a child subreaper, so every
// descendant of the job that loses its parent comes to it, whatever group or session it moved to.
// It starts the job, reports the job's pid and exit status to zklock over a socket, and exits once
// the job and all its descendants are gone. When its end of the socket reads EOF, zklock is gone
// (or gave up on the job): the keeper SIGKILLs every descendant until none is left, then exits.
// It runs in a process group of its own and blocks every signal it can, so nothing sent to
// zklock's process group ends it, not even SIGKILL.
#pragma once

#include <string_view>

namespace zklock {

// argv[0] of the keeper: main() hands such a process to keeper_main().
inline constexpr std::string_view keeper_argv0 = "zklock-keeper";

// What the keeper tells zklock, one fixed-size message each.
struct KeeperReport {
  enum Kind : int {
    started = 1,      // value: the job's pid (also its process group)
    exec_failed = 2,  // value: the errno of execve; the keeper exits after it
    exited = 3,       // value: the job's wait status; descendants_left: whether any still runs
  };
  Kind kind;
  int value;
  bool descendants_left = false;
};

// argv: zklock-keeper SOCKET_FD TAKE_TERMINAL(0|1) PASSED_FDS PATH ARG0 [ARGS...], PASSED_FDS a
// comma-separated list (maybe empty) of the descriptors beyond 0-2 the job may have; the keeper
// closes every other one it inherited. The job gets the keeper's environment. Returns the keeper's
// exit code.
int keeper_main(int argc, char** argv);

}  // namespace zklock
