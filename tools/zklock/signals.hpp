// SPDX-License-Identifier: Apache-2.0
// How zklock hears about signals and about events from the library's callback thread: both become
// readable file descriptors, so the main thread waits for everything with one poll().
#pragma once

#include <csignal>
#include <chrono>
#include <optional>

namespace zklock {

// Signals zklock passes on to the job (or that cancel the wait for the lock).
inline constexpr int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};

// Blocks the forwarded signals and SIGCHLD (received through SignalReceiver), SIGTTOU (so that
// handing the terminal back works from a background group), SIGPIPE (a broken stderr must not kill
// zklock while its job runs) and every other signal whose default action would end zklock without
// stopping its job (SIGALRM, SIGPROF, SIGPWR, real-time signals...: zklock has no use for them, so
// they stay pending, unheard). Call first in main, before any thread exists: threads inherit the
// mask, so no library thread can take these signals. The job starts with an empty mask.
void block_handled_signals();

// A signalfd for the signals blocked above (except SIGTTOU and SIGPIPE).
class SignalReceiver {
 public:
  SignalReceiver();
  ~SignalReceiver();
  SignalReceiver(const SignalReceiver&) = delete;
  SignalReceiver& operator=(const SignalReceiver&) = delete;
  int fd() const { return fd_; }
  // The next pending signal, without blocking.
  std::optional<int> next();

 private:
  int fd_ = -1;
};

// An eventfd that other threads poke. notify() is safe from any thread and never blocks.
class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;
  int fd() const { return fd_; }
  void notify();
  void drain();

 private:
  int fd_ = -1;
};

struct Readiness {
  bool signal = false;
  bool wakeup = false;
};
// Waits until either descriptor (or `also`, if not -1) is readable or the timeout passes (negative:
// no timeout).
Readiness wait_for(const SignalReceiver& signals, const Wakeup& wakeup, std::chrono::milliseconds timeout,
                   int also = -1);

}  // namespace zklock
