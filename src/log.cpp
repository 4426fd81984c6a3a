#include "log.hpp"

#include <atomic>
#include <memory>
#include <mutex>

namespace zkr {
namespace {

std::mutex sink_mutex;
std::shared_ptr<const LogSink> current_sink;
std::atomic<int> enabled_level{-1};  // -1: no sink, nothing is formatted

}  // namespace

void set_log_sink(LogSink sink, LogLevel max_level) {
  std::lock_guard lock(sink_mutex);
  enabled_level = sink ? static_cast<int>(max_level) : -1;
  current_sink = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
}

namespace detail {

bool log_enabled(LogLevel level) noexcept { return static_cast<int>(level) <= enabled_level.load(); }

void log_write(LogLevel level, std::string_view message) {
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(sink_mutex);
    sink = current_sink;
  }
  if (sink) (*sink)(level, message);  // called unlocked: a sink may log or replace itself
}

}  // namespace detail
}  // namespace zkr
