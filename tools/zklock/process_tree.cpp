#include "process_tree.hpp"

#include <sys/wait.h>

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
