// SPDX-License-Identifier: Apache-2.0
#include "log.hpp"

#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>

#include "text_escape.hpp"

namespace zkr {
namespace {

std::mutex sink_mutex;
std::shared_ptr<const LogRecordSink> current_sink;
std::atomic<int> enabled_level{-1};  // -1: no sink, nothing is formatted

void install_sink(LogRecordSink sink, LogLevel max_level) {
  std::lock_guard lock(sink_mutex);
  enabled_level = sink ? static_cast<int>(max_level) : -1;
  current_sink = sink ? std::make_shared<const LogRecordSink>(std::move(sink)) : nullptr;
}

// "2026-01-31T23:59:59.123456Z"
void append_utc_time(std::string& out, std::chrono::system_clock::time_point time) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(micros / 1'000'000 - (micros % 1'000'000 < 0 ? 1 : 0));
  const auto fraction = static_cast<int>(micros - static_cast<std::int64_t>(seconds) * 1'000'000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  fmt::format_to(std::back_inserter(out), "\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z\"", utc.tm_year + 1900,
                 utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, fraction);
}

}  // namespace

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warning: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "unknown";
}

void set_log_sink(LogSink sink, LogLevel max_level) {
  if (!sink) return install_sink(nullptr, max_level);
  install_sink([sink = std::move(sink)](const LogRecord& record) { sink(record.level, record.message); },
               max_level);
}

void set_log_record_sink(LogRecordSink sink, LogLevel max_level) { install_sink(std::move(sink), max_level); }

LogRecordSink json_lines_log_sink(std::FILE* out) {
  // One write per line under one mutex: lines from several threads never interleave.
  auto write_mutex = std::make_shared<std::mutex>();
  return [out, write_mutex](const LogRecord& record) {
    std::string line = "{\"time\":";
    append_utc_time(line, record.time);
    const auto field = [&line](std::string_view name, std::string_view value) {
      fmt::format_to(std::back_inserter(line), ",\"{}\":", name);
      detail::append_json_string(line, value);
    };
    field("level", to_string(record.level));
    field("message", record.message);
    if (record.session_id != 0) field("session", session_id_text(record.session_id));
    if (!record.path.empty()) field("path", record.path);
    if (!record.node.empty()) field("node", record.node);
    line += "}\n";
    std::lock_guard lock(*write_mutex);
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  };
}

namespace detail {

bool log_enabled(LogLevel level) noexcept { return static_cast<int>(level) <= enabled_level.load(); }

void log_write(LogLevel level, std::string_view message, const LogContext& context) {
  std::shared_ptr<const LogRecordSink> sink;
  {
    std::lock_guard lock(sink_mutex);
    sink = current_sink;
  }
  // Called unlocked: a sink may log or replace itself.
  if (sink)
    (*sink)(LogRecord{.time = std::chrono::system_clock::now(),
                      .level = level,
                      .message = message,
                      .session_id = context.session_id,
                      .path = context.path,
                      .node = context.node});
}

}  // namespace detail
}  // namespace zkr
