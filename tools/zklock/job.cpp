#include "job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "exit_status.hpp"

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

// Runs in the forked child: async-signal-safe calls only.
[[noreturn]] void exec_child(const char* path, char* const argv[], char* const envp[],
                             pid_t parent, bool take_terminal, int report_fd) {
  ::setpgid(0, 0);
  // Still with zklock's signal mask (SIGTTOU blocked), so this cannot stop us.
  if (take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // zklock may have died before prctl took effect; then nobody would ever stop us.
  if (::getppid() != parent) ::_exit(exit_code::signal_base + SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  const int error = errno;
  [[maybe_unused]] auto written = ::write(report_fd, &error, sizeof error);
  ::_exit(exit_code::not_found);
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

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

Job Job::start(const std::vector<std::string>& argv, const std::vector<std::string>& environment) {
  if (argv.empty()) throw start_error("", ENOENT);
  const ResolvedCommand command = resolve_command(argv.front());
  if (command.error) throw start_error(argv.front(), command.error);

  // Everything the child needs is allocated here, before fork.
  std::vector<char*> argv_pointers;
  for (const std::string& arg : argv) argv_pointers.push_back(const_cast<char*>(arg.c_str()));
  argv_pointers.push_back(nullptr);
  std::vector<char*> envp_pointers;
  for (const std::string& variable : environment) envp_pointers.push_back(const_cast<char*>(variable.c_str()));
  envp_pointers.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw start_error(argv.front(), errno);
  const bool give_terminal = zklock_owns_terminal();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw JobStartError(exit_code::cannot_execute,
                        fmt::format("{}: cannot fork: {}", argv.front(), std::strerror(error)));
  }
  if (pid == 0) {
    ::close(report[0]);
    exec_child(command.path.c_str(), argv_pointers.data(), envp_pointers.data(), parent,
               give_terminal, report[1]);
  }
  ::close(report[1]);
  // Both sides set the group, so that it exists before either signals it.
  ::setpgid(pid, pid);
  if (give_terminal) ::tcsetpgrp(STDIN_FILENO, pid);
  Job job(pid, give_terminal);

  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(report[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    job.wait_status_ = status;
    job.reclaim_terminal();
    throw start_error(argv.front(), exec_error);
  }
  return job;
}

Job::Job(Job&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      owns_terminal_(std::exchange(other.owns_terminal_, false)),
      wait_status_(other.wait_status_) {}

// Normally the group is long gone by now; this is the last line of defence for the invariant that
// no process of the job outlives zklock's hold on the lock.
Job::~Job() {
  if (pid_ > 0 && group_alive()) signal_group(SIGKILL);
  reclaim_terminal();
}

void Job::signal_group(int signal) const {
  if (pid_ > 0) ::kill(-pid_, signal);
}

bool Job::group_alive() const {
  if (pid_ <= 0) return false;
  return ::kill(-pid_, 0) == 0 || errno == EPERM;
}

bool Job::reap() {
  while (true) {
    int status = 0;
    const pid_t reaped = ::waitpid(-1, &status, WNOHANG);
    if (reaped <= 0) break;
    if (reaped == pid_) {
      wait_status_ = status;
      reclaim_terminal();
    }
  }
  return exited();
}

void Job::reclaim_terminal() {
  if (!owns_terminal_) return;
  owns_terminal_ = false;
  // zklock is now a background group: SIGTTOU must be blocked (it is, see main) for this to work.
  ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
}

}  // namespace zklock
