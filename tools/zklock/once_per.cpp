// SPDX-License-Identifier: Apache-2.0
#include "once_per.hpp"

#include <charconv>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/fenced.hpp>

#include "contender_report.hpp"
#include "json_vocabulary.hpp"

namespace zklock {
namespace {

// "zklock run record 2"; a version 1 record (one run, no schedule) is still read.
constexpr std::string_view record_header_prefix = "zklock run record ";
constexpr int record_version = 2;
// Created and removed again in one multi: the write that reads the leader's clock, leaving nothing.
constexpr std::string_view clock_probe_name = "zklock.clock-probe";

template <typename Number>
bool parse_number(std::string_view text, Number& value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && error == std::errc{} && end == text.data() + text.size();
}

std::string utc_text(std::int64_t epoch_ms) {
  return format_utc(std::chrono::system_clock::time_point(std::chrono::milliseconds(epoch_ms)));
}

// "2026-03-29T00:00:00.000+01:00": the wall-clock time in `zone` and its offset.
std::string local_text(std::int64_t epoch_ms, const TimeZone& zone) {
  if (zone.is_utc()) return utc_text(epoch_ms);
  const std::int64_t offset = (zone.wall_ms(epoch_ms) - epoch_ms) / 1000;
  std::string text = utc_text(zone.wall_ms(epoch_ms));
  text.pop_back();  // the Z
  const std::int64_t magnitude = offset < 0 ? -offset : offset;
  return fmt::format("{}{}{:02}:{:02}", text, offset < 0 ? '-' : '+', magnitude / 3600, magnitude / 60 % 60);
}

constexpr std::int64_t week_ms = 7 * 86'400'000LL;
// 1970-01-01 was a Thursday: whole-week windows count from the Monday before it.
constexpr std::int64_t monday_shift_ms = 3 * 86'400'000LL;

std::int64_t shift_for(std::chrono::milliseconds period) {
  return period.count() % week_ms == 0 ? monday_shift_ms : 0;
}

std::string child_path(std::string_view parent, std::string_view name) {
  return fmt::format("{}/{}", parent == "/" ? "" : parent, name);
}

// Adds to `ops` the create, stamp and remove of the clock probe; the result of the stamp (a set,
// whose stat the leader dates) carries the leader's clock.
constexpr std::size_t clock_stamp_result = 1;
template <typename Ops>
void add_clock_probe(Ops& ops, std::string_view lock_path) {
  const std::string probe = child_path(lock_path, clock_probe_name);
  ops.create(probe, {}, zkr::CreateMode::ephemeral).set(probe, {}).remove(probe);
}

}  // namespace

std::string run_record_path(std::string_view lock_path) { return child_path(lock_path, run_record_name); }

std::optional<zkr::NodeData> read_run_record_node(zkr::Session& session, std::string_view lock_path) {
  try {
    return session.get(run_record_path(lock_path));
  } catch (const zkr::Error& error) {
    if (error.code() == zkr::zk_errc::no_node) return std::nullopt;
    throw;
  }
}

std::string schedule_text(std::chrono::milliseconds period, const TimeZone& zone) {
  struct Unit {
    char suffix;
    std::int64_t ms;
  };
  constexpr Unit units[] = {{'w', week_ms}, {'d', 86'400'000}, {'h', 3'600'000}, {'m', 60'000}, {'s', 1000}};
  for (const auto& unit : units) {
    if (period.count() % unit.ms == 0) return fmt::format("{}{} {}", period.count() / unit.ms, unit.suffix, zone.name());
  }
  return fmt::format("{}ms {}", period.count(), zone.name());
}

std::string encode_run_records(const std::vector<RunRecord>& runs) {
  std::string text = fmt::format("{}{}\n", record_header_prefix, record_version);
  for (const auto& run : runs) {
    text += fmt::format("run {}\nstarted_ms={}\nowner={}\ntoken={}\nsession={}\n", run.schedule, run.started_ms,
                        escape_for_terminal(run.owner), run.token, run.session);
    if (run.exit_code) text += fmt::format("exit_code={}\nfinished_ms={}\n", *run.exit_code, run.finished_ms);
  }
  return text;
}

std::optional<std::vector<RunRecord>> parse_run_records(std::string_view text, std::string& problem,
                                                        std::int64_t modified_ms) {
  const auto line_end = text.find('\n');
  const std::string_view header = text.substr(0, line_end);
  int version = 0;
  if (!header.starts_with(record_header_prefix) ||
      !parse_number(header.substr(record_header_prefix.size()), version) || version < 1) {
    problem = fmt::format("it does not start with '{}{}'", record_header_prefix, record_version);
    return std::nullopt;
  }
  if (version > record_version) {
    problem = fmt::format("it is a version {} run record, and this zklock reads versions 1 and {}: upgrade zklock",
                          version, record_version);
    return std::nullopt;
  }
  std::vector<RunRecord> runs;
  std::vector<bool> has_start;
  // Version 1 holds one run and no "run" line: it starts at once, under no schedule.
  if (version == 1) {
    runs.emplace_back();
    has_start.push_back(false);
  }
  text.remove_prefix(line_end == std::string_view::npos ? text.size() : line_end + 1);
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (version > 1 && line.starts_with("run ")) {
      const std::string_view schedule = line.substr(4);
      for (const auto& run : runs) {
        if (run.schedule == schedule) {
          problem = fmt::format("it has two runs of '{}'", escape_for_terminal(schedule));
          return std::nullopt;
        }
      }
      runs.emplace_back().schedule = schedule;
      has_start.push_back(false);
      continue;
    }
    const auto equals = line.find('=');
    if (equals == std::string_view::npos || runs.empty()) continue;  // room for later versions
    RunRecord& record = runs.back();
    const std::string_view key = line.substr(0, equals);
    const std::string_view value = line.substr(equals + 1);
    const auto number = [&](auto& field) {
      if (parse_number(value, field)) return true;
      problem = fmt::format("its {} '{}' is not a number", key, escape_for_terminal(value));
      return false;
    };
    if (key == "started_ms") {
      if (!number(record.started_ms)) return std::nullopt;
      has_start.back() = true;
    } else if (key == "exit_code") {
      int code = 0;
      if (!number(code)) return std::nullopt;
      record.exit_code = code;
    } else if (key == "finished_ms") {
      if (!number(record.finished_ms)) return std::nullopt;
    } else if (key == "owner") {
      record.owner = value;
    } else if (key == "token") {
      record.token = value;
    } else if (key == "session") {
      record.session = value;
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!has_start[i]) {
      problem = runs[i].schedule.empty() ? "it has no started_ms"
                                         : fmt::format("its run of '{}' has no started_ms", runs[i].schedule);
      return std::nullopt;
    }
  }
  if (version == 1 && runs.front().exit_code) runs.front().finished_ms = modified_ms;
  return runs;
}

std::optional<std::vector<RunRecord>> run_records_from(const zkr::NodeData& node, std::string& problem) {
  return parse_run_records(node.data, problem, node.stat.mtime_ms);
}

std::int64_t window_of(std::int64_t epoch_ms, std::chrono::milliseconds period, const TimeZone& zone) {
  return floor_div(zone.wall_ms(epoch_ms) + shift_for(period), period.count());
}

std::int64_t window_start(std::int64_t window, std::chrono::milliseconds period, const TimeZone& zone) {
  return zone.first_instant_at_or_after(window * period.count() - shift_for(period));
}

std::string describe_window(std::int64_t epoch_ms, std::chrono::milliseconds period, const TimeZone& zone) {
  const std::int64_t window = window_of(epoch_ms, period, zone);
  const std::string range = fmt::format("{} - {}", local_text(window_start(window, period, zone), zone),
                                        local_text(window_start(window + 1, period, zone), zone));
  return zone.is_utc() ? range : fmt::format("{} ({})", range, zone.name());
}

OncePerGate::OncePerGate(zkr::Session& session, std::string lock_path, std::chrono::milliseconds period,
                         TimeZone zone, bool count_failed)
    : session_(session),
      lock_path_(std::move(lock_path)),
      record_path_(run_record_path(lock_path_)),
      period_(period),
      zone_(std::move(zone)),
      schedule_(schedule_text(period_, zone_)),
      count_failed_(count_failed) {}


std::vector<RunRecord> OncePerGate::read_runs(const std::optional<zkr::NodeData>& node) const {
  if (!node) return {};
  std::string problem;
  auto runs = run_records_from(*node, problem);
  if (!runs) {
    throw ForeignRecord(fmt::format("{} is not a run record zklock wrote ({}); delete it if no other program "
                                    "owns it, or use another lock path",
                                    record_path_, problem));
  }
  return std::move(*runs);
}

OncePerGate::Verdict OncePerGate::judge(const std::vector<RunRecord>& runs, std::int64_t now_ms, bool under_lock) {
  Verdict verdict;
  verdict.now_ms = now_ms;
  // This schedule's entry; a version 1 record's single run stands for every schedule.
  for (const auto& run : runs) {
    if (run.schedule == schedule_ || run.schedule.empty()) verdict.last = run;
  }
  if (!verdict.last) return verdict;
  // A leader whose clock is behind the last run's (a new leader, a clock stepped back) reads as
  // the same or an earlier window: never a second run.
  if (window_of(now_ms, period_, zone_) > window_of(verdict.last->started_ms, period_, zone_)) return verdict;
  if (count_failed_ || verdict.last->exit_code == 0) {
    verdict.already_ran = true;
    return verdict;
  }
  if (!verdict.last->exit_code && !under_lock) {
    // No exit code yet: running, if its runner still holds the lock; else it ended unrecorded.
    for (const auto& contender : zkr::list_contenders(session_, lock_path_, 1)) {
      if (contender.holds && zkr::session_id_text(contender.session_id) == verdict.last->session) {
        verdict.already_ran = true;
        return verdict;
      }
    }
  }
  verdict.again = true;
  return verdict;
}

OncePerGate::Verdict OncePerGate::look() {
  const auto node = read_run_record_node(session_, lock_path_);
  if (!node) return {};
  const auto runs = read_runs(node);
  zkr::Transaction probe;
  add_clock_probe(probe, lock_path_);
  const std::int64_t now_ms = session_.commit(probe).at(clock_stamp_result).stat.mtime_ms;
  return judge(runs, now_ms, false);
}

OncePerGate::Verdict OncePerGate::claim(const zkr::HeldLock& held, std::string_view owner, zkr::NodeAcl acl) {
  const auto node = read_run_record_node(session_, lock_path_);
  auto runs = read_runs(node);
  zkr::FencedTransaction probe(held);
  add_clock_probe(probe, lock_path_);
  const std::int64_t now_ms = probe.commit().at(clock_stamp_result).stat.mtime_ms;
  Verdict verdict = judge(runs, now_ms, true);
  if (verdict.already_ran) return verdict;

  // Our entry replaces this schedule's (and a version 1 record's single run); the others stay.
  std::erase_if(runs, [&](const RunRecord& run) { return run.schedule == schedule_ || run.schedule.empty(); });
  runs.push_back(RunRecord{now_ms, std::string(owner), held.token().to_string(),
                           zkr::session_id_text(held.session_id()), std::nullopt, 0, schedule_});
  zkr::FencedTransaction write(held);
  // The version read above: nobody else writes the record while we hold the lock, and a program
  // that does anyway makes the claim fail rather than be overwritten.
  if (node) write.set(record_path_, encode_run_records(runs), node->stat.version);
  else write.create(record_path_, encode_run_records(runs), zkr::CreateMode::persistent, acl);
  const auto results = write.commit();
  claimed_version_ = node ? results.at(0).stat.version : 0;
  claimed_runs_ = std::move(runs);
  return verdict;
}

void OncePerGate::record_exit(const zkr::HeldLock& held, int exit_code) {
  if (claimed_runs_.empty()) return;
  zkr::FencedTransaction probe(held);
  add_clock_probe(probe, lock_path_);
  const std::int64_t now_ms = probe.commit().at(clock_stamp_result).stat.mtime_ms;
  std::vector<RunRecord> runs = claimed_runs_;
  runs.back().exit_code = exit_code;
  runs.back().finished_ms = now_ms;
  zkr::FencedTransaction write(held);
  write.set(record_path_, encode_run_records(runs), claimed_version_);
  write.commit();
}

std::string describe_run(const RunRecord& record) {
  std::string text = fmt::format("started {} by {} (token {}, session {})", utc_text(record.started_ms),
                                 record.owner.empty() ? "an unnamed owner" : fmt::format("\"{}\"", record.owner),
                                 record.token, record.session);
  if (record.exit_code) text += fmt::format(", exited {} at {}", *record.exit_code, utc_text(record.finished_ms));
  else text += ", not (yet) finished";
  return text;
}

// In the vocabulary of json_vocabulary.hpp: a token or session id that the record does not hold as
// a number (a record of another zklock version) is null, not a guess.
std::string run_record_json(const RunRecord& record) {
  std::int64_t token = 0;
  const bool numeric_token = parse_number(record.token, token);
  const auto session_id = parse_session_id_text(record.session);
  return fmt::format(
      "{{{}\"started\":{},\"owner\":{},\"token\":{},\"session_id\":{},\"session\":{},\"exit_code\":{},"
      "\"finished\":{}}}",
      record.schedule.empty() ? std::string() : fmt::format("\"schedule\":{},", json_string(record.schedule)),
      json_string(utc_text(record.started_ms)), json_string(record.owner),
      numeric_token ? std::to_string(token) : "null",
      session_id ? std::to_string(static_cast<std::uint64_t>(*session_id)) : "null", json_string(record.session),
      record.exit_code ? std::to_string(*record.exit_code) : "null",
      record.exit_code ? json_string(utc_text(record.finished_ms)) : "null");
}

}  // namespace zklock
