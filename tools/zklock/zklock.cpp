// zklock: runs a command while holding a ZooKeeper lock, like flock(1) across hosts (see zklock.1).
//
// The main thread does everything that matters: it waits with poll() on a signalfd and on an
// eventfd that the library's callback thread pokes (lock lost, acquisition done, session state).
// Callbacks only record what happened and poke the eventfd; they never act.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>  // before zkr/session.hpp, which uses std::exchange without including it
#include <vector>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/names.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/session.hpp>

#include "cli_options.hpp"
#include "contender_report.hpp"
#include "exit_status.hpp"
#include "job.hpp"
#include "signals.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Bounds on waits that should end promptly; passing one means something is badly wrong, and
// zklock gives up rather than hang.
constexpr auto cancel_bound = 30s;
constexpr auto after_sigkill_bound = 5s;
constexpr auto group_poll_interval = 20ms;

// Messages quote user input (option values, paths): control characters (C1 included) and bytes
// that are not UTF-8 are shown escaped, so that input can neither forge a second message line nor
// send escape sequences to the terminal.
std::string printable(std::string_view text) { return escape_for_terminal(text); }

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "zklock: {}\n", printable(fmt::format(format, std::forward<Args>(args)...)));
}

// Thrown to leave with an exit code once the reason has been printed. Never thrown while a job
// runs (see run_under_lock).
struct ExitRequest {
  int code;
};

std::string signal_label(int signal) { return "SIG" + signal_name(signal); }

// What the library's callback thread reports to the main thread.
class Inbox {
 public:
  struct Acquired {
    std::error_code error;
    zkr::HeldLock held;
  };

  Wakeup& wakeup() { return wakeup_; }

  void post_state(zkr::SessionState state) {
    {
      std::lock_guard guard(mutex_);
      states_.push_back(state);
    }
    wakeup_.notify();
  }
  void post_lost(zkr::LossReason reason) {
    {
      std::lock_guard guard(mutex_);
      if (!lost_) lost_ = reason;
    }
    wakeup_.notify();
  }
  void post_acquired(std::error_code error, zkr::HeldLock held) {
    {
      std::lock_guard guard(mutex_);
      acquired_.emplace(Acquired{error, std::move(held)});
    }
    wakeup_.notify();
  }
  void post_connected() { wakeup_.notify(); }

  std::deque<zkr::SessionState> take_states() {
    std::lock_guard guard(mutex_);
    return std::exchange(states_, {});
  }
  std::optional<zkr::LossReason> lost() const {
    std::lock_guard guard(mutex_);
    return lost_;
  }
  std::optional<Acquired> take_acquired() {
    std::lock_guard guard(mutex_);
    return std::exchange(acquired_, std::nullopt);
  }

 private:
  Wakeup wakeup_;
  mutable std::mutex mutex_;
  std::deque<zkr::SessionState> states_;
  std::optional<zkr::LossReason> lost_;
  std::optional<Acquired> acquired_;
};

class Zklock {
 public:
  Zklock(const CliOptions& options, SignalReceiver& signals)
      : options_(options), signals_(signals), inbox_(std::make_shared<Inbox>()) {}

  int list();
  int run();

 private:
  zkr::SessionOptions session_options() const;
  void connect();
  void check_lead_time() const;
  zkr::HeldLock acquire();
  int run_under_lock(zkr::HeldLock& held);
  int supervise(Job& job);
  bool stop_group(Job& job, int signal, std::chrono::milliseconds grace);
  bool wait_until_group_gone(Job& job, Clock::duration timeout);
  void handle_inbox();
  [[noreturn]] void fail(std::error_code error, const std::string& message) const;
  std::string job_description() const;

  const CliOptions& options_;
  SignalReceiver& signals_;
  std::shared_ptr<Inbox> inbox_;
  std::unique_ptr<zkr::Session> session_;
  zkr::Subscription state_subscription_;
  // One of these, alive as long as the session.
  std::optional<zkr::Lock> mutex_;
  std::optional<zkr::ReadWriteLock> read_write_;
};

// The single place that prints a library failure and turns it into an exit code.
void Zklock::fail(std::error_code error, const std::string& message) const {
  const int code = exit_code_for(error, options_);
  if (!(is_conflict(error) && options_.quiet())) say("{}", message);
  throw ExitRequest{code};
}

zkr::SessionOptions Zklock::session_options() const {
  zkr::SessionOptions session;
  session.servers = options_.servers;
  session.session_timeout = options_.session_timeout;
  session.connect_timeout = options_.connect_timeout;
  // Lost must be declared early enough for the job to be stopped (stop signal, grace, SIGKILL)
  // before the server could expire the session and grant the lock elsewhere.
  session.safety_margin = options_.kill_after + 1s;
  if (options_.auth_file) {
    try {
      session.credentials = zkr::DigestCredentials::from_file(*options_.auth_file);
    } catch (const std::exception& error) {
      // The message names the file, never its content.
      say("--auth-file: {}", error.what());
      throw ExitRequest{exit_code::usage};
    }
  }
  return session;
}

// Connects on a helper thread so that a signal can interrupt a slow connect: nothing exists on
// the ensemble yet, so leaving at once loses nothing.
void Zklock::connect() {
  struct Attempt {
    std::mutex mutex;
    bool done = false;
    std::unique_ptr<zkr::Session> session;
    std::exception_ptr error;
  };
  auto attempt = std::make_shared<Attempt>();
  std::thread connector([attempt, inbox = inbox_, session_options = session_options()] {
    std::unique_ptr<zkr::Session> session;
    std::exception_ptr error;
    try {
      session = std::make_unique<zkr::Session>(session_options);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard guard(attempt->mutex);
      attempt->session = std::move(session);
      attempt->error = error;
      attempt->done = true;
    }
    inbox->post_connected();
  });

  while (true) {
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), -1ms);
    if (ready.signal) {
      while (const auto signal = signals_.next()) {
        if (*signal == SIGCHLD) continue;
        if (!options_.quiet()) say("interrupted by {} while connecting to {}", signal_label(*signal), options_.servers);
        std::fflush(stderr);
        std::_Exit(exit_code::signal_base + *signal);
      }
    }
    if (ready.wakeup) {
      inbox_->wakeup().drain();
      std::lock_guard guard(attempt->mutex);
      if (attempt->done) break;
    }
  }
  connector.join();

  if (attempt->error) {
    try {
      std::rethrow_exception(attempt->error);
    } catch (const zkr::Error& error) {
      if (error.code() == zkr::errc::connect_timeout) {
        fail(error.code(), fmt::format("cannot reach ZooKeeper at {} within {}", options_.servers,
                                       format_duration(options_.connect_timeout)));
      }
      if (error.code() == zkr::errc::auth_failed || error.code() == zkr::zk_errc::auth_failed) {
        fail(error.code(), fmt::format("ZooKeeper at {} refused the credentials of --auth-file {}",
                                       options_.servers, options_.auth_file->string()));
      }
      fail(error.code(), fmt::format("cannot connect to {}: {}", options_.servers, error.what()));
    } catch (const std::exception& error) {
      say("cannot connect to {}: {}", options_.servers, error.what());
      throw ExitRequest{exit_code::internal};
    }
  }
  session_ = std::move(attempt->session);
  if (options_.verbose()) {
    state_subscription_ =
        session_->on_state_change([inbox = inbox_](zkr::SessionState state) { inbox->post_state(state); });
    say("connected to {}: session {:#x}, negotiated timeout {}, lead time {}", options_.servers,
        static_cast<std::uint64_t>(session_->id()), format_duration(session_->negotiated_timeout()),
        format_duration(session_->lead_time()));
  }
}

// The monitor clamps the safety margin to two thirds of the negotiated timeout: then the job may
// not be stopped in time, and the user should know.
void Zklock::check_lead_time() const {
  const auto needed = options_.kill_after + 1s;
  const auto lead_time = session_->lead_time();
  if (lead_time < needed && !options_.quiet()) {
    say("warning: --kill-after {} plus 1s for stopping the job exceeds the lead time of {} that the "
        "session gives (negotiated session timeout {}); the job might outlive the lock: raise "
        "--session-timeout or lower --kill-after",
        format_duration(options_.kill_after), format_duration(lead_time),
        format_duration(session_->negotiated_timeout()));
  }
}

void Zklock::handle_inbox() {
  inbox_->wakeup().drain();
  for (zkr::SessionState state : inbox_->take_states()) {
    if (options_.verbose()) say("session state: {}", zkr::to_string(state));
  }
}

std::string Zklock::job_description() const {
  if (options_.shell_command) return *options_.shell_command;
  std::string text;
  for (const std::string& arg : options_.command) text += (text.empty() ? "" : " ") + arg;
  return text;
}

zkr::HeldLock Zklock::acquire() {
  zkr::LockOptions lock_options;
  if (options_.owner) {
    lock_options.owner_data = *options_.owner;
  } else {
    constexpr std::size_t max_owner_command = 200;
    lock_options.owner_data = fmt::format("{}:{}", zkr::default_owner_data(),
                                          job_description().substr(0, max_owner_command));
  }
  if (options_.auth_file) lock_options.acl = zkr::NodeAcl::creator_all_world_read;

  zkr::Lock* lock = nullptr;
  try {
    if (options_.kind == LockKind::mutex) {
      lock = &mutex_.emplace(*session_, options_.lock_path, lock_options);
    } else {
      read_write_.emplace(*session_, options_.lock_path, lock_options);
      lock = options_.kind == LockKind::read ? &read_write_->read_lock() : &read_write_->write_lock();
    }
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("invalid lock path '{}': {}", options_.lock_path, error.what()));
  }

  if (options_.verbose()) {
    say("acquiring {}{}", options_.lock_path,
        options_.kind == LockKind::read ? " (read)" : options_.kind == LockKind::write ? " (write)" : "");
  }
  const auto started = Clock::now();
  std::stop_source cancel;
  const std::chrono::nanoseconds timeout = options_.wait_timeout.value_or(std::chrono::nanoseconds(-1));
  lock->async_acquire(
      timeout,
      [inbox = inbox_](std::error_code error, zkr::HeldLock held) {
        inbox->post_acquired(error, std::move(held));
      },
      cancel.get_token());

  // A signal cancels the wait: the library then deletes our waiting node.
  std::optional<int> interrupted_by;
  Clock::time_point interrupted_at;
  std::optional<Inbox::Acquired> outcome;
  while (!(outcome = inbox_->take_acquired())) {
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), interrupted_by ? 1000ms : -1ms);
    if (ready.signal) {
      while (const auto signal = signals_.next()) {
        if (*signal == SIGCHLD || interrupted_by) continue;
        interrupted_by = *signal;
        interrupted_at = Clock::now();
        cancel.request_stop();
      }
    }
    if (ready.wakeup) handle_inbox();
    if (interrupted_by && Clock::now() - interrupted_at > cancel_bound) {
      say("interrupted by {}; the lock wait did not end, leaving anyway", signal_label(*interrupted_by));
      std::fflush(stderr);
      std::_Exit(exit_code::signal_base + *interrupted_by);
    }
  }

  if (interrupted_by) {
    if (outcome->held) outcome->held.release();  // granted just as we were interrupted
    if (!options_.quiet()) say("interrupted by {} while waiting for {}", signal_label(*interrupted_by), options_.lock_path);
    throw ExitRequest{exit_code::signal_base + *interrupted_by};
  }
  if (outcome->error == zkr::errc::would_block) {
    fail(outcome->error, fmt::format("{} is held by someone else", options_.lock_path));
  }
  if (outcome->error == zkr::errc::timed_out) {
    fail(outcome->error, fmt::format("timed out after {} waiting for {}",
                                     format_duration(*options_.wait_timeout), options_.lock_path));
  }
  if (outcome->error == zkr::zk_errc::no_auth || outcome->error == zkr::zk_errc::invalid_acl) {
    fail(outcome->error, fmt::format("not allowed to lock {}: the ACL refuses us ({})", options_.lock_path,
                                     outcome->error.message()));
  }
  if (outcome->error) {
    fail(outcome->error, fmt::format("cannot lock {}: {}", options_.lock_path, outcome->error.message()));
  }
  zkr::HeldLock held = std::move(outcome->held);
  if (options_.verbose()) {
    say("got {} after {}: token {}, node {}, session {:#x}", options_.lock_path,
        format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)),
        held.token().value(), held.node_path(), static_cast<std::uint64_t>(held.session_id()));
  }
  return held;
}

int Zklock::run() {
  connect();
  check_lead_time();
  zkr::HeldLock held = acquire();
  const int code = run_under_lock(held);
  session_->close();
  return code;
}

// INVARIANT: the job is stopped before the lock is released, on every path. This function is the
// only one that starts a job, and it releases the lock only after the job's whole process group is
// gone (or after SIGKILL, if the group will not go away). Should anything throw in between, the
// Job's destructor SIGKILLs the group before `held`, declared outside, is destroyed.
int Zklock::run_under_lock(zkr::HeldLock& held) {
  held.on_lost([inbox = inbox_](zkr::LossReason reason) { inbox->post_lost(reason); });
  if (const auto reason = held.loss_reason()) {
    if (!options_.quiet()) say("lost the lock on {} ({}) before the job started", options_.lock_path, zkr::to_string(*reason));
    return options_.lost_exit_code;
  }

  std::vector<std::string> argv = options_.shell_command
                                      ? std::vector<std::string>{"/bin/sh", "-c", *options_.shell_command}
                                      : options_.command;
  std::vector<std::string> environment = environment_with({
      {"ZKLOCK_FENCING_TOKEN", held.token().to_string()},
      {"ZKLOCK_NODE", held.node_path()},
      {"ZKLOCK_PATH", options_.lock_path},
      {"ZKLOCK_SESSION_ID", fmt::format("{:x}", static_cast<std::uint64_t>(held.session_id()))},
  });

  std::optional<Job> job;
  try {
    job.emplace(Job::start(argv, environment));
  } catch (const JobStartError& error) {
    say("{}", error.what());
    held.release();
    return error.exit_code();
  }

  int code = supervise(*job);

  // The command has exited, or was stopped after the loss. Processes it left in its group still
  // work under the lock: stop them too before releasing.
  job->reap();
  if (job->group_alive()) {
    if (options_.verbose()) say("the job left processes in its group; sending {}", signal_label(options_.kill_signal));
    if (!stop_group(*job, options_.kill_signal, options_.kill_after)) {
      say("warning: processes of the job's group {} survive SIGKILL; releasing the lock anyway", job->pid());
    }
  }
  const bool still_held = !held.lost();
  held.release();
  if (options_.verbose() && still_held) say("released {}", options_.lock_path);
  return code;
}

// Waits for the command to exit while passing signals on, and stops it if the lock is lost.
int Zklock::supervise(Job& job) {
  int termination_requests = 0;
  while (!job.reap()) {
    if (const auto reason = inbox_->lost()) {
      if (!options_.quiet()) {
        say("lost the lock on {} ({}); stopping the job with {}", options_.lock_path, zkr::to_string(*reason),
            signal_label(options_.kill_signal));
      }
      if (!stop_group(job, options_.kill_signal, options_.kill_after)) {
        say("warning: processes of the job's group {} survive SIGKILL", job.pid());
      }
      return options_.lost_exit_code;
    }
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), -1ms);
    if (ready.wakeup) handle_inbox();
    if (!ready.signal) continue;
    while (const auto signal = signals_.next()) {
      if (*signal == SIGCHLD) continue;
      if (*signal == SIGINT || *signal == SIGTERM) ++termination_requests;
      const int forwarded = termination_requests >= 2 ? SIGKILL : *signal;
      if (options_.verbose()) say("passing {} to the job", signal_label(forwarded));
      job.signal_group(forwarded);
    }
  }
  return exit_code_from_wait_status(job.wait_status());
}

// Sends `signal` to the job's group, SIGKILL after `grace`. False if processes remain even then.
bool Zklock::stop_group(Job& job, int signal, std::chrono::milliseconds grace) {
  job.reap();
  if (!job.group_alive()) return true;
  job.signal_group(signal);
  // A stopped job (SIGSTOP, or frozen along with zklock) acts on the signal only once continued.
  if (signal != SIGKILL) job.signal_group(SIGCONT);
  if (signal != SIGKILL && wait_until_group_gone(job, grace)) return true;
  if (options_.verbose()) say("sending SIGKILL to the job");
  job.signal_group(SIGKILL);
  return wait_until_group_gone(job, after_sigkill_bound);
}

bool Zklock::wait_until_group_gone(Job& job, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    job.reap();
    if (!job.group_alive()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    const auto step = std::min<Clock::duration>(group_poll_interval, deadline - now);
    const Readiness ready =
        wait_for(signals_, inbox_->wakeup(), std::chrono::ceil<std::chrono::milliseconds>(step));
    if (ready.wakeup) handle_inbox();
    if (!ready.signal) continue;
    while (const auto received = signals_.next()) {
      // The user is already waiting for the job to stop: insisting means "now".
      if (*received == SIGINT || *received == SIGTERM) job.signal_group(SIGKILL);
    }
  }
}

int Zklock::list() {
  connect();
  zkr::PathListing listing;
  try {
    listing = zkr::list_lock_path(*session_, options_.lock_path);
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
  }
  std::error_code ignored;
  const auto servers = zkr::parse_servers(options_.servers, ignored);
  const std::string report = options_.json
                                 ? format_listing_json(options_.lock_path, listing)
                                 : format_listing_text(options_.lock_path, listing, servers ? servers->chroot : "");
  std::fwrite(report.data(), 1, report.size(), stdout);
  std::fflush(stdout);
  session_->close();
  // Not "free": monitoring must not take a missing path (or chroot) for an unlocked one.
  return listing.exists ? 0 : exit_code::no_such_path;
}

void route_library_log_to_stderr() {
  zkr::set_log_sink(
      [](zkr::LogLevel level, std::string_view message) {
        constexpr std::string_view names[] = {"error", "warning", "info", "debug"};
        // The C client's lines end with a newline of their own.
        while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
        fmt::print(stderr, "zklock: [{}] {}\n", names[static_cast<int>(level)], message);
      },
      zkr::LogLevel::info);
}

int zklock_main(int argc, char** argv) {
  // Before any thread exists: every thread inherits the mask (see signals.hpp).
  block_handled_signals();

  CliOptions options;
  try {
    options = parse_command_line(std::vector<std::string>(argv, argv + argc), std::getenv("ZKLOCK_SERVERS"));
  } catch (const UsageError& error) {
    say("{} (see zklock --help)", error.what());
    return exit_code::usage;
  }
  if (options.mode == Mode::help) {
    fmt::print("{}", help_text());
    return 0;
  }
  if (options.mode == Mode::version) {
    fmt::print("{}", version_text());
    return 0;
  }
  if (const std::string problem = zkr::path_problem(options.lock_path); !problem.empty()) {
    say("invalid lock path '{}': {}", options.lock_path, problem);
    return exit_code::usage;
  }
  std::error_code servers_error;
  if (!zkr::parse_servers(options.servers, servers_error)) {
    say("invalid ensemble '{}' for --zk: {}", options.servers, zkr::describe_servers_problem(options.servers));
    return exit_code::usage;
  }
  if (options.verbose()) route_library_log_to_stderr();
  // Children the job leaves behind come to zklock when their parent dies, so that they can be
  // reaped and the job's group can be seen to be empty.
  become_subreaper();

  try {
    SignalReceiver signals;
    Zklock zklock(options, signals);
    return options.mode == Mode::list ? zklock.list() : zklock.run();
  } catch (const ExitRequest& request) {
    return request.code;
  } catch (const std::exception& error) {
    say("{}", error.what());
    return exit_code::internal;
  }
}

}  // namespace
}  // namespace zklock

int main(int argc, char** argv) { return zklock::zklock_main(argc, argv); }
