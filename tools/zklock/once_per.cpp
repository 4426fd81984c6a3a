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

constexpr std::string_view record_header = "zklock run record 1";
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

std::string encode_run_record(const RunRecord& record) {
  std::string text = fmt::format("{}\nstarted_ms={}\nowner={}\ntoken={}\nsession={}\n", record_header,
                                 record.started_ms, escape_for_terminal(record.owner), record.token, record.session);
  if (record.exit_code) text += fmt::format("exit_code={}\n", *record.exit_code);
  return text;
}

std::optional<RunRecord> parse_run_record(std::string_view text, std::string& problem) {
  const auto line_end = text.find('\n');
  if (text.substr(0, line_end) != record_header) {
    problem = fmt::format("it does not start with '{}'", record_header);
    return std::nullopt;
  }
  RunRecord record;
  bool has_start = false;
  text.remove_prefix(line_end == std::string_view::npos ? text.size() : line_end + 1);
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const auto equals = line.find('=');
    if (equals == std::string_view::npos) continue;  // room for later versions
    const std::string_view key = line.substr(0, equals);
    const std::string_view value = line.substr(equals + 1);
    if (key == "started_ms") {
      if (!parse_number(value, record.started_ms)) {
        problem = fmt::format("its started_ms '{}' is not a number", escape_for_terminal(value));
        return std::nullopt;
      }
      has_start = true;
    } else if (key == "exit_code") {
      int code = 0;
      if (!parse_number(value, code)) {
        problem = fmt::format("its exit_code '{}' is not a number", escape_for_terminal(value));
        return std::nullopt;
      }
      record.exit_code = code;
    } else if (key == "owner") {
      record.owner = value;
    } else if (key == "token") {
      record.token = value;
    } else if (key == "session") {
      record.session = value;
    }
  }
  if (!has_start) {
    problem = "it has no started_ms";
    return std::nullopt;
  }
  return record;
}

std::optional<RunRecord> run_record_from(const zkr::NodeData& node, std::string& problem) {
  auto record = parse_run_record(node.data, problem);
  if (record && record->exit_code) record->finished_ms = node.stat.mtime_ms;
  return record;
}

std::int64_t window_of(std::int64_t epoch_ms, std::chrono::milliseconds period) {
  const std::int64_t length = period.count();
  // Floor division: a leader clock before 1970 is absurd, but must not share window 0.
  return epoch_ms >= 0 ? epoch_ms / length : -((-epoch_ms + length - 1) / length);
}

OncePerGate::OncePerGate(zkr::Session& session, std::string lock_path, std::chrono::milliseconds period)
    : session_(session),
      lock_path_(std::move(lock_path)),
      record_path_(run_record_path(lock_path_)),
      period_(period) {}

std::string OncePerGate::describe_window(std::int64_t epoch_ms) const {
  const std::int64_t start = window_of(epoch_ms, period_) * period_.count();
  return fmt::format("{} - {}", utc_text(start), utc_text(start + period_.count()));
}

OncePerGate::Verdict OncePerGate::judge(const std::optional<zkr::NodeData>& node, std::int64_t now_ms) const {
  Verdict verdict;
  verdict.now_ms = now_ms;
  if (!node) return verdict;
  std::string problem;
  verdict.last = run_record_from(*node, problem);
  if (!verdict.last) {
    throw ForeignRecord(fmt::format("{} is not a run record zklock wrote ({}); delete it if no other program "
                                    "owns it, or use another lock path",
                                    record_path_, problem));
  }
  // A leader whose clock is behind the last run's (a new leader, a clock stepped back) reads as
  // the same or an earlier window: never a second run.
  verdict.already_ran = window_of(now_ms, period_) <= window_of(verdict.last->started_ms, period_);
  return verdict;
}

OncePerGate::Verdict OncePerGate::look() {
  const auto node = read_run_record_node(session_, lock_path_);
  if (!node) return {};
  zkr::Transaction probe;
  add_clock_probe(probe, lock_path_);
  const std::int64_t now_ms = session_.commit(probe).at(clock_stamp_result).stat.mtime_ms;
  return judge(node, now_ms);
}

OncePerGate::Verdict OncePerGate::claim(const zkr::HeldLock& held, std::string_view owner, zkr::NodeAcl acl) {
  const auto node = read_run_record_node(session_, lock_path_);
  zkr::FencedTransaction probe(held);
  add_clock_probe(probe, lock_path_);
  const std::int64_t now_ms = probe.commit().at(clock_stamp_result).stat.mtime_ms;
  Verdict verdict = judge(node, now_ms);
  if (verdict.already_ran) return verdict;

  RunRecord record{now_ms, std::string(owner), held.token().to_string(), zkr::session_id_text(held.session_id()),
                   std::nullopt, 0};
  zkr::FencedTransaction write(held);
  // The version read above: nobody else writes the record while we hold the lock, and a program
  // that does anyway makes the claim fail rather than be overwritten.
  if (node) write.set(record_path_, encode_run_record(record), node->stat.version);
  else write.create(record_path_, encode_run_record(record), zkr::CreateMode::persistent, acl);
  const auto results = write.commit();
  claimed_version_ = node ? results.at(0).stat.version : 0;
  claimed_ = std::move(record);
  return verdict;
}

void OncePerGate::record_exit(const zkr::HeldLock& held, int exit_code) {
  if (!claimed_) return;
  RunRecord record = *claimed_;
  record.exit_code = exit_code;
  zkr::FencedTransaction write(held);
  write.set(record_path_, encode_run_record(record), claimed_version_);
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
      "{{\"started\":{},\"owner\":{},\"token\":{},\"session_id\":{},\"session\":{},\"exit_code\":{},\"finished\":{}}}",
      json_string(utc_text(record.started_ms)), json_string(record.owner),
      numeric_token ? std::to_string(token) : "null",
      session_id ? std::to_string(static_cast<std::uint64_t>(*session_id)) : "null", json_string(record.session),
      record.exit_code ? std::to_string(*record.exit_code) : "null",
      record.exit_code ? json_string(utc_text(record.finished_ms)) : "null");
}

}  // namespace zklock
