// SPDX-License-Identifier: Apache-2.0
#include "metrics_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace zklock {
namespace {

// Beside the file, in the same directory (a rename stays within one file system), and not ending
// in ".prom": the textfile collector reads only *.prom files.
std::filesystem::path temporary_beside(const std::filesystem::path& file) {
  return file.string() + fmt::format(".tmp.{}", ::getpid());
}


// The count of the sample `series` ("name{labels}") in `previous`, or 0. Counters are written as
// integers; a value in exponent form (as older zklocks wrote past 999999) is read as the double it
// says, the best that is left of it.
std::uint64_t previous_count(std::string_view previous, std::string_view series) {
  std::size_t at = 0;
  while (at < previous.size()) {
    const std::size_t end = std::min(previous.find('\n', at), previous.size());
    const std::string_view line = previous.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(series) || line.size() <= series.size() || line[series.size()] != ' ') continue;
    const std::string_view number = line.substr(series.size() + 1);
    std::uint64_t count = 0;
    auto [count_end, count_error] = std::from_chars(number.data(), number.data() + number.size(), count);
    if (count_error == std::errc{} && count_end == number.data() + number.size()) return count;
    double value = 0;
    auto [value_end, value_error] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (value_error == std::errc{} && value >= 0 && value < 1.8e19) return static_cast<std::uint64_t>(value);
  }
  return 0;
}

std::string error_text(const std::filesystem::path& file, std::string_view what) {
  return fmt::format("--metrics-file {}: {}: {}", file.string(), what, std::strerror(errno));
}

}  // namespace

std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::optional<std::string> check_metrics_file(const std::filesystem::path& file) {
  const auto temporary = temporary_beside(file);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return error_text(file, fmt::format("cannot create a file beside it ({})", temporary.string()));
  ::close(fd);
  ::unlink(temporary.c_str());
  return std::nullopt;
}

std::string metrics_text(std::string_view lock, const RunSummary& run, std::string_view previous) {
  const std::string labels = fmt::format("lock=\"{}\"", label_value(lock));
  std::string out;
  const auto metric = [&](std::string_view name, std::string_view type, std::string_view help, std::string_view value,
                          std::string_view extra_labels = {}) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n{}{{{}{}}} {}\n", name, help, name, type, name,
                   labels, extra_labels, value);
  };
  const auto seconds = [](std::chrono::nanoseconds duration) {
    return fmt::format("{:.6f}", std::chrono::duration<double>(duration).count());
  };
  metric("zklock_wait_seconds", "gauge", "How long the last run waited in the queue for the lock.",
         seconds(run.wait_time()));
  metric("zklock_hold_seconds", "gauge", "How long the last run held the lock (0 if it did not get it).",
         seconds(run.hold_time()));
  metric("zklock_outcome", "gauge",
         "How the last run ended (ran, lost, held, timed_out, interrupted, skipped or failed): 1 for its outcome.", "1",
         fmt::format(",outcome=\"{}\"", run.outcome()));
  metric("zklock_exit_code", "gauge", "zklock's exit code in the last run.", std::to_string(run.exit_code.value_or(0)));
  metric("zklock_last_run_timestamp_seconds", "gauge", "When the last run ended, in seconds since the Unix epoch.",
         fmt::format("{:.3f}", std::chrono::duration<double>(run.finished.time_since_epoch()).count()));
  const auto counter = [&](std::string_view name, std::string_view help, bool counts) {
    const std::uint64_t value = previous_count(previous, fmt::format("{}{{{}}}", name, labels)) + (counts ? 1 : 0);
    metric(name, "counter", help, std::to_string(value));
  };
  counter("zklock_runs_total", "Runs of the command under the lock (carried over from the file's previous content).",
          run.job_ended || run.lost);
  counter("zklock_losses_total", "Runs that lost the lock while the command ran.", run.lost);
  return out;
}

std::optional<std::string> write_metrics_file(const std::filesystem::path& file, std::string_view lock,
                                              const RunSummary& run) {
  std::string previous;
  {
    std::ifstream in(file);
    std::stringstream content;
    content << in.rdbuf();
    previous = content.str();
  }
  const std::string text = metrics_text(lock, run, previous);
  const auto temporary = temporary_beside(file);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return error_text(file, fmt::format("cannot create {}", temporary.string()));
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t written = ::write(fd, rest.data(), rest.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      const auto problem = error_text(file, fmt::format("cannot write {}", temporary.string()));
      ::close(fd);
      ::unlink(temporary.c_str());
      return problem;
    }
    rest.remove_prefix(static_cast<std::size_t>(written));
  }
  if (::close(fd) != 0 || ::rename(temporary.c_str(), file.c_str()) != 0) {
    const auto problem = error_text(file, "cannot replace it");
    ::unlink(temporary.c_str());
    return problem;
  }
  return std::nullopt;
}

}  // namespace zklock
