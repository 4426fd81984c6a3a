// SPDX-License-Identifier: Apache-2.0
#include "supervisor.hpp"

#include <sys/wait.h>

#include <csignal>
#include <utility>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>
#include <zkr/session.hpp>

#include "exit_status.hpp"
#include "json_vocabulary.hpp"
#include "messages.hpp"
#include "run_events.hpp"

namespace zklock {

using namespace std::chrono_literals;

namespace {

// Bounds on waits that should end promptly; passing one means something is badly wrong, and
// zklock gives up rather than hang.
constexpr auto after_sigkill_bound = 5s;
constexpr auto group_poll_interval = 20ms;
// The session monitor checks its deadline at least every 100 ms: once zklock runs, its verdict on a
// deadline that passed comes within that.
constexpr auto monitor_verdict_bound = 500ms;
constexpr auto noticeably_late = 100ms;

// A lost lock ends the run with an error (the lost exit code): said even with -q, and on stderr
// beside a --log-file.
void lost_message(const std::string& text) { log_lost(escape_for_terminal(text)); }

}  // namespace

void report_session_states(Inbox& inbox, const CliOptions& options) {
  inbox.wakeup().drain();
  for (zkr::SessionState state : inbox.take_states()) {
    if (options.verbose()) say("session state: {}", zkr::to_string(state));
  }
}

HeldZkLock::HeldZkLock(zkr::HeldLock& held, zkr::Session& session, std::string lock_path,
                       std::shared_ptr<Inbox> inbox)
    : held_(held), session_(session), lock_path_(std::move(lock_path)) {
  held_.on_lost([inbox = std::move(inbox)](zkr::LossReason reason) { inbox->post_lost(reason); });
}

// "session lost: the ensemble expired the session", "lock node deleted", ...
std::string HeldZkLock::describe_loss(zkr::LossReason reason) const {
  const auto cause = session_.last_loss_cause();
  if (reason == zkr::LossReason::session_lost && cause) return fmt::format("{}: {}", zkr::to_string(reason), zkr::to_string(*cause));
  return std::string(zkr::to_string(reason));
}

// The session ended meanwhile (the usual reason a delete's answer cannot tell): say so.
std::string HeldZkLock::describe_unconfirmed() const {
  if (session_.last_loss_cause()) return describe_loss(zkr::LossReason::session_lost);
  return "the release could not confirm it held to the end: no answer from the ensemble";
}

// Past the session timeout the monitor has surely declared the session lost, which answers too.
zkr::ReleaseOutcome HeldZkLock::release_and_confirm() {
  return held_.release_and_confirm(session_.negotiated_timeout());
}

void Supervisor::handle_inbox() { report_session_states(inbox_, options_); }

// INVARIANT: the job - the command and every process descending from it, whatever process group
// or session it moved to - is gone before the lock is released, on every path. This function is
// the only one that starts a job, and every path through it passes stop_job() before
// lock.release(). Should anything throw in between, the job's destructor (Job: SIGKILL to the
// whole tree, waited for, bounded) runs before the caller's lock is destroyed. Should zklock
// itself die, the keeper (keeper.hpp) kills the tree; should it stall past the session monitor's
// deadline, the keeper stops the tree as stop_job() would.
int Supervisor::run_under_lock(SupervisedLock& lock) {
  if (const auto reason = lock.loss_reason()) {
    run_events().lost(loss_reason_name(*reason), lock.describe_loss(*reason));
    lost_message(fmt::format("lost the lock on {} ({}) before the job started", options_.lock_path, lock.describe_loss(*reason)));
    return options_.lost_exit_code;
  }

  std::vector<std::string> argv = options_.shell_command
                                      ? std::vector<std::string>{"/bin/sh", "-c", *options_.shell_command}
                                      : options_.command;
  std::vector<std::pair<std::string, std::string>> job_variables{
      {"ZKLOCK_FENCING_TOKEN", lock.fencing_token()},
      {"ZKLOCK_NODE", lock.node_path()},
      {"ZKLOCK_PATH", options_.lock_path},
      {"ZKLOCK_SERVERS", options_.servers},  // a zklock in the job finds the same ensemble (and its own lock)
      {"ZKLOCK_SESSION_ID", zkr::session_id_text(lock.session_id())},
  };
  // ... and reaches it the same way (TLS files; never credentials).
  if (options_.tls_ca) job_variables.emplace_back("ZKLOCK_TLS_CA", options_.tls_ca->string());
  if (options_.tls_cert) job_variables.emplace_back("ZKLOCK_TLS_CERT", options_.tls_cert->string());
  if (options_.tls_key) job_variables.emplace_back("ZKLOCK_TLS_KEY", options_.tls_key->string());
  if (options_.tls_ca && !options_.tls_verify_host) job_variables.emplace_back("ZKLOCK_TLS_NO_VERIFY_HOST", "1");
  std::vector<std::string> environment = environment_with(job_variables);

  // The keeper's deadline starts at the session monitor's for the lock's session (zklock asked to
  // hear it before acquiring, so it is known by now). None known, or one passed already: that
  // session is gone, or nearly; the job must not start.
  const std::optional<zkr::SessionDeadline> deadline = inbox_.deadline();
  if (!deadline || deadline->session_id != lock.session_id() || deadline->at <= zkr::BootClock::now()) {
    const zkr::LossReason reason = lock.loss_reason().value_or(zkr::LossReason::session_lost);
    run_events().lost(loss_reason_name(reason), lock.describe_loss(reason));
    lost_message(fmt::format("lost the lock on {} ({}) before the job started", options_.lock_path, lock.describe_loss(reason)));
    return options_.lost_exit_code;
  }

  std::unique_ptr<JobControl> job;
  try {
    job = start_job_(argv, environment, {deadline->at, options_.kill_signal, options_.kill_after});
  } catch (const JobStartError& error) {
    log_error(error.what());
    lock.job_ended(error.exit_code());
    lock.release();  // no job was started: nothing to stop
    run_events().released();
    return error.exit_code();
  }

  const Supervised outcome = supervise(*job, lock, deadline->at);

  // The command has exited, or the lock was lost. Whatever is left of the job (the command, or
  // processes it left behind, in its group or not) still works under the lock: stop it here, the
  // one place that does, before releasing.
  if (!outcome.lost && job->left_processes_behind() && options_.verbose()) {
    say("the job left processes behind; sending {}", signal_label(options_.kill_signal));
  }
  if (!stop_job(*job, options_.kill_signal, options_.kill_after)) {
    say("warning: processes of the job survive SIGKILL; releasing the lock anyway");
  }

  if (outcome.lost) {
    report_stopped_job(*job);
    lock.release();
    run_events().released();
    return options_.lost_exit_code;
  }
  // The job's exit and the loss can be pending together (zklock frozen past the session, then
  // thawed): the monitor may not have spoken yet when the exit is read. The delete's answer says
  // whether our node stood until now, in our session: no read needed.
  if (const auto reason = inbox_.lost() ? inbox_.lost() : lock.loss_reason()) {
    run_events().lost(loss_reason_name(*reason), lock.describe_loss(*reason));
    lost_message(fmt::format("lost the lock on {} ({}) while the job ran", options_.lock_path, lock.describe_loss(*reason)));
    lock.release();
    run_events().released();
    return options_.lost_exit_code;
  }
  lock.job_ended(outcome.exit_code);
  const zkr::ReleaseOutcome released = lock.release_and_confirm();
  run_events().released();
  if (released == zkr::ReleaseOutcome::held_to_the_end) {
    if (options_.verbose()) say("released {}", options_.lock_path);
    return outcome.exit_code;
  }
  const auto reason = inbox_.lost() ? inbox_.lost() : lock.loss_reason();
  const std::string why = reason                                  ? lock.describe_loss(*reason)
                          : released == zkr::ReleaseOutcome::lost ? std::string("its node is gone")
                                                                  : lock.describe_unconfirmed();
  run_events().lost(reason ? loss_reason_name(*reason) : unconfirmed_loss, why);
  lost_message(fmt::format("lost the lock on {} ({}) while the job ran", options_.lock_path, why));
  return options_.lost_exit_code;
}

// Waits for the command to exit while passing signals on and relaying the session monitor's
// deadlines to the keeper, or for the lock to be lost, or for the keeper to have stopped the job at
// its deadline (the caller then stops the job).
Supervisor::Supervised Supervisor::supervise(JobControl& job, const SupervisedLock& lock,
                                             zkr::BootClock::time_point relayed_deadline) {
  int termination_requests = 0;
  while (true) {
    const bool ended = job.poll();
    // Checked first: a job that the keeper's stop made exit ran up to the lock's deadline.
    if (job.stopped_by_keeper()) {
      const std::string message = describe_keeper_stop(job, lock, relayed_deadline);
      const auto reason = inbox_.lost() ? inbox_.lost() : lock.loss_reason();
      run_events().lost(reason ? loss_reason_name(*reason) : keeper_deadline_loss, message);
      lost_message(message);
      return {options_.lost_exit_code, true};
    }
    if (ended) break;
    if (const auto reason = inbox_.lost()) {
      run_events().lost(loss_reason_name(*reason), lock.describe_loss(*reason));
      lost_message(fmt::format("lost the lock on {} ({}); stopping the job with {}", options_.lock_path,
                               lock.describe_loss(*reason), signal_label(options_.kill_signal)));
      return {options_.lost_exit_code, true};
    }
    const Readiness ready = waiter_.wait(-1ms, job.keeper_socket());
    if (ready.wakeup) {
      handle_inbox();
      // Only the lock's own session's deadlines: a replacement session's would keep a job alive
      // whose lock went with the old one.
      const auto deadline = inbox_.deadline();
      if (deadline && deadline->session_id == lock.session_id() && deadline->at != relayed_deadline) {
        job.renew_deadline(deadline->at);
        relayed_deadline = deadline->at;
      }
    }
    if (!ready.signal) continue;
    while (const auto signal = waiter_.next_signal()) {
      if (*signal == SIGCHLD) continue;
      if (*signal == SIGINT || *signal == SIGTERM) ++termination_requests;
      if (termination_requests >= 2) {
        run_events().signal_passed(*signal, "killed");
        if (options_.verbose()) say("passing SIGKILL to the job and every process it started");
        job.signal_tree(SIGKILL);
        continue;
      }
      run_events().signal_passed(*signal, "passed");
      if (options_.verbose()) say("passing {} to the job", signal_label(*signal));
      job.signal_group(*signal);
    }
  }
  if (job.keeper_failed()) {
    log_error("zklock's keeper process died; the job was killed");
    run_events().job_exit(std::nullopt, std::nullopt);
    return {exit_code::internal, false};
  }
  report_stopped_job(job);
  return {exit_code_from_wait_status(job.wait_status()), false};
}

// The job's "job_exit" record: its status once it exited, or none known (its keeper died without
// saying, or something of it survived SIGKILL).
void Supervisor::report_stopped_job(JobControl& job) {
  if (job.poll() && !job.keeper_failed()) {
    const int status = job.wait_status();
    run_events().job_exit(exit_code_from_wait_status(status),
                          WIFSIGNALED(status) ? std::optional<int>(WTERMSIG(status)) : std::nullopt);
    return;
  }
  run_events().job_exit(std::nullopt, std::nullopt);
}

// The keeper stopped the job at the session monitor's deadline (keeper.hpp) because zklock had
// not: it raced with the keeper (the monitor declares the loss at that very deadline), or it did
// not run (stopped, starved). Says which, with the monitor's own verdict, which comes soon after
// zklock runs; the keeper is stopping the job meanwhile.
std::string Supervisor::describe_keeper_stop(JobControl& job, const SupervisedLock& lock,
                                             zkr::BootClock::time_point deadline) {
  const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(zkr::BootClock::now() - deadline);
  const auto verdict_bound = Clock::now() + monitor_verdict_bound;
  std::optional<zkr::LossReason> reason;
  while (!(reason = inbox_.lost() ? inbox_.lost() : lock.loss_reason()) && Clock::now() < verdict_bound) {
    wait_a_little(job, group_poll_interval);
  }
  std::string message =
      fmt::format("lost the lock on {} ({}); its keeper stopped the job with {} at the session monitor's deadline",
                  options_.lock_path,
                  reason ? lock.describe_loss(*reason) : std::string("zklock relayed no later deadline in time"),
                  signal_label(options_.kill_signal));
  if (late > noticeably_late) {
    message += fmt::format(": zklock itself ran again only {} after it (stopped or starved)", format_duration(late));
  }
  return message;
}

// Sends `signal` to every process of the job's tree, SIGKILL after `grace`; returns once no process
// of the job is left (true) or the bound after SIGKILL passed (false). Processes that appear while
// it waits (forked, or escaped from their group) get the signal too.
bool Supervisor::stop_job(JobControl& job, int signal, std::chrono::milliseconds grace) {
  if (job.tree_gone()) return true;
  // The keeper, stopping the job at its deadline, sent the signal already: a shell's trap must not
  // run twice. Otherwise it learns that zklock stops the job, and SIGKILLs after the grace should
  // zklock stall meanwhile.
  const bool keeper_signalled = job.stopped_by_keeper();
  if (!keeper_signalled) job.announce_stop();
  if (signal != SIGKILL) {
    std::vector<pid_t> signalled;
    bool insisted = false;
    const auto deadline = Clock::now() + grace;
    do {  // at least once, even with no grace at all
      if (!keeper_signalled) {
        job.signal_tree(signal, &signalled);
        // A stopped job (SIGSTOP, or frozen along with zklock) acts on the signal only once continued.
        job.signal_tree(SIGCONT);
      }
      insisted = wait_a_little(job, std::min<Clock::duration>(group_poll_interval, deadline - Clock::now()));
      if (job.tree_gone()) return true;
    } while (!insisted && Clock::now() < deadline);
  }
  if (options_.verbose()) say("sending SIGKILL to every process of the job");
  const auto deadline = Clock::now() + after_sigkill_bound;
  while (Clock::now() < deadline) {
    job.kill_everything();
    wait_a_little(job, group_poll_interval);
    if (job.tree_gone()) return true;
  }
  return false;
}

// Waits up to `step` for a signal, a keeper report or an inbox event. True if the user sent INT or
// TERM meanwhile: already waiting for the job to stop, insisting means "now".
bool Supervisor::wait_a_little(JobControl& job, Clock::duration step) {
  // Never negative: a negative timeout means "no timeout".
  const auto timeout = std::max(std::chrono::ceil<std::chrono::milliseconds>(step), 0ms);
  const Readiness ready = waiter_.wait(timeout, job.keeper_socket());
  if (ready.wakeup) handle_inbox();
  bool insisted = false;
  if (ready.signal) {
    while (const auto received = waiter_.next_signal()) {
      if (*received == SIGCHLD) continue;
      const bool insisting = *received == SIGINT || *received == SIGTERM;
      run_events().signal_passed(*received, insisting ? "insisted" : "ignored");
      insisted |= insisting;
    }
  }
  return insisted;
}

}  // namespace zklock
