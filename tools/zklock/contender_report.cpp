#include "contender_report.hpp"

#include <ctime>

#include <fmt/format.h>

namespace zklock {

namespace {

std::string_view role_name(zkr::ContenderRole role) {
  switch (role) {
    case zkr::ContenderRole::exclusive: return "exclusive";
    case zkr::ContenderRole::read: return "read";
    case zkr::ContenderRole::write: return "write";
    case zkr::ContenderRole::latch: return "latch";
  }
  return "unknown";
}

std::string_view scheme_name(zkr::ContenderScheme scheme) {
  return scheme == zkr::ContenderScheme::kazoo ? "kazoo" : "zkrecipes";
}

std::string session_hex(std::int64_t session_id) {
  return fmt::format("{:#x}", static_cast<std::uint64_t>(session_id));
}

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  if (length == 2 && lead < 0xC2) return 0;  // overlong
  return length;
}

// Owner data is free text written by any client: keep a table row on one line.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out.empty() ? "-" : out;
}

}  // namespace

std::string format_utc(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto since_epoch = duration_cast<milliseconds>(time.time_since_epoch());
  const std::time_t seconds = static_cast<std::time_t>(floor<std::chrono::seconds>(since_epoch).count());
  const auto millis = since_epoch.count() - static_cast<long long>(seconds) * 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (length > 1) {
      out.append(text.substr(i, length));
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
    i += length;
  }
  out += '"';
  return out;
}

std::string format_contenders_text(std::string_view path, const std::vector<zkr::ContenderInfo>& contenders) {
  if (contenders.empty()) return fmt::format("{}: free (no holder, no waiters)\n", path);
  std::size_t holders = 0;
  for (const auto& contender : contenders) holders += contender.holds ? 1 : 0;
  std::string out = fmt::format("{}: {} holder{}, {} waiter{}\n", path, holders, holders == 1 ? "" : "s",
                                contenders.size() - holders, contenders.size() - holders == 1 ? "" : "s");
  const char* row = "{:<7} {:<9} {:<9} {:>12} {:<20} {:<24} {:<24} {}\n";
  out += fmt::format(fmt::runtime(row), "STATE", "ROLE", "CLIENT", "TOKEN", "SESSION", "SINCE", "OWNER", "NODE");
  for (const auto& contender : contenders) {
    out += fmt::format(fmt::runtime(row), contender.holds ? "holder" : "waiter", role_name(contender.role),
                       scheme_name(contender.scheme), contender.token.value(),
                       session_hex(contender.session_id), format_utc(contender.created),
                       printable(contender.owner_data), printable(contender.node));
  }
  return out;
}

std::string format_contenders_json(std::string_view path, const std::vector<zkr::ContenderInfo>& contenders) {
  std::string out = fmt::format("{{\"path\":{},\"contenders\":[", json_string(path));
  bool first = true;
  for (const auto& contender : contenders) {
    if (!first) out += ',';
    first = false;
    out += fmt::format(
        "{{\"node\":{},\"sequence\":{},\"token\":{},\"session_id\":{},\"owner\":{},\"since\":{},"
        "\"holds\":{},\"role\":{},\"scheme\":{}}}",
        json_string(contender.node), contender.sequence, contender.token.value(),
        json_string(session_hex(contender.session_id)), json_string(contender.owner_data),
        json_string(format_utc(contender.created)), contender.holds ? "true" : "false",
        json_string(role_name(contender.role)), json_string(scheme_name(contender.scheme)));
  }
  out += "]}\n";
  return out;
}

}  // namespace zklock
