// SPDX-License-Identifier: Apache-2.0
// The supervisor: runs the job under a held lock, passes signals on, stops the job when the lock
// is lost or the job ends, and only then releases the lock. It sees the lock, the job and what it
// waits on through the small interfaces below, so that tests can drive it with fakes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "cli_options.hpp"
#include "inbox.hpp"
#include "job.hpp"
#include "signals.hpp"

namespace zklock {

// The held lock as the supervisor sees it. A loss is reported through the Inbox (post_lost) as
// soon as it is known; the members here are asked on the main thread.
class SupervisedLock {
 public:
  virtual ~SupervisedLock() = default;
  // What the job's environment tells about the grant.
  virtual std::string fencing_token() const = 0;
  virtual std::string node_path() const = 0;
  virtual std::int64_t session_id() const = 0;
  // Why the lock is lost, if it is known to be.
  virtual std::optional<zkr::LossReason> loss_reason() const = 0;
  // The reason as messages give it, with what decided it when the session knows.
  virtual std::string describe_loss(zkr::LossReason reason) const { return std::string(zkr::to_string(reason)); }
  // Why a release could not confirm the lock held to the end, as messages give it.
  virtual std::string describe_unconfirmed() const { return "the release could not confirm it held to the end"; }
  // The command ended (with zklock's exit code `exit_code`) and the lock was not lost: the last
  // moment to write anything under it, before release().
  virtual void job_ended(int exit_code) { (void)exit_code; }
  virtual void release() = 0;
  // Releases and waits for the ensemble's answer to the delete, which tells whether the lock stood
  // until now (see zkr::HeldLock::release_and_confirm), at most until the session monitor has
  // surely spoken.
  virtual zkr::ReleaseOutcome release_and_confirm() = 0;
};

// What the supervisor waits on: signals sent to zklock, the Inbox's wakeup, and the job.
class EventWaiter {
 public:
  virtual ~EventWaiter() = default;
  // Waits until a signal is pending, the Inbox was poked, `also` (if not -1) is readable or the
  // timeout passed (negative: no timeout).
  virtual Readiness wait(std::chrono::milliseconds timeout, int also) = 0;
  // The next pending signal, without blocking.
  virtual std::optional<int> next_signal() = 0;
};

// The real EventWaiter: a signalfd and the Inbox's eventfd.
class SignalWaiter final : public EventWaiter {
 public:
  SignalWaiter(SignalReceiver& signals, Wakeup& wakeup) : signals_(signals), wakeup_(wakeup) {}
  Readiness wait(std::chrono::milliseconds timeout, int also) override {
    return wait_for(signals_, wakeup_, timeout, also);
  }
  std::optional<int> next_signal() override { return signals_.next(); }

 private:
  SignalReceiver& signals_;
  Wakeup& wakeup_;
};

// The real SupervisedLock: a granted zkr lock. Reports its loss to `inbox` from construction on.
class HeldZkLock final : public SupervisedLock {
 public:
  HeldZkLock(zkr::HeldLock& held, zkr::Session& session, std::string lock_path, std::shared_ptr<Inbox> inbox);
  std::string fencing_token() const override { return held_.token().to_string(); }
  std::string node_path() const override { return held_.node_path(); }
  std::int64_t session_id() const override { return held_.session_id(); }
  std::optional<zkr::LossReason> loss_reason() const override { return held_.loss_reason(); }
  std::string describe_loss(zkr::LossReason reason) const override;
  std::string describe_unconfirmed() const override;
  void job_ended(int exit_code) override {
    if (on_job_ended_) on_job_ended_(exit_code);
  }
  void release() override { held_.release(); }
  zkr::ReleaseOutcome release_and_confirm() override;
  void on_job_ended(std::function<void(int exit_code)> action) { on_job_ended_ = std::move(action); }

 private:
  std::function<void(int)> on_job_ended_;
  zkr::HeldLock& held_;
  zkr::Session& session_;
  std::string lock_path_;
};

// Starts the job (argv, environment), whose keeper stops it by itself once `deadline` passes
// unrenewed; throws JobStartError.
using JobStarter = std::function<std::unique_ptr<JobControl>(
    const std::vector<std::string>& argv, const std::vector<std::string>& environment, const KeeperDeadline& deadline)>;

class Supervisor {
 public:
  Supervisor(const CliOptions& options, Inbox& inbox, EventWaiter& waiter, JobStarter start_job)
      : options_(options), inbox_(inbox), waiter_(waiter), start_job_(std::move(start_job)) {}

  // Runs the command of `options` under `lock` and releases it; returns zklock's exit code: the
  // command's, the lost code, or 126/127 if it could not start. See the invariant in the .cpp.
  int run_under_lock(SupervisedLock& lock);

 private:
  using Clock = std::chrono::steady_clock;
  struct Supervised {
    int exit_code;
    bool lost;  // the lock was lost and the job stopped for it
  };
  Supervised supervise(JobControl& job, const SupervisedLock& lock, zkr::BootClock::time_point relayed_deadline);
  std::string describe_keeper_stop(JobControl& job, const SupervisedLock& lock, zkr::BootClock::time_point deadline);
  bool stop_job(JobControl& job, int signal, std::chrono::milliseconds grace);
  bool wait_a_little(JobControl& job, Clock::duration step);
  void report_stopped_job(JobControl& job);
  void handle_inbox();

  const CliOptions& options_;
  Inbox& inbox_;
  EventWaiter& waiter_;
  JobStarter start_job_;
};

// Drains the Inbox's wakeup and reports session state changes (with -v).
void report_session_states(Inbox& inbox, const CliOptions& options);

}  // namespace zklock
