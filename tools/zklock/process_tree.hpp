// SPDX-License-Identifier: Apache-2.0
// The job's process tree as the kernel links it (parent to child), whatever process groups or
// sessions its members moved to: the only view from which no descendant can hide.
#pragma once

#include <sys/types.h>

#include <optional>
#include <vector>

namespace zklock {

// The children of `pid` (every thread's), from /proc/PID/task/*/children; empty if it is gone.
std::vector<pid_t> children_of(pid_t pid);

// Every descendant of `root`, parents before their children. A process that forks or is
// reparented while the tree is read may be missed: callers walk again until the tree is empty.
std::vector<pid_t> descendants_of(pid_t root);

// Sends `signal` to the process group `group` and to every descendant of `root` outside it (the
// group's members had it with the group: a shell's trap must not run twice), `spared` excepted.
// Pids in `already` are skipped, and those signalled added to it (-group stands for the group).
void signal_process_tree(pid_t root, pid_t group, int signal, pid_t spared = 0, std::vector<pid_t>* already = nullptr);

// Reaps every child that has exited, without blocking; sets `watched_status` when `watched` is
// among them. True once the caller has no child left at all: then, for a child subreaper, no
// descendant is left either.
bool reap_children(pid_t watched, std::optional<int>& watched_status);

}  // namespace zklock
