// SPDX-License-Identifier: Apache-2.0
// The library's log: everything goes to the sink set with zkr::set_log_sink (or
// set_log_record_sink), nothing to stderr.
#pragma once

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include <zkr/session.hpp>

namespace zkr::detail {

// What a line concerns, for record sinks (zkr::LogRecord): pass what is known, leave the rest.
struct LogContext {
  std::int64_t session_id = 0;
  std::string_view path;
  std::string_view node;
};

bool log_enabled(LogLevel level) noexcept;
void log_write(LogLevel level, std::string_view message, const LogContext& context = {});

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_write(level, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void log(LogLevel level, const LogContext& context, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_write(level, fmt::format(format, std::forward<Args>(args)...), context);
}

}  // namespace zkr::detail
