// SPDX-License-Identifier: Apache-2.0
// zklock: runs a command while holding a ZooKeeper lock, like flock(1) across hosts (see zklock.1).
//
// The main thread does everything that matters: it waits with poll() on a signalfd and on an
// eventfd that the library's callback thread pokes (lock lost, acquisition done, session state:
// inbox.hpp). This file connects, acquires and lists; running the job under the lock is the
// supervisor's (supervisor.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <zkr/cache.hpp>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/names.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>

#include "cli_options.hpp"
#include "contender_report.hpp"
#include "exit_status.hpp"
#include "inbox.hpp"
#include "json_vocabulary.hpp"
#include "job.hpp"
#include "keeper.hpp"
#include "lock_exposition.hpp"
#include "metrics_listener.hpp"
#include "messages.hpp"
#include "metrics_file.hpp"
#include "nesting.hpp"
#include "once_per.hpp"
#include "queue_feedback.hpp"
#include "run_events.hpp"
#include "signals.hpp"
#include "supervisor.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// How long a cancelled lock wait may take to end; passing it means something is badly wrong, and
// zklock gives up rather than hang.
constexpr auto cancel_bound = 30s;

// One line of standard input without its newline, or nothing at the end of input. Through stdio,
// as the prompt before it: zklock sets up no iostreams (see cli_options.cpp).
std::optional<std::string> read_stdin_line() {
  char* line = nullptr;
  std::size_t capacity = 0;
  const ssize_t length = ::getline(&line, &capacity, stdin);
  std::optional<std::string> text;
  if (length >= 0) text.emplace(line, static_cast<std::size_t>(length));
  std::free(line);
  if (text && text->ends_with('\n')) text->pop_back();
  return text;
}

// Thrown to leave with an exit code once the reason has been printed. Never thrown while a job
// runs (the supervisor returns its exit code).
struct ExitRequest {
  int code;
};

class Zklock {
 public:
  Zklock(const CliOptions& options, SignalReceiver& signals, std::vector<int> given_descriptors,
         std::optional<WaitingKeeper> keeper)
      : options_(options),
        signals_(signals),
        given_descriptors_(std::move(given_descriptors)),
        keeper_(std::move(keeper)),
        inbox_(std::make_shared<Inbox>()) {}

  int list();
  int watch_list();
  struct Listing {
    zkr::PathListing contenders;
    std::optional<int> slots;
    std::vector<RunRecord> last_runs;
    std::chrono::system_clock::time_point observed;  // when it was read
    std::optional<RecipeReading> recipe;              // another recipe's path (no contender there)
  };
  Listing read_listing();  // LOCKPATH's; fails (exits) on an error
  Listing read_listing_or_throw(const std::string& path);  // throws zkr::Error
  bool passing_outage(const std::error_code& code) const;
  std::string format_listing(const std::string& path, const Listing& listing) const;
  std::vector<RunRecord> read_last_runs(const std::string& path, zkr::PathListing& listing);
  std::optional<RecipeReading> read_recipe(const std::string& path, zkr::PathListing& listing);
  int list_recursive();
  int serve_metrics();
  bool interrupted();
  struct Walk {
    std::vector<std::pair<std::string, Listing>> shown;
    std::chrono::system_clock::time_point observed;
    std::size_t read = 0;
    bool complete = true;
    bool exists = true;
  };
  Walk walk_listings();
  std::string walk_exposition(const Walk* walk, std::optional<std::uint64_t> walks = std::nullopt) const;
  int break_lock();
  std::string current_holders();
  std::string kind_description() const;
  std::string limit_mismatch(std::error_code error);
  int run();

 private:
  zkr::SessionOptions session_options() const;
  void connect();
  void follow_servers_file();
  void refuse_a_wait_for_the_parent();
  std::chrono::milliseconds lead_time_needed() const;
  void require_lead_time() const;
  std::string owner_data() const;
  zkr::NodeAcl lock_acl() const;
  zkr::HeldLock acquire();
  bool once_per_window_done(OncePerGate& gate, const zkr::HeldLock* held);
  [[noreturn]] void fail(std::error_code error, const std::string& message) const;
  [[noreturn]] void not_acquired(std::error_code error, std::string_view reason, const std::string& message) const;
  std::string job_description() const;

  const CliOptions& options_;
  SignalReceiver& signals_;
  const std::vector<int> given_descriptors_;  // beyond 0-2; what the job may inherit
  std::optional<WaitingKeeper> keeper_;        // forked at the start (run mode), until the job starts
  std::shared_ptr<Inbox> inbox_;
  std::unique_ptr<zkr::Session> session_;
  Clock::time_point connect_started_;  // -w counts from here
  zkr::Subscription state_subscription_;
  zkr::Subscription deadline_subscription_;  // run mode: the monitor's deadlines, for the job's keeper
  // One of these, alive as long as the session.
  std::optional<zkr::Lock> mutex_;
  std::optional<zkr::ReadWriteLock> read_write_;
  std::optional<zkr::Semaphore> semaphore_;
  // -z @FILE: reads the file again while zklock runs (follow_servers_file). Stopped and joined
  // before the session goes (declared after it).
  std::jthread servers_follower_;
};

// The single place that prints a library failure and turns it into an exit code.
void Zklock::fail(std::error_code error, const std::string& message) const {
  const int code = exit_code_for(error, options_);
  log_error(escape_for_terminal(message));
  throw ExitRequest{code};
}

// The lock held (-n) or the wait timed out (-w): a routine outcome, not an error. Its own
// not_acquired record in JSON, a message in text; neither under -q.
void Zklock::not_acquired(std::error_code error, std::string_view reason, const std::string& message) const {
  const std::string text = options_.quiet() ? std::string() : escape_for_terminal(message);
  run_events().not_acquired(reason, text);
  if (!json_log() && !text.empty()) log_message(text);
  throw ExitRequest{exit_code_for(error, options_)};
}

zkr::SessionOptions Zklock::session_options() const {
  zkr::SessionOptions session;
  session.servers = options_.servers;
  session.session_timeout = options_.session_timeout;
  session.connect_timeout = options_.connect_timeout;
  // -w bounds the whole wait for the lock, reaching the ensemble included (-n does not: it fails
  // at once on a held lock, and needs the ensemble to know; --connect-timeout bounds that).
  if (options_.wait_timeout && *options_.wait_timeout > std::chrono::nanoseconds::zero())
    session.connect_timeout = std::min(session.connect_timeout, std::chrono::ceil<std::chrono::milliseconds>(*options_.wait_timeout));
  session.ensemble_tick_time = options_.tick_time;
  // Lost must be declared early enough for the job to be stopped (stop signal, grace, SIGKILL)
  // before the server could expire the session and grant the lock elsewhere: the session timeout
  // asked for is long enough for that lead time (require_lead_time() checks what was granted).
  session.safety_margin = lead_time_needed();
  if (options_.mode == Mode::run) {
    session.session_timeout =
        std::max(options_.session_timeout, zkr::shortest_session_timeout(session.safety_margin, options_.tick_time));
  }
  if (options_.tls_ca) {
    session.tls = zkr::TlsOptions{*options_.tls_ca, options_.tls_cert.value_or(std::filesystem::path{}),
                                  options_.tls_key.value_or(std::filesystem::path{}), options_.tls_verify_host};
  }
  if (options_.auth_file) {
    try {
      session.credentials = zkr::DigestCredentials::from_file(*options_.auth_file);
    } catch (const std::exception& error) {
      // The message names the file, never its content.
      log_error(escape_for_terminal(fmt::format("--auth-file: {}", error.what())));
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
  connect_started_ = Clock::now();
  const zkr::SessionOptions requested = session_options();
  if (options_.verbose() && requested.session_timeout > options_.session_timeout) {
    say("asking for a session timeout of {}: --session-timeout {} leaves less than the {} of lead time "
        "that --kill-after {} needs",
        format_duration(requested.session_timeout), format_duration(options_.session_timeout),
        format_duration(lead_time_needed()), format_duration(options_.kill_after));
  }
  std::thread connector([attempt, inbox = inbox_, session_options = requested] {
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
        run_events().interrupted(*signal, "interrupted");
        run_events().finished(exit_code::signal_base + *signal);
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
        fail(error.code(), fmt::format("cannot reach ZooKeeper at {} within {}{} ({})", options_.servers,
                                       format_duration(requested.connect_timeout),
                                       requested.connect_timeout < options_.connect_timeout ? " (--wait)" : "",
                                       error.detail()));
      }
      if (error.code() == zkr::errc::auth_failed || error.code() == zkr::zk_errc::auth_failed) {
        fail(error.code(), fmt::format("ZooKeeper at {} refused the credentials of --auth-file {}",
                                       options_.servers, options_.auth_file->string()));
      }
      fail(error.code(), fmt::format("cannot connect to {}: {}", options_.servers, error.what()));
    } catch (const std::exception& error) {
      log_error(escape_for_terminal(fmt::format("cannot connect to {}: {}", options_.servers, error.what())));
      throw ExitRequest{exit_code::internal};
    }
  }
  session_ = std::move(attempt->session);
  run_events().connected(session_->id(), session_->negotiated_timeout());
  follow_servers_file();
  // --list --watch says when it loses the ensemble, -v every state.
  if (options_.verbose() || options_.watch) {
    state_subscription_ =
        session_->on_state_change([inbox = inbox_](zkr::SessionState state) { inbox->post_state(state); });
  }
  if (options_.verbose()) {
    // The tolerated silence is how long the ensemble may not answer through its leader (an
    // election, a restart) before the job is stopped: what an operator sizes --session-timeout by.
    say("connected to {}: session {}, negotiated timeout {}, lead time {}, tolerated silence {}", options_.servers,
        zkr::session_id_text(session_->id()), format_duration(session_->negotiated_timeout()),
        format_duration(session_->lead_time()), format_duration(session_->silence_tolerance()));
  }
}

// -z @FILE: the file is read again every few seconds, and a list that names other servers goes to
// the session (zkr::Session::set_servers): a job that outlives a server's replacement keeps
// reaching the ensemble, and is not stopped when the servers it started with are gone. A file
// that cannot be read, or names another chroot, is reported (once while it stays so) and the list
// the session has is kept.
void Zklock::follow_servers_file() {
  if (options_.servers_file.empty()) return;
  servers_follower_ = std::jthread([this](std::stop_token stop) {
    constexpr auto kInterval = std::chrono::seconds(2);
    constexpr auto kStep = std::chrono::milliseconds(100);  // how soon a stop is seen
    std::string reported;  // the problem said last, so as not to repeat it every interval
    for (;;) {
      for (auto waited = kStep - kStep; waited < kInterval; waited += kStep) {
        if (stop.stop_requested()) return;
        std::this_thread::sleep_for(kStep);
      }
      std::string problem;
      try {
        const std::string servers = servers_from_file(options_.servers_file);
        if (session_->set_servers(servers) && !options_.quiet())
          say("servers now {} (read from {})", servers, options_.servers_file);
      } catch (const zkr::Error& error) {
        if (error.code() == zkr::errc::session_closed) return;  // zklock is ending
        problem = fmt::format("keeping the servers {}: {}", session_->servers(), error.what());
      } catch (const std::exception& error) {
        problem = fmt::format("keeping the servers {}: {}", session_->servers(), error.what());
      }
      if (!problem.empty() && problem != reported) log_message(escape_for_terminal(problem), level::warning);
      reported = problem;
    }
  });
}

// Run by the job of a zklock that holds this very lock (found on the ensemble, see nesting.hpp):
// refused when this zklock would wait for its parent, which waits for it.
void Zklock::refuse_a_wait_for_the_parent() {
  std::optional<std::string> refusal;
  try {
    refusal = nested_wait_refusal(*session_, options_);
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
  }
  if (!refusal) return;
  log_error(escape_for_terminal(*refusal));
  session_->close();
  throw ExitRequest{exit_code::usage};
}

// Stopping the job takes up to --kill-after, and 1 s more for zklock to see it gone.
std::chrono::milliseconds Zklock::lead_time_needed() const { return options_.kill_after + 1s; }

// session_options() asked for a session timeout long enough for the lead time the job needs; the
// ensemble may have negotiated it down (to its maxSessionTimeout). Then the job could outlive the
// lock: refuse before queueing rather than warn and run.
void Zklock::require_lead_time() const {
  const auto needed = lead_time_needed();
  const auto lead_time = session_->lead_time();
  if (lead_time >= needed) return;
  log_error(fmt::format(
      "--kill-after {} needs a lead time of {}, so a session timeout of at least {} (with --tick-time {}); "
      "the ensemble granted {} (its maxSessionTimeout?), a lead time of {}: lower --kill-after or raise "
      "maxSessionTimeout on the servers",
      format_duration(options_.kill_after), format_duration(needed),
      format_duration(zkr::shortest_session_timeout(needed, options_.tick_time)), format_duration(options_.tick_time),
      format_duration(session_->negotiated_timeout()), format_duration(lead_time)));
  throw ExitRequest{exit_code::usage};
}

std::string Zklock::job_description() const {
  if (options_.shell_command) return *options_.shell_command;
  std::string text;
  for (const std::string& arg : options_.command) text += (text.empty() ? "" : " ") + arg;
  return text;
}

std::string Zklock::owner_data() const {
  if (options_.owner) return *options_.owner;
  constexpr std::size_t max_owner_command = 200;
  return fmt::format("{}:{}", zkr::default_owner_data(), job_description().substr(0, max_owner_command));
}

zkr::NodeAcl Zklock::lock_acl() const {
  return options_.auth_file ? zkr::NodeAcl::creator_all_world_read : zkr::NodeAcl::open;
}

zkr::HeldLock Zklock::acquire() {
  zkr::LockOptions lock_options;
  lock_options.owner_data = owner_data();
  lock_options.acl = lock_acl();

  // Every kind acquires the same way (Lock::async_acquire and Semaphore::async_acquire agree).
  std::function<void(std::chrono::nanoseconds, zkr::AcquireHandler, std::stop_token)> async_acquire;
  try {
    switch (options_.kind) {
      case LockKind::mutex: {
        zkr::Lock& lock = mutex_.emplace(*session_, options_.lock_path, lock_options);
        async_acquire = [&lock](auto timeout, auto handler, auto stop) { lock.async_acquire(timeout, std::move(handler), stop); };
        break;
      }
      case LockKind::read:
      case LockKind::write: {
        read_write_.emplace(*session_, options_.lock_path, lock_options);
        zkr::Lock& lock = options_.kind == LockKind::read ? read_write_->read_lock() : read_write_->write_lock();
        async_acquire = [&lock](auto timeout, auto handler, auto stop) { lock.async_acquire(timeout, std::move(handler), stop); };
        break;
      }
      case LockKind::semaphore: {
        zkr::Semaphore& semaphore = semaphore_.emplace(*session_, options_.lock_path, options_.slots,
                                                       zkr::SemaphoreOptions{lock_options.owner_data, lock_options.acl});
        async_acquire = [&semaphore](auto timeout, auto handler, auto stop) {
          semaphore.async_acquire(timeout, std::move(handler), stop);
        };
        break;
      }
    }
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("invalid lock path '{}': {}", options_.lock_path, error.what()));
  }

  if (options_.verbose()) say("acquiring {}{}", options_.lock_path, kind_description());
  run_events().waiting();
  const auto started = Clock::now();
  std::stop_source cancel;
  // What is left of -w after connecting (at least one try).
  const std::chrono::nanoseconds timeout =
      options_.wait_timeout ? std::max(*options_.wait_timeout - (started - connect_started_), std::chrono::nanoseconds::zero())
                            : std::chrono::nanoseconds(-1);
  async_acquire(
      timeout,
      [inbox = inbox_](std::error_code error, zkr::HeldLock held) {
        inbox->post_acquired(error, std::move(held));
      },
      cancel.get_token());

  // Our place in the queue, said as it changes; its watch on the path pokes the Inbox.
  QueueFeedback feedback(*session_, options_, inbox_);
  feedback.refresh();
  constexpr auto feedback_poll = 500ms;  // while the path is not there to be watched yet

  // A signal cancels the wait: the library then deletes our waiting node.
  std::optional<int> interrupted_by;
  Clock::time_point interrupted_at;
  std::optional<Inbox::Acquired> outcome;
  while (!(outcome = inbox_->take_acquired())) {
    const auto poll = interrupted_by ? 1000ms : feedback.needs_poll() ? feedback_poll : -1ms;
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), poll);
    if (ready.signal) {
      while (const auto signal = signals_.next()) {
        if (*signal == SIGCHLD || interrupted_by) continue;
        interrupted_by = *signal;
        interrupted_at = Clock::now();
        run_events().interrupted(*signal, "withdrew");
        cancel.request_stop();
      }
    }
    if (ready.wakeup) report_session_states(*inbox_, options_);
    if (!interrupted_by && (inbox_->take_path_changed() || feedback.needs_poll()) && !inbox_->has_acquired())
      feedback.refresh();
    if (interrupted_by && Clock::now() - interrupted_at > cancel_bound) {
      say("interrupted by {}; the lock wait did not end, leaving anyway", signal_label(*interrupted_by));
      run_events().finished(exit_code::signal_base + *interrupted_by);
      std::_Exit(exit_code::signal_base + *interrupted_by);
    }
  }

  if (interrupted_by) {
    if (outcome->held) outcome->held.release();  // granted just as we were interrupted
    if (!options_.quiet()) say("interrupted by {} while waiting for {}", signal_label(*interrupted_by), options_.lock_path);
    throw ExitRequest{exit_code::signal_base + *interrupted_by};
  }
  if (outcome->error == zkr::errc::would_block) {
    if (options_.kind == LockKind::semaphore) {
      not_acquired(outcome->error, "held", fmt::format("all {} slots of {} are taken, held by {}", options_.slots,
                                                       options_.lock_path, current_holders()));
    }
    not_acquired(outcome->error, "held", fmt::format("{} is held by {}", options_.lock_path, current_holders()));
  }
  if (outcome->error == zkr::errc::timed_out) {
    not_acquired(outcome->error, "timed_out",
                 fmt::format("timed out after {} waiting for {}, held by {}", format_duration(*options_.wait_timeout),
                             options_.lock_path, current_holders()));
  }
  if (outcome->error == zkr::zk_errc::no_auth || outcome->error == zkr::zk_errc::invalid_acl) {
    fail(outcome->error, fmt::format("not allowed to lock {}: the ACL refuses us ({})", options_.lock_path,
                                     outcome->error.message()));
  }
  // A lock on a semaphore's path is refused as another recipe's (incompatible_peer); say which.
  if (outcome->error == zkr::errc::limit_mismatch || outcome->error == zkr::errc::incompatible_peer) {
    fail(outcome->error, fmt::format("cannot lock {}{}: {}", options_.lock_path, kind_description(),
                                     limit_mismatch(outcome->error)));
  }
  if (outcome->error) {
    fail(outcome->error, fmt::format("cannot lock {}: {}", options_.lock_path, outcome->error.message()));
  }
  zkr::HeldLock held = std::move(outcome->held);
  run_events().acquired(held.token(), held.node_path(), held.session_id());
  if (options_.verbose()) {
    say("got {} after {}: token {}, node {}, session {}", options_.lock_path,
        format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)),
        held.token().value(), held.node_path(), zkr::session_id_text(held.session_id()));
  }
  return held;
}

// --once-per: true if this window's run is done or running elsewhere (said unless -q): the caller
// leaves with 0. Before the lock (`held` null) it only looks; under the lock it claims the window.
bool Zklock::once_per_window_done(OncePerGate& gate, const zkr::HeldLock* held) {
  OncePerGate::Verdict verdict;
  try {
    verdict = held ? gate.claim(*held, owner_data(), lock_acl()) : gate.look();
  } catch (const ForeignRecord& error) {
    log_error(escape_for_terminal(fmt::format("{}: not running the command", error.what())));
    throw ExitRequest{exit_code::data_error};
  } catch (const zkr::Error& error) {
    if (error.code() == zkr::errc::lock_lost) {
      log_lost(escape_for_terminal(
          fmt::format("lost the lock on {} before the job started: {}", options_.lock_path, error.what())));
      throw ExitRequest{options_.lost_exit_code};
    }
    fail(error.code(), fmt::format("cannot read or write the --once-per record of {}: {}", options_.lock_path,
                                   error.what()));
  }
  if (!verdict.already_ran) {
    if (held && verdict.again && !options_.quiet()) {
      say("{}: this window's run ({}) {}: running it again", options_.lock_path, gate.describe_window(verdict.now_ms),
          describe_run(*verdict.last));
    } else if (held && options_.verbose()) {
      say("claimed the window {} of --once-per for this run", gate.describe_window(verdict.now_ms));
    }
    return false;
  }
  run_events().skipped();
  if (!options_.quiet()) {
    say("{}: this window's run ({}) is claimed already: {}; not running the command", options_.lock_path,
        gate.describe_window(verdict.now_ms), describe_run(*verdict.last));
  }
  return true;
}

int Zklock::run() {
  connect();
  require_lead_time();
  refuse_a_wait_for_the_parent();
  // Before acquiring: the session's current deadline is then in the inbox before the grant is,
  // both coming through its callback thread in order, and the job's keeper starts with it.
  deadline_subscription_ =
      session_->on_deadline([inbox = inbox_](zkr::SessionDeadline deadline) { inbox->post_deadline(deadline); });
  std::optional<OncePerGate> once_per;
  if (options_.once_per) {
    once_per.emplace(*session_, options_.lock_path, *options_.once_per, options_.once_per_zone,
                     options_.count_failed);
    if (once_per_window_done(*once_per, nullptr)) {
      session_->close();
      return 0;
    }
  }
  // Declared before the supervisor's job, so destroyed (released) after it.
  zkr::HeldLock held = acquire();
  if (once_per && once_per_window_done(*once_per, &held)) {
    held.release();
    session_->close();
    return 0;
  }
  HeldZkLock lock(held, *session_, options_.lock_path, inbox_);
  if (once_per) {
    lock.on_job_ended([this, &once_per, &held](int exit_code) {
      try {
        once_per->record_exit(held, exit_code);
      } catch (const zkr::Error& error) {
        if (!options_.quiet()) say("could not record the exit code in the --once-per record: {}", error.what());
      }
    });
  }
  SignalWaiter waiter(signals_, inbox_->wakeup());
  Supervisor supervisor(options_, *inbox_, waiter,
                        [this](const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                               const KeeperDeadline& deadline) {
                          return std::make_unique<Job>(
                              Job::start(std::move(keeper_.value()), argv, environment, given_descriptors_, deadline));
                        });
  const int code = supervisor.run_under_lock(lock);
  session_->close();
  return code;
}

// " (read)", " (write)", " (one of 3 slots)", or nothing for a plain lock.
std::string Zklock::kind_description() const {
  switch (options_.kind) {
    case LockKind::mutex: return {};
    case LockKind::read: return " (read)";
    case LockKind::write: return " (write)";
    case LockKind::semaphore: return fmt::format(" (one of {} slots)", options_.slots);
  }
  return {};
}

// Why the path refused this kind of lock: what the path records, and what to pass instead.
std::string Zklock::limit_mismatch(std::error_code error) {
  std::optional<int> recorded;
  try {
    recorded = zkr::Semaphore::recorded_limit(*session_, options_.lock_path);
  } catch (const zkr::Error&) {
    // The generic message below still says what is wrong.
  }
  // Another library's nodes (a semaphore's own path included): the library's words say it.
  if (error == zkr::errc::incompatible_peer && (!recorded || options_.kind == LockKind::semaphore))
    return error.message();
  if (!recorded) return "the path belongs to another recipe or records another limit";
  if (options_.kind == LockKind::semaphore) {
    return fmt::format("the path is a semaphore of {} slots, not {}: every participant must give --slots {}", *recorded,
                       options_.slots, *recorded);
  }
  return fmt::format("the path is a semaphore of {} slots: take one with --slots {}", *recorded, *recorded);
}

// For a conflict message only: one more listing, and never an error of its own.
std::string Zklock::current_holders() {
  if (options_.quiet()) return {};  // the message is not printed
  try {
    const int max_holders = options_.kind == LockKind::semaphore ? options_.slots : 1;
    return describe_holders(zkr::list_contenders(*session_, options_.lock_path, max_holders));
  } catch (const zkr::Error& error) {
    return fmt::format("someone else (who could not be listed: {})", error.what());
  }
}

// The path's --once-per record, shown as the last run rather than as a child that is not a
// contender. A record zklock did not write stays listed as such a child.
std::vector<RunRecord> Zklock::read_last_runs(const std::string& path, zkr::PathListing& listing) {
  auto& others = listing.not_contenders;
  const auto record = std::find(others.begin(), others.end(), run_record_name);
  if (record == others.end()) return {};
  const auto node = read_run_record_node(*session_, path);
  if (!node) return {};  // removed since the listing
  std::string problem;
  auto last_runs = run_records_from(*node, problem);
  if (!last_runs) return {};
  others.erase(record);
  return std::move(*last_runs);
}

Zklock::Listing Zklock::read_listing_or_throw(const std::string& path) {
  Listing listing;
  listing.observed = std::chrono::system_clock::now();
  // A semaphore's path records its slots: its first N contenders hold, not only the first.
  listing.slots = zkr::Semaphore::recorded_limit(*session_, path);
  listing.contenders = zkr::list_lock_path(*session_, path, listing.slots.value_or(1));
  listing.last_runs = read_last_runs(path, listing.contenders);
  // A semaphore's path, or a lock path with its once-per record, is not another recipe's.
  if (!listing.slots && listing.last_runs.empty()) listing.recipe = read_recipe(path, listing.contenders);
  return listing;
}

// A path with no contender may be another recipe's: its node and its children's are read, and
// recognise_recipe() says what they are. Children it recognises are no longer listed as "not a
// contender". A node removed in between is read as gone.
std::optional<RecipeReading> Zklock::read_recipe(const std::string& path, zkr::PathListing& listing) {
  if (!listing.exists) {
    RecipeReading missing;
    missing.kind = RecipeReading::Kind::missing;
    return missing;
  }
  if (!listing.contenders.empty()) return std::nullopt;
  const auto read = [&](const std::string& node) -> std::optional<zkr::NodeData> {
    try {
      return session_->get(node);
    } catch (const zkr::Error& error) {
      if (error.code() == zkr::zk_errc::no_node) return std::nullopt;
      throw;
    }
  };
  const auto own = read(path);
  if (!own) return std::nullopt;
  std::vector<ListedNode> children;
  for (const auto& name : listing.not_contenders) {
    if (auto child = read(path + "/" + name)) children.push_back({name, std::move(child->data), child->stat});
  }
  auto recipe = recognise_recipe({{}, own->data, own->stat}, children);
  if (recipe) listing.not_contenders.clear();  // every child is a member or participant (or "ready")
  return recipe;
}

Zklock::Listing Zklock::read_listing() {
  try {
    return read_listing_or_throw(options_.lock_path);
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
  }
}

// An outage a watcher waits through: the ensemble out of reach or silent (a read that got no
// reply: nothing was changed), or the session lost and being replaced. Only a session zklock
// closed itself, or refused credentials, end it.
bool Zklock::passing_outage(const std::error_code& code) const {
  const auto state = session_->state();
  if (state == zkr::SessionState::closed || state == zkr::SessionState::auth_failed) return false;
  return code == zkr::condition::connection_trouble || code == zkr::condition::session_ended ||
         code == zkr::errc::timed_out;
}

// JSON carries the time the listing was read; --watch's text says it in a line of its own first.
std::string Zklock::format_listing(const std::string& path, const Listing& listing) const {
  if (options_.json) {
    return format_listing_json(path, listing.contenders, listing.slots, listing.last_runs,
                               listing.observed, listing.recipe);
  }
  std::error_code ignored;
  const auto servers = zkr::parse_servers(options_.servers, ignored);
  return (options_.watch ? fmt::format("observed {}\n", format_utc(listing.observed)) : std::string()) +
         format_listing_text(path, listing.contenders, servers ? servers->chroot : "", listing.slots,
                             listing.last_runs, listing.recipe);
}

void print_report(const std::string& report) {
  std::fwrite(report.data(), 1, report.size(), stdout);
  std::fflush(stdout);
}

int Zklock::list() {
  connect();
  if (options_.watch) return watch_list();
  const Listing listing = read_listing();
  print_report(format_listing(options_.lock_path, listing));
  session_->close();
  // Not "free": monitoring must not take a missing path (or chroot) for an unlocked one.
  return listing.contenders.exists ? 0 : exit_code::no_such_path;
}

// The paths --list shows: LOCKPATH's alone, or (--recursive) every lock, semaphore, election and
// other recipe at or under it, in path order. The walk goes down through the children that are
// not contenders (a contender's node has none, and a recipe recognised there takes its children as
// members); a path shows when it has contenders, records a semaphore's slots or a --once-per run,
// or is a group, a double barrier or a counter. Plain nodes and free lock paths are passed over. A
// path removed while the walk reads it is skipped. At most kMostListedPaths paths are read, so that
// a prefix of millions of nodes cannot keep the ensemble busy: beyond that the walk is incomplete.
// Throws zkr::Error; `exists` is false when LOCKPATH (or the chroot) does not exist.
Zklock::Walk Zklock::walk_listings() {
  constexpr std::size_t kMostListedPaths = 10000;
  Walk walk;
  walk.observed = std::chrono::system_clock::now();
  std::vector<std::string> to_read{options_.lock_path};
  while (!to_read.empty() && walk.read < kMostListedPaths) {
    const std::string path = std::move(to_read.back());
    to_read.pop_back();
    Listing listing;
    try {
      listing = read_listing_or_throw(path);
    } catch (const zkr::Error& error) {
      if (error.code() == zkr::zk_errc::no_node && walk.read > 0) continue;  // removed meanwhile
      throw;
    }
    ++walk.read;
    if (!listing.contenders.exists) {
      if (walk.read > 1) continue;  // removed meanwhile
      walk.exists = false;
      walk.shown.emplace_back(path, std::move(listing));  // says the prefix (or the chroot) does not exist
      return walk;
    }
    if (options_.recursive) {
      auto children = listing.contenders.not_contenders;  // a recognised recipe has taken its own
      std::sort(children.rbegin(), children.rend());       // the stack pops them in order
      for (const auto& name : children) {
        if (path == "/" && name == "zookeeper") continue;  // the server's own
        to_read.push_back(path == "/" ? "/" + name : path + "/" + name);
      }
    }
    const auto recipe_kind = listing.recipe ? listing.recipe->kind : RecipeReading::Kind::empty;
    const bool recipe_shown = recipe_kind == RecipeReading::Kind::group ||
                              recipe_kind == RecipeReading::Kind::double_barrier ||
                              recipe_kind == RecipeReading::Kind::counter;
    if (!options_.recursive || !listing.contenders.contenders.empty() || listing.slots || !listing.last_runs.empty() ||
        recipe_shown)
      walk.shown.emplace_back(path, std::move(listing));
  }
  walk.complete = to_read.empty();
  return walk;
}

// The walk as Prometheus text: the first --max-locks paths' series, the others counted.
std::string Zklock::walk_exposition(const Walk* walk, std::optional<std::uint64_t> walks) const {
  ListingSummary summary;
  summary.walks = walks;
  std::vector<PathReading> readings;
  if (walk) {
    summary.observed = walk->observed;
    summary.complete = walk->complete;
    summary.paths_read = walk->read;
    for (const auto& [path, listing] : walk->shown) {
      if (!listing.contenders.exists) continue;
      if (readings.size() == options_.max_locks) {
        ++summary.dropped;
        continue;
      }
      readings.push_back({path, listing.contenders, listing.slots, listing.recipe});
    }
  } else {
    summary.observed = std::chrono::system_clock::now();
    summary.up = false;
    summary.complete = false;
  }
  return lock_exposition(readings, summary);
}

// --list --recursive (text or JSON), and --list --prometheus of one path or of a prefix; list()
// is the one path's table or JSON.
int Zklock::list_recursive() {
  connect();
  Walk walk;
  try {
    walk = walk_listings();
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
  }
  if (!walk.complete && !options_.quiet())
    say("stopped after reading {} paths under {}; the rest is not listed", walk.read, options_.lock_path);
  if (!walk.exists) {
    print_report(options_.prometheus ? walk_exposition(&walk) : format_listing(options_.lock_path, walk.shown.front().second));
    session_->close();
    return exit_code::no_such_path;
  }

  std::string report;
  if (options_.prometheus) {
    report = walk_exposition(&walk);
  } else if (options_.json) {
    report = fmt::format(R"({{"observed":{},"prefix":{},"complete":{},"paths":[)", json_string(format_utc(walk.observed)),
                         json_string(options_.lock_path), walk.complete);
    for (std::size_t i = 0; i < walk.shown.size(); ++i) {
      const auto& [path, listing] = walk.shown[i];
      std::string object = format_listing_json(path, listing.contenders, listing.slots, listing.last_runs,
                                               std::nullopt, listing.recipe);
      while (!object.empty() && object.back() == '\n') object.pop_back();
      report += (i ? "," : "") + object;
    }
    report += "]}\n";
  } else if (walk.shown.empty()) {
    report = fmt::format("{}: no lock or recipe under it\n", escape_for_terminal(options_.lock_path));
  } else {
    for (std::size_t i = 0; i < walk.shown.size(); ++i)
      report += (i ? "\n" : "") + format_listing(walk.shown[i].first, walk.shown[i].second);
  }
  print_report(report);
  session_->close();
  return 0;
}

// For the modes that run until interrupted (--watch, --listen): true once INT, TERM or HUP came;
// other signals pending are taken and ignored.
bool Zklock::interrupted() {
  bool stop = false;
  while (const auto signal = signals_.next()) stop = stop || *signal == SIGINT || *signal == SIGTERM || *signal == SIGHUP;
  return stop;
}

// --list ... --listen HOST:PORT: an exporter. One session, and a TreeCache of the prefix that keeps
// only the nodes' stats (no data): its watches count every change under the prefix (a node added
// or removed, a node's data set) and tell when it may lag (a dropped connection, a new session). A
// scrape reads the listing afresh (walk_listings()) only when something changed since the last
// walk, or the cache could not vouch for it (loading, stale, stopped); otherwise it answers from
// that walk, its ages measured to now. The order is safe: a walk is credited with the changes
// counted before it began, and the cache counts a change once it has read it through the same
// session, so a change counted before the walk began is one the walk reads, and a change counted
// later makes the next scrape read again.
// While the ensemble cannot be read it answers zklock_listing_up 0, so that an alert on it fires
// rather than the series going stale. A prefix too large for the cache (its max_nodes) is read at
// each scrape instead. Until INT, TERM or HUP (exit 0). One request at a time: Prometheus scrapes
// a target serially.
int Zklock::serve_metrics() {
  std::optional<MetricsListener> listener;
  try {
    listener.emplace(MetricsListener::open(options_.listen));
  } catch (const std::runtime_error& error) {
    std::fprintf(stderr, "zklock: %s\n", error.what());
    return exit_code::usage;
  }
  connect();
  std::atomic<std::uint64_t> changes{0};  // before the cache: its callback counts here until stopped
  std::error_code watch_error;
  std::optional<zkr::TreeCache> watches = zkr::TreeCache::make(
      *session_, options_.lock_path, [&changes](const zkr::CacheEvent&) { ++changes; },
      zkr::TreeCacheOptions{.cache_data = false}, watch_error);
  if (!watches && !options_.quiet())
    say("cannot watch {} ({}): each scrape reads it", options_.lock_path, watch_error.message());
  bool cache_failure_told = false;
  // The cache vouches for a walk credited with `changes` when it has loaded, is not stale, and has
  // not stopped; what it counted since says whether the walk is still current.
  auto vouching = [&] {
    if (!watches) return false;
    if (const auto stopped = watches->error()) {
      if (!cache_failure_told && !options_.quiet())
        say("stopped watching {} ({}): each scrape reads it", options_.lock_path, stopped.message());
      cache_failure_told = true;
      return false;
    }
    return watches->initialized() && !watches->stale();
  };
  struct KnownWalk {
    Walk walk;
    std::uint64_t changes_before = 0;
    bool vouched = false;
  };
  std::optional<KnownWalk> last;
  std::uint64_t walks = 0;
  print_report(fmt::format("serving the locks under {} as Prometheus metrics on http://{}/metrics\n",
                           options_.lock_path, listener->address()));
  while (true) {
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), std::chrono::milliseconds(-1), listener->fd());
    if (ready.signal && interrupted()) {
      if (watches) watches->stop();
      session_->close();
      return 0;
    }
    if (ready.wakeup) {
      inbox_->wakeup().drain();
      (void)inbox_->take_states();
      (void)inbox_->take_path_changed();
    }
    listener->serve_waiting([&](std::string_view target) -> std::optional<std::string> {
      if (target != "/metrics") return std::nullopt;
      const std::uint64_t changes_now = changes.load();
      const bool vouched = vouching();
      if (last && last->vouched && vouched && last->changes_before == changes_now) {
        last->walk.observed = std::chrono::system_clock::now();
        return walk_exposition(&last->walk, walks);
      }
      try {
        last = KnownWalk{walk_listings(), changes_now, vouched};
        return walk_exposition(&last->walk, ++walks);
      } catch (const zkr::Error& error) {
        last.reset();
        if (!passing_outage(error.code()) && !options_.quiet()) say("cannot list {}: {}", options_.lock_path, error.what());
        return walk_exposition(nullptr, walks);
      }
    });
  }
}

// --list --watch: the listing, then again each time the set of holders changes (a new leader, a
// lock passed on or freed, the path created or removed), until INT, TERM or HUP. A children watch
// on the path wakes it; it is set again once it fired, or once the session was replaced (a new
// session does not carry the old one's watches). A path that does not exist cannot carry one: it
// is read again every second until it does.
// An outage (the ensemble unreachable, the session lost and replaced) is waited through: said
// once on stderr as it starts (the connection dropped: reconnecting), then the listing resumes,
// with a watch set again on the new session.
int Zklock::watch_list() {
  constexpr auto missing_path_poll = 1000ms;
  constexpr auto safety_poll = 10s;  // should a watch ever be missed, the listing still catches up
  std::optional<std::string> shown_holders;
  std::int64_t watched_session = 0;  // the session whose watch is armed; 0: none
  bool in_outage = false;
  const auto outage = [&](const zkr::Error& error) {
    if (!passing_outage(error.code())) fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
    if (!in_outage && !options_.quiet())
      say("cannot list {} now ({}); reconnecting, the listing resumes once the ensemble answers", options_.lock_path,
          error.what());
    in_outage = true;
  };
  while (true) {
    if (watched_session != session_->id()) {
      try {
        session_->children(options_.lock_path, [inbox = inbox_](zkr::NodeEvent) { inbox->post_path_changed(); });
        watched_session = session_->id();
      } catch (const zkr::Error& error) {
        if (error.code() != zkr::zk_errc::no_node) outage(error);
      }
    }
    std::optional<Listing> listing;
    try {
      listing = read_listing_or_throw(options_.lock_path);
    } catch (const zkr::Error& error) {
      outage(error);
    }
    if (listing) {
      if (in_outage && !options_.quiet()) say("listing {} again", options_.lock_path);
      in_outage = false;
      std::string holders = listing->contenders.exists ? "exists" : "missing";
      for (const auto& contender : listing->contenders.contenders)
        if (contender.holds) holders += "\n" + contender.node;
      if (listing->recipe) holders += "\n" + format_listing_json(options_.lock_path, {}, {}, {}, {}, listing->recipe);
      if (holders != shown_holders) {
        print_report(format_listing(options_.lock_path, *listing));
        shown_holders = std::move(holders);
      }
    }

    const auto poll = watched_session != 0 && !in_outage ? safety_poll : missing_path_poll;
    const Readiness ready = wait_for(signals_, inbox_->wakeup(), std::chrono::duration_cast<std::chrono::milliseconds>(poll));
    if (ready.signal && interrupted()) {
      session_->close();
      return 0;
    }
    if (ready.wakeup) {
      inbox_->wakeup().drain();
      for (const zkr::SessionState state : inbox_->take_states()) {
        if (options_.verbose()) say("session state: {}", zkr::to_string(state));
        const bool dropped = state == zkr::SessionState::suspended || state == zkr::SessionState::lost ||
                             state == zkr::SessionState::connecting;
        if (!dropped || in_outage) continue;
        if (!options_.quiet())
          say("lost the connection to {} (session {}); reconnecting, the listing resumes once the ensemble answers",
              options_.servers, zkr::to_string(state));
        in_outage = true;
      }
      if (inbox_->take_path_changed()) watched_session = 0;  // fired: set it again
    }
  }
}

// An operator breaks a stuck lock: the holder's node is deleted, so its zklock hears node_deleted,
// stops its job and exits 75, and the next waiter is granted (possibly before that: the next
// holder's larger token is what protects the resource). Asks first unless --force; with several
// holders (a semaphore, readers), --node says which.
int Zklock::break_lock() {
  connect();
  std::vector<zkr::ContenderInfo> holders;
  zkr::PathListing listing;
  try {
    const std::optional<int> slots = zkr::Semaphore::recorded_limit(*session_, options_.lock_path);
    listing = zkr::list_lock_path(*session_, options_.lock_path, slots.value_or(1));
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot list {}: {}", options_.lock_path, error.what()));
  }
  // As --list says it: a path that does not exist is not one without a holder (a typo, a chroot).
  if (!listing.exists) {
    std::string missing = format_listing(options_.lock_path, Listing{std::move(listing), std::nullopt, {}, std::chrono::system_clock::now(), std::nullopt});
    while (!missing.empty() && missing.back() == '\n') missing.pop_back();
    say("{}, nothing to break", missing);
    return exit_code::no_such_path;
  }
  for (auto& contender : listing.contenders)
    if (contender.holds && (!options_.break_node || contender.node == *options_.break_node))
      holders.push_back(std::move(contender));
  if (holders.empty()) {
    if (!options_.quiet()) {
      say("{}: {}, nothing to break", options_.lock_path,
          options_.break_node ? fmt::format("no holder's node is named {}", escape_for_terminal(*options_.break_node))
                              : std::string("no holder"));
    }
    return 1;
  }
  if (holders.size() > 1) {
    // One message line a holder: say() escapes a line break inside a message.
    say("{} has {} holders: give --node NAME to break one of them:", options_.lock_path, holders.size());
    for (const auto& holder : holders) say("  {} ({})", holder.node, describe_holders({holder}));
    return exit_code::usage;
  }
  const zkr::ContenderInfo& holder = holders.front();
  const std::string who = describe_holders({holder});
  const std::string node = escape_for_terminal(holder.node);
  if (!options_.force) {
    if (!::isatty(STDIN_FILENO)) {
      log_error(escape_for_terminal(
          fmt::format("--break asks before deleting {}'s node; standard input is not a terminal: add --force", who)));
      return exit_code::usage;
    }
    std::fprintf(stderr, "zklock: break %s: delete the node %s of %s, token %lld? [y/N] ", options_.lock_path.c_str(),
                 node.c_str(), who.c_str(), static_cast<long long>(holder.token.value()));
    std::fflush(stderr);
    const std::optional<std::string> answer = read_stdin_line();
    if (!answer || (*answer != "y" && *answer != "Y" && *answer != "yes")) {
      say("not broken");
      return 1;
    }
  }
  bool deleted = false;
  try {
    deleted = zkr::break_holder(*session_, options_.lock_path, holder);
  } catch (const zkr::Error& error) {
    fail(error.code(), fmt::format("cannot break {}: {}", options_.lock_path, error.what()));
  }
  if (!deleted) {
    if (!options_.quiet()) say("{}: the holder let go meanwhile, nothing to break", options_.lock_path);
    return 1;
  }
  if (!options_.quiet()) {
    say("broke {}: deleted the node {} of {} (token {})", options_.lock_path, node, who, holder.token.value());
  }
  session_->close();
  return 0;
}

// A closed stdin, stdout or stderr would be taken by the next descriptor zklock opens (a ZooKeeper
// socket, say), and messages meant for stderr would go there.
void open_standard_descriptors() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int null = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
      if (null >= 0 && null != fd) {
        ::dup2(null, fd);
        ::close(null);
      }
    }
  }
}

#ifdef ZKLOCK_TLS_BUILD_INSTALLED
// This zklock links no OpenSSL, whose libraries would cost every start more than the rest of
// zklock (tools/zklock/CMakeLists.txt): a run with a TLS option becomes zklock-tls, the same
// program with TLS, found beside this binary (a build tree) or where it is installed. Arguments,
// environment, descriptors and signal mask pass on as they are. Returns only if it cannot be run.
int run_tls_build(char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    say("TLS options need zklock-tls, which cannot be found: /proc/self/exe: {}", error.message());
    return exit_code::unavailable;
  }
  std::string tried;
  for (const std::filesystem::path& candidate :
       {self.parent_path() / "zklock-tls", (self.parent_path() / ZKLOCK_TLS_BUILD_INSTALLED).lexically_normal()}) {
    ::execv(candidate.c_str(), argv);
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", candidate.string(), std::strerror(errno));
  }
  say("TLS options need zklock-tls, which cannot be run ({})", tried);
  return exit_code::unavailable;
}
#endif

// The run's "exit" record and --metrics-file, then the exit code.
int finish(int exit_code) {
  run_events().finished(exit_code);
  return exit_code;
}

int zklock_main(int argc, char** argv) {
  open_standard_descriptors();
  std::vector<int> given_descriptors = open_descriptors();
  // Before any thread exists: every thread inherits the mask (see signals.hpp).
  block_handled_signals();

  CliOptions options;
  try {
    options = parse_command_line(std::vector<std::string>(argv, argv + argc), std::getenv("ZKLOCK_SERVERS"),
                                 std::getenv("ZKLOCK_TICK_TIME"));
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
#ifdef ZKLOCK_TLS_BUILD_INSTALLED
  if (options.tls_ca) return run_tls_build(argv);
#endif
  if (const std::string problem = zkr::path_problem(options.lock_path); !problem.empty()) {
    say("invalid lock path '{}': {}", options.lock_path, problem);
    return exit_code::usage;
  }
  std::error_code servers_error;
  if (!zkr::parse_servers(options.servers, servers_error)) {
    say("invalid ensemble '{}' for --zk: {}", options.servers, zkr::describe_servers_problem(options.servers));
    return exit_code::usage;
  }
  // zklock's log (--log-file, --log-format) and the metrics file: a bad name is refused here,
  // before anything is acquired.
  if (const auto problem = open_log(options)) {
    say("{}", *problem);
    return exit_code::usage;
  }
  if (options.metrics_file) {
    if (const auto problem = check_metrics_file(*options.metrics_file)) {
      log_error(escape_for_terminal(*problem));
      return exit_code::usage;
    }
  }
  run_events().configure(options);
  route_library_log(options);
  // Should the keeper die, the job's processes come to zklock, which can still stop and reap them.
  become_subreaper();

  try {
    // Forked now, while zklock is single-threaded: a copy of zklock needs no exec of its own
    // binary when the job starts (see keeper.hpp).
    std::optional<WaitingKeeper> keeper;
    if (options.mode == Mode::run) keeper.emplace(WaitingKeeper::fork_now());
    SignalReceiver signals;
    Zklock zklock(options, signals, std::move(given_descriptors), std::move(keeper));
    if (options.mode == Mode::list) {
      if (!options.listen.empty()) return finish(zklock.serve_metrics());
      return finish(options.recursive || options.prometheus ? zklock.list_recursive() : zklock.list());
    }
    if (options.mode == Mode::break_lock) return finish(zklock.break_lock());
    return finish(zklock.run());
  } catch (const ExitRequest& request) {
    return finish(request.code);
  } catch (const std::exception& error) {
    log_error(escape_for_terminal(error.what()));
    return finish(exit_code::internal);
  }
}

}  // namespace
}  // namespace zklock

int main(int argc, char** argv) {
  return zklock::zklock_main(argc, argv);
}
