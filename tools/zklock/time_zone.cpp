// SPDX-License-Identifier: Apache-2.0
#include "time_zone.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>

#include <fmt/format.h>

namespace zklock {
namespace {

std::invalid_argument bad_file(std::string_view name, std::string_view why) {
  return std::invalid_argument(fmt::format("the tz database's file for '{}' cannot be read: {}", name, why));
}

// Big-endian reader over the file's bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(std::string_view name, std::string_view bytes) : name_(name), bytes_(bytes) {}
  std::string_view take(std::size_t count) {
    if (count > bytes_.size() - position_) throw bad_file(name_, "it is truncated");
    const auto part = bytes_.substr(position_, count);
    position_ += count;
    return part;
  }
  std::int64_t number(std::size_t width) {
    const auto part = take(width);
    std::uint64_t value = 0;
    for (const char byte : part) value = value << 8 | static_cast<unsigned char>(byte);
    if (width == 4) return static_cast<std::int32_t>(value);
    return static_cast<std::int64_t>(value);
  }
  std::string_view rest() const { return bytes_.substr(position_); }

 private:
  std::string_view name_;
  std::string_view bytes_;
  std::size_t position_ = 0;
};

struct Counts {
  std::int64_t isut, isstd, leap, time, type, chars;
};

Counts read_header(Reader& reader, std::string_view name, char& version) {
  if (reader.take(4) != "TZif") throw bad_file(name, "it is not a TZif file");
  version = reader.take(1)[0];
  reader.take(15);
  Counts counts{};
  for (auto* count : {&counts.isut, &counts.isstd, &counts.leap, &counts.time, &counts.type, &counts.chars}) {
    *count = reader.number(4);
    if (*count < 0 || *count > 100'000) throw bad_file(name, "its header is damaged");
  }
  if (counts.type < 1) throw bad_file(name, "it has no local time type");
  return counts;
}

// [+-]hh[:mm[:ss]] in seconds; advances `text`.
std::optional<std::int64_t> take_clock(std::string_view& text) {
  int sign = 1;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    sign = text[0] == '-' ? -1 : 1;
    text.remove_prefix(1);
  }
  std::int64_t total = 0;
  for (int part = 0; part < 3; ++part) {
    if (part > 0) {
      if (text.empty() || text[0] != ':') break;
      text.remove_prefix(1);
    }
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
      value = value * 10 + (text[digits] - '0');
      ++digits;
    }
    if (digits == 0 || digits > 3) return std::nullopt;
    text.remove_prefix(digits);
    total += value * (part == 0 ? 3600 : part == 1 ? 60 : 1);
  }
  return sign * total;
}

bool take_zone_name(std::string_view& text) {
  std::size_t length = 0;
  if (!text.empty() && text[0] == '<') {
    length = text.find('>');
    if (length == std::string_view::npos) return false;
    ++length;
  } else {
    while (length < text.size() && std::isalpha(static_cast<unsigned char>(text[length]))) ++length;
    if (length < 3) return false;
  }
  text.remove_prefix(length);
  return true;
}

bool take_number(std::string_view& text, int& value) {
  std::size_t digits = 0;
  value = 0;
  while (digits < text.size() && digits < 2 && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    value = value * 10 + (text[digits] - '0');
    ++digits;
  }
  text.remove_prefix(digits);
  return digits > 0;
}

// Seconds since the epoch of local midnight starting the day of a rule's change in `year`.
std::int64_t change_day(int year, int month, int week, int weekday) {
  using namespace std::chrono;
  const auto ym = std::chrono::year(year) / std::chrono::month(static_cast<unsigned>(month));
  const std::chrono::weekday day{static_cast<unsigned>(weekday)};
  const sys_days date = week == 5 ? sys_days(ym / day[last]) : sys_days(ym / day[static_cast<unsigned>(week)]);
  return duration_cast<seconds>(date.time_since_epoch()).count();
}

}  // namespace

TimeZone::TimeZone() : name_("UTC") {}

TimeZone TimeZone::load(std::string_view name, const std::filesystem::path& directory) {
  if (name == "UTC") return TimeZone();
  const bool valid_characters = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '_' || c == '-' || c == '+';
  });
  if (name.empty() || !valid_characters || name.front() == '/' || name.find("..") != std::string_view::npos) {
    throw std::invalid_argument(
        fmt::format("'{}' is not a time zone name: expected a name of the tz database, such as UTC or Europe/Berlin",
                    name));
  }
  const auto file = directory / std::string(name);
  std::ifstream in(file, std::ios::binary);
  if (!in || std::filesystem::is_directory(file)) {
    throw std::invalid_argument(fmt::format("unknown time zone '{}': there is no {} (Debian's tzdata package holds "
                                            "the zones; names are such as UTC or Europe/Berlin)",
                                            name, file.string()));
  }
  std::string bytes;
  constexpr std::size_t largest = 1 << 20;
  bytes.resize(largest + 1);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  if (bytes.size() > largest) throw bad_file(name, "it is larger than any zone file");
  return from_tzif(std::string(name), bytes);
}

TimeZone TimeZone::from_tzif(std::string name, std::string_view bytes) {
  Reader reader(name, bytes);
  char version = 0;
  Counts counts = read_header(reader, name, version);
  if (version < '2') throw bad_file(name, "it is a version 1 TZif file (64-bit data is needed)");
  // Skip the 32-bit block; the 64-bit one follows with its own header.
  reader.take(static_cast<std::size_t>(counts.time * 5 + counts.type * 6 + counts.chars + counts.leap * 8 +
                                       counts.isstd + counts.isut));
  counts = read_header(reader, name, version);

  TimeZone zone;
  zone.name_ = std::move(name);
  std::vector<std::int64_t> times;
  for (std::int64_t i = 0; i < counts.time; ++i) times.push_back(reader.number(8));
  std::vector<std::size_t> type_of;
  for (std::int64_t i = 0; i < counts.time; ++i) {
    const auto index = static_cast<std::size_t>(reader.number(1));
    if (index >= static_cast<std::size_t>(counts.type)) throw bad_file(zone.name_, "a transition names no type");
    type_of.push_back(index);
  }
  std::vector<std::int64_t> offsets;
  for (std::int64_t i = 0; i < counts.type; ++i) {
    offsets.push_back(reader.number(4));
    reader.take(2);  // is-DST flag, abbreviation index
  }
  reader.take(static_cast<std::size_t>(counts.chars + counts.leap * 12 + counts.isstd + counts.isut));
  if (!std::is_sorted(times.begin(), times.end())) throw bad_file(zone.name_, "its transitions are out of order");
  zone.transitions_ = std::move(times);
  for (const auto index : type_of) zone.offset_after_.push_back(offsets[index]);
  zone.offset_before_first_ = offsets[0];

  // The footer: "\n<POSIX TZ rule>\n", empty when the transitions say everything.
  std::string_view footer = reader.rest();
  if (footer.size() >= 2 && footer.front() == '\n') {
    footer.remove_prefix(1);
    footer = footer.substr(0, footer.find('\n'));
    if (!footer.empty()) {
      zone.rule_ = parse_rule(footer);
      zone.has_rule_ = true;
    }
  }
  return zone;
}

TimeZone::Rule TimeZone::parse_rule(std::string_view text) {
  const auto invalid = [&] {
    return std::invalid_argument(fmt::format("the zone's rule '{}' is not one zklock can read", text));
  };
  Rule rule;
  std::string_view rest = text;
  if (!take_zone_name(rest)) throw invalid();
  const auto standard = take_clock(rest);
  if (!standard) throw invalid();
  rule.standard_offset = -*standard;  // POSIX counts west of Greenwich as positive
  if (rest.empty()) return rule;
  if (!take_zone_name(rest)) throw invalid();
  rule.has_dst = true;
  rule.dst_offset = rule.standard_offset + 3600;
  if (!rest.empty() && rest[0] != ',') {
    const auto dst = take_clock(rest);
    if (!dst) throw invalid();
    rule.dst_offset = -*dst;
  }
  for (Rule::Change* change : {&rule.start, &rule.end}) {
    // Only the Mm.w.d form: the one the tz database writes.
    if (rest.size() < 2 || rest[0] != ',' || rest[1] != 'M') throw invalid();
    rest.remove_prefix(2);
    if (!take_number(rest, change->month) || rest.empty() || rest[0] != '.') throw invalid();
    rest.remove_prefix(1);
    if (!take_number(rest, change->week) || rest.empty() || rest[0] != '.') throw invalid();
    rest.remove_prefix(1);
    if (!take_number(rest, change->weekday)) throw invalid();
    if (change->month < 1 || change->month > 12 || change->week < 1 || change->week > 5 || change->weekday > 6) {
      throw invalid();
    }
    if (!rest.empty() && rest[0] == '/') {
      rest.remove_prefix(1);
      const auto seconds = take_clock(rest);
      if (!seconds) throw invalid();
      change->seconds = *seconds;
    }
  }
  if (!rest.empty()) throw invalid();
  return rule;
}

std::int64_t TimeZone::rule_offset_at(std::int64_t epoch_seconds) const {
  if (!rule_.has_dst) return rule_.standard_offset;
  using namespace std::chrono;
  const sys_days day{days(floor_div(epoch_seconds + rule_.standard_offset, 86'400))};
  const int year = static_cast<int>(year_month_day(day).year());
  // The start is given in standard time, the end in daylight time.
  const std::int64_t start =
      change_day(year, rule_.start.month, rule_.start.week, rule_.start.weekday) + rule_.start.seconds -
      rule_.standard_offset;
  const std::int64_t end =
      change_day(year, rule_.end.month, rule_.end.week, rule_.end.weekday) + rule_.end.seconds - rule_.dst_offset;
  const bool dst = start < end ? (epoch_seconds >= start && epoch_seconds < end)
                               : !(epoch_seconds >= end && epoch_seconds < start);  // southern hemisphere
  return dst ? rule_.dst_offset : rule_.standard_offset;
}

std::int64_t TimeZone::offset_at(std::int64_t epoch_seconds) const {
  if (transitions_.empty() || epoch_seconds < transitions_.front()) {
    return transitions_.empty() && has_rule_ ? rule_offset_at(epoch_seconds) : offset_before_first_;
  }
  if (epoch_seconds >= transitions_.back() && has_rule_) return rule_offset_at(epoch_seconds);
  const auto after = std::upper_bound(transitions_.begin(), transitions_.end(), epoch_seconds);
  return offset_after_[static_cast<std::size_t>(std::distance(transitions_.begin(), after) - 1)];
}

std::int64_t TimeZone::wall_ms(std::int64_t epoch_ms) const {
  return epoch_ms + offset_at(floor_div(epoch_ms, 1000)) * 1000;
}

std::int64_t TimeZone::first_instant_at_or_after(std::int64_t wall) const {
  // Offsets change at most once within a day around any instant in practice: the offsets a day
  // before and after give the candidates.
  constexpr std::int64_t day_ms = 86'400'000;
  const std::int64_t early = wall - offset_at(floor_div(wall - day_ms, 1000)) * 1000;
  const std::int64_t late = wall - offset_at(floor_div(wall + day_ms, 1000)) * 1000;
  std::optional<std::int64_t> found;
  for (const std::int64_t candidate : {early, late}) {
    if (wall_ms(candidate) == wall && (!found || candidate < *found)) found = candidate;
  }
  if (found) return *found;
  // In a gap: the wall clock jumps over `wall` between the two candidates; find the jump.
  std::int64_t low = std::min(early, late), high = std::max(early, late);
  while (low < high) {
    const std::int64_t middle = low + (high - low) / 2;
    if (wall_ms(middle) >= wall) high = middle;
    else low = middle + 1;
  }
  return low;
}

}  // namespace zklock
