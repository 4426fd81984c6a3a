// SPDX-License-Identifier: Apache-2.0
// The C client's log lines, made fit for the library's log: its own prefix (time, process, thread,
// level, function and line) taken off, and a line that repeats (a refused connection is retried,
// and logged twice, every few hundred milliseconds) summarised instead of flooding the sink.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/session.hpp>

namespace zkr::detail {

struct ClientLogLine {
  LogLevel level = LogLevel::debug;
  std::string_view message;  // without the client's prefix and trailing newline
};

// "2026-12-03 11:50:00,123:4242(0x7f..):ZOO_ERROR@handle_socket_error_msg@1290: Socket ..." ->
// error, "Socket ...". A line in another shape is kept whole (at debug level unless it names one).
ClientLogLine parse_client_log_line(std::string_view raw);

// The first occurrence of a message is logged; its repeats within `interval` after that are only
// counted, and the first repeat after the interval is logged with the count
// ("... (repeated 17 times in 10s)"), starting the next interval. Thread-safe.
class RepeatSummary {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RepeatSummary(Clock::duration interval, std::size_t max_messages = 64);

  // The text to log for this occurrence, or nothing when it is one of the counted repeats.
  std::optional<std::string> admit(LogLevel level, std::string_view message, Clock::time_point now);

 private:
  struct Seen {
    LogLevel level;
    std::string message;
    Clock::time_point reported;
    std::size_t repeats = 0;  // since `reported`, not logged
  };
  std::mutex mutex_;
  Clock::duration interval_;
  std::size_t max_messages_;
  std::vector<Seen> seen_;
};

// How long the C client's repeated lines are counted before the count is logged.
inline constexpr std::chrono::seconds client_log_summary_interval{10};

}  // namespace zkr::detail
