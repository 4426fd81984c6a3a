// SPDX-License-Identifier: Apache-2.0
#include "process_tree.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

namespace zklock {

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code error;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream in(task.path() / "children");
    pid_t child = 0;
    while (in >> child) children.push_back(child);
  }
  return children;
}

std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<pid_t> found = children_of(root);
  for (std::size_t next = 0; next < found.size(); ++next) {
    for (pid_t child : children_of(found[next])) found.push_back(child);
  }
  return found;
}

void signal_process_tree(pid_t root, pid_t group, int signal, pid_t spared, std::vector<pid_t>* already) {
  const auto done = [already](pid_t pid) {
    if (!already) return false;
    if (std::find(already->begin(), already->end(), pid) != already->end()) return true;
    already->push_back(pid);
    return false;
  };
  if (group > 0 && !done(-group)) ::kill(-group, signal);
  for (pid_t pid : descendants_of(root)) {
    if (pid == spared) continue;
    if (group > 0 && ::getpgid(pid) == group) continue;
    if (!done(pid)) ::kill(pid, signal);
  }
}

bool reap_children(pid_t watched, std::optional<int>& watched_status) {
  while (true) {
    int status = 0;
    const pid_t reaped = ::waitpid(-1, &status, WNOHANG);
    if (reaped > 0) {
      if (reaped == watched) watched_status = status;
      continue;
    }
    if (reaped < 0 && errno == EINTR) continue;
    return reaped < 0 && errno == ECHILD;
  }
}

}  // namespace zklock
