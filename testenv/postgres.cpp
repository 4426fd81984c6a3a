// PostgresServer: starts and stops a server through testenv/pgenv.py.
#include "postgres.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "testenv.hpp"

namespace zkr::testenv {
namespace {

constexpr auto python = "/usr/bin/python3";

std::string trim(std::string text) {
  auto end = text.find_last_not_of(" \t\r\n");
  text.erase(end == std::string::npos ? 0 : end + 1);
  return text;
}

// Runs pgenv.py with `arguments`: its exit status and output (stdout and stderr).
std::pair<std::optional<int>, std::string> run_pgenv(const std::vector<std::string>& arguments) {
  std::vector<std::string> argv{python, source_dir() + "/testenv/pgenv.py"};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  Process::Options options;
  options.merge_stderr = true;
  Process process(argv, options);
  // pgenv.py bounds its own waits (initdb, 30 s to accept connections); this guards against a hang.
  auto output = process.read_all(scaled(std::chrono::seconds(120)));
  auto status = process.wait(std::chrono::seconds(5));
  return {status, trim(output)};
}

}  // namespace

std::string PostgresServer::unavailable_reason() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    try {
      auto [status, output] = run_pgenv({"check"});
      if (status != 0) {
        reason = output.empty() ? fmt::format("pgenv.py check failed (status {})", status.value_or(-1)) : output;
      }
    } catch (const std::exception& e) {
      reason = fmt::format("cannot run pgenv.py: {}", e.what());
    }
  });
  return reason;
}

PostgresServer::PostgresServer() {
  state_dir_ = make_temp_dir("zkr-postgres");
  try {
    // Prints the URI, then "pid N".
    std::vector<std::string> start = {"start", "--owner-pid", std::to_string(::getpid()), "--timeout",
                                      fmt::format("{}", 30 * timeout_scale())};
    if (!std::getenv("ZKR_KEEP_CLUSTER_DIR")) start.push_back("--remove-dir");
    std::istringstream lines(pgenv(start));
    started_ = true;
    std::string pid_line;
    std::getline(lines, uri_);
    std::getline(lines, pid_line);
    if (!uri_.starts_with("postgresql://") || !pid_line.starts_with("pid ")) {
      throw std::runtime_error(fmt::format("pgenv.py start printed '{}' and '{}'", uri_, pid_line));
    }
    pid_ = static_cast<pid_t>(std::stol(pid_line.substr(4)));
  } catch (...) {
    if (started_) {
      try {
        pgenv({"stop"});
      } catch (...) {
      }
    }
    // pgenv.py stops what it started when it fails; the directory stays for postgres.log.
    throw;
  }
}

PostgresServer::~PostgresServer() {
  if (!started_) return;
  try {
    pgenv({"stop"});
    if (!std::getenv("ZKR_KEEP_CLUSTER_DIR")) {
      std::error_code ignored;
      std::filesystem::remove_all(state_dir_, ignored);
    }
  } catch (...) {
    // Never throw from a destructor; the directory stays for a post-mortem.
  }
}

std::string PostgresServer::pgenv(const std::vector<std::string>& arguments) const {
  std::vector<std::string> all = arguments;
  all.push_back("--dir");
  all.push_back(state_dir_.string());
  auto [status, output] = run_pgenv(all);
  if (status != 0) {
    throw std::runtime_error(fmt::format("pgenv.py {} failed ({}): {}", arguments.front(),
                                         status ? fmt::format("exit {}", *status) : "timed out", output));
  }
  return output;
}

}  // namespace zkr::testenv
