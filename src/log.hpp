// The library's log: everything goes to the sink set with zkr::set_log_sink, nothing to stderr.
#pragma once

#include <string_view>

#include <fmt/format.h>

#include <zkr/session.hpp>

namespace zkr::detail {

bool log_enabled(LogLevel level) noexcept;
void log_write(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_write(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace zkr::detail
