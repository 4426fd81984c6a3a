// zklock's messages on stderr: one line each, "zklock: " first, user input shown escaped.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "cli_options.hpp"
#include "contender_report.hpp"

namespace zklock {

// Writes a whole message to stderr, or as much as stderr takes. Never throws and never blocks on
// a closed reader (SIGPIPE is blocked: EPIPE): a broken stderr must not cost the job's orderly stop.
void write_to_stderr(std::string_view text) noexcept;

// Messages quote user input (option values, paths): control characters (C1 included) and bytes
// that are not UTF-8 are shown escaped (escape_for_terminal), so that input can neither forge a
// second message line nor send escape sequences to the terminal.
template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    write_to_stderr(
        fmt::format("zklock: {}\n", escape_for_terminal(fmt::format(format, std::forward<Args>(args)...))));
  } catch (...) {
    // Out of memory while formatting a message: carry on without it.
  }
}

// "SIGTERM"
inline std::string signal_label(int signal) { return "SIG" + signal_name(signal); }

}  // namespace zklock
