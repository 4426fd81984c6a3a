// --list output: the holders and waiters of a lock path, as a table or as JSON.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>  // before zkr/session.hpp, which uses std::exchange without including it
#include <vector>

#include <zkr/lock.hpp>

namespace zklock {

// A table, one line per contender (holders first, then waiters in queue order), preceded by a
// header line; "PATH: free" when there is nobody.
std::string format_contenders_text(std::string_view path, const std::vector<zkr::ContenderInfo>& contenders);

// {"path": ..., "contenders": [{"node", "sequence", "token", "session_id", "owner", "since",
// "holds", "role", "scheme"}, ...]} on one line, followed by a newline.
std::string format_contenders_json(std::string_view path, const std::vector<zkr::ContenderInfo>& contenders);

// A JSON string literal (quotes included); invalid UTF-8 bytes become U+FFFD.
std::string json_string(std::string_view text);

// "2024-05-01T12:00:00.123Z"
std::string format_utc(std::chrono::system_clock::time_point time);

}  // namespace zklock
