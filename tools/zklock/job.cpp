// SPDX-License-Identifier: Apache-2.0
#include "job.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "exit_status.hpp"
#include "keeper.hpp"
#include "process_tree.hpp"

extern char** environ;

namespace zklock {

namespace {

struct ResolvedCommand {
  std::string path;
  int error = 0;  // errno-style: ENOENT (not found), EACCES (found, not executable)
};

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The $PATH search execvp does, done before fork: the child of a multi-threaded process may only
// call async-signal-safe functions, and a failure found here needs no child at all.
ResolvedCommand resolve_command(const std::string& name) {
  if (name.empty()) return {"", ENOENT};
  if (name.find('/') != std::string::npos) return {name, 0};
  const char* search_path = std::getenv("PATH");
  std::string_view directories = search_path ? search_path : "/usr/local/bin:/usr/bin:/bin";
  int error = ENOENT;
  while (true) {
    const std::size_t colon = directories.find(':');
    std::string_view directory = directories.substr(0, colon);
    std::string candidate = fmt::format("{}/{}", directory.empty() ? "." : directory, name);
    if (is_executable_file(candidate)) return {candidate, 0};
    if (::access(candidate.c_str(), F_OK) == 0) error = EACCES;
    if (colon == std::string_view::npos) break;
    directories.remove_prefix(colon + 1);
  }
  return {"", error};
}

JobStartError start_error(const std::string& command, int error) {
  if (error == ENOENT && command.find('/') == std::string::npos) {
    return JobStartError(exit_code::not_found, fmt::format("{}: command not found", command));
  }
  if (error == ENOENT) {
    return JobStartError(exit_code::not_found,
                         fmt::format("{}: cannot execute: {}", command, std::strerror(error)));
  }
  return JobStartError(exit_code::cannot_execute,
                       fmt::format("{}: cannot execute: {}", command, std::strerror(error)));
}

bool zklock_owns_terminal() {
  return ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
}

}  // namespace

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> environment;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view variable(*entry);
    const std::string_view name = variable.substr(0, variable.find('='));
    bool overridden = false;
    for (const auto& [override_name, value] : overrides) overridden |= name == override_name;
    if (!overridden) environment.emplace_back(variable);
  }
  for (const auto& [name, value] : overrides) environment.push_back(fmt::format("{}={}", name, value));
  return environment;
}

std::vector<int> open_descriptors() {
  std::vector<int> descriptors;
  DIR* directory = ::opendir("/proc/self/fd");
  if (!directory) return descriptors;
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != ::dirfd(directory)) descriptors.push_back(fd);
  }
  ::closedir(directory);
  return descriptors;
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

Job Job::start(WaitingKeeper keeper, const std::vector<std::string>& argv,
               const std::vector<std::string>& environment, const std::vector<int>& passed_on,
               const KeeperDeadline& deadline) {
  if (argv.empty()) throw start_error("", ENOENT);
  const ResolvedCommand command = resolve_command(argv.front());
  if (command.error) throw start_error(argv.front(), command.error);

  const bool give_terminal = zklock_owns_terminal();
  const auto handed = keeper.hand_over({give_terminal, deadline, passed_on, command.path, argv, environment});
  if (!handed) {
    throw JobStartError(exit_code::cannot_execute,
                        fmt::format("{}: cannot start: zklock's keeper process is gone ({})", argv.front(),
                                    std::strerror(errno)));
  }
  Job job(handed->pid, handed->socket, give_terminal);

  // The first report: the command started, or could not be executed.
  KeeperReport first{};
  ssize_t got;
  do {
    got = ::recv(job.socket_, &first, sizeof first, 0);
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof first) && first.kind == KeeperReport::started) {
    job.pid_ = first.value;
    return job;
  }
  // The keeper is exiting (or could not start); the destructor reaps it.
  job.reclaim_terminal();
  if (got == static_cast<ssize_t>(sizeof first) && first.kind == KeeperReport::exec_failed) {
    throw start_error(argv.front(), first.value);
  }
  throw JobStartError(exit_code::cannot_execute,
                      fmt::format("{}: cannot start: zklock's keeper process did not start", argv.front()));
}

Job::Job(Job&& other) noexcept
    : keeper_(std::exchange(other.keeper_, -1)),
      pid_(std::exchange(other.pid_, -1)),
      socket_(std::exchange(other.socket_, -1)),
      owns_terminal_(std::exchange(other.owns_terminal_, false)),
      keeper_gone_(other.keeper_gone_),
      no_child_left_(other.no_child_left_),
      left_processes_behind_(other.left_processes_behind_),
      stopped_by_keeper_(other.stopped_by_keeper_),
      wait_status_(other.wait_status_) {}

Job::~Job() {
  if (keeper_ > 0) {
    using namespace std::chrono_literals;
    // Having reported the job's tree empty, the keeper exits by itself: let it, rather than kill it.
    if (tree_gone()) wait_for_keeper_exit(1s);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!all_reaped() && std::chrono::steady_clock::now() < deadline) {
      kill_everything();
      std::this_thread::sleep_for(10ms);
    }
  }
  reclaim_terminal();
  if (socket_ >= 0) ::close(socket_);
}

void Job::signal_group(int signal) const {
  if (pid_ > 0) ::kill(-pid_, signal);
}

void Job::signal_tree(int signal, std::vector<pid_t>* already) const {
  // The keeper blocks what it can; only SIGCONT (it may be stopped too) is for it.
  signal_process_tree(::getpid(), pid_, signal, signal == SIGCONT ? 0 : keeper_, already);
}

void Job::kill_everything() {
  if (pid_ > 0) ::kill(-pid_, SIGKILL);
  // Named as well as walked: should /proc show no children, the keeper still goes, and its orphans
  // come to zklock.
  if (!keeper_gone_ && keeper_ > 0) ::kill(keeper_, SIGKILL);
  for (pid_t pid : descendants_of(::getpid())) ::kill(pid, SIGKILL);
}

void Job::order(const KeeperOrder& order) {
  // Never blocks: the keeper reads its orders at once, and a full buffer means it is stopped (then
  // a lost renewal only errs early).
  if (socket_ >= 0 && !keeper_gone_) ::send(socket_, &order, sizeof order, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Job::renew_deadline(zkr::BootClock::time_point deadline) {
  order({KeeperOrder::renew, deadline.time_since_epoch().count()});
}

void Job::announce_stop() { order({KeeperOrder::stopping, 0}); }

void Job::read_reports() {
  if (socket_ < 0) return;
  KeeperReport report{};
  while (::recv(socket_, &report, sizeof report, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof report)) {
    if (report.kind == KeeperReport::deadline_passed) stopped_by_keeper_ = true;
    if (report.kind == KeeperReport::exited && !wait_status_) {
      wait_status_ = report.value;
      left_processes_behind_ = report.descendants_left;
      reclaim_terminal();
    }
  }
}

bool Job::poll() {
  read_reports();
  std::optional<int> keeper_status;
  no_child_left_ = reap_children(keeper_, keeper_status);
  if (keeper_status) {
    keeper_gone_ = true;
    read_reports();  // what it said just before exiting
    reclaim_terminal();
  }
  return exited() || keeper_gone_;
}

bool Job::tree_gone() {
  poll();
  if (keeper_gone_) return no_child_left_;
  // Every orphan of the job went to the keeper, a subreaper: with no child left when the command
  // exited, nothing of the job is left. The keeper itself is not the job (and is about to exit).
  return exited() && !left_processes_behind_;
}

bool Job::all_reaped() {
  poll();
  return keeper_gone_ && no_child_left_;
}

void Job::wait_for_keeper_exit(std::chrono::milliseconds bound) {
  // glibc 2.36's <sys/pidfd.h> declares pidfd_open without C linkage: the system call itself.
  const int keeper = static_cast<int>(::syscall(SYS_pidfd_open, keeper_, 0));
  if (keeper < 0) return;
  pollfd ended{keeper, POLLIN, 0};
  ::poll(&ended, 1, static_cast<int>(bound.count()));  // signals are blocked: no EINTR
  ::close(keeper);
  poll();
}

void Job::reclaim_terminal() {
  if (!owns_terminal_) return;
  owns_terminal_ = false;
  // zklock is now a background group: SIGTTOU must be blocked (it is, see main) for this to work.
  ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
}

}  // namespace zklock
