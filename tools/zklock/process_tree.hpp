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

// Reaps every child that has exited, without blocking; sets `watched_status` when `watched` is
// among them. True once the caller has no child left at all: then, for a child subreaper, no
// descendant is left either.
bool reap_children(pid_t watched, std::optional<int>& watched_status);

}  // namespace zklock
