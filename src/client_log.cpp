// SPDX-License-Identifier: Apache-2.0
#include "client_log.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace zkr::detail {

ClientLogLine parse_client_log_line(std::string_view raw) {
  while (!raw.empty() && (raw.back() == '\n' || raw.back() == '\r')) raw.remove_suffix(1);
  ClientLogLine line{LogLevel::debug, raw};
  struct Level {
    std::string_view name;
    LogLevel level;
  };
  constexpr Level levels[] = {{":ZOO_ERROR@", LogLevel::error},
                              {":ZOO_WARN@", LogLevel::warning},
                              {":ZOO_INFO@", LogLevel::info},
                              {":ZOO_DEBUG@", LogLevel::debug}};
  for (const auto& level : levels) {
    const auto at = raw.find(level.name);
    if (at == std::string_view::npos) continue;
    line.level = level.level;
    // FUNCTION@LINE: MESSAGE
    const auto function_end = raw.find('@', at + level.name.size());
    const auto message_start = function_end == std::string_view::npos ? function_end : raw.find(": ", function_end);
    if (message_start != std::string_view::npos) line.message = raw.substr(message_start + 2);
    break;
  }
  return line;
}

RepeatSummary::RepeatSummary(Clock::duration interval, std::size_t max_messages)
    : interval_(interval), max_messages_(std::max<std::size_t>(max_messages, 1)) {}

std::optional<std::string> RepeatSummary::admit(LogLevel level, std::string_view message, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto seen = std::find_if(seen_.begin(), seen_.end(),
                                 [&](const Seen& entry) { return entry.level == level && entry.message == message; });
  if (seen == seen_.end()) {
    if (seen_.size() >= max_messages_) {
      // Forget the message reported longest ago: at worst it is logged once more.
      seen_.erase(std::min_element(seen_.begin(), seen_.end(),
                                   [](const Seen& a, const Seen& b) { return a.reported < b.reported; }));
    }
    seen_.push_back(Seen{level, std::string(message), now, 0});
    return std::string(message);
  }
  if (now - seen->reported < interval_) {
    ++seen->repeats;
    return std::nullopt;
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - seen->reported);
  const std::size_t repeats = seen->repeats + 1;
  seen->reported = now;
  seen->repeats = 0;
  if (repeats == 1) return std::string(message);  // not repeated within the interval
  return fmt::format("{} (repeated {} times in {}s)", message, repeats, elapsed.count());
}

}  // namespace zkr::detail
