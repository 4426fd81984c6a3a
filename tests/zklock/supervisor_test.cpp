// SPDX-License-Identifier: Apache-2.0
// The supervisor against a fake lock and a fake job, no server: on every path the job is stopped
// before the lock is released, and the exit code is the one zklock(1) documents.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exit_status.hpp"
#include "supervisor.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::ElementsAre;

// Everything the fakes did, in order, for assertions on ordering.
struct Timeline {
  std::vector<std::string> events;
  void add(std::string event) { events.push_back(std::move(event)); }
  bool has(const std::string& event) const {
    return std::find(events.begin(), events.end(), event) != events.end();
  }
};

// The job's processes as the fake job models them: the command, and what it leaves behind.
struct JobState {
  bool command_running = true;
  bool others_running = false;  // processes the command started
  int wait_status = 0;
  // Script.
  int exits_after_polls = -1;  // the command exits by itself with exit_status_on_exit; -1: never
  int exit_status_on_exit = 0;
  bool leaves_processes_behind = false;
  std::set<int> ignored_signals;  // besides SIGKILL, every signal but SIGCONT/SIGCHLD ends a process
  bool keeper_fails = false;
  int keeper_stops_after_polls = -1;  // the keeper's deadline passes: it sends keeper_signal; -1: never
  int keeper_signal = SIGTERM;
  // Record.
  std::vector<zkr::BootClock::time_point> renewals;  // deadlines relayed to the keeper
  bool stopped_by_keeper = false;
  int polls = 0;
  std::vector<int> group_signals;
  std::vector<int> tree_signals;
  bool destroyed = false;

  bool gone() const { return !command_running && !others_running; }
  bool ends(int signal) const {
    return signal == SIGKILL || (signal != SIGCONT && signal != SIGCHLD && !ignored_signals.count(signal));
  }
};

class FakeJob final : public JobControl {
 public:
  FakeJob(std::shared_ptr<JobState> state, Timeline& timeline) : state_(std::move(state)), timeline_(timeline) {}
  ~FakeJob() override {
    state_->destroyed = true;
    timeline_.add("job destroyed");
  }
  int keeper_socket() const noexcept override { return -1; }
  void signal_group(int signal) const override {
    state_->group_signals.push_back(signal);
    if (state_->command_running && state_->ends(signal)) end_command(signal);
  }
  void signal_tree(int signal, std::vector<pid_t>*) const override {
    state_->tree_signals.push_back(signal);
    if (!state_->ends(signal)) return;
    if (state_->command_running) end_command(signal);
    state_->others_running = false;
    note_if_gone();
  }
  void kill_everything() override { signal_tree(SIGKILL, nullptr); }
  void renew_deadline(zkr::BootClock::time_point deadline) override { state_->renewals.push_back(deadline); }
  void announce_stop() override { timeline_.add("stop announced to the keeper"); }
  bool stopped_by_keeper() const noexcept override { return state_->stopped_by_keeper; }
  bool poll() override {
    ++state_->polls;
    if (!state_->stopped_by_keeper && state_->keeper_stops_after_polls >= 0 &&
        state_->polls > state_->keeper_stops_after_polls) {
      state_->stopped_by_keeper = true;
      timeline_.add("keeper's deadline passed");
      if (state_->ends(state_->keeper_signal)) {  // as the keeper sends it: to the whole tree
        if (state_->command_running) end_command(state_->keeper_signal);
        state_->others_running = false;
        note_if_gone();
      }
    }
    if (state_->command_running && state_->exits_after_polls >= 0 && state_->polls > state_->exits_after_polls) {
      state_->command_running = false;
      state_->wait_status = state_->exit_status_on_exit;
      state_->others_running = state_->leaves_processes_behind;
      timeline_.add("command exited");
      note_if_gone();
    }
    return !state_->command_running || state_->keeper_fails;
  }
  int wait_status() const override { return state_->wait_status; }
  bool keeper_failed() const noexcept override { return state_->keeper_fails; }
  bool left_processes_behind() const noexcept override { return state_->leaves_processes_behind; }
  bool tree_gone() override { return state_->gone(); }

 private:
  void end_command(int signal) const {
    state_->command_running = false;
    state_->wait_status = signal;  // as waitpid() reports a death by signal
    state_->others_running = state_->others_running || state_->leaves_processes_behind;
    timeline_.add("command killed by " + std::to_string(signal));
    note_if_gone();
  }
  void note_if_gone() const {
    if (state_->gone() && !timeline_.has("job gone")) timeline_.add("job gone");
  }
  std::shared_ptr<JobState> state_;
  Timeline& timeline_;
};

class FakeLock final : public SupervisedLock {
 public:
  FakeLock(Inbox& inbox, Timeline& timeline) : inbox_(inbox), timeline_(timeline) {}

  // What the library's monitor does when the lock is lost.
  void declare_lost(zkr::LossReason reason) {
    lost_ = reason;
    inbox_.post_lost(reason);
  }
  // Lost on the server, not yet declared (the monitor has not run): the delete finds no node.
  void lose_silently() { release_answer = zkr::ReleaseOutcome::lost; }

  std::string fencing_token() const override { return "4711"; }
  std::string node_path() const override { return "/locks/a/_c_0-lock-0000000001"; }
  std::int64_t session_id() const override { return 0x1234; }
  std::optional<zkr::LossReason> loss_reason() const override { return lost_; }
  void release() override {
    ++releases;
    released_with_job_alive = released_with_job_alive || (job && !job->gone());
    timeline_.add("released");
  }
  zkr::ReleaseOutcome release_and_confirm() override {
    ++confirmed_releases;
    release();
    return release_answer;
  }

  std::shared_ptr<JobState> job;  // the job to check at release
  int releases = 0;
  bool released_with_job_alive = false;
  int confirmed_releases = 0;  // releases that asked whether the lock stood until then
  zkr::ReleaseOutcome release_answer = zkr::ReleaseOutcome::held_to_the_end;

 private:
  Inbox& inbox_;
  Timeline& timeline_;
  std::optional<zkr::LossReason> lost_;
};

// Signals delivered at given waits; `on_wait` runs before each wait answers.
class FakeWaiter final : public EventWaiter {
 public:
  Readiness wait(std::chrono::milliseconds, int) override {
    ++waits;
    if (waits > max_waits) throw std::runtime_error("the supervisor kept waiting");  // bounds every test
    if (on_wait) on_wait(waits);
    if (signals.empty()) ::usleep(1000);  // time passes for the supervisor's deadlines
    return {!signals.empty(), true};
  }
  std::optional<int> next_signal() override {
    if (signals.empty()) return std::nullopt;
    const int signal = signals.front();
    signals.pop_front();
    return signal;
  }

  std::deque<int> signals;
  std::function<void(int wait)> on_wait;
  int waits = 0;
  int max_waits = 20'000;
};

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest() {
    options.lock_path = "/locks/a";
    options.command = {"job", "arg"};
    options.kill_after = 50ms;
    lock.job = job;
    inbox.post_deadline({lock.session_id(), first_deadline});  // as the session tells zklock at once
  }

  int run() {
    Supervisor supervisor(options, inbox, waiter,
                          [this](const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                                 const KeeperDeadline& deadline) -> std::unique_ptr<JobControl> {
                            started_argv = argv;
                            started_environment = environment;
                            started_deadline = deadline;
                            timeline.add("job started");
                            if (start_error) throw *start_error;
                            auto started = std::make_unique<FakeJob>(job, timeline);
                            if (after_start) after_start();
                            return started;
                          });
    return supervisor.run_under_lock(lock);
  }

  // The invariant, checked by the fake lock when it was released.
  void expect_job_stopped_before_release() {
    EXPECT_EQ(lock.releases, 1);
    EXPECT_FALSE(lock.released_with_job_alive);
    EXPECT_TRUE(job->gone());
    const auto gone = std::find(timeline.events.begin(), timeline.events.end(), "job gone");
    const auto released = std::find(timeline.events.begin(), timeline.events.end(), "released");
    EXPECT_LT(gone, released) << ::testing::PrintToString(timeline.events);
  }

  CliOptions options;
  Timeline timeline;
  Inbox inbox;
  FakeWaiter waiter;
  std::shared_ptr<JobState> job = std::make_shared<JobState>();
  FakeLock lock{inbox, timeline};
  std::optional<JobStartError> start_error;
  std::function<void()> after_start;
  std::vector<std::string> started_argv;
  std::vector<std::string> started_environment;
  std::optional<KeeperDeadline> started_deadline;
  const zkr::BootClock::time_point first_deadline = zkr::BootClock::now() + std::chrono::hours(1);
};

TEST_F(SupervisorTest, JobExitingNormallyGivesItsStatusAndReleasesAfterIt) {
  job->exits_after_polls = 2;
  job->exit_status_on_exit = 3 << 8;  // exit(3)

  EXPECT_EQ(run(), 3);
  expect_job_stopped_before_release();
  EXPECT_EQ(started_argv, (std::vector<std::string>{"job", "arg"}));
  EXPECT_THAT(started_environment, Contains("ZKLOCK_FENCING_TOKEN=4711"));
  EXPECT_THAT(started_environment, Contains("ZKLOCK_NODE=/locks/a/_c_0-lock-0000000001"));
  EXPECT_THAT(started_environment, Contains("ZKLOCK_PATH=/locks/a"));
  EXPECT_THAT(started_environment, Contains("ZKLOCK_SESSION_ID=0x1234"));
  EXPECT_TRUE(job->tree_signals.empty());  // nothing was left to stop
  EXPECT_EQ(lock.confirmed_releases, 1);   // held to the end, as the delete's answer says
}

TEST_F(SupervisorTest, ShellCommandRunsUnderBinSh) {
  options.command.clear();
  options.shell_command = "echo a | cat";
  job->exits_after_polls = 0;

  EXPECT_EQ(run(), 0);
  EXPECT_EQ(started_argv, (std::vector<std::string>{"/bin/sh", "-c", "echo a | cat"}));
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, ProcessesLeftBehindAreStoppedBeforeRelease) {
  job->exits_after_polls = 1;
  job->leaves_processes_behind = true;

  EXPECT_EQ(run(), 0);
  EXPECT_THAT(job->tree_signals, Contains(SIGTERM));
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, LossWhileTheJobRunsStopsItWithTheKillSignalAndGivesTheLostCode) {
  options.kill_signal = SIGUSR2;
  waiter.on_wait = [&](int wait) {
    if (wait == 3) lock.declare_lost(zkr::LossReason::session_lost);
  };

  EXPECT_EQ(run(), 75);
  EXPECT_EQ(job->tree_signals.front(), SIGUSR2);
  EXPECT_TRUE(job->group_signals.empty());
  expect_job_stopped_before_release();
  EXPECT_EQ(lock.confirmed_releases, 0);  // the loss was known: no need to ask
}

TEST_F(SupervisorTest, LossWithAJobIgnoringTheKillSignalEndsInSigkillBeforeRelease) {
  options.lost_exit_code = 99;
  job->ignored_signals = {SIGTERM};
  waiter.on_wait = [&](int wait) {
    if (wait == 1) lock.declare_lost(zkr::LossReason::node_deleted);
  };

  EXPECT_EQ(run(), 99);
  EXPECT_THAT(job->tree_signals, Contains(SIGTERM));
  EXPECT_EQ(job->tree_signals.back(), SIGKILL);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, LossDeclaredAsTheJobExitsGivesTheLostCode) {
  job->exits_after_polls = 0;  // the exit is read first
  after_start = [&] { lock.declare_lost(zkr::LossReason::session_lost); };

  EXPECT_EQ(run(), 75);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, LossNotYetDeclaredWhenTheJobExitsIsFoundOnTheServer) {
  job->exits_after_polls = 0;
  after_start = [&] { lock.lose_silently(); };

  EXPECT_EQ(run(), 75);
  EXPECT_EQ(lock.confirmed_releases, 1);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, ReleaseThatCannotBeConfirmedCountsAsLost) {
  job->exits_after_polls = 0;
  job->exit_status_on_exit = 5 << 8;
  lock.release_answer = zkr::ReleaseOutcome::unconfirmed;

  EXPECT_EQ(run(), 75);
  EXPECT_EQ(lock.confirmed_releases, 1);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, LostBeforeTheJobStartedStartsNothing) {
  lock.declare_lost(zkr::LossReason::session_lost);

  EXPECT_EQ(run(), 75);
  EXPECT_FALSE(timeline.has("job started"));
}

// The keeper starts with the session monitor's deadline for the lock's session and the stop terms,
// and hears every later deadline of that session once; a replacement session's never.
TEST_F(SupervisorTest, TheLocksSessionDeadlinesAreRelayedToTheKeeper) {
  options.kill_signal = SIGUSR2;
  const auto later = first_deadline + 1s, latest = first_deadline + 2s;
  waiter.on_wait = [&](int wait) {
    if (wait == 1) inbox.post_deadline({lock.session_id(), later});
    if (wait == 3) inbox.post_deadline({lock.session_id() + 1, latest + 1s});  // another session's
    if (wait == 5) inbox.post_deadline({lock.session_id(), latest});
  };
  job->exits_after_polls = 8;

  EXPECT_EQ(run(), 0);
  ASSERT_TRUE(started_deadline);
  EXPECT_EQ(started_deadline->at, first_deadline);
  EXPECT_EQ(started_deadline->kill_signal, SIGUSR2);
  EXPECT_EQ(started_deadline->grace, options.kill_after);
  EXPECT_THAT(job->renewals, ElementsAre(later, latest));
  expect_job_stopped_before_release();
}

// zklock stalled past the deadline: the keeper stopped the job (kill signal to the tree). zklock,
// running again, gives the lost code, sends no second kill signal (a trap must not run twice), and
// releases only once the tree is gone.
TEST_F(SupervisorTest, KeeperStoppingTheJobAtItsDeadlineGivesTheLostCodeWithoutASecondSignal) {
  job->keeper_stops_after_polls = 2;
  job->leaves_processes_behind = true;

  EXPECT_EQ(run(), 75);
  EXPECT_TRUE(job->tree_signals.empty()) << ::testing::PrintToString(job->tree_signals);
  EXPECT_FALSE(timeline.has("stop announced to the keeper"));
  expect_job_stopped_before_release();
}

// The same when the job ignores the kill signal: SIGKILL after the grace, before the release.
TEST_F(SupervisorTest, KeeperStoppingAJobThatIgnoresTheSignalEndsInSigkillBeforeRelease) {
  job->keeper_stops_after_polls = 1;
  job->ignored_signals = {SIGTERM};

  EXPECT_EQ(run(), 75);
  EXPECT_THAT(job->tree_signals, ElementsAre(SIGKILL));
  expect_job_stopped_before_release();
}

// zklock stops the job itself: the keeper hears it first, so that it can SIGKILL after the grace
// should zklock stall in the middle.
TEST_F(SupervisorTest, ZklocksOwnStopIsAnnouncedToTheKeeperFirst) {
  waiter.on_wait = [&](int wait) {
    if (wait == 2) lock.declare_lost(zkr::LossReason::session_lost);
  };

  EXPECT_EQ(run(), 75);
  const auto announced = std::find(timeline.events.begin(), timeline.events.end(), "stop announced to the keeper");
  const auto killed = std::find(timeline.events.begin(), timeline.events.end(), "command killed by 15");
  EXPECT_LT(announced, killed) << ::testing::PrintToString(timeline.events);
  expect_job_stopped_before_release();
}

// No deadline of the lock's session is known (the session was replaced), or it has passed: the
// job must not start.
TEST_F(SupervisorTest, NoLiveDeadlineOfTheLocksSessionStartsNothing) {
  for (const zkr::SessionDeadline deadline : {zkr::SessionDeadline{lock.session_id() + 1, first_deadline},
                                              zkr::SessionDeadline{lock.session_id(), zkr::BootClock::now() - 1ms}}) {
    inbox.post_deadline(deadline);
    EXPECT_EQ(run(), 75);
    EXPECT_FALSE(timeline.has("job started"));
  }
}

TEST_F(SupervisorTest, SignalIsPassedToTheJobsGroup) {
  job->ignored_signals = {SIGUSR1};
  waiter.on_wait = [&](int wait) {
    if (wait == 1) waiter.signals = {SIGCHLD, SIGUSR1};
    if (wait == 2) waiter.signals = {SIGHUP};
  };

  EXPECT_EQ(run(), 128 + SIGHUP);
  EXPECT_THAT(job->group_signals, ElementsAre(SIGUSR1, SIGHUP));  // SIGCHLD is zklock's own
  EXPECT_TRUE(job->tree_signals.empty());
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, SecondTermSendsSigkillToTheWholeTree) {
  job->ignored_signals = {SIGTERM, SIGINT};
  job->leaves_processes_behind = true;
  waiter.on_wait = [&](int wait) {
    if (wait == 1) waiter.signals = {SIGTERM};
    if (wait == 3) waiter.signals = {SIGINT};
  };

  EXPECT_EQ(run(), 128 + SIGKILL);
  EXPECT_THAT(job->group_signals, ElementsAre(SIGTERM));
  EXPECT_EQ(job->tree_signals.front(), SIGKILL);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, JobThatCannotStartReleasesAndGivesTheShellsCode) {
  start_error.emplace(exit_code::not_found, "job: command not found");

  EXPECT_EQ(run(), 127);
  EXPECT_EQ(lock.releases, 1);
  EXPECT_FALSE(job->destroyed);  // no job ever existed
}

TEST_F(SupervisorTest, KeeperDeathGivesTheInternalCodeAfterTheTreeIsGone) {
  job->keeper_fails = true;
  job->others_running = true;

  EXPECT_EQ(run(), exit_code::internal);
  expect_job_stopped_before_release();
}

TEST_F(SupervisorTest, FailureWhileSupervisingDestroysTheJobAndLeavesTheLockToTheCaller) {
  waiter.on_wait = [&](int wait) {
    if (wait == 2) throw std::runtime_error("poll failed");
  };

  EXPECT_THROW(run(), std::runtime_error);
  EXPECT_TRUE(job->destroyed);
  EXPECT_EQ(lock.releases, 0);  // released by the caller's HeldLock, after the job's destructor
}

// A stderr whose reader is gone: every message fails (EPIPE), and nothing else changes.
class BrokenStderr {
 public:
  BrokenStderr() {
    old_pipe_action_ = std::signal(SIGPIPE, SIG_IGN);
    int ends[2];
    if (::pipe(ends) != 0) throw std::runtime_error("pipe");
    ::close(ends[0]);
    saved_stderr_ = ::dup(STDERR_FILENO);
    ::dup2(ends[1], STDERR_FILENO);
    ::close(ends[1]);
  }
  ~BrokenStderr() {
    ::dup2(saved_stderr_, STDERR_FILENO);
    ::close(saved_stderr_);
    std::signal(SIGPIPE, old_pipe_action_);
  }

 private:
  int saved_stderr_ = -1;
  void (*old_pipe_action_)(int) = nullptr;
};

TEST_F(SupervisorTest, BrokenStderrDoesNotCostTheOrderlyStop) {
  options.verbosity = Verbosity::verbose;  // as many messages as there can be
  job->ignored_signals = {SIGTERM, SIGUSR1};
  job->leaves_processes_behind = true;
  waiter.on_wait = [&](int wait) {
    if (wait == 1) waiter.signals = {SIGUSR1};
    if (wait == 2) lock.declare_lost(zkr::LossReason::session_lost);
  };

  int code = -1;
  {
    BrokenStderr broken;
    code = run();
  }
  EXPECT_EQ(code, 75);
  EXPECT_THAT(job->group_signals, ElementsAre(SIGUSR1));
  EXPECT_EQ(job->tree_signals.back(), SIGKILL);
  expect_job_stopped_before_release();
}

}  // namespace
}  // namespace zklock
