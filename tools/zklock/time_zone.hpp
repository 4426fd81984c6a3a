// SPDX-License-Identifier: Apache-2.0
// A time zone read from the system's tz database (/usr/share/zoneinfo, Debian's tzdata), for
// --once-per --tz. Read here rather than through the C library: localtime_r knows only the zone
// in $TZ, and changing the process's TZ would change it for the job too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace zklock {

// value / divisor rounded toward minus infinity (divisor > 0): a time before 1970 falls in the
// day or window before the epoch's, never in the epoch's own.
constexpr std::int64_t floor_div(std::int64_t value, std::int64_t divisor) {
  return value >= 0 ? value / divisor : -((-value + divisor - 1) / divisor);
}

class TimeZone {
 public:
  // UTC, known without the tz database.
  TimeZone();

  // The zone NAME ("Europe/Berlin", "UTC") of the database in `directory`. Throws
  // std::invalid_argument saying what is wrong with the name or the file.
  static TimeZone load(std::string_view name, const std::filesystem::path& directory = "/usr/share/zoneinfo");
  // From the bytes of a TZif file (RFC 8536, version 2 or later). Throws std::invalid_argument.
  static TimeZone from_tzif(std::string name, std::string_view bytes);

  const std::string& name() const { return name_; }
  bool is_utc() const { return name_ == "UTC"; }
  // Seconds east of UTC in force at `epoch_seconds`.
  std::int64_t offset_at(std::int64_t epoch_seconds) const;
  // The local wall-clock time at `epoch_ms`, counted like epoch milliseconds.
  std::int64_t wall_ms(std::int64_t epoch_ms) const;
  // The first instant whose wall-clock time is `wall_ms` or later: the earlier of the two when a
  // fall-back repeats it, the end of the gap when a spring-forward skips it.
  std::int64_t first_instant_at_or_after(std::int64_t wall_ms) const;

 private:
  // The POSIX TZ rule at the file's end ("CET-1CEST,M3.5.0,M10.5.0/3"): times after the last
  // transition.
  struct Rule {
    std::int64_t standard_offset = 0;
    bool has_dst = false;
    std::int64_t dst_offset = 0;
    struct Change {
      int month = 0, week = 0, weekday = 0;  // Mm.w.d: the w-th (5: last) weekday d of month m
      std::int64_t seconds = 7200;           // local time of day of the change
    } start, end;
  };
  static Rule parse_rule(std::string_view text);
  std::int64_t rule_offset_at(std::int64_t epoch_seconds) const;

  std::string name_;
  std::vector<std::int64_t> transitions_;     // ascending, epoch seconds
  std::vector<std::int64_t> offset_after_;    // the offset from transitions_[i] on
  std::int64_t offset_before_first_ = 0;
  bool has_rule_ = false;
  Rule rule_;
};

}  // namespace zklock
