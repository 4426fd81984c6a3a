// SPDX-License-Identifier: Apache-2.0
// zklock's messages (on stderr, or as --log-file and --log-format say): one line each, "zklock: " first, user input shown escaped.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "cli_options.hpp"
#include "contender_report.hpp"

namespace zklock {

// Writes a whole message to fd (stderr, the --log-file), or as much as it takes. Never throws and
// never blocks on a closed reader (SIGPIPE is blocked: EPIPE): a broken stderr must not cost the
// job's orderly stop.
void write_all(int fd, std::string_view text) noexcept;

// Writes one message line to zklock's log (run_events.hpp): "zklock: TEXT" on stderr or
// --log-file, or a "message" record of `level` with --log-format json. Never throws.
void log_message(std::string_view text, std::string_view level = "info") noexcept;

// Messages quote user input (option values, paths): control characters (C1 included) and bytes
// that are not UTF-8 are shown escaped (escape_for_terminal), so that input can neither forge a
// second message line nor send escape sequences to the terminal.
template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    log_message(escape_for_terminal(fmt::format(format, std::forward<Args>(args)...)));
  } catch (...) {
    // Out of memory while formatting a message: carry on without it.
  }
}

// "SIGTERM"
inline std::string signal_label(int signal) { return "SIG" + signal_name(signal); }

}  // namespace zklock
