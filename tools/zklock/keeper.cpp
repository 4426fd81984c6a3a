#include "keeper.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exit_status.hpp"
#include "process_tree.hpp"

extern char** environ;

namespace zklock {

namespace {

using namespace std::chrono_literals;

// How long the keeper keeps killing before it gives up on processes that survive SIGKILL.
constexpr auto kill_bound = 30s;

void report(int socket, KeeperReport::Kind kind, int value, bool descendants_left = false) {
  const KeeperReport message{kind, value, descendants_left};
  // zklock may be gone; then nobody is listening and that is fine (MSG_NOSIGNAL: no SIGPIPE).
  while (::send(socket, &message, sizeof message, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// SIGKILLs every descendant, again and again, until none is left (or the bound passes).
[[noreturn]] void kill_everything_and_exit(pid_t job) {
  const auto deadline = std::chrono::steady_clock::now() + kill_bound;
  std::optional<int> ignored;
  while (std::chrono::steady_clock::now() < deadline) {
    ::kill(-job, SIGKILL);
    for (pid_t pid : descendants_of(::getpid())) ::kill(pid, SIGKILL);
    if (reap_children(job, ignored)) ::_exit(0);
    std::this_thread::sleep_for(10ms);
  }
  ::_exit(1);
}

// Runs in the keeper's forked child: async-signal-safe calls only (the keeper has one thread, but
// the habit costs nothing).
[[noreturn]] void exec_job(const char* path, char* const argv[], bool take_terminal, pid_t keeper, int report_fd) {
  ::setpgid(0, 0);
  // SIGTTOU is still blocked (the keeper blocks everything), so this cannot stop us.
  if (take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  // If the keeper itself is killed, the job goes with it; its own children come to zklock.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != keeper) ::_exit(exit_code::signal_base + SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, environ);
  const int error = errno;
  [[maybe_unused]] auto written = ::write(report_fd, &error, sizeof error);
  ::_exit(exit_code::not_found);
}

// Closes what zklock opened for itself and did not mark close-on-exec (the ZooKeeper client's
// sockets and pipes): only what zklock was given, and the keeper's socket, stay.
void close_descriptors_not_passed(std::string_view passed_list, int socket) {
  std::vector<int> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, socket};
  while (!passed_list.empty()) {
    const std::size_t comma = passed_list.find(',');
    keep.push_back(std::atoi(std::string(passed_list.substr(0, comma)).c_str()));
    passed_list.remove_prefix(comma == std::string_view::npos ? passed_list.size() : comma + 1);
  }
  std::vector<int> to_close;
  DIR* directory = ::opendir("/proc/self/fd");
  if (!directory) return;
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != ::dirfd(directory) && std::find(keep.begin(), keep.end(), fd) == keep.end()) to_close.push_back(fd);
  }
  ::closedir(directory);
  for (int fd : to_close) ::close(fd);
}

}  // namespace

int keeper_main(int argc, char** argv) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  const int socket = argc >= 6 ? std::atoi(argv[1]) : -1;
  struct stat socket_info {};
  if (::fstat(socket, &socket_info) != 0 || !S_ISSOCK(socket_info.st_mode)) {
    const std::string_view message = "zklock-keeper: started by zklock only\n";
    [[maybe_unused]] auto written = ::write(STDERR_FILENO, message.data(), message.size());
    return exit_code::usage;
  }
  // zklock may have died while the keeper started: then the job must not start at all.
  pollfd zklock_gone{socket, POLLIN, 0};
  if (::poll(&zklock_gone, 1, 0) > 0 && (zklock_gone.revents & (POLLHUP | POLLERR))) return 0;
  const bool take_terminal = std::string_view(argv[2]) == "1";
  close_descriptors_not_passed(argv[3], socket);
  const char* path = argv[4];
  char** job_argv = argv + 5;
  ::fcntl(socket, F_SETFD, FD_CLOEXEC);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  sigset_t child_exits;
  sigemptyset(&child_exits);
  sigaddset(&child_exits, SIGCHLD);
  const int signals = ::signalfd(-1, &child_exits, SFD_CLOEXEC | SFD_NONBLOCK);

  int exec_report[2];
  if (signals < 0 || ::pipe2(exec_report, O_CLOEXEC) != 0) {
    report(socket, KeeperReport::exec_failed, errno);
    return exit_code::internal;
  }
  const pid_t keeper = ::getpid();
  const pid_t job = ::fork();
  if (job < 0) {
    report(socket, KeeperReport::exec_failed, errno);
    return exit_code::internal;
  }
  if (job == 0) {
    ::close(exec_report[0]);
    exec_job(path, job_argv, take_terminal, keeper, exec_report[1]);
  }
  ::close(exec_report[1]);
  // Both sides set the group, so that it exists before either signals it.
  ::setpgid(job, job);
  if (take_terminal) ::tcsetpgrp(STDIN_FILENO, job);

  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(exec_report[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  ::close(exec_report[0]);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    while (::waitpid(job, nullptr, 0) < 0 && errno == EINTR) {
    }
    report(socket, KeeperReport::exec_failed, exec_error);
    return 0;
  }
  report(socket, KeeperReport::started, job);

  std::optional<int> job_status;
  while (true) {
    pollfd fds[2] = {{socket, POLLIN, 0}, {signals, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signals, &info, sizeof info) > 0) {
      }
      const bool had_status = job_status.has_value();
      const bool no_child_left = reap_children(job, job_status);
      if (job_status && !had_status) report(socket, KeeperReport::exited, *job_status, !no_child_left);
      if (no_child_left) return 0;  // the job and every descendant are gone
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char byte;
      const ssize_t read = ::recv(socket, &byte, sizeof byte, MSG_DONTWAIT);
      // EOF: zklock died or gave up on the job. Nothing else is ever sent.
      if (read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR)) kill_everything_and_exit(job);
    }
  }
}

}  // namespace zklock
