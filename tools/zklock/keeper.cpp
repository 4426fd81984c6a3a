// SPDX-License-Identifier: Apache-2.0
#include "keeper.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "exit_status.hpp"
#include "process_tree.hpp"

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
    signal_process_tree(::getpid(), job, SIGKILL);
    if (reap_children(job, ignored)) ::_exit(0);
    std::this_thread::sleep_for(10ms);
  }
  ::_exit(1);
}

// The keeper's deadline (see keeper.hpp) and the stop it makes when the deadline passes, paced by
// a timer on the session monitor's clock: the kill signal to the whole tree (again every poll
// interval, for processes that appear meanwhile), SIGKILL once the grace is over, again until
// nothing is left. Mirrors zklock's own stop (Supervisor::stop_job), which it backs up.
class DeadlineWatch {
 public:
  // Throws std::system_error if the timer cannot be made.
  DeadlineWatch(int socket, const KeeperDeadline& terms)
      : socket_(socket), terms_(terms),
        timer_(::timerfd_create(zkr::BootClock::clock_id, TFD_CLOEXEC | TFD_NONBLOCK)) {
    if (timer_ < 0) throw std::system_error(errno, std::generic_category(), "timerfd_create");
  }
  ~DeadlineWatch() { ::close(timer_); }
  DeadlineWatch(const DeadlineWatch&) = delete;
  DeadlineWatch& operator=(const DeadlineWatch&) = delete;

  int fd() const { return timer_; }
  // The job runs: the deadline counts from now on.
  void start(pid_t job) {
    job_ = job;
    arm(terms_.at);
  }

  void obey(const KeeperOrder& order) {
    if (phase_ != Phase::watching) return;  // a stop once begun is never called off
    if (order.kind == KeeperOrder::renew) arm(zkr::BootClock::time_point(std::chrono::nanoseconds(order.deadline_ns)));
    if (order.kind == KeeperOrder::stopping) {
      // zklock signals the tree itself; the keeper only makes sure of the SIGKILL after the grace.
      phase_ = Phase::signalling;
      stop_began_ = zkr::BootClock::now();
      signalled_by_zklock_ = true;
      arm(stop_began_ + terms_.grace);
    }
  }

  // The timer is readable: act if it has expired.
  void on_timer() {
    std::uint64_t expirations = 0;
    if (::read(timer_, &expirations, sizeof expirations) != static_cast<ssize_t>(sizeof expirations)) return;
    const auto now = zkr::BootClock::now();
    if (phase_ == Phase::watching) {
      // zklock did not renew in time: it is paused, or starved, and cannot stop the job itself.
      report(socket_, KeeperReport::deadline_passed, terms_.kill_signal);
      phase_ = Phase::signalling;
      stop_began_ = now;
    }
    if (phase_ == Phase::signalling) {
      const bool plain_kill = terms_.kill_signal == SIGKILL;
      if (!signalled_by_zklock_ && !plain_kill) {  // at least once, even with no grace at all
        signal_process_tree(::getpid(), job_, terms_.kill_signal, 0, &signalled_);
        // A stopped process acts on the signal only once continued.
        signal_process_tree(::getpid(), job_, SIGCONT);
      }
      if (!plain_kill && now - stop_began_ < terms_.grace) {
        arm(std::min(now + poll_interval, stop_began_ + terms_.grace));
        return;
      }
      phase_ = Phase::killing;
      kill_began_ = now;
    }
    signal_process_tree(::getpid(), job_, SIGKILL);
    if (now - kill_began_ < kill_bound) arm(now + poll_interval);  // until no child is left: keep() returns then
  }

 private:
  static constexpr auto poll_interval = 20ms;
  enum class Phase { watching, signalling, killing };

  void arm(zkr::BootClock::time_point at) {
    // An absolute time on CLOCK_BOOTTIME: it counts a suspend of the machine, as the monitor does.
    const auto since_epoch = std::max(at.time_since_epoch(), std::chrono::nanoseconds(1));  // 0 would disarm
    itimerspec value{};
    value.it_value.tv_sec = static_cast<time_t>(since_epoch.count() / 1'000'000'000);
    value.it_value.tv_nsec = static_cast<long>(since_epoch.count() % 1'000'000'000);
    ::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &value, nullptr);
  }

  pid_t job_ = -1;
  int socket_;
  KeeperDeadline terms_;
  int timer_;
  Phase phase_ = Phase::watching;
  bool signalled_by_zklock_ = false;
  zkr::BootClock::time_point stop_began_{}, kill_began_{};
  std::vector<pid_t> signalled_;
};

// What the job's process needs until its execve.
struct JobLaunch {
  const char* path;
  char* const* argv;
  char* const* envp;
  bool take_terminal;
  pid_t keeper;
  int report_read_fd;   // the keeper's end: closed in the job
  int report_write_fd;  // the execve's errno, if it fails
};

// The job's process until its execve. It shares the keeper's memory (see start_job), so: system
// calls only, no allocation, nothing written but its own stack and errno, and it never returns.
int exec_job(void* argument) {
  const JobLaunch& launch = *static_cast<const JobLaunch*>(argument);
  ::close(launch.report_read_fd);
  ::setpgid(0, 0);
  // SIGTTOU is still blocked (the keeper blocks everything), so this cannot stop us.
  if (launch.take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  // If the keeper itself is killed, the job goes with it; its own children come to zklock.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launch.keeper) ::_exit(exit_code::signal_base + SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(launch.path, launch.argv, launch.envp);
  const int error = errno;
  [[maybe_unused]] auto written = ::write(launch.report_write_fd, &error, sizeof error);
  ::_exit(exit_code::not_found);
}

// Starts the job's process as posix_spawn does: it shares the keeper's memory, on a stack of its
// own, and the keeper waits until it has exec'd (or exited). The keeper is a copy of zklock, and a
// fork would copy its page tables only for the job to exec at once: about 1 ms of CPU and of wall
// time on the 2-core benchmark machine (docs/BENCHMARKS.md, section 7). posix_spawn itself cannot
// set the parent-death signal. Safe because the keeper is single-threaded and blocks every signal:
// no handler can run in the child on the shared memory. Returns the pid, or -1 with errno.
pid_t start_job(const JobLaunch& launch) {
  // Far more than a few system calls need; not zeroed, so only the pages the child uses are touched.
  // Freed on return: by then the child has exec'd or exited.
  constexpr std::size_t stack_size = 64 * 1024;
  const auto stack = std::make_unique_for_overwrite<char[]>(stack_size);
  const auto top = reinterpret_cast<std::uintptr_t>(stack.get() + stack_size) & ~std::uintptr_t{15};  // grows down
  return ::clone(exec_job, reinterpret_cast<void*>(top), CLONE_VM | CLONE_VFORK | SIGCHLD,
                 const_cast<JobLaunch*>(&launch));
}

// Closes what zklock opened for itself and did not mark close-on-exec: only what zklock was
// given, and the keeper's socket, stay. close_range() over the gaps between them, with no listing
// of /proc/self/fd (whose entries the kernel must also drop when the keeper is reaped), except
// on kernels older than 5.9.
void close_descriptors_not_passed(const std::vector<int>& passed, int socket) {
  std::vector<int> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, socket};
  keep.insert(keep.end(), passed.begin(), passed.end());
  std::sort(keep.begin(), keep.end());
  unsigned first_unkept = 0;
  bool closed = true;
  for (int fd : keep) {
    if (fd < 0 || static_cast<unsigned>(fd) < first_unkept) continue;
    if (static_cast<unsigned>(fd) > first_unkept) closed &= ::close_range(first_unkept, fd - 1, 0) == 0;
    first_unkept = static_cast<unsigned>(fd) + 1;
  }
  closed &= ::close_range(first_unkept, ~0U, 0) == 0;
  if (closed) return;
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

// Everything zklock writes to the job pipe, up to its end (zklock closed it, or died).
std::string read_to_end(int fd) {
  std::string bytes;
  char buffer[4096];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return bytes;
    bytes.append(buffer, static_cast<std::size_t>(got));
  }
}

// Runs the job and watches it and zklock; returns the keeper's exit code.
int keep(int socket, JobSpec spec) {
  close_descriptors_not_passed(spec.passed_fds, socket);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::vector<char*> job_argv;
  for (std::string& arg : spec.argv) job_argv.push_back(arg.data());
  job_argv.push_back(nullptr);
  std::vector<char*> job_environment;
  for (std::string& variable : spec.environment) job_environment.push_back(variable.data());
  job_environment.push_back(nullptr);
  const bool take_terminal = spec.take_terminal;
  sigset_t child_exits;
  sigemptyset(&child_exits);
  sigaddset(&child_exits, SIGCHLD);
  const int signals = ::signalfd(-1, &child_exits, SFD_CLOEXEC | SFD_NONBLOCK);

  // No job without its deadline.
  std::optional<DeadlineWatch> deadline;
  try {
    deadline.emplace(socket, spec.deadline);
  } catch (const std::system_error& error) {
    report(socket, KeeperReport::exec_failed, error.code().value());
    return exit_code::internal;
  }
  int exec_report[2];
  if (signals < 0 || ::pipe2(exec_report, O_CLOEXEC) != 0) {
    report(socket, KeeperReport::exec_failed, errno);
    return exit_code::internal;
  }
  const JobLaunch launch{spec.path.c_str(), job_argv.data(), job_environment.data(), take_terminal, ::getpid(),
                         exec_report[0],   exec_report[1]};
  const pid_t job = start_job(launch);
  if (job < 0) {
    report(socket, KeeperReport::exec_failed, errno);
    return exit_code::internal;
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
  deadline->start(job);

  std::optional<int> job_status;
  while (true) {
    pollfd fds[3] = {{socket, POLLIN, 0}, {signals, POLLIN, 0}, {deadline->fd(), POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) continue;
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signals, &info, sizeof info) > 0) {
      }
      const bool had_status = job_status.has_value();
      const bool no_child_left = reap_children(job, job_status);
      if (job_status && !had_status) report(socket, KeeperReport::exited, *job_status, !no_child_left);
      if (no_child_left) return 0;  // the job and every descendant are gone
    }
    // zklock's orders before the timer: a renewal that came in time counts, even if the keeper
    // itself was slow to read it.
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      while (true) {
        KeeperOrder order{};
        const ssize_t read = ::recv(socket, &order, sizeof order, MSG_DONTWAIT);
        if (read < 0 && errno == EINTR) continue;
        if (read < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        // EOF: zklock died or gave up on the job.
        if (read <= 0) kill_everything_and_exit(job);
        if (read == static_cast<ssize_t>(sizeof order)) deadline->obey(order);
      }
    }
    if (fds[2].revents & POLLIN) deadline->on_timer();
  }
}


// The forked keeper, waiting for its job: it never returns into zklock's code.
[[noreturn]] void run_keeper(int socket, int job_pipe) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  ::prctl(PR_SET_NAME, std::string(keeper_name).c_str());
  const std::optional<JobSpec> spec = decode_job_spec(read_to_end(job_pipe));
  ::close(job_pipe);
  if (!spec) ::_exit(0);  // zklock died, or ended without a job: start nothing
  // zklock may have died since it handed the job over: then the job must not start at all.
  pollfd zklock_gone{socket, POLLIN, 0};
  if (::poll(&zklock_gone, 1, 0) > 0 && (zklock_gone.revents & (POLLHUP | POLLERR))) ::_exit(0);
  ::_exit(keep(socket, std::move(*spec)));
}

}  // namespace

std::string encode_job_spec(const JobSpec& spec) {
  std::string fields;
  const auto add = [&fields](std::string_view field) {
    fields += field;
    fields += '\0';
  };
  add(spec.take_terminal ? "1" : "0");
  add(std::to_string(spec.deadline.at.time_since_epoch().count()));
  add(std::to_string(spec.deadline.kill_signal));
  add(std::to_string(spec.deadline.grace.count()));
  add(std::to_string(spec.passed_fds.size()));
  for (int fd : spec.passed_fds) add(std::to_string(fd));
  add(spec.path);
  add(std::to_string(spec.argv.size()));
  for (const std::string& arg : spec.argv) add(arg);
  for (const std::string& variable : spec.environment) add(variable);
  const std::uint64_t length = fields.size();
  return std::string(reinterpret_cast<const char*>(&length), sizeof length) + fields;
}

std::optional<JobSpec> decode_job_spec(std::string_view bytes) {
  std::uint64_t length = 0;
  if (bytes.size() < sizeof length) return std::nullopt;
  std::memcpy(&length, bytes.data(), sizeof length);
  bytes.remove_prefix(sizeof length);
  if (bytes.size() != length || (!bytes.empty() && bytes.back() != '\0')) return std::nullopt;
  std::vector<std::string_view> fields;
  while (!bytes.empty()) {
    const std::size_t end = bytes.find('\0');
    fields.push_back(bytes.substr(0, end));
    bytes.remove_prefix(end + 1);
  }
  std::size_t next = 0;
  const auto count = [&]() -> std::optional<std::size_t> {
    if (next >= fields.size()) return std::nullopt;
    const std::string_view field = fields[next++];
    std::size_t value = 0;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (error != std::errc() || end != field.data() + field.size()) return std::nullopt;
    return value;
  };
  JobSpec spec;
  if (fields.empty() || (fields[0] != "0" && fields[0] != "1")) return std::nullopt;
  spec.take_terminal = fields[next++] == "1";
  const auto deadline_ns = count(), kill_signal = count(), grace_ms = count();
  if (!deadline_ns || !kill_signal || !grace_ms || *kill_signal < 1 || *kill_signal >= NSIG) return std::nullopt;
  spec.deadline = {zkr::BootClock::time_point(std::chrono::nanoseconds(static_cast<std::int64_t>(*deadline_ns))), static_cast<int>(*kill_signal),
                   std::chrono::milliseconds(*grace_ms)};
  const auto passed = count();
  if (!passed || *passed > fields.size() - next) return std::nullopt;
  for (std::size_t i = 0; i < *passed; ++i) {
    const auto fd = count();
    if (!fd) return std::nullopt;
    spec.passed_fds.push_back(static_cast<int>(*fd));
  }
  if (next >= fields.size()) return std::nullopt;
  spec.path = fields[next++];
  const auto argc = count();
  if (!argc || *argc == 0 || *argc > fields.size() - next) return std::nullopt;
  for (std::size_t i = 0; i < *argc; ++i) spec.argv.emplace_back(fields[next++]);
  while (next < fields.size()) spec.environment.emplace_back(fields[next++]);
  return spec;
}

WaitingKeeper WaitingKeeper::fork_now() {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot start zklock's keeper");
  }
  int job_pipe[2];
  if (::pipe2(job_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(sockets[0]);
    ::close(sockets[1]);
    throw std::system_error(error, std::generic_category(), "cannot start zklock's keeper");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sockets[0]);
    ::close(job_pipe[1]);
    // A group of its own: whatever kills zklock's group (a supervisor's SIGKILL) leaves the keeper
    // to clean up. It blocks SIGTTOU, so from this background group it can still hand the job the
    // terminal.
    ::setpgid(0, 0);
    run_keeper(sockets[1], job_pipe[0]);
  }
  const int error = errno;
  ::close(sockets[1]);
  ::close(job_pipe[0]);
  if (pid < 0) {
    ::close(sockets[0]);
    ::close(job_pipe[1]);
    throw std::system_error(error, std::generic_category(), "cannot fork zklock's keeper");
  }
  ::setpgid(pid, pid);  // both sides, so that the group exists whichever runs first
  return WaitingKeeper(pid, sockets[0], job_pipe[1]);
}

WaitingKeeper::WaitingKeeper(WaitingKeeper&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      socket_(std::exchange(other.socket_, -1)),
      job_pipe_(std::exchange(other.job_pipe_, -1)) {}

WaitingKeeper::~WaitingKeeper() {
  // The keeper reads EOF without a job and exits at once: the wait is short.
  if (job_pipe_ >= 0) ::close(job_pipe_);
  if (socket_ >= 0) ::close(socket_);
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

std::optional<WaitingKeeper::Handed> WaitingKeeper::hand_over(const JobSpec& spec) {
  const std::string bytes = encode_job_spec(spec);
  std::size_t written = 0;
  while (written < bytes.size()) {
    // SIGPIPE is blocked in zklock: a dead keeper gives EPIPE.
    const ssize_t wrote = ::write(job_pipe_, bytes.data() + written, bytes.size() - written);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return std::nullopt;
    written += static_cast<std::size_t>(wrote);
  }
  ::close(std::exchange(job_pipe_, -1));
  return Handed{std::exchange(pid_, -1), std::exchange(socket_, -1)};
}

}  // namespace zklock
