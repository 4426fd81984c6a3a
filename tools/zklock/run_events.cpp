// SPDX-License-Identifier: Apache-2.0
#include "run_events.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include <zkr/session.hpp>

#include "contender_report.hpp"
#include "json_vocabulary.hpp"
#include "metrics_file.hpp"
#include "messages.hpp"
#include "once_per.hpp"

namespace zklock {
namespace {

struct LogState {
  LogDestination destination;
  std::string lock;
};

LogState& log_state() {
  static LogState state;
  return state;
}

// Whole lines, each in one write() as a rule: lines from the library's thread and the main thread
// do not interleave, and several zklocks appending to one file (O_APPEND) keep their lines whole.
void write_line(std::string_view line) noexcept { write_all(log_state().destination.fd, line); }

// "zklock", or "2026-01-31T23:59:59.123456Z zklock[PID]" in a log file.
std::string text_prefix() {
  if (!log_state().destination.stamped) return "zklock";
  return fmt::format("{} zklock[{}]", format_utc_micros(std::chrono::system_clock::now()), ::getpid());
}

// The library warns about children of a lock path not named like contenders (someone put them
// there). --once-per's record is zklock's own, there by design: the warning that names it alone
// is not passed on. One that names other children too still is.
bool warns_of_the_run_record_alone(std::string_view message) {
  static const std::string own =
      fmt::format(": 1 child is not named like a contender node, never a holder: '{}'", run_record_name);
  return message.ends_with(own);
}

}  // namespace

std::optional<std::string> open_log(const CliOptions& options) {
  LogState& state = log_state();
  if (options.log_file) {
    const int fd = ::open(options.log_file->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0) {
      return fmt::format("--log-file {}: cannot open for appending: {}", options.log_file->string(),
                         std::strerror(errno));
    }
    state.destination.fd = fd;
    state.destination.stamped = true;
  }
  state.destination.format = options.log_format;
  state.lock = options.lock_path;
  return std::nullopt;
}

const LogDestination& log_destination() { return log_state().destination; }
bool json_log() { return log_state().destination.format == LogFormat::json; }

void log_message(std::string_view text, std::string_view level) noexcept {
  try {
    if (json_log()) Event("message", level).text("message", text).emit();
    else write_line(fmt::format("{}: {}\n", text_prefix(), text));
  } catch (...) {
    // Out of memory while formatting: the line is lost, zklock carries on.
  }
}

namespace {

void log_fatal(std::string_view text, bool error_record) noexcept {
  try {
    if (!json_log()) write_line(fmt::format("{}: {}\n", text_prefix(), text));
    else if (error_record) run_events().error(text);
    else log_message(text, level::warning);
    if (log_state().destination.fd != STDERR_FILENO) write_all(STDERR_FILENO, fmt::format("zklock: {}\n", text));
  } catch (...) {
    // Out of memory while formatting: the line is lost, zklock carries on.
  }
}

}  // namespace

void log_error(std::string_view text) noexcept { log_fatal(text, true); }
void log_lost(std::string_view text) noexcept { log_fatal(text, false); }

void route_library_log(const CliOptions& options) {
  if (options.log_format == LogFormat::text) {
    if (!options.verbose()) return;
    zkr::set_log_sink(
        [](zkr::LogLevel level, std::string_view message) {
          // The C client's lines end with a newline of their own.
          while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
          if (warns_of_the_run_record_alone(message)) return;
          try {
            write_line(fmt::format("{}: [{}] {}\n", text_prefix(), zkr::to_string(level), message));
          } catch (...) {
            // Formatting failed (out of memory): the line is lost, the callback thread carries on.
          }
        },
        zkr::LogLevel::info);
    return;
  }
  zkr::set_log_record_sink(
      [](const zkr::LogRecord& record) {
        std::string_view message = record.message;
        while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
        if (warns_of_the_run_record_alone(message)) return;
        try {
          Event event("log", zkr::to_string(record.level));
          event.text("message", message);
          if (record.session_id != 0) event.session(record.session_id);
          if (!record.path.empty()) event.text("path", record.path);
          if (!record.node.empty()) event.text("node", record.node);
          event.emit();
        } catch (...) {
          // As above.
        }
      },
      options.quiet() ? zkr::LogLevel::error : options.verbose() ? zkr::LogLevel::info : zkr::LogLevel::warning);
}

Event::Event(std::string_view name, std::string_view level) {
  if (!json_log()) return;
  line_ = fmt::format("{{\"time\":\"{}\",\"event\":{},\"level\":{},\"lock\":{},\"pid\":{}",
                      format_utc_micros(std::chrono::system_clock::now()), json_string(name), json_string(level),
                      json_string(log_state().lock), ::getpid());
}

Event& Event::text(std::string_view name, std::string_view value) { return json(name, json_string(value)); }
Event& Event::number(std::string_view name, std::int64_t value) { return json(name, std::to_string(value)); }
Event& Event::seconds(std::string_view name, std::chrono::nanoseconds value) {
  return json(name, fmt::format("{:.6f}", std::chrono::duration<double>(value).count()));
}
Event& Event::session(std::int64_t session_id) {
  if (!line_.empty()) line_ += "," + json_session_fields(session_id);
  return *this;
}
Event& Event::json(std::string_view name, std::string_view value) {
  if (!line_.empty()) fmt::format_to(std::back_inserter(line_), ",{}:{}", json_string(name), value);
  return *this;
}

void Event::emit() noexcept {
  if (line_.empty()) return;
  try {
    line_ += "}\n";
    write_line(line_);
  } catch (...) {
    // Out of memory: the record is lost.
  }
  line_.clear();
}

std::string RunSummary::outcome() const {
  if (skipped) return "skipped";
  if (lost) return "lost";
  if (job_ended) return "ran";
  if (not_acquired) return *not_acquired;
  if (interrupted) return "interrupted";
  return "failed";
}

std::chrono::nanoseconds RunSummary::wait_time() const {
  if (!wait_started) return {};
  const Clock::time_point end = acquired_at ? *acquired_at : Clock::now();
  return end - *wait_started;
}

std::chrono::nanoseconds RunSummary::hold_time() const {
  if (!acquired_at) return {};
  return (released_at ? *released_at : Clock::now()) - *acquired_at;
}

RunEvents& run_events() {
  static RunEvents events;
  return events;
}

void RunEvents::configure(const CliOptions& options) { options_ = &options; }

Event RunEvents::event(std::string_view name, std::string_view level) const {
  Event record(name, level);
  if (token_) record.number("token", token_->value());
  return record;
}

void RunEvents::connected(std::int64_t session_id, std::chrono::milliseconds negotiated_timeout) {
  event("connected").session(session_id).seconds("session_timeout_seconds", negotiated_timeout).emit();
}

void RunEvents::waiting() { summary_.wait_started = RunSummary::Clock::now(); }

void RunEvents::queued(int position, int waiters, const std::vector<QueueHolder>& holders) {
  if (!json_log()) return;
  std::string list = "[";
  for (const QueueHolder& holder : holders) {
    list += fmt::format("{}{{\"token\":{},{},\"owner\":{}}}", list.size() > 1 ? "," : "", holder.token,
                        json_session_fields(holder.session_id), json_string(holder.owner));
  }
  list += "]";
  event("queued").number("position", position).number("waiters", waiters).json("holders", list).emit();
}

void RunEvents::acquired(zkr::FencingToken token, std::string_view node, std::int64_t session_id) {
  summary_.acquired_at = RunSummary::Clock::now();
  token_ = token;
  event("acquired").session(session_id).text("node", node).seconds("wait_seconds", summary_.wait_time()).emit();
}

void RunEvents::not_acquired(std::string_view reason, std::string_view message) {
  summary_.not_acquired = std::string(reason);
  Event record = event("not_acquired", level::notice);
  record.text("reason", reason).seconds("wait_seconds", summary_.wait_time());
  if (!message.empty()) record.text("message", message);
  record.emit();
}

void RunEvents::interrupted(int signal, std::string_view action) {
  summary_.interrupted = true;
  event("signal").text("signal", signal_label(signal)).text("action", action).emit();
}

void RunEvents::signal_passed(int signal, std::string_view action) {
  event("signal").text("signal", signal_label(signal)).text("action", action).emit();
}

void RunEvents::skipped() {
  summary_.skipped = true;
  event("skipped").emit();
}

void RunEvents::lost(std::string_view reason, std::string_view detail) {
  if (summary_.lost) return;  // said once
  summary_.lost = true;
  event("lost", level::warning).text("reason", reason).text("detail", detail).emit();
}

void RunEvents::job_exit(std::optional<int> exit_code, std::optional<int> signal) {
  summary_.job_ended = true;
  Event record = event("job_exit");
  if (exit_code) record.number("exit_code", *exit_code);
  if (signal) record.text("signal", signal_label(*signal));
  record.emit();
}

void RunEvents::released() {
  summary_.released_at = RunSummary::Clock::now();
  event("released").seconds("hold_seconds", summary_.hold_time()).emit();
}

void RunEvents::error(std::string_view message) { event("error", level::error).text("message", message).emit(); }

void RunEvents::finished(int exit_code) noexcept {
  if (finished_) return;
  finished_ = true;
  try {
    summary_.exit_code = exit_code;
    summary_.finished = std::chrono::system_clock::now();
    if (summary_.acquired_at && !summary_.released_at) summary_.released_at = RunSummary::Clock::now();
    // --list and --break run no command: no outcome of a run, only the exit code.
    const bool running = options_ && options_->mode == Mode::run;
    const std::string outcome = summary_.outcome();
    const bool fine = running ? outcome == "ran" || outcome == "skipped" : exit_code == 0;
    const bool routine = running && summary_.not_acquired && outcome == *summary_.not_acquired;
    Event record = event("exit", fine ? level::info : routine ? level::notice : level::warning);
    record.number("exit_code", exit_code);
    if (running) record.text("outcome", outcome);
    record.emit();
    if (options_ && options_->metrics_file) {
      if (const auto problem = write_metrics_file(*options_->metrics_file, options_->lock_path, summary_))
        log_error(*problem);
    }
  } catch (...) {
    // Out of memory at the exit: the exit code stands.
  }
}

}  // namespace zklock
