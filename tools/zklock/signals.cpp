// SPDX-License-Identifier: Apache-2.0
#include "signals.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace zklock {

namespace {

sigset_t received_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : forwarded_signals) sigaddset(&set, signal);
  sigaddset(&set, SIGCHLD);
  return set;
}

}  // namespace

void block_handled_signals() {
  sigset_t set = received_signals();
  sigaddset(&set, SIGTTOU);
  sigaddset(&set, SIGPIPE);
  for (int fatal : {SIGALRM, SIGVTALRM, SIGPROF, SIGPOLL, SIGPWR, SIGSTKFLT, SIGXCPU, SIGXFSZ}) sigaddset(&set, fatal);
  // glibc keeps the few real-time signals it uses internally out of any mask on its own.
  for (int realtime = SIGRTMIN; realtime <= SIGRTMAX; ++realtime) sigaddset(&set, realtime);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

SignalReceiver::SignalReceiver() {
  const sigset_t set = received_signals();
  fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
}

SignalReceiver::~SignalReceiver() { ::close(fd_); }

std::optional<int> SignalReceiver::next() {
  signalfd_siginfo info{};
  ssize_t got;
  do {
    got = ::read(fd_, &info, sizeof info);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof info)) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

Wakeup::Wakeup() {
  fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

Wakeup::~Wakeup() { ::close(fd_); }

void Wakeup::notify() {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(fd_, &one, sizeof one);
}

void Wakeup::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] auto got = ::read(fd_, &count, sizeof count);
}

Readiness wait_for(const SignalReceiver& signals, const Wakeup& wakeup, std::chrono::milliseconds timeout,
                   int also) {
  pollfd fds[3] = {{signals.fd(), POLLIN, 0}, {wakeup.fd(), POLLIN, 0}, {also, POLLIN, 0}};
  const int result = ::poll(fds, also >= 0 ? 3 : 2, timeout.count() < 0 ? -1 : static_cast<int>(timeout.count()));
  Readiness ready;
  if (result > 0) {
    ready.signal = fds[0].revents & POLLIN;
    ready.wakeup = fds[1].revents & POLLIN;
  }
  return ready;
}

}  // namespace zklock
