// SPDX-License-Identifier: Apache-2.0
#include "json_vocabulary.hpp"

#include <charconv>
#include <ctime>

#include <fmt/format.h>

#include <zkr/session.hpp>

#include "contender_report.hpp"

namespace zklock {

std::string json_session_fields(std::int64_t session_id) {
  return fmt::format("\"session_id\":{},\"session\":{}", static_cast<std::uint64_t>(session_id),
                     json_string(zkr::session_id_text(session_id)));
}

std::optional<std::int64_t> parse_session_id_text(std::string_view text) {
  if (!text.starts_with("0x")) return std::nullopt;
  text.remove_prefix(2);
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

std::string format_utc_micros(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto micros = duration_cast<microseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(micros / 1'000'000 - (micros % 1'000'000 < 0 ? 1 : 0));
  const auto fraction = micros - static_cast<std::int64_t>(seconds) * 1'000'000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, fraction);
}

std::string_view loss_reason_name(zkr::LossReason reason) noexcept {
  switch (reason) {
    case zkr::LossReason::session_lost: return "session_lost";
    case zkr::LossReason::connection_lost: return "connection_lost";
    case zkr::LossReason::node_deleted: return "node_deleted";
    case zkr::LossReason::session_closed: return "session_closed";
  }
  return "unknown";
}

}  // namespace zklock
