// SPDX-License-Identifier: Apache-2.0
// Process: fork/exec with a stdout pipe, bounded reads, and a reliable kill on destruction.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "testenv.hpp"

extern char** environ;

namespace zkr::testenv {
namespace {

using Clock = std::chrono::steady_clock;

// Resolves argv[0] before fork: PATH search allocates, which a forked child of a threaded
// program must not do.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  throw std::runtime_error(fmt::format("cannot start '{}': not found in PATH", name));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Process::Process(std::vector<std::string> argv, Options options) {
  if (argv.empty()) throw std::invalid_argument("Process: empty argv");
  const std::string program = resolve_program(argv[0]);

  // Everything the child needs is built before fork.
  std::vector<char*> child_argv;
  for (auto& arg : argv) child_argv.push_back(arg.data());
  child_argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** entry = environ; *entry; ++entry) {
    std::string_view text(*entry);
    auto name = text.substr(0, text.find('='));
    if (!options.env.contains(std::string(name))) env_strings.emplace_back(text);
  }
  for (const auto& [name, value] : options.env) env_strings.push_back(name + "=" + value);
  std::vector<char*> child_env;
  for (auto& entry : env_strings) child_env.push_back(entry.data());
  child_env.push_back(nullptr);

  int out_pipe[2], in_pipe[2] = {-1, -1}, error_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(error_pipe, O_CLOEXEC) != 0 ||
      (options.pipe_stdin && ::pipe2(in_pipe, O_CLOEXEC) != 0)) {
    throw std::runtime_error(fmt::format("Process: pipe failed: {}", std::strerror(errno)));
  }

  pid_t child = ::fork();
  if (child < 0) {
    int error = errno;
    for (int fd : {out_pipe[0], out_pipe[1], error_pipe[0], error_pipe[1], in_pipe[0], in_pipe[1]})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error(fmt::format("Process: fork failed: {}", std::strerror(error)));
  }
  if (child == 0) {
    // Only async-signal-safe calls from here on.
    if (options.new_process_group) ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    if (options.merge_stderr) ::dup2(out_pipe[1], STDERR_FILENO);
    if (options.pipe_stdin) ::dup2(in_pipe[0], STDIN_FILENO);
    ::execve(program.c_str(), child_argv.data(), child_env.data());
    int error = errno;
    [[maybe_unused]] auto ignored = ::write(error_pipe[1], &error, sizeof error);
    ::_exit(127);
  }

  pid_ = child;
  own_group_ = options.new_process_group;
  if (own_group_) ::setpgid(child, child);  // also here, so the group exists before we signal it
  ::close(out_pipe[1]);
  ::close(error_pipe[1]);
  if (options.pipe_stdin) {
    ::close(in_pipe[0]);
    stdin_fd_ = in_pipe[1];
  }
  stdout_fd_ = out_pipe[0];

  // The error pipe closes on a successful exec; otherwise it carries the child's errno.
  int exec_error = 0;
  ssize_t got;
  do {
    got = ::read(error_pipe[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (got > 0) {
    ::waitpid(child, nullptr, 0);
    pid_ = -1;
    close_fd(stdout_fd_);
    close_fd(stdin_fd_);
    throw std::runtime_error(
        fmt::format("cannot start '{}': {}", program, std::strerror(exec_error)));
  }
}

Process::~Process() {
  if (pid_ > 0) {
    if (own_group_) ::kill(-pid_, SIGKILL);  // the job's children too, even if the leader is gone
    if (!status_) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
  }
  close_fd(stdout_fd_);
  close_fd(stdin_fd_);
}

bool Process::fill_buffer(Clock::time_point deadline) {
  if (stdout_closed_) return false;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char chunk[4096];
    ssize_t got = ::read(stdout_fd_, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      stdout_closed_ = true;
      close_fd(stdout_fd_);
      return false;
    }
    buffer_.append(chunk, static_cast<std::size_t>(got));
    return true;
  }
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    if (!fill_buffer(deadline)) {
      if (stdout_closed_ && !buffer_.empty()) return std::exchange(buffer_, {});
      if (stdout_closed_ || Clock::now() >= deadline) return std::nullopt;
    }
  }
}

std::optional<std::string> Process::wait_for_line(std::string_view prefix,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto line = read_line(std::max(left, std::chrono::milliseconds(0)));
    if (!line) return std::nullopt;
    if (line->starts_with(prefix)) return line;
  }
}

std::string Process::read_all(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!stdout_closed_ && Clock::now() < deadline) fill_buffer(deadline);
  return std::exchange(buffer_, {});
}

void Process::write_stdin(std::string_view data) {
  if (stdin_fd_ < 0) throw std::logic_error("Process: stdin is not piped (or already closed)");
  // A child that closed its stdin must not kill us with SIGPIPE: block it for this thread and
  // swallow the pending one.
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  int error = 0;
  while (!data.empty()) {
    ssize_t wrote = ::write(stdin_fd_, data.data(), data.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) {
      error = errno;
      break;
    }
    data.remove_prefix(static_cast<std::size_t>(wrote));
  }
  if (error == EPIPE) {
    timespec zero{0, 0};
    ::sigtimedwait(&pipe_signal, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error) {
    throw std::runtime_error(fmt::format("Process: write to stdin failed: {}", std::strerror(error)));
  }
}

void Process::close_stdin() { close_fd(stdin_fd_); }

void Process::signal(int sig) {
  if (pid_ <= 0) return;
  if (own_group_) {
    ::kill(-pid_, sig);
  } else if (!status_) {
    ::kill(pid_, sig);  // never after reaping: the pid may belong to someone else by now
  }
}

void Process::freeze() { signal(SIGSTOP); }
void Process::thaw() { signal(SIGCONT); }

bool Process::reap(bool block) {
  if (status_) return true;
  int raw = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &raw, block ? 0 : WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got != pid_) return false;
  if (WIFEXITED(raw)) {
    status_ = WEXITSTATUS(raw);
  } else if (WIFSIGNALED(raw)) {
    status_ = 128 + WTERMSIG(raw);
  } else {
    status_ = 255;
  }
  return true;
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!reap(false)) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

bool Process::running() { return pid_ > 0 && !reap(false); }

}  // namespace zkr::testenv

namespace zkr::testenv {

std::vector<std::string> HeldByChild::all(const std::string& key) const {
  std::vector<std::string> values;
  for (auto [it, end] = facts.equal_range(key); it != end; ++it) values.push_back(it->second);
  return values;
}

HeldByChild hold_in_child(const std::string& test_name, std::chrono::milliseconds timeout) {
  Process::Options options;
  options.merge_stderr = true;
  HeldByChild held;
  held.process = std::make_unique<Process>(
      std::vector<std::string>{std::filesystem::read_symlink("/proc/self/exe").string(),
                               "--gtest_also_run_disabled_tests", "--gtest_filter=" + test_name},
      options);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string output;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = held.process->read_line(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    if (!line) break;
    output += *line + "\n";
    if (*line == "held ready") return held;
    if (line->starts_with("held ")) {
      auto space = line->find(' ', 5);
      held.facts.emplace(line->substr(5, space - 5), space == std::string::npos ? "" : line->substr(space + 1));
    }
  }
  throw std::runtime_error(fmt::format("{} in a child process did not get ready:\n{}", test_name, output));
}

void print_held(std::string_view key, std::string_view value) {
  std::fputs((value.empty() ? fmt::format("held {}\n", key) : fmt::format("held {} {}\n", key, value)).c_str(),
             stdout);
  std::fflush(stdout);
}

}  // namespace zkr::testenv
