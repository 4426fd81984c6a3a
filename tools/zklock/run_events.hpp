// SPDX-License-Identifier: Apache-2.0
// zklock's log and what a run did, for people and for fleets.
//
// One process-wide log output takes zklock's messages (say()), its events and the library's log
// lines, and writes them to stderr or --log-file, as "zklock: ..." text (in a file "TIME
// zklock[PID]: ...") or as one JSON object a line (--log-format json). A JSON record always has "time" (UTC, microseconds), "event",
// "level", "lock" (LOCKPATH) and "pid" (zklock's), then what the event is about, in the
// vocabulary of json_vocabulary.hpp ("token", "session_id", "session", "node", "exit_code"...).
// Events are what a run goes through: connected, queued (the place in the queue, each time it
// changes), acquired, not_acquired, signal, lost, job_exit, released, error, exit. In text form
// events print nothing by themselves: the messages say what happened, as -v and -q ask. Levels
// (json_vocabulary.hpp): a routine outcome (the lock held, a -w timeout) is a notice, never an
// error; "error" is kept for what made zklock give up.
//
// The same events feed the run's summary, which --metrics-file writes at the exit
// (metrics_file.hpp): one source for the log and the metrics, so that they cannot disagree.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/lock.hpp>

#include "cli_options.hpp"

namespace zklock {

// Where the log goes. Until configured: text on stderr.
struct LogDestination {
  LogFormat format = LogFormat::text;
  int fd = 2;  // stderr, or the --log-file opened for appending (close-on-exec)
  // Text lines in a file say when and which zklock ("TIME zklock[PID]: ..."): several zklocks may
  // append to one file, and nothing else dates the lines (on stderr, the journal or cron does).
  bool stamped = false;
};

// Opens --log-file (if any) for appending and routes the log there, in `options.log_format`.
// Returns an error message naming the file if it cannot be opened; nothing is changed then.
std::optional<std::string> open_log(const CliOptions& options);
const LogDestination& log_destination();
bool json_log();

// A fatal error (what -q still prints): to the log, as a message line or an "error" record, and
// also as a "zklock: " line on stderr when the log goes to a --log-file, so that cron and the
// journal still see it. A lost lock is said the same way, but as a "message" record of warning
// level in JSON (its "lost" record is the event). Never throws.
void log_error(std::string_view text) noexcept;
void log_lost(std::string_view text) noexcept;

// Routes the library's log records into zklock's log: in JSON as "log" records (warnings and
// errors always, info with -v); in text only with -v, as "zklock: [level] message" lines.
void route_library_log(const CliOptions& options);

// One JSON record under construction; emit() writes it (JSON log only, else nothing).
class Event {
 public:
  explicit Event(std::string_view name, std::string_view level = "info");
  Event& text(std::string_view name, std::string_view value);
  Event& number(std::string_view name, std::int64_t value);
  Event& seconds(std::string_view name, std::chrono::nanoseconds value);
  Event& session(std::int64_t session_id);  // "session_id" and "session"
  Event& json(std::string_view name, std::string_view value);  // value is JSON already
  void emit() noexcept;

 private:
  std::string line_;
};

// Someone holding the lock, as a queued event shows them.
struct QueueHolder {
  std::int64_t token = 0;
  std::int64_t session_id = 0;
  std::string owner;
};

// What a run went through, as far as it got. Filled by the RunEvents calls below.
struct RunSummary {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> wait_started;
  std::optional<Clock::time_point> acquired_at;
  std::optional<Clock::time_point> released_at;
  std::optional<std::string> not_acquired;  // "held" or "timed_out"
  bool interrupted = false;                 // a signal while connecting or queued
  bool skipped = false;                     // --once-per: this window's run is claimed already
  bool job_ended = false;
  bool lost = false;
  std::optional<int> exit_code;             // zklock's, once known
  std::chrono::system_clock::time_point finished;

  // "ran", "lost", "held", "timed_out", "interrupted", "skipped" or "failed" (anything else: the
  // ensemble out of reach, a usage error found on the ensemble, a job that could not start...).
  std::string outcome() const;
  std::chrono::nanoseconds wait_time() const;
  std::chrono::nanoseconds hold_time() const;
};

// The run's events: each writes its record (JSON log) and notes what the summary needs.
// Process-wide, as the log is; used on zklock's main thread only.
class RunEvents {
 public:
  void configure(const CliOptions& options);
  void connected(std::int64_t session_id, std::chrono::milliseconds negotiated_timeout);
  void waiting();
  void queued(int position, int waiters, const std::vector<QueueHolder>& holders);
  void acquired(zkr::FencingToken token, std::string_view node, std::int64_t session_id);
  // "held", "timed_out", at notice level: a skipped turn, not an error. `message` (what the text
  // log says; empty under -q) goes into the record.
  void not_acquired(std::string_view reason, std::string_view message);
  // A signal ended the run before the job started: "interrupted" (connecting), "withdrew" (queued).
  void interrupted(int signal, std::string_view action);
  // A signal while the job runs or is being stopped: "passed" to the job, "killed" the job (a
  // second INT or TERM), "insisted" (INT or TERM while stopping it: SIGKILL now), "ignored".
  void signal_passed(int signal, std::string_view action);
  void skipped();
  // `reason` in the vocabulary of json_vocabulary.hpp (loss_reason_name(), unconfirmed_loss...).
  void lost(std::string_view reason, std::string_view detail);
  // The job ended, on its own or stopped after a loss; no exit code if none could be read (its
  // keeper died, or it survived SIGKILL).
  void job_exit(std::optional<int> exit_code, std::optional<int> signal);
  void released();
  // What made zklock give up: an "error" record (JSON log only; see log_error()).
  void error(std::string_view message);
  // The run ends with `exit_code`: the "exit" record, then --metrics-file. Once; later calls do
  // nothing (an exit path may pass twice).
  void finished(int exit_code) noexcept;

  const RunSummary& summary() const { return summary_; }

 private:
  Event event(std::string_view name, std::string_view level = "info") const;

  const CliOptions* options_ = nullptr;
  RunSummary summary_;
  std::optional<zkr::FencingToken> token_;
  bool finished_ = false;
};

RunEvents& run_events();

}  // namespace zklock
